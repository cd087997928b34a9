/*
 * Unit tests of precise_cache_aware (dataplane/policy/precise_cache_aware.c)
 * over a private holder index: the longest exact match wins, the least
 * loaded of its holders; the per-request balance gate and a full KV cache
 * move a request off its holder; a prompt nobody holds goes down its
 * ranking to a worker that holds no more than its share of blocks; a
 * speculative entry keeps a burst of one
 * new prefix on one worker and expires with its TTL; and through the
 * policy interface, a request whose tokenizing failed (or any request
 * without an index) is decided by cache_aware's approximate match.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/prom.h"
#include "dataplane/core/policy.h"
#include "dataplane/policy/precise_cache_aware.h"
#include "dataplane/policy/tokenize_stats.h"

static const struct ca_params params = {
    .cache_threshold = 0.5,
    .balance_abs_threshold = 32,
    .balance_rel_threshold = 1.5,
    .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
    .rendezvous = false,
    .bounded_load_factor = 1.25,
};

#define N 4

static void cands_init(struct ca_candidate *c)
{
    for (unsigned i = 0; i < N; i++)
        c[i] = (struct ca_candidate){.slot = 10 + i, .load = 0, .rdv_seed = 1000 + i};
}

static void chain_of(unsigned salt, uint64_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ((uint64_t)salt << 40) ^ ((i + 1) * 0x9e3779b97f4a7c15ull);
}

static void hold(struct kvh_index *ix, const uint64_t *chain, size_t n, uint32_t slot)
{
    for (size_t i = 0; i < n; i++)
        kvh_add(ix, chain[i], slot);
}

static void test_longest_exact_match_wins(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[40];
    chain_of(1, chain, 40);
    hold(ix, chain, 10, 11);
    hold(ix, chain, 30, 12);
    hold(ix, chain, 30, 13);
    c[1].load = 0; /* slot 11: shortest */
    c[2].load = 5; /* slot 12 */
    c[3].load = 3; /* slot 13: as long as 12, less loaded */
    struct ca_choice ch;
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 40, c, N, 0, &ch), 0);
    assert_int_equal(c[ch.index].slot, 13);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.matched_blocks, 30);
    assert_int_equal(ch.total_blocks, 40);
    /* A holder that is not a candidate is never named. */
    struct ca_candidate two[2] = {c[0], c[1]};
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 40, two, 2, 0, &ch), 0);
    assert_int_equal(two[ch.index].slot, 11);
    assert_int_equal(ch.matched_blocks, 10);
    /* Nothing held: by load. */
    uint64_t other[8];
    chain_of(2, other, 8);
    assert_int_equal(pca_decide(ix, NULL, &params, other, 8, c, N, 0, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    assert_int_equal(c[ch.index].load, 0);
    kvh_destroy(ix);
}

static void test_balance_gate_and_full_kv(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[16];
    chain_of(3, chain, 16);
    hold(ix, chain, 16, 12);
    /* Within the gate: affinity although more loaded than the rest. */
    c[2].load = 30;
    struct ca_choice ch;
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 16, c, N, 0, &ch), 0);
    assert_int_equal(c[ch.index].slot, 12);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    /* Past both thresholds (load > 0 + 32 and > 1.5 x 0): moved. */
    c[2].load = 40;
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 16, c, N, 0, &ch), 0);
    assert_true(c[ch.index].slot != 12);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    /* Another worker hot elsewhere does not switch affinity off. */
    c[2].load = 0;
    c[0].load = 500;
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 16, c, N, 0, &ch), 0);
    assert_int_equal(c[ch.index].slot, 12);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    /* Its fresh report says its KV cache is full: moved. */
    c[0].load = 0;
    c[2].kv_overloaded = true;
    assert_int_equal(pca_decide(ix, NULL, &params, chain, 16, c, N, 0, &ch), 0);
    assert_true(c[ch.index].slot != 12);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    kvh_destroy(ix);
}

static void test_speculative_entry_holds_a_burst(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14); /* knows nothing */
    struct pca_spec *spec = pca_spec_create(2000);
    assert_non_null(spec);
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[20];
    chain_of(4, chain, 20);
    uint64_t now = 100000;
    struct ca_choice ch;
    assert_int_equal(pca_decide(ix, spec, &params, chain, 20, c, N, now, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    size_t first = ch.index;
    /* The burst: the first worker now has the most in flight, yet the
     * same prefix follows it (within the gate). */
    for (int k = 1; k <= 10; k++) {
        c[first].load = (uint64_t)k;
        assert_int_equal(pca_decide(ix, spec, &params, chain, 20, c, N, now + (uint64_t)k, &ch), 0);
        assert_int_equal(ch.index, first);
        assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
        assert_int_equal(ch.matched_blocks, 20);
    }
    /* A longer prompt on the same prefix matches the speculative part. */
    uint64_t longer[30];
    chain_of(4, longer, 30);
    assert_int_equal(pca_decide(ix, spec, &params, longer, 30, c, N, now + 20, &ch), 0);
    assert_int_equal(ch.index, first);
    assert_int_equal(ch.matched_blocks, 20);
    /* After the TTL the entry is gone: by load again (another worker). */
    assert_int_equal(pca_decide(ix, spec, &params, chain, 20, c, N, now + 2021, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    assert_true(ch.index != first);
    pca_spec_destroy(spec);
    kvh_destroy(ix);
}

/* bounded_affinity: a holder over the ranking's bound (bounded_load_factor)
 * but within its own, looser affinity bound (affinity_load_factor) keeps
 * the request, as under cache_aware; over that bound too, the request goes
 * by load. */
static void test_bounded_affinity_uses_its_own_factor(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[20];
    chain_of(9, chain, 20);
    hold(ix, chain, 20, 11);
    /* Mean 3: the ranking's bound is 1.25 x 3 + 1 = 4.75, the affinity
     * bound 2 x 3 + 1 = 7; slot 11 at 6 is within the balance gate. */
    c[0].load = 2;
    c[1].load = 6;
    c[2].load = 2;
    c[3].load = 2;
    struct ca_params bounded = params;
    bounded.rendezvous = true;
    bounded.bounded_affinity = true;
    bounded.affinity_load_factor = 2.0;
    struct ca_choice ch;
    assert_int_equal(pca_decide(ix, NULL, &bounded, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(c[ch.index].slot, 11);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    /* Without a factor of its own, the ranking's bound applies. */
    bounded.affinity_load_factor = 0;
    assert_int_equal(pca_decide(ix, NULL, &bounded, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    assert_true(c[ch.index].slot != 11);
    /* Over the affinity bound: by load. */
    bounded.affinity_load_factor = 2.0;
    c[1].load = 9; /* mean 3.75: bound 8.5 */
    assert_int_equal(pca_decide(ix, NULL, &bounded, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    kvh_destroy(ix);
}

/* With rendezvous, the rule of a prompt nobody holds (an evicted one): the
 * first worker of its head's ranking within the balance gate, whatever the
 * load bound (a factor over the mean) says, so the prompt comes back to the
 * same worker while that worker is not overloaded; past the gate, another. */
static void test_not_held_follows_ranking_within_gate(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14); /* knows nothing */
    struct ca_params rp = params;
    rp.rendezvous = true;
    rp.balance_abs_threshold = 6;
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[20];
    chain_of(6, chain, 20);
    struct ca_choice ch;
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    size_t top = ch.index;
    /* Up to 6 against 0: over 1.25 x the mean, within the gate. */
    for (uint64_t load = 1; load <= 6; load++) {
        c[top].load = load;
        assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
        assert_int_equal(ch.index, top);
        assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    }
    /* Past the gate (> 0 + 6 and > 1.5 x 0): the ranking's next. */
    c[top].load = 7;
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_true(ch.index != top);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    kvh_destroy(ix);
}

/* The rank of each candidate in chain's ranking (rank[0] first): found by
 * pushing the ones found so far past the balance gate (against the
 * least loaded, still at 0). */
static void ranking_of(const struct ca_params *rp, const uint64_t *chain, size_t n_chain,
                       size_t *rank)
{
    struct ca_candidate c[N];
    cands_init(c);
    struct ca_choice ch;
    for (size_t r = 0; r < N; r++) {
        assert_int_equal(pca_decide(NULL, NULL, rp, chain, n_chain, c, N, 0, &ch), 0);
        rank[r] = ch.index;
        c[ch.index].load = 100;
    }
}

/* Its share: a new prompt goes down its ranking to the first worker
 * within the gate that holds no more than the mean of the blocks the
 * workers within the gate hold, plus an eighth of the prompt's blocks
 * (here 2); level counts (full caches) leave it with the ranking's first. */
static void test_not_held_goes_to_a_worker_within_its_share(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct ca_params rp = params;
    rp.rendezvous = true;
    rp.balance_abs_threshold = 6;
    struct ca_candidate c[N];
    cands_init(c);
    uint64_t chain[20];
    chain_of(7, chain, 20);
    size_t rank[N];
    ranking_of(&rp, chain, 20, rank);
    struct ca_choice ch;
    uint64_t other[N][64];
    for (unsigned k = 0; k < N; k++)
        chain_of(20 + k, other[k], 64);
    /* Nobody holds anything: the ranking's first. */
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[0]);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    /* Level (40 each): the first. */
    for (unsigned r = 0; r < N; r++)
        hold(ix, other[r], 40, c[rank[r]].slot);
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[0]);
    /* The first at 42 (the mean 40.5, 40 + 2): still it. */
    hold(ix, other[0], 42, c[rank[0]].slot);
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[0]);
    /* At 46 (the mean 41.5, 41 + 2): the ranking's next. */
    hold(ix, other[0], 46, c[rank[0]].slot);
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[1]);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    kvh_forget_all(ix);
    /* The first two hold alike, the last two nothing: past both (two
     * choices by held blocks would have left it with the first). */
    hold(ix, other[0], 40, c[rank[0]].slot);
    hold(ix, other[1], 40, c[rank[1]].slot);
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[2]);
    kvh_forget_all(ix);
    /* Only the workers within the gate share: 40, 25, (past the gate) 0,
     * 10. Their mean 25 keeps the second in; with the one past the gate
     * counted (18.75) only the last would be. */
    hold(ix, other[0], 40, c[rank[0]].slot);
    hold(ix, other[1], 25, c[rank[1]].slot);
    hold(ix, other[3], 10, c[rank[3]].slot);
    c[rank[2]].load = 7;
    assert_int_equal(pca_decide(ix, NULL, &rp, chain, 20, c, N, 0, &ch), 0);
    assert_int_equal(ch.index, rank[1]);
    kvh_destroy(ix);
}

/* ---- through the policy interface ---- */

static const char *no_headers(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return NULL;
}

static void test_policy_falls_back_without_tokens(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct shm_worker_info w[N];
    struct pol_candidate pc[N];
    memset(w, 0, sizeof(w));
    for (unsigned i = 0; i < N; i++) {
        w[i].slot = 10 + i;
        snprintf(w[i].id, sizeof(w[i].id), "w%u", i);
        pc[i] = (struct pol_candidate){.worker = &w[i], .load = 0};
    }
    uint64_t chain[12];
    chain_of(5, chain, 12);
    hold(ix, chain, 12, 13);
    struct pol_shared *sh;
    assert_int_equal(pol_shared_create(NULL, ix, &sh), 0);
    struct cfg_policy cfg = {
        .name = CFG_POLICY_PRECISE_CACHE_AWARE,
        .cache_threshold = 0.5,
        .balance_abs_threshold = 32,
        .balance_rel_threshold = 1.5,
        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
        .bounded_load_factor = 1.25,
        .precise_cache_aware = {.block_size = 16, .speculative_ttl_ms = 0},
    };
    struct pol_policy p;
    assert_int_equal(pol_create(&cfg, sh, &p), 0);
    char text[2000];
    memset(text, 'a', sizeof(text));
    struct pol_request r = {.path = "/v1/completions",
                            .model = "m",
                            .text = text,
                            .text_len = sizeof(text),
                            .user = "",
                            .header = no_headers,
                            .tokens = POL_TOKENS_OK,
                            .kv_chain = chain,
                            .kv_chain_len = 12};
    enum pol_decision d;
    int i = pol_pick(&p, &r, pc, N, &d);
    assert_int_equal(w[i].slot, 13);
    assert_int_equal(d, POL_DECISION_AFFINITY);
    /* Tokenizing failed: cache_aware decides, on the text, and follows
     * where the precise decision sent that text (its index learned it),
     * although that worker is not the least loaded. */
    r.tokens = POL_TOKENS_FAILED;
    r.kv_chain = NULL;
    r.kv_chain_len = 0;
    pc[3].load = 1; /* the exact holder is not the least loaded */
    i = pol_pick(&p, &r, pc, N, &d);
    assert_int_equal(w[i].slot, 13);
    assert_int_equal(d, POL_DECISION_AFFINITY);
    /* A text never routed precisely: a no_match, then followed. */
    char other[2000];
    memset(other, 'b', sizeof(other));
    r.text = other;
    int first = pol_pick(&p, &r, pc, N, &d);
    assert_int_equal(d, POL_DECISION_NO_MATCH);
    int again = pol_pick(&p, &r, pc, N, &d);
    assert_int_equal(again, first);
    assert_int_equal(d, POL_DECISION_AFFINITY);
    r.text = text;
    pol_destroy(&p);
    /* No index at all: every request falls back, counted as no_index. */
    pol_shared_destroy(sh);
    assert_int_equal(pol_shared_create(NULL, NULL, &sh), 0);
    assert_int_equal(pol_create(&cfg, sh, &p), 0);
    r.tokens = POL_TOKENS_OK;
    r.kv_chain = chain;
    r.kv_chain_len = 12;
    struct buf page = BUF_INIT(1 << 16);
    struct prom_writer pw;
    prom_init(&pw, &page);
    dp_tok_metrics_write(&pw);
    assert_non_null(strstr(page.data, "switchyard_precise_fallbacks_total{reason=\"no_index\"} 0"));
    i = pol_pick(&p, &r, pc, N, &d);
    assert_true(i >= 0);
    buf_reset(&page);
    prom_init(&pw, &page);
    dp_tok_metrics_write(&pw);
    assert_non_null(strstr(page.data, "switchyard_precise_fallbacks_total{reason=\"no_index\"} 1"));
    buf_fini(&page);
    pol_destroy(&p);
    pol_shared_destroy(sh);
    kvh_destroy(ix);
}

/* The loops of a data plane share their speculative entries: where one
 * loop's instance just sent a new prefix, another loop's instance sends it
 * too (a burst split over the loops does not scatter). */
static void test_speculative_entries_shared_by_loops(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14); /* knows nothing */
    struct shm_worker_info w[N];
    struct pol_candidate pc[N];
    memset(w, 0, sizeof(w));
    for (unsigned i = 0; i < N; i++) {
        w[i].slot = 10 + i;
        snprintf(w[i].id, sizeof(w[i].id), "w%u", i);
        pc[i] = (struct pol_candidate){.worker = &w[i], .load = 0};
    }
    struct pol_shared *sh;
    assert_int_equal(pol_shared_create(NULL, ix, &sh), 0);
    struct cfg_policy cfg = {
        .name = CFG_POLICY_PRECISE_CACHE_AWARE,
        .cache_threshold = 0.5,
        .balance_abs_threshold = 32,
        .balance_rel_threshold = 1.5,
        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
        .bounded_load_factor = 1.25,
        .precise_cache_aware = {.block_size = 16, .speculative_ttl_ms = 60000},
    };
    struct pol_policy a, b;
    assert_int_equal(pol_create(&cfg, sh, &a), 0);
    assert_int_equal(pol_create(&cfg, sh, &b), 0);
    for (unsigned k = 0; k < 8; k++) {
        uint64_t chain[12];
        chain_of(40 + k, chain, 12);
        struct pol_request r = {.path = "/v1/completions",
                                .model = "m",
                                .text = "x",
                                .text_len = 1,
                                .user = "",
                                .header = no_headers,
                                .tokens = POL_TOKENS_OK,
                                .kv_chain = chain,
                                .kv_chain_len = 12};
        enum pol_decision d;
        int first = pol_pick(&a, &r, pc, N, &d);
        assert_int_equal(d, POL_DECISION_NO_MATCH);
        pc[first].load = 1; /* by load alone, the next would go elsewhere */
        int second = pol_pick(&b, &r, pc, N, &d);
        assert_int_equal(second, first);
        assert_int_equal(d, POL_DECISION_AFFINITY);
        pc[first].load = 0;
    }
    pol_destroy(&a);
    pol_destroy(&b);
    pol_shared_destroy(sh);
    kvh_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longest_exact_match_wins),
        cmocka_unit_test(test_balance_gate_and_full_kv),
        cmocka_unit_test(test_speculative_entry_holds_a_burst),
        cmocka_unit_test(test_bounded_affinity_uses_its_own_factor),
        cmocka_unit_test(test_not_held_follows_ranking_within_gate),
        cmocka_unit_test(test_not_held_goes_to_a_worker_within_its_share),
        cmocka_unit_test(test_policy_falls_back_without_tokens),
        cmocka_unit_test(test_speculative_entries_shared_by_loops),
    };
    return cmocka_run_group_tests_name("precise_cache_aware", tests, NULL, NULL);
}
