/* tests/fuzz/fuzz_util.h - shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c, `make fuzz`).
 *
 * The loaders under test read files by path, so each input is written to a file of this process's
 * own (in /dev/shm when there is one: no disk traffic) and the loader is pointed at it.  libFuzzer's
 * -fork and -jobs modes run separate processes, so the pid keeps their files apart.
 */
#ifndef NF_FUZZ_UTIL_H
#define NF_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Write data to "<dir>/nf_fuzz_<pid><suffix>" and return that path (a static buffer), or NULL. */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[256];
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/nf_fuzz_%ld%s", dir, (long)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    int ok = (size == 0 || fwrite(data, 1, size, f) == size);
    if (fclose(f) != 0 || !ok) return NULL;
    return path;
}

#endif
