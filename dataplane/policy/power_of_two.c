/*
 * power_of_two: two distinct random candidates, the less loaded wins (ties
 * go to the first drawn). Near least_load's balance without every loop
 * herding onto the same least-loaded worker between two load updates.
 * Per-loop state; no locks.
 */
#include "dataplane/core/policy.h"
#include "dataplane/policy/rng.h"

static int p2c_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                    size_t n, enum pol_decision *decision)
{
    (void)req;
    (void)decision;
    if (n == 1)
        return 0;
    size_t a = (size_t)rng_below(state, n);
    /* Draw the second from the other n-1 so the two are distinct. */
    size_t b = (size_t)rng_below(state, n - 1);
    if (b >= a)
        b++;
    return (int)(cands[b].load < cands[a].load ? b : a);
}

const struct pol_ops pol_power_of_two_ops = {
    .name = "power_of_two",
    .decision = POL_DECISION_POWER_OF_TWO,
    .create = pol_rng_state_create,
    .destroy = pol_rng_state_destroy,
    .pick = p2c_pick,
};
