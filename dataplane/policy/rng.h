/*
 * The state of the random policies (random, power_of_two): one struct rng
 * (common/rng.h, splitmix64) per policy instance, so per loop, seeded with
 * rng_seed_random(). Fast and good enough to spread load; not for anything
 * secret (request ids draw from rng_fill_random instead). Single-threaded
 * by construction (one per loop).
 */
#ifndef SY_DATAPLANE_POLICY_RNG_H
#define SY_DATAPLANE_POLICY_RNG_H

#include <errno.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/rng.h"
#include "dataplane/core/policy.h"

/* pol_ops.create / destroy for policies whose only state is a struct rng. */
static inline int pol_rng_state_create(const struct cfg_policy *cfg, struct pol_shared *shared,
                                       void **state)
{
    (void)cfg;
    (void)shared;
    struct rng *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    rng_seed_random(r);
    *state = r;
    return 0;
}

static inline void pol_rng_state_destroy(void *state)
{
    free(state);
}

#endif
