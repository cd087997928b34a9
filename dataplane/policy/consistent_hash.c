/*
 * consistent_hash: requests with the same session key go to the same worker.
 * The key is the X-Session-Id header, else X-User-Id, else the body's
 * "user". Rendezvous (highest-random-weight) hashing over the worker ids
 * (policy/rendezvous.h, shared with cache_aware): a key's worker changes
 * only when that worker leaves or is full, never because an unrelated
 * worker came or went.
 *
 * Bounded load: a worker is full when its load has reached
 * ceil(CH_LOAD_FACTOR × (total load + 1) / n); the key then goes to its
 * next-ranked worker that is not, so one heavy session cannot overload a
 * worker. Requests without a key go to the least-loaded worker.
 * Stateless apart from the ops; no locks.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "dataplane/core/policy.h"
#include "dataplane/policy/rendezvous.h"

#define CH_LOAD_FACTOR 1.25

static const char *ch_key(const struct pol_request *req, size_t *len)
{
    const char *names[2] = {"X-Session-Id", "X-User-Id"};
    for (int i = 0; i < 2; i++) {
        const char *v = req->header != NULL ? req->header(req->header_ctx, names[i]) : NULL;
        if (v != NULL && v[0] != '\0') {
            *len = strlen(v);
            return v;
        }
    }
    if (req->user != NULL && req->user[0] != '\0') {
        *len = strlen(req->user);
        return req->user;
    }
    return NULL;
}

struct ch_walk {
    const struct pol_candidate *cands;
    uint64_t cap;
    bool capped; /* false: every worker is acceptable */
};

static bool ch_accept(const void *ctx, size_t i, uint64_t *seed)
{
    const struct ch_walk *w = ctx;
    *seed = rdv_worker_seed(w->cands[i].worker->id);
    return !w->capped || w->cands[i].load < w->cap;
}

int pol_consistent_hash_pick(const struct pol_request *req, const struct pol_candidate *cands,
                             size_t n, enum pol_decision *decision)
{
    size_t key_len = 0;
    const char *key = ch_key(req, &key_len);
    uint64_t total = 0;
    size_t least = 0;
    for (size_t i = 0; i < n; i++) {
        total += cands[i].load;
        if (cands[i].load < cands[least].load)
            least = i;
    }
    if (key == NULL) {
        *decision = POL_DECISION_NO_KEY;
        return (int)least;
    }
    struct ch_walk walk = {
        .cands = cands,
        .cap = (uint64_t)ceil(CH_LOAD_FACTOR * (double)(total + 1) / (double)n),
        .capped = true,
    };
    /* The best-ranked worker under the cap; the best overall if all are full. */
    long best = rdv_first(key, key_len, n, ch_accept, &walk);
    *decision = best >= 0 ? POL_DECISION_HASH : POL_DECISION_HASH_ALL_FULL;
    if (best < 0) {
        walk.capped = false;
        best = rdv_first(key, key_len, n, ch_accept, &walk);
    }
    return (int)best;
}

static int ch_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                   size_t n, enum pol_decision *decision)
{
    (void)state;
    return pol_consistent_hash_pick(req, cands, n, decision);
}

const struct pol_ops pol_consistent_hash_ops = {
    .name = "consistent_hash",
    .pick = ch_pick,
};
