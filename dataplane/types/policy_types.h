/* The types of policy.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_POLICY_TYPES_H
#define SY_DATAPLANE_POLICY_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cfg_policy;
struct pol_shared;
struct shm_worker_info;

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

#endif
