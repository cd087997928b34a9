/*
 * random: a uniformly random eligible worker. Per-loop state; no locks.
 */
#include <errno.h>
#include <stdlib.h>

#include "dataplane/policy.h"
#include "dataplane/policy/rng.h"

static int rnd_create(const struct cfg_policy *cfg, void **state)
{
    (void)cfg;
    struct pol_rng *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    pol_rng_seed(r);
    *state = r;
    return 0;
}

static void rnd_destroy(void *state)
{
    free(state);
}

static int rnd_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                    size_t n, const char **decision)
{
    (void)req;
    (void)decision;
    (void)cands;
    return (int)pol_rng_below(state, n);
}

const struct pol_ops pol_random_ops = {
    .name = "random",
    .create = rnd_create,
    .destroy = rnd_destroy,
    .pick = rnd_pick,
};
