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

#include "common/proc.h"

#define RNG_SECRET_BLOCK 64u /* values per getrandom call */

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

uint64_t rng_secret64(void)
{
    static _Thread_local uint64_t block[RNG_SECRET_BLOCK];
    static _Thread_local size_t left;
    static _Thread_local uint64_t fallback;
    if (left == 0) {
        if (rng_fill_random(block, sizeof(block)) != 0) {
            /* getrandom cannot fail on the kernels we run on; should it,
             * ids stay unique (not unguessable) rather than the request fail. */
            return rng_mix64(proc_monotonic_ns() ^ ++fallback);
        }
        left = RNG_SECRET_BLOCK;
    }
    uint64_t v = block[--left];
    block[left] = 0;
    return v;
}
