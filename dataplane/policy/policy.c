/*
 * Policy selection (see dataplane/policy.h): maps policy.name to its ops.
 */
#include <errno.h>

#include "common/log.h"
#include "dataplane/policy.h"

int pol_create(const struct cfg_policy *cfg, struct pol_policy *out)
{
    const struct pol_ops *ops;
    switch (cfg->name) {
    case CFG_POLICY_ROUND_ROBIN:
        ops = &pol_round_robin_ops;
        break;
    case CFG_POLICY_RANDOM:
        ops = &pol_random_ops;
        break;
    case CFG_POLICY_POWER_OF_TWO:
        ops = &pol_power_of_two_ops;
        break;
    case CFG_POLICY_LEAST_LOAD:
        ops = &pol_least_load_ops;
        break;
    case CFG_POLICY_CONSISTENT_HASH:
        ops = &pol_consistent_hash_ops;
        break;
    case CFG_POLICY_CACHE_AWARE:
        ops = &pol_cache_aware_ops;
        break;
    default:
        log_error("unknown routing policy %d", (int)cfg->name);
        return -EINVAL;
    }
    out->ops = ops;
    out->state = NULL;
    return ops->create != NULL ? ops->create(cfg, &out->state) : 0;
}

void pol_destroy(struct pol_policy *p)
{
    if (p->ops != NULL && p->ops->destroy != NULL)
        p->ops->destroy(p->state);
    p->ops = NULL;
    p->state = NULL;
}

int pol_pick(struct pol_policy *p, const struct pol_request *req, const struct pol_candidate *cands,
             size_t n, const char **decision)
{
    *decision = p->ops->name;
    if (n == 0)
        return -ENOENT;
    int i = p->ops->pick(p->state, req, cands, n, decision);
    if (i >= 0 && (size_t)i >= n)
        return -EINVAL;
    return i;
}
