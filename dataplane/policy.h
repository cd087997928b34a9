/*
 * Routing policies: given one request and the eligible workers (healthy,
 * not draining, serving the request's model, not yet tried by it) with
 * their current loads, pick one. A policy sees the request's routing text
 * (the prompt or the concatenated chat messages, bounded), a header lookup
 * and the candidates; it never touches load itself (the forwarder's guard
 * does). Policies live in dataplane/policy/, one per file.
 *
 * Threading: each event loop creates its own instance (pol_create), so a
 * policy's state (a round-robin cursor, a random generator) is
 * single-threaded. cache_aware's prefix index is the exception: one per
 * process, shared by every loop, so that a request's affinity does not
 * depend on which thread accepted it (see policy/prefix_index.h).
 */
#ifndef SY_DATAPLANE_POLICY_H
#define SY_DATAPLANE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/registry.h"

/* Returns the value of request header `name` (case-insensitive) or NULL. */
typedef const char *(*pol_header_fn)(void *ctx, const char *name);

/* What a policy may look at. Borrowed for the duration of pick. */
struct pol_request {
    const char *path;  /* e.g. "/v1/chat/completions" */
    const char *model; /* the model being routed */
    const char *text;  /* routing text, not NUL-terminated */
    size_t text_len;
    const char *user; /* the body's "user" ("" when absent) */
    pol_header_fn header;
    void *header_ctx;
};

struct pol_candidate {
    const struct shm_worker_info *worker; /* borrowed */
    uint64_t load;                        /* shm_load_read_many at decision time */
};

struct pol_ops {
    const char *name;
    /* Creates per-loop state (may set *state to NULL). 0 or -errno. */
    int (*create)(const struct cfg_policy *cfg, void **state);
    void (*destroy)(void *state);
    /*
     * Index into cands (n >= 1), or a negative errno to refuse. *decision
     * names why (a static string: the label of
     * switchyard_routing_decisions_total and x-switchyard-decision).
     */
    int (*pick)(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                size_t n, const char **decision);
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

/* Creates the policy named by cfg->name. 0 or -errno. */
int pol_create(const struct cfg_policy *cfg, struct pol_policy *out);
void pol_destroy(struct pol_policy *p);

/* Picks among n >= 1 candidates: an index, or a negative errno; *decision
 * as in pol_ops.pick. */
int pol_pick(struct pol_policy *p, const struct pol_request *req, const struct pol_candidate *cands,
             size_t n, const char **decision);

/* Bytes held by cache_aware's shared prefix index (0 before its first use). */
size_t pol_cache_aware_index_bytes(void);

/* The consistent_hash choice as a function (also used by tests). */
int pol_consistent_hash_pick(const struct pol_request *req, const struct pol_candidate *cands,
                             size_t n, const char **decision);

#endif
