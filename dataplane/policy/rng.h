/*
 * A tiny per-loop pseudo-random generator for the random policies
 * (xorshift64*): fast, good enough to spread load, seeded from getrandom.
 * Not for anything secret. Single-threaded by construction (one per loop).
 */
#ifndef SY_DATAPLANE_POLICY_RNG_H
#define SY_DATAPLANE_POLICY_RNG_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

#include "common/config.h"

struct pol_rng {
    uint64_t state;
};

static inline void pol_rng_seed(struct pol_rng *r)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
        seed = (uint64_t)(uintptr_t)r ^ 0x9e3779b97f4a7c15ull;
    r->state = seed | 1u;
}

static inline uint64_t pol_rng_next(struct pol_rng *r)
{
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n), n >= 1 (the modulo bias is negligible for fleet sizes). */
static inline size_t pol_rng_below(struct pol_rng *r, size_t n)
{
    return (size_t)(pol_rng_next(r) % n);
}

/* pol_ops.create / destroy for policies whose only state is a generator. */
static inline int pol_rng_state_create(const struct cfg_policy *cfg, void **state)
{
    (void)cfg;
    struct pol_rng *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    pol_rng_seed(r);
    *state = r;
    return 0;
}

static inline void pol_rng_state_destroy(void *state)
{
    free(state);
}

#endif
