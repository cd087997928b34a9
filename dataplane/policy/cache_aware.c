/*
 * cache_aware's per-request decision (see cache_aware.h). Block hashes live
 * on the stack (PIX_MAX_BLOCKS × 8 bytes = 32 KiB): an event-loop thread's
 * stack is large and nothing here recurses.
 */
#include "dataplane/policy/cache_aware.h"

#include <errno.h>
#include <stdbool.h>

#include <xxhash.h>

#include "common/token_chain.h"
#include "dataplane/policy/hash_memo.h"
#include "dataplane/policy/rendezvous.h"

#define CA_MAX_CANDIDATES 1024u

bool ca_is_overloaded(const struct ca_params *p, uint64_t load, uint64_t min_load)
{
    return load > min_load + p->balance_abs_threshold &&
           (double)load > (double)min_load * p->balance_rel_threshold;
}

enum pol_decision ca_gate(const struct ca_params *p, const struct ca_candidate *cands, size_t n,
                          size_t matched_idx, bool enough, uint64_t min_load, uint64_t max_load,
                          uint64_t total)
{
    if (p->balance_gate == CFG_BALANCE_GATE_FLEET && ca_is_overloaded(p, max_load, min_load))
        return POL_DECISION_FLEET_IMBALANCED;
    if (!enough || matched_idx >= n)
        return POL_DECISION_NO_MATCH;
    if (cands[matched_idx].kv_overloaded ||
        ca_is_overloaded(p, cands[matched_idx].load, min_load) ||
        ca_affinity_over_bound(p, cands[matched_idx].load, total, n))
        return POL_DECISION_OVERLOADED_FALLBACK;
    /* Told apart so that an operator (and the benchmark) sees how often
     * judging per request kept a cache hit the fleet gate would have thrown
     * away: the fleet gate would send this request to a less loaded worker
     * than its matched one. */
    if (ca_is_overloaded(p, max_load, min_load) && cands[matched_idx].load > min_load)
        return POL_DECISION_AFFINITY_DESPITE_IMBALANCE;
    return POL_DECISION_AFFINITY;
}

/* Looser than the cold walk's bound (bounded_load_factor): a matched
 * worker gives way only when the prefix piles up on it, not when a busy
 * moment lifts its in-flight count past the mean (on the benchmark's
 * shared_prefix, the cold factor 1.25 here moved groups for nothing and
 * cost 8% of the hits; 2 costs none and still spreads a hot prefix). */
struct ca_params ca_params_from_cfg(const struct cfg_policy *cfg)
{
    return (struct ca_params){
        .cache_threshold = cfg->cache_threshold,
        .balance_abs_threshold = cfg->balance_abs_threshold,
        .balance_rel_threshold = cfg->balance_rel_threshold,
        .balance_gate = cfg->balance_gate,
        .rendezvous = cfg->rendezvous,
        .bounded_load_factor = cfg->bounded_load_factor,
        .bounded_affinity = cfg->bounded_affinity,
        .affinity_load_factor = cfg->affinity_load_factor,
    };
}

bool ca_affinity_over_bound(const struct ca_params *p, uint64_t load, uint64_t total, size_t n)
{
    double factor =
        p->affinity_load_factor >= 1.0 ? p->affinity_load_factor : p->bounded_load_factor;
    return p->rendezvous && p->bounded_affinity && !rdv_within_bound(load, total, n, factor);
}

/*
 * The least-loaded candidate. Among equally loaded ones the better match
 * (`prefer`) wins; otherwise `spread` (a hash of the request) picks one, so
 * that sequential unmatched requests on an idle fleet do not all land on
 * the first worker. A worker whose KV cache is over policy.kv_overload is
 * taken only when every candidate is.
 */
size_t ca_least_loaded(const struct ca_candidate *cands, size_t n, long prefer, uint64_t spread)
{
    bool skip_kv = false;
    for (size_t i = 0; i < n && !skip_kv; i++)
        skip_kv = !cands[i].kv_overloaded;
    uint64_t min_load = UINT64_MAX;
    size_t ties = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_kv && cands[i].kv_overloaded)
            continue;
        if (cands[i].load < min_load) {
            min_load = cands[i].load;
            ties = 1;
        } else if (cands[i].load == min_load) {
            ties++;
        }
    }
    if (prefer >= 0 && cands[prefer].load == min_load && !(skip_kv && cands[prefer].kv_overloaded))
        return (size_t)prefer;
    size_t pick = (size_t)(spread % ties);
    for (size_t i = 0; i < n; i++) {
        if (cands[i].load != min_load || (skip_kv && cands[i].kv_overloaded))
            continue;
        if (pick == 0)
            return i;
        pick--;
    }
    return 0;
}

/* A walk of the rendezvous ranking: candidates within the load bound and
 * not KV-full, except `skip` (the overloaded matched worker, or n for none). */
struct ca_walk {
    const struct ca_candidate *cands;
    size_t n;
    size_t skip;
    size_t holder; /* accepted at its rank whatever the bound (n for none) */
    uint64_t total;
    double factor;
};

static bool ca_walk_accept(const void *ctx, size_t i, uint64_t *seed)
{
    const struct ca_walk *w = ctx;
    *seed = w->cands[i].rdv_seed;
    if (i == w->holder)
        return true;
    /* A worker whose fresh report says its KV cache is full is passed over
     * like one over the bound: a request sent there would queue. */
    return i != w->skip && !w->cands[i].kv_overloaded &&
           rdv_within_bound(w->cands[i].load, w->total, w->n, w->factor);
}

/* The first worker of the ranking for key within bounds (skipping `skip`);
 * the least-loaded one if none is (only possible when skipping). */
static size_t ca_walk_first(const struct ca_params *p, const struct ca_candidate *cands, size_t n,
                            uint64_t total, size_t skip, size_t holder, const void *key,
                            size_t key_len, uint64_t spread)
{
    struct ca_walk w = {.cands = cands,
                        .n = n,
                        .skip = skip,
                        .holder = holder,
                        .total = total,
                        .factor = p->bounded_load_factor};
    long i = rdv_first(key, key_len, n, ca_walk_accept, &w);
    return i >= 0 ? (size_t)i : ca_least_loaded(cands, n, -1, spread);
}

size_t ca_ranked(const struct ca_params *p, const struct ca_candidate *cands, size_t n,
                 uint64_t total, size_t skip, const void *key, size_t key_len, uint64_t spread)
{
    return ca_walk_first(p, cands, n, total, skip, n, key, key_len, spread);
}

/*
 * The ranking walk for a prompt whose match is below cache_threshold but
 * not empty: `holder` (which holds the match) is accepted at its own rank
 * when it is not overloaded, so it gives way only to a worker that ranks
 * above it for this key and is within the bound. With several router nodes
 * this is a node that placed a conversation's first turn and sees it again
 * turns later, its match now short of the threshold: the placement it made
 * is knowledge, where walking on past a holder over the bound would be a
 * guess that splits the conversation between workers (each node then keeps
 * sending its turns to the worker it chose).
 */
static size_t ca_ranked_holder(const struct ca_params *p, const struct ca_candidate *cands,
                               size_t n, uint64_t total, size_t holder, uint64_t min_load,
                               const void *key, size_t key_len, uint64_t spread)
{
    if (holder >= n || cands[holder].kv_overloaded ||
        ca_is_overloaded(p, cands[holder].load, min_load))
        holder = n;
    return ca_walk_first(p, cands, n, total, n, holder, key, key_len, spread);
}

uint64_t ca_chain_seed(const char *model, bool salted, uint64_t salt_hash)
{
    uint64_t seed = pix_model_seed(model);
    return salted ? tkc_salt_seed(seed, salt_hash) : seed;
}

int ca_decide(struct pix_index *ix, const struct ca_params *p, const char *model, const char *text,
              size_t len, const struct ca_candidate *cands, size_t n, struct ca_choice *out)
{
    return ca_decide_seeded(ix, p, pix_model_seed(model), text, len, cands, n, out);
}

int ca_decide_seeded(struct pix_index *ix, const struct ca_params *p, uint64_t seed,
                     const char *text, size_t len, const struct ca_candidate *cands, size_t n,
                     struct ca_choice *out)
{
    if (n == 0)
        return -EINVAL;
    uint64_t hashes[PIX_MAX_BLOCKS];
    /* The same hashes as pix_hash_blocks; a head seen recently is not hashed again. */
    size_t n_blocks = hm_hash_blocks(seed, text, len, hashes, PIX_MAX_BLOCKS);

    /* Per thread, all zero between calls: every slot added is cleared below. */
    static _Thread_local struct pix_slot_set candidates;
    uint32_t slots[CA_MAX_CANDIDATES];
    size_t n_slots = n < CA_MAX_CANDIDATES ? n : CA_MAX_CANDIDATES;
    uint64_t min_load = UINT64_MAX, max_load = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        total += cands[i].load;
        if (i < n_slots) {
            slots[i] = cands[i].slot;
            pix_slots_add(&candidates, cands[i].slot);
        }
        if (cands[i].load < min_load)
            min_load = cands[i].load;
        if (cands[i].load > max_load)
            max_load = cands[i].load;
    }

    uint32_t holders[PIX_REFS];
    size_t n_holders = 0;
    size_t matched = n_blocks > 0
                         ? pix_longest_match(ix, hashes, n_blocks, &candidates, holders, &n_holders)
                         : 0;
    pix_slots_clear(&candidates, slots, n_slots);
    /* Every holder has the whole matched prefix: the least loaded of them is
     * the preferred worker (the most recent one among equals), which spreads
     * a hot prefix over the workers that already cache it. */
    size_t matched_idx = n_slots;
    for (size_t h = 0; h < n_holders; h++)
        for (size_t i = 0; i < n_slots; i++) {
            if (cands[i].slot != holders[h])
                continue;
            if (matched_idx == n_slots || cands[i].load < cands[matched_idx].load)
                matched_idx = i;
            break; /* a slot is one candidate */
        }
    if (matched_idx == n_slots)
        matched = 0; /* cannot happen: holders come from the candidate set */
    long prefer = matched > 0 ? (long)matched_idx : -1;
    bool enough =
        n_blocks > 0 && (double)matched >= p->cache_threshold * (double)n_blocks && matched > 0;

    /* Deterministic per text, different across texts. */
    uint64_t spread = n_blocks > 0 ? hashes[0] : XXH3_64bits(text, len);
    /* The ranking's key: the chained hash of the head's blocks (it covers
     * them all), or the whole text when it has no full block. */
    size_t key_blocks = n_blocks < CA_RDV_KEY_BLOCKS ? n_blocks : CA_RDV_KEY_BLOCKS;
    const void *rdv_key = key_blocks > 0 ? (const void *)&hashes[key_blocks - 1] : text;
    size_t rdv_key_len = key_blocks > 0 ? sizeof(hashes[0]) : len;
    size_t chosen;
    enum pol_decision decision =
        ca_gate(p, cands, n, matched_idx, enough, min_load, max_load, total);
    switch (decision) {
    case POL_DECISION_FLEET_IMBALANCED:
        chosen = ca_least_loaded(cands, n, prefer, spread);
        break;
    case POL_DECISION_NO_MATCH:
        chosen = p->rendezvous
                     ? ca_ranked_holder(p, cands, n, total, prefer >= 0 ? (size_t)prefer : n,
                                        min_load, rdv_key, rdv_key_len, spread)
                     : ca_least_loaded(cands, n, prefer, spread);
        break;
    case POL_DECISION_OVERLOADED_FALLBACK:
        chosen = p->rendezvous
                     ? ca_ranked(p, cands, n, total, matched_idx, rdv_key, rdv_key_len, spread)
                     : ca_least_loaded(cands, n, -1, spread);
        break;
    default:
        chosen = matched_idx;
        break;
    }

    /* The chosen worker already holds the matched blocks when it is the
     * matched one: record only what it has not seen. */
    size_t from = (prefer >= 0 && chosen == (size_t)prefer) ? matched : 0;
    if (from == n_blocks && n_blocks > 0)
        from = n_blocks - 1; /* refresh the last block's age so hot prefixes stay */
    pix_record(ix, hashes, from, n_blocks, cands[chosen].slot);

    out->index = chosen;
    out->decision = decision;
    out->matched_blocks = matched;
    out->total_blocks = n_blocks;
    return 0;
}
