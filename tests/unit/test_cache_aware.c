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
    };
    return cmocka_run_group_tests_name("cache_aware", tests, NULL, NULL);
}
