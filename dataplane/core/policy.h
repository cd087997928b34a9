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
#include "dataplane/types/policy_types.h"

/* The label of d (static); "other" for POL_DECISION_UNSET or out of range. */
const char *pol_decision_name(enum pol_decision d);

struct pol_shared;

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
