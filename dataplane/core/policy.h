/*
 * Routing policies: given one request and the eligible workers (healthy,
 * not draining, serving the request's model, not yet tried by it) with
 * their current loads, pick one and say why (enum pol_decision: one label
 * per reason, from one names table). A policy sees the request's routing text
 * (the prompt or the concatenated chat messages, bounded), a header lookup
 * and the candidates; it never touches load itself (the forwarder's guard
 * does). Policies live in dataplane/policy/, one per file.
 *
 * Threading: each event loop creates its own instance (pol_create), so a
 * policy's state (a round-robin cursor, a random generator) is
 * single-threaded. What is not per loop is in a struct pol_shared, one per
 * data plane, handed to every pol_create: cache_aware's prefix index (one
 * per node, in shared memory, used by every loop of every data plane, so
 * that a request's affinity does not depend on which thread or process
 * accepted it nor on a restart; see shm/prefix_index.h), precise's KV
 * holder index and its speculative entries.
 */
#ifndef SY_DATAPLANE_POLICY_H
#define SY_DATAPLANE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/registry.h"

/*
 * Why a policy chose its worker. pol_decision_name gives the label used in
 * switchyard_routing_decisions_total, switchyard_pd_routing_decisions_total
 * and the x-switchyard-decision debug header; the classic policies report
 * their own name. The zero value, "other", is a pick that named no reason
 * (a refused one).
 */
enum pol_decision {
    POL_DECISION_UNSET = 0,
    POL_DECISION_ROUND_ROBIN,
    POL_DECISION_RANDOM,
    POL_DECISION_POWER_OF_TWO,
    POL_DECISION_LEAST_LOAD,
    POL_DECISION_HASH,                /* consistent_hash: the key's worker */
    POL_DECISION_HASH_ALL_FULL,       /* ... every worker full: the key's first */
    POL_DECISION_NO_KEY,              /* ... no session key: the least loaded */
    POL_DECISION_AFFINITY,            /* cache_aware: the prefix-matched worker */
    POL_DECISION_OVERLOADED_FALLBACK, /* ... matched, but that worker is overloaded */
    POL_DECISION_NO_MATCH,            /* ... match below cache_threshold */
    POL_DECISION_FLEET_IMBALANCED,    /* ... balance_gate fleet switched affinity off */
    /* ... per-request gate: the matched worker, although another worker is
     * overloaded (the fleet gate would have switched affinity off here) */
    POL_DECISION_AFFINITY_DESPITE_IMBALANCE,
    /* Responses: the worker that stores the response the request names
     * (previous_response_id, or the id in its path), whatever the policy */
    POL_DECISION_RESPONSE_AFFINITY,
    POL_DECISION_COUNT,
};

/* The label of d (static); "other" for POL_DECISION_UNSET or out of range. */
const char *pol_decision_name(enum pol_decision d);

/* Returns the value of request header `name` (case-insensitive) or NULL. */
typedef const char *(*pol_header_fn)(void *ctx, const char *name);

/* precise_cache_aware's token chain of a request (dataplane/forward/tokenize.h). */
enum pol_tokens {
    POL_TOKENS_NONE = 0, /* not tokenized (not this policy, or a route without a prompt) */
    POL_TOKENS_OK,       /* kv_chain holds the prompt's block hashes */
    POL_TOKENS_FAILED,   /* tokenizing failed or timed out: route approximately */
};

/* What a policy may look at. Borrowed for the duration of pick. */
struct pol_request {
    const char *path;  /* e.g. "/v1/chat/completions" */
    const char *model; /* the model being routed */
    const char *text;  /* routing text, not NUL-terminated */
    size_t text_len;
    const char *user; /* the body's "user" ("" when absent) */
    /* The cache_salt the worker receives (the client's, or the tenant's
     * under cache_isolation): a salted request matches only blocks routed
     * with the same salt (tkc_salt_seed of both chains, token_chain.h). */
    bool salted;
    uint64_t salt_hash; /* tkc_salt_hash of it, when salted */
    pol_header_fn header;
    void *header_ctx;
    /* precise_cache_aware: the prompt's chain of block hashes (token_chain.h). */
    enum pol_tokens tokens;
    const uint64_t *kv_chain;
    size_t kv_chain_len;
};

struct pol_candidate {
    const struct shm_worker_info *worker; /* borrowed */
    uint64_t load;      /* at decision time: own in-flight combined with the worker's
                         * fresh report (shm/effective_load.h) */
    bool kv_overloaded; /* the fresh report's kv_cache_usage > policy.kv_overload */
};

struct pol_shared;

struct pol_ops {
    const char *name;
    enum pol_decision decision; /* what pick reports unless it says otherwise */
    /* Routes on the prompt's token chain (pol_request.kv_chain): the forwarder
     * tokenizes the request before the first pick. */
    bool needs_tokens;
    /* Creates per-loop state (may set *state to NULL); shared is the data
     * plane's (borrowed: it outlives the state). 0 or -errno. */
    int (*create)(const struct cfg_policy *cfg, struct pol_shared *shared, void **state);
    void (*destroy)(void *state);
    /*
     * Index into cands (n >= 1), or a negative errno to refuse. May set
     * *decision to say why (it holds the ops' decision on entry).
     */
    int (*pick)(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                size_t n, enum pol_decision *decision);
};

/* A policy instance. Caller storage; pol_create / pol_destroy. */
struct pol_policy {
    const struct pol_ops *ops;
    void *state;
};

extern const struct pol_ops pol_round_robin_ops;
extern const struct pol_ops pol_random_ops;
extern const struct pol_ops pol_power_of_two_ops;
extern const struct pol_ops pol_least_load_ops;
extern const struct pol_ops pol_consistent_hash_ops;
extern const struct pol_ops pol_cache_aware_ops;
extern const struct pol_ops pol_precise_cache_aware_ops;

/* True when p routes on token ids, which the caller must fetch first. */
static inline bool pol_needs_tokens(const struct pol_policy *p)
{
    return p->ops->needs_tokens;
}

/* Creates the policy named by cfg->name, sharing what is not per loop
 * through shared (pol_shared_create). 0 or -errno. */
int pol_create(const struct cfg_policy *cfg, struct pol_shared *shared, struct pol_policy *out);
void pol_destroy(struct pol_policy *p);

/* Picks among n >= 1 candidates: an index, or a negative errno; *decision
 * as in pol_ops.pick. */
int pol_pick(struct pol_policy *p, const struct pol_request *req, const struct pol_candidate *cands,
             size_t n, enum pol_decision *decision);

struct pix_index;
struct kvh_index;

/*
 * What the policies of every loop of one data plane share (opaque). The
 * main thread creates it before any loop creates its policies and destroys
 * it after the last policy is destroyed; pol_create and picks may run on
 * any loop thread (it has its own lock). Both indexes are borrowed and
 * must outlive it:
 *  - prefix: the node's shared prefix index for cache_aware; NULL makes
 *    cache_aware create a private one on first use (owned by this);
 *  - kv_holders: the node's KV holder index for precise_cache_aware; NULL
 *    routes every request of that policy by cache_aware's approximate
 *    match (counted as fallback "no_index").
 * 0 or -ENOMEM.
 */
int pol_shared_create(struct pix_index *prefix, struct kvh_index *kv_holders,
                      struct pol_shared **out);
void pol_shared_destroy(struct pol_shared *s);

/* Bytes mapped by cache_aware's prefix index (0 before its first use, or
 * when s is NULL). */
size_t pol_shared_prefix_bytes(struct pol_shared *s);

/* The consistent_hash choice as a function (also used by tests). */
int pol_consistent_hash_pick(const struct pol_request *req, const struct pol_candidate *cands,
                             size_t n, enum pol_decision *decision);

#endif
