/*
 * random: a uniformly random eligible worker. Per-loop state; no locks.
 */
#include "dataplane/core/policy.h"
#include "dataplane/policy/rng.h"

static int rnd_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                    size_t n, enum pol_decision *decision)
{
    (void)req;
    (void)decision;
    (void)cands;
    return (int)rng_below(state, n);
}

const struct pol_ops pol_random_ops = {
    .name = "random",
    .decision = POL_DECISION_RANDOM,
    .create = pol_rng_state_create,
    .destroy = pol_rng_state_destroy,
    .pick = rnd_pick,
};
