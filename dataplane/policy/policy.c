/*
 * Policy selection (see dataplane/core/policy.h): maps policy.name to its ops,
 * every routing decision to its label, and owns what the policies of a
 * data plane's loops share (struct pol_shared, policy_internal.h).
 */
#include <errno.h>
#include <stdlib.h>

#include "common/log.h"
#include "dataplane/core/policy.h"
#include "dataplane/policy/policy_internal.h"
#include "shm/prefix_index.h"

/* Labels as published in metrics and debug headers: never rename one. */
static const char *const pol_decision_names[POL_DECISION_COUNT] = {
    [POL_DECISION_UNSET] = "other",
    [POL_DECISION_ROUND_ROBIN] = "round_robin",
    [POL_DECISION_RANDOM] = "random",
    [POL_DECISION_POWER_OF_TWO] = "power_of_two",
    [POL_DECISION_LEAST_LOAD] = "least_load",
    [POL_DECISION_HASH] = "hash",
    [POL_DECISION_HASH_ALL_FULL] = "hash_all_full",
    [POL_DECISION_NO_KEY] = "no_key",
    [POL_DECISION_AFFINITY] = "affinity",
    [POL_DECISION_OVERLOADED_FALLBACK] = "overloaded_fallback",
    [POL_DECISION_NO_MATCH] = "no_match",
    [POL_DECISION_FLEET_IMBALANCED] = "fleet_imbalanced",
    [POL_DECISION_AFFINITY_DESPITE_IMBALANCE] = "affinity_despite_imbalance",
    [POL_DECISION_RESPONSE_AFFINITY] = "response_affinity",
};

const char *pol_decision_name(enum pol_decision d)
{
    if (d <= POL_DECISION_UNSET || d >= POL_DECISION_COUNT)
        d = POL_DECISION_UNSET;
    return pol_decision_names[d];
}

int pol_shared_create(struct pix_index *prefix, struct kvh_index *kv_holders,
                      struct pol_shared **out)
{
    struct pol_shared *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    s->prefix = prefix;
    s->kv_holders = kv_holders;
    *out = s;
    return 0;
}

void pol_shared_destroy(struct pol_shared *s)
{
    if (s == NULL)
        return;
    if (s->prefix_owned)
        pix_destroy(s->prefix);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

size_t pol_shared_prefix_bytes(struct pol_shared *s)
{
    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    size_t bytes = s->prefix != NULL ? pix_memory_bytes(s->prefix) : 0;
    pthread_mutex_unlock(&s->lock);
    return bytes;
}

int pol_create(const struct cfg_policy *cfg, struct pol_shared *shared, struct pol_policy *out)
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
    case CFG_POLICY_PRECISE_CACHE_AWARE:
        ops = &pol_precise_cache_aware_ops;
        break;
    default:
        log_error("unknown routing policy %d", (int)cfg->name);
        return -EINVAL;
    }
    out->ops = ops;
    out->state = NULL;
    return ops->create != NULL ? ops->create(cfg, shared, &out->state) : 0;
}

void pol_destroy(struct pol_policy *p)
{
    if (p->ops != NULL && p->ops->destroy != NULL)
        p->ops->destroy(p->state);
    p->ops = NULL;
    p->state = NULL;
}

int pol_pick(struct pol_policy *p, const struct pol_request *req, const struct pol_candidate *cands,
             size_t n, enum pol_decision *decision)
{
    *decision = p->ops->decision;
    if (n == 0)
        return -ENOENT;
    int i = p->ops->pick(p->state, req, cands, n, decision);
    if (i >= 0 && (size_t)i >= n)
        return -EINVAL;
    return i;
}
