/*
 * round_robin: each loop walks its eligible workers in registry order with
 * its own cursor. The cursor counts decisions, not workers, so a fleet
 * whose eligible set changes still spreads evenly. Per-loop state; no locks.
 */
#include <errno.h>
#include <stdlib.h>

#include "dataplane/core/policy.h"

struct pol_rr {
    uint64_t next;
};

static int rr_create(const struct cfg_policy *cfg, struct pol_shared *shared, void **state)
{
    (void)cfg;
    (void)shared;
    struct pol_rr *rr = calloc(1, sizeof(*rr));
    if (rr == NULL)
        return -ENOMEM;
    *state = rr;
    return 0;
}

static void rr_destroy(void *state)
{
    free(state);
}

static int rr_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                   size_t n, enum pol_decision *decision)
{
    (void)req;
    (void)decision;
    (void)cands;
    struct pol_rr *rr = state;
    return (int)(rr->next++ % n);
}

const struct pol_ops pol_round_robin_ops = {
    .name = "round_robin",
    .decision = POL_DECISION_ROUND_ROBIN,
    .create = rr_create,
    .destroy = rr_destroy,
    .pick = rr_pick,
};
