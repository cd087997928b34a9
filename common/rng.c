/*
 * Seeding and kernel randomness for common/rng.h (the PRNG itself is inline
 * there). getrandom may return fewer bytes than asked for large requests or
 * be interrupted by a signal: both are retried here so callers see all or
 * nothing.
 */
#include "common/rng.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>

void rng_seed_random(struct rng *r)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed)) {
        /* Early boot or no getrandom: still distinct per process and object. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed =
            ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (uint64_t)(uintptr_t)r;
    }
    rng_seed(r, seed);
}

int rng_fill_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}
