/*
 * cache_aware as a routing policy (the decision itself is in
 * cache_aware.c). The prefix index is one per node: the data plane attaches
 * the control plane's shared segment at startup and hands it to the
 * policies' shared state (pol_shared_create) before any loop creates its
 * policy, so every loop of every data plane on the node (and the next one
 * after a hot restart) sees the same prefixes. Without one (no segment, or
 * a unit test) the first loop that asks creates a private index in that
 * shared state, as before the index was shared; either lives as long as
 * the shared state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/log.h"
#include "dataplane/core/policy.h"
#include "dataplane/policy/cache_aware.h"
#include "dataplane/policy/policy_internal.h"
#include "dataplane/policy/rendezvous.h"
#include "shm/prefix_index.h"

/* The private fallback's size: shm.prefix_index_blocks' default (1 Mi
 * blocks of 240 bytes: 240 MiB of distinct prompt text, in 16 MiB). */
#define CA_INDEX_BLOCKS     (1u << 20)
#define CA_STACK_CANDIDATES 256u

static struct pix_index *ca_shared_index(struct pol_shared *sh)
{
    pthread_mutex_lock(&sh->lock);
    if (sh->prefix == NULL) {
        sh->prefix = pix_create(CA_INDEX_BLOCKS);
        sh->prefix_owned = sh->prefix != NULL;
        if (sh->prefix != NULL)
            log_info("cache_aware: private prefix index of %zu blocks (%zu bytes)",
                     pix_capacity(sh->prefix), pix_memory_bytes(sh->prefix));
    }
    struct pix_index *ix = sh->prefix;
    pthread_mutex_unlock(&sh->lock);
    return ix;
}

struct ca_state {
    struct pix_index *ix; /* shared, borrowed */
    struct ca_params params;
};

static int ca_create(const struct cfg_policy *cfg, struct pol_shared *shared, void **state)
{
    if (shared == NULL)
        return -EINVAL;
    struct ca_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->ix = ca_shared_index(shared);
    if (s->ix == NULL) {
        free(s);
        return -ENOMEM;
    }
    s->params = ca_params_from_cfg(cfg);
    *state = s;
    return 0;
}

static void ca_destroy(void *state)
{
    free(state);
}

static int ca_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                   size_t n, enum pol_decision *decision)
{
    struct ca_state *s = state;
    if (n == 0)
        return -ENOENT;
    struct ca_candidate stack[CA_STACK_CANDIDATES];
    bool on_heap = n > CA_STACK_CANDIDATES;
    struct ca_candidate *cc = on_heap ? malloc(n * sizeof(*cc)) : stack;
    if (cc == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        cc[i] = (struct ca_candidate){
            .slot = cands[i].worker->slot,
            .load = cands[i].load,
            .kv_overloaded = cands[i].kv_overloaded,
            .rdv_seed = rdv_worker_seed(cands[i].worker->id),
        };
    struct ca_choice choice;
    int rc =
        ca_decide_seeded(s->ix, &s->params, ca_chain_seed(req->model, req->salted, req->salt_hash),
                         req->text != NULL ? req->text : "", req->text_len, cc, n, &choice);
    if (on_heap)
        free(cc);
    if (rc != 0)
        return rc;
    *decision = choice.decision;
    return (int)choice.index;
}

const struct pol_ops pol_cache_aware_ops = {
    .name = "cache_aware",
    .create = ca_create,
    .destroy = ca_destroy,
    .pick = ca_pick,
};
