/*
 * precise_cache_aware (see precise_cache_aware.h for the rule): the policy
 * ops, the decision, and the speculative entries.
 *
 * The KV holder index is one per node, written by the control plane: the
 * data plane attaches it at startup and hands it to the policies' shared
 * state (pol_shared_create) before any loop creates its policy. Requests
 * without a token chain (the tokenizer was slow, down or refused the
 * prompt; a route without a prompt) and every request when there is no
 * index are decided by a cache_aware instance of the same loop, so they
 * keep approximate affinity.
 */
#include "dataplane/policy/precise_cache_aware.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/proc.h"
#include "dataplane/core/policy.h"
#include "dataplane/policy/policy_internal.h"
#include "dataplane/policy/rendezvous.h"
#include "dataplane/policy/tokenize_stats.h"

#define PCA_MAX_CANDIDATES 1024u
#define PCA_MAX_HOLDERS    64u
#define PCA_SPEC_FACTS     (1u << 16)
#define PCA_STACK_CANDS    256u

/* ---- speculative entries ---- */

struct pca_spec {
    pthread_mutex_t lock;     /* the loops of a data plane share one */
    struct kvh_index *gen[2]; /* [cur] takes new entries; both are read */
    unsigned cur;
    uint64_t half_ttl_ms;
    uint64_t swapped_ms;
};

struct pca_spec *pca_spec_create(uint64_t ttl_ms)
{
    if (ttl_ms == 0)
        return NULL;
    struct pca_spec *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->gen[0] = kvh_create(PCA_SPEC_FACTS);
    s->gen[1] = kvh_create(PCA_SPEC_FACTS);
    s->half_ttl_ms = ttl_ms / 2 > 0 ? ttl_ms / 2 : 1;
    if (s->gen[0] == NULL || s->gen[1] == NULL) {
        pca_spec_destroy(s);
        return NULL;
    }
    return s;
}

void pca_spec_destroy(struct pca_spec *s)
{
    if (s == NULL)
        return;
    kvh_destroy(s->gen[0]);
    kvh_destroy(s->gen[1]);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Empties the older generation every half TTL (both after a whole one). */
static void pca_spec_age(struct pca_spec *s, uint64_t now_ms)
{
    if (now_ms - s->swapped_ms < s->half_ttl_ms)
        return;
    if (now_ms - s->swapped_ms >= 2 * s->half_ttl_ms)
        kvh_forget_all(s->gen[s->cur]);
    s->cur ^= 1u;
    kvh_forget_all(s->gen[s->cur]);
    s->swapped_ms = now_ms;
}

/* ---- the decision ---- */

/* The longest prefix held by a candidate in ix; holders appended to
 * holders[*nh..) when the length is >= best (replacing shorter ones). */
static void pca_match(const struct kvh_index *ix, const uint64_t *chain, size_t n_chain,
                      const struct pix_slot_set *set, size_t *best, uint32_t *holders, size_t *nh)
{
    uint32_t found[PCA_MAX_HOLDERS];
    size_t nf = 0;
    size_t m = kvh_longest_match(ix, chain, n_chain, set, found, PCA_MAX_HOLDERS, &nf);
    if (m == 0 || m < *best)
        return;
    if (m > *best) {
        *best = m;
        *nh = 0;
    }
    for (size_t i = 0; i < nf && *nh < PCA_MAX_HOLDERS; i++)
        holders[(*nh)++] = found[i];
}

/* A walk of the rendezvous ranking for a prompt no eligible worker holds:
 * the candidates within the balance gate (not overloaded against the least
 * loaded one) and not KV-full, except `skip`. */
struct pca_walk {
    const struct ca_params *p;
    const struct ca_candidate *cands;
    size_t n, skip;
    /* With exact: only workers holding at most held_max blocks. */
    const struct kvh_index *exact;
    size_t held_max;
    uint64_t min_load, total;
};

static bool pca_walk_within_gate(const struct pca_walk *w, size_t i)
{
    const struct ca_candidate *c = &w->cands[i];
    return i != w->skip && !c->kv_overloaded && !ca_is_overloaded(w->p, c->load, w->min_load) &&
           (!w->p->bounded_affinity ||
            rdv_within_bound(c->load, w->total, w->n, w->p->bounded_load_factor));
}

static bool pca_walk_accept(const void *ctx, size_t i, uint64_t *seed)
{
    const struct pca_walk *w = ctx;
    *seed = w->cands[i].rdv_seed;
    return pca_walk_within_gate(w, i) &&
           (w->exact == NULL || kvh_slot_count(w->exact, w->cands[i].slot) <= w->held_max);
}

/* By load: the first worker of the chain head's rendezvous ranking that is
 * within the balance gate (skipping `skip`) and does not hold more than
 * its share, or the least-loaded worker. The gate, not the rendezvous load
 * bound: at the small in-flight counts of a worker running a few sequences
 * the bound (a factor over the mean) turns away the ranking's first worker
 * at every passing burst, and a prefix whose blocks were evicted would
 * land on a different worker each time it comes back: its group spreads
 * over the fleet and every copy costs cache. Within the gate a prefix
 * nobody holds goes back to the same worker as long as that worker is not
 * overloaded, which is what cache_aware's remembered holder gives it, and
 * the events still decide whenever some worker does hold it.
 *
 * Its share: a worker takes part when it holds no more than the mean of
 * the blocks the workers within the gate hold (the exact index's count
 * per worker), give or take an eighth of the prompt's blocks. A hash
 * ranking alone deals new prefixes unevenly (47 conversations over 8
 * workers: from 2 to 9 each), and a conversation stays where its first
 * turn went, so an uneven deal costs balance (and, once the busiest
 * caches evict what others would have room for, hits) for the rest of
 * the run: one worker dealt 7 where the others have 6 is the busiest by a
 * third. The counts come from the workers' own events, which every router
 * node applies within milliseconds of the worker scheduling a prompt, so
 * independent nodes see each other's placements there (a load report
 * shows them a scrape interval later, after a short request has ended)
 * and deal alike. The mean, not the least: about half the fleet takes
 * part, so new prefixes that arrive before their events (a worker that
 * queues a prompt stores nothing yet) still spread over the ranking
 * instead of piling on the one least holding worker, and one count moving
 * seldom changes the set, so a burst of one new prefix through several
 * nodes mostly still goes to one worker. The eighth of a prompt lets
 * counts that are level but for a few blocks (full caches) all take part:
 * the ranking's first keeps the prompt. */
static size_t pca_by_load(const struct kvh_index *exact, const struct ca_params *p,
                          const struct ca_candidate *cands, size_t n, uint64_t min_load,
                          uint64_t total, size_t skip, const uint64_t *chain, size_t n_chain)
{
    uint64_t spread = n_chain > 0 ? chain[0] : 0;
    if (p->rendezvous && n_chain > 0) {
        size_t k = n_chain < PCA_RDV_KEY_BLOCKS ? n_chain : PCA_RDV_KEY_BLOCKS;
        struct pca_walk w = {.p = p,
                             .cands = cands,
                             .n = n,
                             .skip = skip,
                             .exact = NULL,
                             .min_load = min_load,
                             .total = total};
        if (exact != NULL) {
            uint64_t held = 0, within = 0;
            for (size_t i = 0; i < n; i++)
                if (pca_walk_within_gate(&w, i)) {
                    held += kvh_slot_count(exact, cands[i].slot);
                    within++;
                }
            if (within > 0) {
                w.exact = exact;
                w.held_max = (size_t)(held / within) + n_chain / 8;
            }
        }
        long i = rdv_first(&chain[k - 1], sizeof(chain[0]), n, pca_walk_accept, &w);
        if (i >= 0)
            return (size_t)i;
    }
    return ca_least_loaded(cands, n, -1, spread);
}

int pca_decide(const struct kvh_index *exact, struct pca_spec *spec, const struct ca_params *p,
               const uint64_t *chain, size_t n_chain, const struct ca_candidate *cands, size_t n,
               uint64_t now_ms, struct ca_choice *out)
{
    if (n == 0)
        return -EINVAL;
    /* Per thread, all zero between calls: every slot added is cleared below. */
    static _Thread_local struct pix_slot_set set;
    uint32_t slots[PCA_MAX_CANDIDATES];
    size_t n_slots = n < PCA_MAX_CANDIDATES ? n : PCA_MAX_CANDIDATES;
    uint64_t min_load = UINT64_MAX, max_load = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        total += cands[i].load;
        if (i < n_slots) {
            slots[i] = cands[i].slot;
            pix_slots_add(&set, cands[i].slot);
        }
        if (cands[i].load < min_load)
            min_load = cands[i].load;
        if (cands[i].load > max_load)
            max_load = cands[i].load;
    }
    size_t matched = 0, exact_matched = 0, nh = 0;
    uint32_t holders[PCA_MAX_HOLDERS];
    if (exact != NULL && n_chain > 0) {
        pca_match(exact, chain, n_chain, &set, &matched, holders, &nh);
        exact_matched = matched;
    }
    if (spec != NULL)
        pthread_mutex_lock(&spec->lock);
    if (spec != NULL && n_chain > 0) {
        pca_spec_age(spec, now_ms);
        pca_match(spec->gen[0], chain, n_chain, &set, &matched, holders, &nh);
        pca_match(spec->gen[1], chain, n_chain, &set, &matched, holders, &nh);
    }
    pix_slots_clear(&set, slots, n_slots);
    /* The least loaded of the holders: a hot prefix spreads over the
     * workers that already hold it. */
    size_t matched_idx = n;
    for (size_t h = 0; h < nh; h++)
        for (size_t i = 0; i < n_slots; i++) {
            if (cands[i].slot != holders[h])
                continue;
            if (matched_idx == n || cands[i].load < cands[matched_idx].load)
                matched_idx = i;
            break;
        }
    if (matched_idx == n)
        matched = 0;
    size_t chosen;
    enum pol_decision decision =
        ca_gate(p, cands, n, matched_idx, matched > 0, min_load, max_load, total);
    switch (decision) {
    case POL_DECISION_FLEET_IMBALANCED:
        chosen = ca_least_loaded(cands, n, matched > 0 ? (long)matched_idx : -1,
                                 n_chain > 0 ? chain[0] : 0);
        break;
    case POL_DECISION_NO_MATCH:
        chosen = pca_by_load(exact, p, cands, n, min_load, total, n, chain, n_chain);
        break;
    case POL_DECISION_OVERLOADED_FALLBACK:
        chosen = pca_by_load(exact, p, cands, n, min_load, total, matched_idx, chain, n_chain);
        break;
    default:
        chosen = matched_idx;
        break;
    }
    /* The chosen worker will hold the whole prompt once it has run it. */
    if (spec != NULL && cands[chosen].slot < PIX_SLOT_LIMIT) {
        size_t from = chosen == matched_idx ? exact_matched : 0;
        for (size_t i = from; i < n_chain; i++)
            kvh_add(spec->gen[spec->cur], chain[i], cands[chosen].slot);
    }
    if (spec != NULL)
        pthread_mutex_unlock(&spec->lock);
    out->index = chosen;
    out->decision = decision;
    out->matched_blocks = matched;
    out->total_blocks = n_chain;
    return 0;
}

/* ---- the policy ---- */

/* The speculative entries every loop of this data plane shares (in
 * struct pol_shared): a burst of one new prefix is spread over the loops
 * by the listener, and a loop that cannot see where another one just sent
 * the prefix scatters it. One per TTL in use. */
static struct pca_spec *pca_spec_get(struct pol_shared *sh, uint64_t ttl_ms)
{
    if (ttl_ms == 0)
        return NULL;
    struct pca_spec *out = NULL;
    pthread_mutex_lock(&sh->lock);
    for (size_t i = 0; i < POL_SHARED_SPECS && out == NULL; i++)
        if (sh->specs[i].refs > 0 && sh->specs[i].ttl_ms == ttl_ms) {
            sh->specs[i].refs++;
            out = sh->specs[i].spec;
        }
    for (size_t i = 0; i < POL_SHARED_SPECS && out == NULL; i++)
        if (sh->specs[i].refs == 0) {
            out = pca_spec_create(ttl_ms);
            if (out != NULL) {
                sh->specs[i].spec = out;
                sh->specs[i].ttl_ms = ttl_ms;
                sh->specs[i].refs = 1;
            }
            break;
        }
    pthread_mutex_unlock(&sh->lock);
    /* More TTLs than shared entries: a private one. */
    return out != NULL ? out : pca_spec_create(ttl_ms);
}

static void pca_spec_put(struct pol_shared *sh, struct pca_spec *spec)
{
    if (spec == NULL)
        return;
    pthread_mutex_lock(&sh->lock);
    for (size_t i = 0; i < POL_SHARED_SPECS; i++)
        if (sh->specs[i].refs > 0 && sh->specs[i].spec == spec) {
            if (--sh->specs[i].refs == 0)
                sh->specs[i].spec = NULL;
            else
                spec = NULL;
            break;
        }
    pthread_mutex_unlock(&sh->lock);
    pca_spec_destroy(spec);
}

/* One loop's instance. */
struct pca_state {
    struct pol_shared *shared; /* the data plane's, borrowed */
    struct kvh_index *exact;   /* the node's, borrowed; NULL: approximate only */
    struct pca_spec *spec;     /* shared (pca_spec_get); NULL when speculative_ttl is 0 */
    struct ca_params params;
    void *approx; /* a cache_aware instance's state, for requests without tokens */
};

static void pca_destroy(void *state)
{
    struct pca_state *s = state;
    if (s == NULL)
        return;
    pca_spec_put(s->shared, s->spec);
    if (s->approx != NULL)
        pol_cache_aware_ops.destroy(s->approx);
    free(s);
}

static int pca_create(const struct cfg_policy *cfg, struct pol_shared *shared, void **state)
{
    if (shared == NULL)
        return -EINVAL;
    struct pca_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    int rc = pol_cache_aware_ops.create(cfg, shared, &s->approx);
    if (rc != 0) {
        free(s);
        return rc;
    }
    s->shared = shared;
    s->exact = shared->kv_holders;
    s->spec = pca_spec_get(shared, cfg->precise_cache_aware.speculative_ttl_ms);
    s->params = ca_params_from_cfg(cfg);
    *state = s;
    return 0;
}

static int pca_pick(void *state, const struct pol_request *req, const struct pol_candidate *cands,
                    size_t n, enum pol_decision *decision)
{
    struct pca_state *s = state;
    if (n == 0)
        return -ENOENT;
    if (req->tokens != POL_TOKENS_OK || s->exact == NULL) {
        /* A failed tokenize was counted where it failed. */
        if (req->tokens == POL_TOKENS_OK)
            dp_tok_count_fallback(DP_TOK_FB_NO_INDEX);
        *decision = POL_DECISION_UNSET;
        return pol_cache_aware_ops.pick(s->approx, req, cands, n, decision);
    }
    struct ca_candidate stack[PCA_STACK_CANDS];
    bool on_heap = n > PCA_STACK_CANDS;
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
    int rc = pca_decide(s->exact, s->spec, &s->params, req->kv_chain, req->kv_chain_len, cc, n,
                        proc_monotonic_ms(), &choice);
    if (on_heap)
        free(cc);
    if (rc != 0)
        return rc;
    /* The approximate index learns where the prompt went: a later request
     * whose tokenizing times out (a busy tokenizer, a burst) then follows
     * it by text instead of landing wherever cache_aware's own ranking
     * of the text points, a second copy of the prefix there. cache_aware
     * given the one chosen candidate records the text's blocks on it. */
    if (req->text != NULL && req->text_len > 0) {
        enum pol_decision ignored;
        (void)pol_cache_aware_ops.pick(s->approx, req, &cands[choice.index], 1, &ignored);
    }
    *decision = choice.decision;
    return (int)choice.index;
}

const struct pol_ops pol_precise_cache_aware_ops = {
    .name = "precise_cache_aware",
    .decision = POL_DECISION_AFFINITY,
    .needs_tokens = true,
    .create = pca_create,
    .destroy = pca_destroy,
    .pick = pca_pick,
};
