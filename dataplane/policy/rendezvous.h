/*
 * Rendezvous (highest-random-weight) ranking of workers for a key, shared
 * by consistent_hash (session keys) and cache_aware (cold prefixes). Each
 * worker scores XXH3(key) seeded with the hash of its id; the ranking is
 * the workers by descending score. A key's first choice depends only on
 * the key and the set of workers, so independent routers with the same
 * workers agree on it without talking, and adding or removing one worker
 * moves only the keys that ranked it first.
 *
 * The worker's part of the seed is its id (stable across nodes and
 * restarts, unlike a registry slot number). Stateless and thread-safe.
 */
#ifndef SY_DATAPLANE_POLICY_RENDEZVOUS_H
#define SY_DATAPLANE_POLICY_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A worker's seed: the hash of its id (NUL-terminated). */
uint64_t rdv_worker_seed(const char *id);

/* The score of key[0..len) for the worker with this seed. */
uint64_t rdv_score(const void *key, size_t len, uint64_t worker_seed);

/*
 * Candidate i of n: sets *seed and returns whether the walk may stop at it
 * (e.g. its load is within the bound); ctx is the caller's.
 */
typedef bool (*rdv_candidate_fn)(const void *ctx, size_t i, uint64_t *seed);

/*
 * Walks the ranking of candidates 0..n-1 for key and returns the first one
 * `accept` accepts (the highest score among the accepted; ties: the lowest
 * index), or -1 when it accepts none.
 */
long rdv_first(const void *key, size_t len, size_t n, rdv_candidate_fn accept, const void *ctx);

/*
 * The bounded-load limit: a worker is within bounds while its load is at
 * most factor × (total / n) + 1. The +1 lets an idle fleet take a request
 * per worker before the mean moves. factor >= 1 keeps the least-loaded
 * worker always within bounds.
 */
bool rdv_within_bound(uint64_t load, uint64_t total, size_t n, double factor);

#endif
