/*
 * cache_aware as a routing policy (the decision itself is in
 * cache_aware.c). The prefix index is one per node: the data plane attaches
 * the control plane's shared segment at startup and hands it over with
 * pol_cache_aware_use_index before any loop creates its policy, so every
 * loop of every data plane on the node (and the next one after a hot
 * restart) sees the same prefixes. Without one (no segment, or a unit test)
 * the first loop that asks creates a private index for the process, as
 * before the index was shared; either lives until the process exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/log.h"
#include "dataplane/core/policy.h"
#include "dataplane/policy/cache_aware.h"
#include "dataplane/policy/rendezvous.h"
#include "shm/prefix_index.h"

/* The private fallback's size: shm.prefix_index_blocks' default (1 Mi
 * blocks of 240 bytes: 240 MiB of distinct prompt text, in 16 MiB). */
#define CA_INDEX_BLOCKS     (1u << 20)
#define CA_STACK_CANDIDATES 256u

static pthread_mutex_t ca_index_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pix_index *ca_index;

void pol_cache_aware_use_index(struct pix_index *ix)
{
    pthread_mutex_lock(&ca_index_lock);
    ca_index = ix;
    pthread_mutex_unlock(&ca_index_lock);
}

static struct pix_index *ca_shared_index(void)
{
    pthread_mutex_lock(&ca_index_lock);
    if (ca_index == NULL) {
        ca_index = pix_create(CA_INDEX_BLOCKS);
        if (ca_index != NULL)
            log_info("cache_aware: private prefix index of %zu blocks (%zu bytes)",
                     pix_capacity(ca_index), pix_memory_bytes(ca_index));
    }
    struct pix_index *ix = ca_index;
    pthread_mutex_unlock(&ca_index_lock);
    return ix;
}

size_t pol_cache_aware_index_bytes(void)
{
    pthread_mutex_lock(&ca_index_lock);
    size_t bytes = ca_index != NULL ? pix_memory_bytes(ca_index) : 0;
    pthread_mutex_unlock(&ca_index_lock);
    return bytes;
}

struct ca_state {
    struct pix_index *ix; /* shared, borrowed */
    struct ca_params params;
};

static int ca_create(const struct cfg_policy *cfg, void **state)
{
    struct ca_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->ix = ca_shared_index();
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
