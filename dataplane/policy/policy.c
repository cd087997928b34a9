/*
 * Policy selection (see dataplane/policy.h): maps policy.name to its ops.
 * Until the policies issue lands, names without an implementation fall
 * back to least_load, logged once per process.
 */
#include <errno.h>
#include <stdatomic.h>

#include "common/log.h"
#include "dataplane/policy.h"

static atomic_bool pol_fallback_logged;

int pol_create(const struct cfg_policy *cfg, struct pol_policy *out)
{
    const struct pol_ops *ops;
    switch (cfg->name) {
    case CFG_POLICY_ROUND_ROBIN:
        ops = &pol_round_robin_ops;
        break;
    case CFG_POLICY_LEAST_LOAD:
        ops = &pol_least_load_ops;
        break;
    default:
        ops = &pol_least_load_ops;
        if (!atomic_exchange_explicit(&pol_fallback_logged, true, memory_order_relaxed))
            log_warn("policy %s is not implemented yet; routing with least_load",
                     cfg_policy_name_str(cfg->name));
        break;
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
             size_t n)
{
    if (n == 0)
        return -ENOENT;
    int i = p->ops->pick(p->state, req, cands, n);
    if (i >= 0 && (size_t)i >= n)
        return -EINVAL;
    return i;
}
