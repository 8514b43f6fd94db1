/* core/error.h - the real type, error codes and the replaceable error handler.
 *
 * Every libnf call that can fail returns an int: NF_OK (0) or one of the NF_E* codes below, after
 * recording a message that names the input and what was expected ("data.h5: dataset /x has 3 columns,
 * the model expects 2").  The message is kept per thread and read with nf_strerror_last().  Like GSL,
 * a replaceable handler is called on every error; the default handler does nothing, because the
 * library never prints and never exits.  The command-line program prints the message on stderr.
 *
 *   if ((rc = nf_flow_log_prob(...)) != NF_OK) fprintf(stderr, "nf: %s\n", nf_strerror_last());
 */
#ifndef NF_ERROR_H
#define NF_ERROR_H

#include <stddef.h>
#include <stdint.h>

#ifdef NF_DOUBLE
typedef double nf_real;
#define NF_REAL_NAME "double"
#define NF_REAL_EPS 2.220446049250313e-16
#else
typedef float nf_real;
#define NF_REAL_NAME "float"
#define NF_REAL_EPS 1.1920929e-07f
#endif

#ifndef NF_VERSION
#define NF_VERSION "0.1.0"
#endif

enum nf_status {
    NF_OK = 0,
    NF_EINVAL = 1,   /* bad argument, option or spec */
    NF_ENOMEM = 2,   /* allocation failed */
    NF_EIO = 3,      /* file missing, unreadable or unwritable */
    NF_EFORMAT = 4,  /* file of the wrong format, version or shape */
    NF_EDATA = 5,    /* data empty, ragged or with non-finite values */
    NF_ENONFINITE = 6, /* a computation produced NaN or infinity */
    NF_ENOCONV = 7,  /* an iteration did not converge */
    NF_ESINGULAR = 8 /* a map is (nearly) singular: cannot be inverted */
};

typedef void nf_error_handler_t(int code, const char *message);

/* Record a printf-style message for this thread, call the handler, and return code. */
int nf_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "context: " (used while an error travels up), unless it already
 * begins with "context:" (a file's path said by its reader and again by the caller). Returns code. */
int nf_error_context(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *nf_strerror_last(void);
/* A short name for a code ("invalid argument", ...). */
const char *nf_strerror(int code);
void nf_error_clear(void);
/* Install a handler (NULL restores the silent default); returns the previous one. */
nf_error_handler_t *nf_set_error_handler(nf_error_handler_t *handler);

/* Return from the calling function if expr fails. */
#define NF_TRY(expr) do { int nf_rc_ = (expr); if (nf_rc_ != NF_OK) return nf_rc_; } while (0)

/* calloc that records NF_ENOMEM with what was being allocated; returns NULL on failure. */
void *nf_calloc(size_t count, size_t size, const char *what);

#endif
