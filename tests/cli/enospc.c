/* tests/cli/enospc.c - a full disk, for tests/cli/hardening.sh: an LD_PRELOAD library whose write
 * calls fail with ENOSPC on nf's temporary files ("*.tmp.<pid>") once NF_ENOSPC_AFTER bytes have
 * been written to them (0: from the first byte), and every one after that, as on a full disk.  Other files, and writes after nf has pointed a
 * failed file's descriptor elsewhere, pass through.  No root and no small file system needed.
 *
 *   gcc -shared -fPIC -O1 -o enospc.so tests/cli/enospc.c -ldl
 *   NF_ENOSPC_AFTER=20000 LD_PRELOAD=./enospc.so nf fit ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static long long written;
static int is_full;

/* 1 if fd is one of nf's temporary files and the budget is spent (counting n more bytes). */
static int full(int fd, size_t n)
{
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, target, sizeof target - 1);
    if (k <= 0) return 0;
    target[k] = '\0';
    if (!strstr(target, ".tmp.")) return 0;
    const char *after = getenv("NF_ENOSPC_AFTER");
    long long budget = after ? atoll(after) : 0;
    if (is_full || written + (long long)n > budget) return is_full = 1; /* a full disk stays full */
    written += (long long)n;
    return 0;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (full(fd, n)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    if (full(fd, n)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}
