/*
 * precise_cache_aware's decision, separated from the policy plumbing so it
 * can be tested as a function of (holder index, speculative entries, the
 * request's token chain, candidates with loads, thresholds).
 *
 * The rule, per request: the eligible workers whose KV-cache events say
 * they hold the longest prefix of the request's blocks (kv_holders.h), or
 * to which this data plane just sent that prefix (a speculative entry), are
 * the holders; the least loaded holder is chosen when it is not overloaded
 * under cache_aware's per-request balance gate (its load exceeds the least
 * loaded candidate's by balance_abs_threshold and by the factor
 * balance_rel_threshold) and its fresh report does not say its KV cache is
 * full: decision affinity (affinity_despite_imbalance when the fleet gate
 * would have moved it). Any exact match counts: a held block saves its
 * prefill, so cache_threshold (a guard against cache_aware's guesses) does
 * not apply. Otherwise the request goes by load: down the rendezvous
 * ranking of the chain's head (policy.rendezvous) to the first worker
 * within the balance gate, or to the least-loaded worker (decisions
 * no_match, overloaded_fallback). The gate, not the load bound: an evicted
 * prefix then comes back to the same worker while it is not overloaded.
 * Its share: of the workers within the gate, only those holding no more
 * than the mean of their blocks (the holder index's count per worker),
 * give or take an eighth of the prompt's, are walked, so new prefixes are dealt evenly while caches
 * fill, and independent router nodes, which all learn these counts from
 * the workers' events within milliseconds, deal them alike; with full
 * caches the counts are level and the ranking's first keeps it.
 *
 * Speculative entries: after each decision the chosen worker is recorded as
 * holding the request's blocks in a private index, shared by the loops of
 * the data plane (under a lock), for
 * speculative_ttl (two generations swapped every ttl / 2, so an entry lives
 * between half the TTL and the TTL), so that a burst of one new prefix,
 * arriving before the worker's first BlockStored event, does not scatter
 * over the fleet. The worker's event makes the fact exact; the entry then
 * simply ages out.
 */
#ifndef SY_DATAPLANE_POLICY_PRECISE_CACHE_AWARE_H
#define SY_DATAPLANE_POLICY_PRECISE_CACHE_AWARE_H

#include <stddef.h>
#include <stdint.h>

#include "dataplane/policy/cache_aware.h"
#include "shm/kv_holders.h"

/* Blocks of the chain's head that key the rendezvous ranking (8 blocks of
 * 16 tokens: about cache_aware's 120 tokens). */
#define PCA_RDV_KEY_BLOCKS 8u

/* Speculative entries of one loop. Owned by the policy instance. */
struct pca_spec;

/* NULL when ttl_ms is 0 (off) or on allocation failure. */
struct pca_spec *pca_spec_create(uint64_t ttl_ms);
void pca_spec_destroy(struct pca_spec *s);

/*
 * Decides among n >= 1 candidates for the request whose chain of block
 * hashes is chain[0..n_chain), and records the choice as a speculative
 * entry (spec may be NULL; now_ms: monotonic). exact may be NULL (nothing
 * is known to be held). 0, or -EINVAL if n == 0.
 */
int pca_decide(const struct kvh_index *exact, struct pca_spec *spec, const struct ca_params *p,
               const uint64_t *chain, size_t n_chain, const struct ca_candidate *cands, size_t n,
               uint64_t now_ms, struct ca_choice *out);

#endif
