/* core/error.c - per-thread error messages and the replaceable handler. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF_MSG_MAX 1024

static _Thread_local char last_message[NF_MSG_MAX];
static nf_error_handler_t *handler = NULL;

int nf_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    if (handler) handler(code, last_message);
    return code;
}

int nf_error_context(int code, const char *fmt, ...)
{
    char prefix[NF_MSG_MAX], old[NF_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t at = strlen(prefix);
    if (at > 0 && !strncmp(last_message, prefix, at) && last_message[at] == ':')
        return code; /* already said (a file named by its loader and again by its caller) */
    memcpy(old, last_message, sizeof old);
    if (at > NF_MSG_MAX - 3) at = NF_MSG_MAX - 3;
    memcpy(last_message, prefix, at);
    memcpy(last_message + at, ": ", 2);
    at += 2;
    size_t rest = strlen(old);
    if (rest > NF_MSG_MAX - 1 - at) rest = NF_MSG_MAX - 1 - at;
    memcpy(last_message + at, old, rest);
    last_message[at + rest] = '\0';
    return code;
}

const char *nf_strerror_last(void) { return last_message; }

void nf_error_clear(void) { last_message[0] = '\0'; }

const char *nf_strerror(int code)
{
    switch (code) {
    case NF_OK: return "success";
    case NF_EINVAL: return "invalid argument";
    case NF_ENOMEM: return "out of memory";
    case NF_EIO: return "input/output error";
    case NF_EFORMAT: return "wrong file format";
    case NF_EDATA: return "bad data";
    case NF_ENONFINITE: return "non-finite value";
    case NF_ENOCONV: return "no convergence";
    case NF_ESINGULAR: return "singular map";
    default: return "unknown error";
    }
}

nf_error_handler_t *nf_set_error_handler(nf_error_handler_t *h)
{
    nf_error_handler_t *old = handler;
    handler = h;
    return old;
}

void *nf_calloc(size_t count, size_t size, const char *what)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) nf_error(NF_ENOMEM, "out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}
