/*
 * cache_aware's decision, separated from the policy plumbing so that it can
 * be tested and benchmarked as a pure function of (index, request text,
 * candidates with loads, thresholds).
 *
 * The rule, per request (the vllm-router #238 fix as the design): find the
 * eligible worker holding the longest prefix of the request's blocks. If the
 * match covers at least cache_threshold of the blocks and *that worker* is
 * not overloaded — its load exceeds the least-loaded eligible worker's by
 * more than balance_abs_threshold AND by more than the factor
 * balance_rel_threshold — route there (affinity). Otherwise route to the
 * least-loaded worker, ties broken toward the longer match. A hot worker
 * elsewhere in the fleet does not switch affinity off (invariant 9).
 *
 * Rendezvous (params.rendezvous): a prefix no eligible worker holds (or
 * holds less than cache_threshold of) goes down the rendezvous ranking of
 * the eligible workers (policy/rendezvous.h), keyed by the hash of its
 * first CA_RDV_KEY_BLOCKS blocks (the whole text when shorter than a
 * block), to the first worker whose load is within the bound
 * (bounded_load_factor × mean + 1); and when the matched worker is
 * overloaded, the fallback walks the same ranking, skipping it. Independent
 * router nodes, each with its own index, thus send the same new prefix to
 * the same worker, and agree on where to go when they give up affinity.
 * A match below cache_threshold still counts in the walk: its holder is
 * taken at its own rank unless it is overloaded, so only a better-ranked
 * worker within the bound takes the request from it (a node that placed a
 * conversation's first turn and sees a later one keeps it where it is).
 * The worker key is its id, never a slot number. Without rendezvous both
 * go to the least-loaded worker (the behaviour before it existed).
 *
 * balance_gate: fleet reproduces vllm-router's pre-#238 behaviour for
 * benchmarks only: when the fleet's max and min loads differ by both
 * thresholds, every request goes to the least-loaded worker.
 *
 * Either way the request's blocks are recorded for the chosen worker.
 */
#ifndef SY_DATAPLANE_POLICY_CACHE_AWARE_H
#define SY_DATAPLANE_POLICY_CACHE_AWARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "dataplane/core/policy.h"
#include "shm/prefix_index.h"

/* Blocks of a prompt's head that key its rendezvous ranking: 2 blocks, 480
 * bytes, about 120 tokens. Short, so that the first turn of a chat already
 * has them and later turns (arriving at other router nodes) keep the same
 * key; long enough that prompts sharing only a short preamble spread. */
#define CA_RDV_KEY_BLOCKS 2u

struct ca_params {
    double cache_threshold;
    uint64_t balance_abs_threshold;
    double balance_rel_threshold;
    enum cfg_balance_gate balance_gate;
    bool rendezvous;            /* cold prefixes and fallbacks walk the ranking */
    double bounded_load_factor; /* >= 1 (the ranking's load bound) */
    bool bounded_affinity;      /* the matched worker must be within the bound too */
    /* ... its bound's factor (>= 1; 0: bounded_load_factor) */
    double affinity_load_factor;
};

/* One eligible worker: its registry slot, current load, and rendezvous
 * seed (rdv_worker_seed of its id). */
struct ca_candidate {
    uint32_t slot;
    uint64_t load;
    bool kv_overloaded; /* counts as overloaded in the balance gate */
    uint64_t rdv_seed;
};

struct ca_choice {
    size_t index; /* into the candidates */
    /* AFFINITY, AFFINITY_DESPITE_IMBALANCE, OVERLOADED_FALLBACK, NO_MATCH
     * or FLEET_IMBALANCED (policy.h) */
    enum pol_decision decision;
    size_t matched_blocks;
    size_t total_blocks;
};

/*
 * Decides for one request of model `model` with routing text text[0..len)
 * among n >= 1 candidates, and records the request's blocks for the chosen
 * worker. Thread-safe (the index is shared). Returns 0, or -EINVAL if n == 0.
 */
int ca_decide(struct pix_index *ix, const struct ca_params *p, const char *model, const char *text,
              size_t len, const struct ca_candidate *cands, size_t n, struct ca_choice *out);

/* ca_decide with the chain's seed given: ca_chain_seed's. */
int ca_decide_seeded(struct pix_index *ix, const struct ca_params *p, uint64_t seed,
                     const char *text, size_t len, const struct ca_candidate *cands, size_t n,
                     struct ca_choice *out);

/* The seed of a request's text chain: its model's (pix_model_seed), mixed
 * with its cache_salt's hash when salted (tkc_salt_seed, token_chain.h),
 * so that a salted request matches only prefixes recorded with the same
 * salt and an unsalted one only unsalted prefixes (docs/routing.md). */
uint64_t ca_chain_seed(const char *model, bool salted, uint64_t salt_hash);

/* The policy's parameters as the config gives them (cache_aware and
 * precise_cache_aware read the same keys). */
struct ca_params ca_params_from_cfg(const struct cfg_policy *cfg);

/* True when `load` is overloaded relative to `min_load` under p. */
bool ca_is_overloaded(const struct ca_params *p, uint64_t load, uint64_t min_load);

/*
 * The overload gate both cache-aware policies apply once they know their
 * match (invariant 9): the fleet gate (balance_gate: fleet) when the
 * fleet is imbalanced; no match when `enough` is false; a fallback when
 * the matched candidate cands[matched_idx] is KV-full, overloaded against
 * min_load or over its affinity bound; else affinity, told apart when the
 * fleet gate would have moved it. Returns the decision; the caller picks
 * the worker that goes with it.
 */
enum pol_decision ca_gate(const struct ca_params *p, const struct ca_candidate *cands, size_t n,
                          size_t matched_idx, bool enough, uint64_t min_load, uint64_t max_load,
                          uint64_t total);

/* With bounded_affinity (and rendezvous): true when a matched worker's
 * `load` is over its bound, affinity_load_factor x (total / n) + 1. */
bool ca_affinity_over_bound(const struct ca_params *p, uint64_t load, uint64_t total, size_t n);

/* The pieces of the decision precise_cache_aware shares (it matches on
 * another index, then chooses the same way). */

/* The least-loaded candidate; not a KV-full one unless all are; among
 * equals `prefer` (an index, or -1), else the one `spread` (a hash of the
 * request) picks, so that unmatched requests on an idle fleet spread. */
size_t ca_least_loaded(const struct ca_candidate *cands, size_t n, long prefer, uint64_t spread);

/* The first candidate of key's rendezvous ranking within the load bound
 * and not KV-full, skipping index `skip` (n for none); the least-loaded one
 * when none is. total: the candidates' summed load. */
size_t ca_ranked(const struct ca_params *p, const struct ca_candidate *cands, size_t n,
                 uint64_t total, size_t skip, const void *key, size_t key_len, uint64_t spread);

#endif
