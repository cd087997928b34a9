/*
 * Unit tests of cache_aware's per-request decision (the index itself:
 * test_prefix_index.c),
 * including vllm-router #238's regression (a hot worker elsewhere must not
 * switch affinity off) and the fleet gate that reproduces the old bug.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/policy/cache_aware.h"
#include "dataplane/policy/rendezvous.h"
#include "shm/prefix_index.h"

static const struct ca_params default_params = {
    .cache_threshold = 0.5,
    .balance_abs_threshold = 32,
    .balance_rel_threshold = 1.5,
    .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
};

/* Deterministic text of `len` bytes; `salt` changes it from byte `from` on. */
static char *make_text(size_t len, unsigned salt, size_t from)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    for (size_t i = 0; i < len; i++)
        t[i] = (char)('a' + ((i * 7 + (i >= from ? salt * 13 : 0)) % 26));
    t[len] = '\0';
    return t;
}

static struct pix_index *ix_new(void)
{
    struct pix_index *ix = pix_create(1 << 16);
    assert_non_null(ix);
    return ix;
}

/* Routes text once to the given slot by offering only that candidate. */
static void prime(struct pix_index *ix, const char *model, const char *text, uint32_t slot)
{
    struct ca_candidate only = {.slot = slot, .load = 0};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, model, text, strlen(text), &only, 1, &ch), 0);
    assert_int_equal(ch.index, 0);
}

static void test_regression_238_hot_worker_elsewhere_keeps_affinity(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(4096, 0, 0);
    prime(ix, "m", text, 11); /* B holds the prefix */
    struct ca_candidate c[3] = {
        {.slot = 10, .load = 60}, /* A: hot */
        {.slot = 11, .load = 2},  /* B: holds the prefix */
        {.slot = 12, .load = 0},  /* C: idle */
    };
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), c, 3, &ch), 0);
    assert_int_equal(ch.index, 1);
    /* Told apart from plain affinity: the fleet gate would have moved it. */
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY_DESPITE_IMBALANCE);
    assert_string_equal(pol_decision_name(ch.decision), "affinity_despite_imbalance");
    assert_int_equal(ch.matched_blocks, ch.total_blocks);

    /* The matched worker is itself the least loaded: the fleet gate would
     * have chosen it too, so this is plain affinity. */
    struct ca_candidate calm_match[2] = {{.slot = 10, .load = 60}, {.slot = 11, .load = 0}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), calm_match, 2, &ch),
                     0);
    assert_int_equal(ch.index, 1);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);

    /* vllm-router's pre-#238 fleet gate abandons affinity for everyone. */
    struct ca_params fleet = default_params;
    fleet.balance_gate = CFG_BALANCE_GATE_FLEET;
    assert_int_equal(ca_decide(ix, &fleet, "m", text, strlen(text), c, 3, &ch), 0);
    assert_int_equal(ch.index, 2);
    assert_int_equal(ch.decision, POL_DECISION_FLEET_IMBALANCED);
    free(text);
    pix_destroy(ix);
}

static void test_preferred_worker_overloaded_falls_back(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(2048, 0, 0);
    prime(ix, "m", text, 1);
    struct ca_choice ch;
    /* 40 > 0 + 32 and 40 > 0 * 1.5: overloaded. */
    struct ca_candidate over[2] = {{.slot = 1, .load = 40}, {.slot = 2, .load = 0}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), over, 2, &ch), 0);
    assert_int_equal(ch.index, 1);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);

    /* The fallback recorded the prefix for slot 2 too: start over with slot
     * 1 as the only holder. */
    pix_destroy(ix);
    ix = ix_new();
    prime(ix, "m", text, 1);
    /* Only the relative factor exceeded (100 vs 70: +30 <= 32): stays. */
    struct ca_candidate abs_ok[2] = {{.slot = 1, .load = 100}, {.slot = 2, .load = 70}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), abs_ok, 2, &ch), 0);
    assert_int_equal(ch.index, 0);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);

    /* Only the absolute margin exceeded (200 vs 150: +50 > 32, but x1.33 <= 1.5): stays. */
    struct ca_candidate rel_ok[2] = {{.slot = 1, .load = 200}, {.slot = 2, .load = 150}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), rel_ok, 2, &ch), 0);
    assert_int_equal(ch.index, 0);
    free(text);
    pix_destroy(ix);
}

/* Several workers hold the whole matched prefix (a hot prefix that spilled
 * over before): the least loaded of them is preferred, the most recent one
 * among equals, so a hot prefix spreads over the workers that cache it. */
static void test_least_loaded_holder_of_the_prefix_wins(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(2048, 0, 0);
    prime(ix, "m", text, 1);
    prime(ix, "m", text, 2); /* slot 2 is now the most recent holder */
    struct ca_choice ch;
    struct ca_candidate c[3] = {
        {.slot = 1, .load = 3}, {.slot = 2, .load = 9}, {.slot = 3, .load = 0}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), c, 3, &ch), 0);
    assert_int_equal(ch.index, 0); /* slot 1: holds it, less loaded than slot 2 */
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.matched_blocks, ch.total_blocks);
    /* Equal loads: the most recent holder. */
    prime(ix, "m", text, 2);
    struct ca_candidate eq[3] = {
        {.slot = 1, .load = 4}, {.slot = 2, .load = 4}, {.slot = 3, .load = 0}};
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), eq, 3, &ch), 0);
    assert_int_equal(ch.index, 1);
    free(text);
    pix_destroy(ix);
}

static void test_no_match_goes_least_loaded_and_ties_prefer_match(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *seen = make_text(4096, 0, 0);
    char *fresh = make_text(4096, 5, 0);
    prime(ix, "m", seen, 7);
    struct ca_choice ch;
    struct ca_candidate c[3] = {
        {.slot = 6, .load = 3}, {.slot = 7, .load = 5}, {.slot = 8, .load = 1}};
    assert_int_equal(ca_decide(ix, &default_params, "m", fresh, strlen(fresh), c, 3, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    assert_int_equal(ch.index, 2);
    assert_int_equal(ch.matched_blocks, 0);

    /* Below the threshold (1 of 16 blocks matched) but tied on load: the
     * matched worker wins the tie. */
    char *partial = make_text(4096, 9, 256);
    struct ca_candidate tied[3] = {
        {.slot = 6, .load = 0}, {.slot = 7, .load = 0}, {.slot = 8, .load = 0}};
    assert_int_equal(ca_decide(ix, &default_params, "m", partial, strlen(partial), tied, 3, &ch),
                     0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    assert_int_equal(ch.matched_blocks, 1);
    assert_int_equal(ch.index, 1);
    free(seen);
    free(fresh);
    free(partial);
    pix_destroy(ix);
}

static void test_single_and_no_candidate(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(1000, 0, 0);
    struct ca_candidate one = {.slot = 3, .load = 99};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), &one, 1, &ch), 0);
    assert_int_equal(ch.index, 0);
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), &one, 0, &ch),
                     -EINVAL);
    /* Short text (no full block): still routed, never matched. */
    assert_int_equal(ca_decide(ix, &default_params, "m", "hi", 2, &one, 1, &ch), 0);
    assert_int_equal(ch.total_blocks, 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    free(text);
    pix_destroy(ix);
}

static void test_matched_worker_gone_is_no_match(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(4096, 0, 0);
    prime(ix, "m", text, 4);
    struct ca_candidate without[2] = {{.slot = 5, .load = 0}, {.slot = 6, .load = 0}};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, "m", text, strlen(text), without, 2, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
    assert_int_equal(ch.matched_blocks, 0);
    free(text);
    pix_destroy(ix);
}

static void test_models_have_separate_indexes(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = make_text(4096, 0, 0);
    prime(ix, "llama", text, 1);
    struct ca_candidate c[2] = {{.slot = 1, .load = 0}, {.slot = 2, .load = 0}};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, "qwen", text, strlen(text), c, 2, &ch), 0);
    assert_int_equal(ch.matched_blocks, 0);
    assert_int_equal(ca_decide(ix, &default_params, "llama", text, strlen(text), c, 2, &ch), 0);
    assert_int_equal(ch.matched_blocks, ch.total_blocks);
    free(text);
    pix_destroy(ix);
}

static void test_multi_turn_chat_sticks_to_its_worker(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    /* A conversation: each turn's text extends the previous turn's. */
    char *conv = make_text(8 * 1024, 0, 0);
    size_t turn_len[5] = {1500, 2600, 3900, 5200, 7000};
    struct ca_candidate c[4] = {{.slot = 0, .load = 3},
                                {.slot = 1, .load = 0},
                                {.slot = 2, .load = 2},
                                {.slot = 3, .load = 1}};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &default_params, "m", conv, turn_len[0], c, 4, &ch), 0);
    size_t home = ch.index;
    assert_int_equal(home, 1);
    /* Loads move between turns, the home worker becomes the busiest but
     * stays within the thresholds. */
    for (int t = 1; t < 5; t++) {
        c[home].load = 10 + (uint64_t)t * 5;
        c[(home + 1) % 4].load = (uint64_t)t;
        assert_int_equal(ca_decide(ix, &default_params, "m", conv, turn_len[t], c, 4, &ch), 0);
        assert_int_equal(ch.index, home);
        assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
        assert_true(ch.matched_blocks >= turn_len[t - 1] / PIX_BLOCK_BYTES);
    }
    free(conv);
    pix_destroy(ix);
}

/* ---- rendezvous for cold prefixes, bounded load ---------------------------- */

/* Text of `len` bytes drawn from `base` up to byte `from` and from `seed`
 * after it (make_text's salt gives only two distinct texts). */
static char *rdv_text2(size_t len, unsigned base, unsigned seed, size_t from)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    for (size_t i = 0; i < len; i++) {
        uint64_t x = (uint64_t)(i >= from ? seed : base) * 0x9e3779b97f4a7c15ull + i;
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        t[i] = (char)('a' + x % 26);
    }
    t[len] = '\0';
    return t;
}

static char *rdv_text(size_t len, unsigned seed, size_t from)
{
    return rdv_text2(len, seed, seed, from);
}

static const struct ca_params rdv_params = {
    .cache_threshold = 0.5,
    .balance_abs_threshold = 32,
    .balance_rel_threshold = 1.5,
    .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
    .rendezvous = true,
    .bounded_load_factor = 1.25,
};

#define RDV_N 4

/* Candidates w0..w<n-1> on slots base+0.., all idle. */
static void rdv_fleet(struct ca_candidate *c, size_t n, uint32_t base)
{
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "w%zu", i);
        c[i] = (struct ca_candidate){
            .slot = base + (uint32_t)i, .load = 0, .rdv_seed = rdv_worker_seed(id)};
    }
}

/* Routes text on a fresh index (a router node that never saw it): the
 * chosen candidate's seed, which names the worker whatever its slot. */
static uint64_t cold_pick(const struct ca_params *p, const char *text, const struct ca_candidate *c,
                          size_t n, enum pol_decision *decision)
{
    struct pix_index *ix = ix_new();
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, p, "m", text, strlen(text), c, n, &ch), 0);
    pix_destroy(ix);
    if (decision != NULL)
        *decision = ch.decision;
    return c[ch.index].rdv_seed;
}

/* Two router nodes with their own indexes, their own slot numbers and
 * candidate orders send the same new prompt to the same worker, and many
 * prompts spread over every worker. */
static void test_rendezvous_nodes_agree_on_cold_prefix(void **state)
{
    (void)state;
    struct ca_candidate a[RDV_N], b[RDV_N];
    rdv_fleet(a, RDV_N, 0);
    rdv_fleet(b, RDV_N, 100);
    /* Node B lists them in reverse. */
    for (size_t i = 0; i < RDV_N / 2; i++) {
        struct ca_candidate t = b[i];
        b[i] = b[RDV_N - 1 - i];
        b[RDV_N - 1 - i] = t;
    }
    unsigned hits[RDV_N] = {0};
    for (unsigned k = 0; k < 64; k++) {
        char *text = rdv_text(1500, k + 1, 0);
        enum pol_decision d;
        uint64_t on_a = cold_pick(&rdv_params, text, a, RDV_N, &d);
        assert_int_equal(d, POL_DECISION_NO_MATCH);
        assert_true(on_a == cold_pick(&rdv_params, text, b, RDV_N, NULL));
        for (size_t i = 0; i < RDV_N; i++)
            hits[i] += a[i].rdv_seed == on_a;
        free(text);
    }
    for (size_t i = 0; i < RDV_N; i++)
        assert_true(hits[i] > 0);
}

/* The key is the prompt's head: a later turn of a chat (the earlier turns
 * plus a new question) that reaches a node which never saw the chat goes to
 * the worker the first turn went to on another node. A prompt shorter than
 * a block is keyed by its whole text. */
static void test_rendezvous_key_is_the_head(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    unsigned moved = 0;
    for (unsigned k = 0; k < 32; k++) {
        char *turn1 = rdv_text(600, k + 1, 0);
        char *turn5 = rdv_text(4000, k + 1, 0);
        assert_memory_equal(turn1, turn5, 600);
        assert_true(cold_pick(&rdv_params, turn1, c, RDV_N, NULL) ==
                    cold_pick(&rdv_params, turn5, c, RDV_N, NULL));
        /* Differing from the third block on: still the same worker. */
        char *third = rdv_text2(4000, k + 1, k + 1000, 2 * PIX_BLOCK_BYTES);
        assert_true(cold_pick(&rdv_params, turn1, c, RDV_N, NULL) ==
                    cold_pick(&rdv_params, third, c, RDV_N, NULL));
        /* Differing in the second block: its own ranking (differs sometimes). */
        char *second = rdv_text2(4000, k + 1, k + 1000, PIX_BLOCK_BYTES + 10);
        moved += cold_pick(&rdv_params, turn1, c, RDV_N, NULL) !=
                 cold_pick(&rdv_params, second, c, RDV_N, NULL);
        free(turn1);
        free(turn5);
        free(third);
        free(second);
    }
    assert_true(moved > 0);
    const char *hi = "hello there";
    assert_true(cold_pick(&rdv_params, hi, c, RDV_N, NULL) ==
                cold_pick(&rdv_params, hi, c, RDV_N, NULL));
}

/* The first worker of the ranking over the bound (factor × mean + 1) is
 * passed over for the next one within it — the same one on every node —
 * not for the least-loaded one. */
static void test_rendezvous_bounded_load_walks_the_ranking(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    unsigned not_least = 0;
    for (unsigned k = 0; k < 32; k++) {
        char *text = rdv_text(1500, k + 1, 0);
        uint64_t first = cold_pick(&rdv_params, text, c, RDV_N, NULL);
        size_t fi = 0;
        while (c[fi].rdv_seed != first)
            fi++;
        /* total 12, mean 3: bound 1.25 * 3 + 1 = 4.75; the first has 9. */
        struct ca_candidate busy[RDV_N];
        memcpy(busy, c, sizeof(busy));
        busy[fi].load = 9;
        size_t other = (fi + 1) % RDV_N;
        busy[other].load = 3; /* within the bound, not the least loaded */
        uint64_t second = cold_pick(&rdv_params, text, busy, RDV_N, NULL);
        assert_true(second != first);
        size_t si = 0;
        while (busy[si].rdv_seed != second)
            si++;
        assert_true(rdv_within_bound(busy[si].load, 12, RDV_N, 1.25));
        not_least += busy[si].load != 0;
        /* Within the bound again (4 <= 1.25 * 13 / 4 + 1): back to the first. */
        for (size_t i = 0; i < RDV_N; i++)
            busy[i].load = 3;
        busy[fi].load = 4;
        assert_true(cold_pick(&rdv_params, text, busy, RDV_N, NULL) == first);
        free(text);
    }
    /* `other` (load 3) is the second of the ranking about a third of the time. */
    assert_true(not_least > 0);
}

/* A cold prefix's first-ranked worker whose fresh report says its KV
 * cache is full is passed over like one over the load bound. */
static void test_rendezvous_skips_a_kv_full_worker(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    char *text = rdv_text(1500, 7, 0);
    uint64_t first = cold_pick(&rdv_params, text, c, RDV_N, NULL);
    size_t fi = 0;
    while (c[fi].rdv_seed != first)
        fi++;
    c[fi].kv_overloaded = true;
    assert_true(cold_pick(&rdv_params, text, c, RDV_N, NULL) != first);
    free(text);
}

/* The matched worker is overloaded: the fallback is the first worker of the
 * prefix's ranking within bounds other than it, not the least-loaded one. */
static void test_rendezvous_overloaded_fallback_follows_ranking(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    unsigned not_least = 0;
    for (unsigned k = 0; k < 32; k++) {
        char *text = rdv_text(2048, k + 1, 0);
        /* Where the ranking goes when worker 0 is out of bounds. */
        struct ca_candidate probe[RDV_N];
        memcpy(probe, c, sizeof(probe));
        probe[0].load = 1000;
        uint64_t expect = cold_pick(&rdv_params, text, probe, RDV_N, NULL);
        assert_true(expect != c[0].rdv_seed);

        struct pix_index *ix = ix_new();
        struct ca_candidate only = c[0];
        struct ca_choice ch;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), &only, 1, &ch), 0);
        /* Worker 0 holds the prefix and is overloaded (40 > 0 + 32, > 0 * 1.5);
         * the others have 1, 0, 0 (bound 1.25 * 41 / 4 + 1). */
        struct ca_candidate over[RDV_N];
        memcpy(over, c, sizeof(over));
        over[0].load = 40;
        over[1].load = 1;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), over, RDV_N, &ch), 0);
        assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
        assert_true(over[ch.index].rdv_seed == expect);
        not_least += over[ch.index].load != 0;
        free(text);
        pix_destroy(ix);
    }
    assert_true(not_least > 0);
}

/* bounded_affinity: a matched worker over the load bound (but under the
 * balance thresholds, abs 32) gives way down the ranking; without it, or
 * within the bound, affinity holds. */
static void test_bounded_affinity(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    char *text = rdv_text(2048, 3, 0);
    struct pix_index *ix = ix_new();
    struct ca_candidate only = c[0];
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), &only, 1, &ch), 0);
    /* Worker 0 holds the prefix with load 8, the others 1 each: mean 2.75,
     * bound 1.25 * 2.75 + 1 = 4.44; 8 - 1 < 32, so no balance threshold. */
    struct ca_candidate hot[RDV_N];
    memcpy(hot, c, sizeof(hot));
    for (size_t i = 0; i < RDV_N; i++)
        hot[i].load = 1;
    hot[0].load = 8;
    assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.index, 0);
    struct ca_params bounded = rdv_params;
    bounded.bounded_affinity = true;
    assert_int_equal(ca_decide(ix, &bounded, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    size_t second = ch.index;
    assert_true(second != 0);
    /* Within the bound (2 <= 1.25 * 5 / 4 + 1): affinity again, to the
     * least loaded of the prefix's two holders now (it spread). */
    hot[0].load = 2;
    assert_int_equal(ca_decide(ix, &bounded, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.index, second);
    hot[second].load = 2;
    hot[0].load = 1;
    assert_int_equal(ca_decide(ix, &bounded, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.index, 0);
    free(text);
    pix_destroy(ix);

    /* affinity_load_factor is the matched worker's bound: 5 with the
     * others at 1 (mean 2) is over 1.25 x 2 + 1 but within 2 x 2 + 1. */
    text = rdv_text(2048, 4, 0);
    ix = ix_new();
    assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), &only, 1, &ch), 0);
    for (size_t i = 0; i < RDV_N; i++)
        hot[i].load = 1;
    hot[0].load = 5;
    bounded.affinity_load_factor = 2.0;
    assert_int_equal(ca_decide(ix, &bounded, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    assert_int_equal(ch.index, 0);
    bounded.affinity_load_factor = 1.25;
    assert_int_equal(ca_decide(ix, &bounded, "m", text, strlen(text), hot, RDV_N, &ch), 0);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    free(text);
    pix_destroy(ix);
}

/* The candidates of c in the order of key's ranking for text (the hash of
 * its first CA_RDV_KEY_BLOCKS blocks, as ca_decide computes it). */
static void rdv_order(const char *text, const struct ca_candidate *c, size_t n, size_t *order)
{
    uint64_t hashes[CA_RDV_KEY_BLOCKS];
    size_t nb = pix_hash_blocks(pix_model_seed("m"), text, strlen(text), hashes, CA_RDV_KEY_BLOCKS);
    assert_int_equal(nb, CA_RDV_KEY_BLOCKS);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            uint64_t si = rdv_score(&hashes[nb - 1], sizeof(hashes[0]), c[order[i]].rdv_seed);
            uint64_t sj = rdv_score(&hashes[nb - 1], sizeof(hashes[0]), c[order[j]].rdv_seed);
            if (sj > si) {
                size_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
}

/*
 * Three router nodes behind a round-robin front: node A placed a
 * conversation's first turn on the second worker of its ranking (the first
 * was over the load bound then) and sees it again three turns later, when
 * it knows only that first turn (a match below cache_threshold). The worker
 * that holds it keeps it while no better-ranked worker is within the bound,
 * even when it is over the bound itself (not overloaded): walking on to the
 * third-ranked worker, as before, split the conversation between workers
 * and the nodes then kept sending its turns to different ones. A
 * better-ranked worker within the bound still wins (the other nodes, which
 * never saw the first turn, send it there), and an overloaded holder is
 * passed over.
 */
static void test_partial_match_holder_keeps_its_rank(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N];
    rdv_fleet(c, RDV_N, 0);
    for (unsigned k = 0; k < 16; k++) {
        /* Turn 0: 2.5 blocks; turn 3 repeats it and adds 7.5 more. */
        char *turn0 = rdv_text2(600, k + 1, k + 1, 600);
        char *turn3 = rdv_text2(2400, k + 1, k + 500, 600);
        size_t r[RDV_N];
        rdv_order(turn0, c, RDV_N, r);
        struct pix_index *ix = ix_new();
        struct ca_choice ch;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn0, strlen(turn0), &c[r[1]], 1, &ch),
                         0);

        /* Ranks 0 and 1 over the bound (4 > 1.25 * 2 + 1), not overloaded. */
        struct ca_candidate busy[RDV_N];
        memcpy(busy, c, sizeof(busy));
        busy[r[0]].load = 4;
        busy[r[1]].load = 4;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn3, strlen(turn3), busy, RDV_N, &ch),
                         0);
        assert_true(ch.matched_blocks > 0 && ch.matched_blocks < ch.total_blocks / 2);
        assert_int_equal(ch.decision, POL_DECISION_NO_MATCH);
        assert_int_equal(ch.index, r[1]);

        /* Rank 0 within the bound: it wins over the holder (on an index
         * that, again, holds only the first turn). */
        pix_destroy(ix);
        ix = ix_new();
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn0, strlen(turn0), &c[r[1]], 1, &ch),
                         0);
        busy[r[0]].load = 0;
        busy[r[2]].load = 4;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn3, strlen(turn3), busy, RDV_N, &ch),
                         0);
        assert_int_equal(ch.index, r[0]);
        free(turn0);
        free(turn3);
        pix_destroy(ix);

        /* An overloaded holder (40 > 0 + 32 and > 0 * 1.5) is passed over. */
        ix = ix_new();
        turn0 = rdv_text2(600, k + 1, k + 1, 600);
        turn3 = rdv_text2(2400, k + 1, k + 500, 600);
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn0, strlen(turn0), &c[r[1]], 1, &ch),
                         0);
        memcpy(busy, c, sizeof(busy));
        busy[r[0]].load = 40;
        busy[r[1]].load = 40;
        assert_int_equal(ca_decide(ix, &rdv_params, "m", turn3, strlen(turn3), busy, RDV_N, &ch),
                         0);
        assert_int_equal(ch.index, r[2]);
        free(turn0);
        free(turn3);
        pix_destroy(ix);
    }
}

/* Adding a worker moves only the prefixes that now rank it first; removing
 * one moves only those that ranked it first. */
static void test_rendezvous_membership_change_moves_few(void **state)
{
    (void)state;
    struct ca_candidate c[RDV_N + 1];
    rdv_fleet(c, RDV_N + 1, 0);
    unsigned to_new = 0;
    for (unsigned k = 0; k < 200; k++) {
        char *text = rdv_text(1500, k + 1, 0);
        uint64_t before = cold_pick(&rdv_params, text, c, RDV_N, NULL);
        uint64_t after = cold_pick(&rdv_params, text, c, RDV_N + 1, NULL);
        if (after != before) {
            assert_true(after == c[RDV_N].rdv_seed);
            to_new++;
        }
        /* Remove w1 (swap the last one into its place: order does not matter). */
        struct ca_candidate less[RDV_N - 1] = {c[0], c[3], c[2]};
        uint64_t removed = cold_pick(&rdv_params, text, less, RDV_N - 1, NULL);
        if (before != c[1].rdv_seed)
            assert_true(removed == before);
        free(text);
    }
    /* About 1/5 of them. */
    assert_true(to_new > 15 && to_new < 70);
}

/* Rendezvous changes where cold prefixes and fallbacks go, nothing else:
 * a hot worker elsewhere keeps affinity (invariant 9), and the fleet gate
 * still sends everyone to the least loaded. */
static void test_rendezvous_keeps_affinity_rules(void **state)
{
    (void)state;
    struct pix_index *ix = ix_new();
    char *text = rdv_text(4096, 0, 0);
    struct ca_candidate c[3];
    rdv_fleet(c, 3, 10);
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), &c[1], 1, &ch), 0);
    c[0].load = 60;
    c[1].load = 2;
    assert_int_equal(ca_decide(ix, &rdv_params, "m", text, strlen(text), c, 3, &ch), 0);
    assert_int_equal(ch.index, 1);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY_DESPITE_IMBALANCE);
    struct ca_params fleet = rdv_params;
    fleet.balance_gate = CFG_BALANCE_GATE_FLEET;
    assert_int_equal(ca_decide(ix, &fleet, "m", text, strlen(text), c, 3, &ch), 0);
    assert_int_equal(ch.index, 2);
    assert_int_equal(ch.decision, POL_DECISION_FLEET_IMBALANCED);
    free(text);
    pix_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regression_238_hot_worker_elsewhere_keeps_affinity),
        cmocka_unit_test(test_preferred_worker_overloaded_falls_back),
        cmocka_unit_test(test_no_match_goes_least_loaded_and_ties_prefer_match),
        cmocka_unit_test(test_single_and_no_candidate),
        cmocka_unit_test(test_matched_worker_gone_is_no_match),
        cmocka_unit_test(test_models_have_separate_indexes),
        cmocka_unit_test(test_multi_turn_chat_sticks_to_its_worker),
        cmocka_unit_test(test_least_loaded_holder_of_the_prefix_wins),
        cmocka_unit_test(test_rendezvous_nodes_agree_on_cold_prefix),
        cmocka_unit_test(test_rendezvous_key_is_the_head),
        cmocka_unit_test(test_rendezvous_bounded_load_walks_the_ranking),
        cmocka_unit_test(test_rendezvous_skips_a_kv_full_worker),
        cmocka_unit_test(test_rendezvous_overloaded_fallback_follows_ranking),
        cmocka_unit_test(test_bounded_affinity),
        cmocka_unit_test(test_partial_match_holder_keeps_its_rank),
        cmocka_unit_test(test_rendezvous_membership_change_moves_few),
        cmocka_unit_test(test_rendezvous_keeps_affinity_rules),
    };
    return cmocka_run_group_tests_name("cache_aware", tests, NULL, NULL);
}
