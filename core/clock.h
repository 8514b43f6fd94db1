/* core/clock.h - the wall clock every timing in nf reads: seconds on the monotonic clock (since an
 * arbitrary start; only differences mean anything), unaffected by changes of the system time. */
#ifndef NF_CLOCK_H
#define NF_CLOCK_H

#include <time.h>

static inline double nf_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
