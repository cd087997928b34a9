/*
 * least_load: the candidate with the smallest load (summed over every
 * dataplane's lease). Ties are broken by a per-loop rotating start, so an
 * idle fleet is not hammered on its first worker. Per-loop state; no locks.
 */
#include <errno.h>
#include <stdlib.h>

#include "dataplane/core/policy.h"

struct pol_ll {
    uint64_t turn;
};

static int ll_create(const struct cfg_policy *cfg, struct pol_shared *shared, void **state)
{
    (void)cfg;
    (void)shared;
    struct pol_ll *ll = calloc(1, sizeof(*ll));
    if (ll == NULL)
        return -ENOMEM;
    *state = ll;
    return 0;
}

static void ll_destroy(void *state)
{
    free(state);
}

static int ll_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                   size_t n, enum pol_decision *decision)
{
    (void)req;
    (void)decision;
    struct pol_ll *ll = state;
    size_t start = (size_t)(ll->turn++ % n);
    size_t best = start;
    for (size_t k = 1; k < n; k++) {
        size_t i = (start + k) % n;
        if (cands[i].load < cands[best].load)
            best = i;
    }
    return (int)best;
}

const struct pol_ops pol_least_load_ops = {
    .name = "least_load",
    .decision = POL_DECISION_LEAST_LOAD,
    .create = ll_create,
    .destroy = ll_destroy,
    .pick = ll_pick,
};
