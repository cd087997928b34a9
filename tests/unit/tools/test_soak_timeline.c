/*
 * Unit tests of the soak's fault timeline (tests/soak/timeline.c): which
 * injected fault a failed request is put on. The soak's verdict rests on
 * it (every failure must be explained by a fault), so a rule that names
 * the wrong fault, or explains what nothing explains, makes the soak's
 * report lie. Includes the .c file: it is part of the soak program, not of
 * a library.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tests/soak/timeline.c"

static struct sk_failure failure(long status, const char *worker, const char *pinned, int64_t t0,
                                 int64_t t1)
{
    struct sk_failure fr = {.t0 = t0, .t1 = t1, .dp = 0, .status = status};
    snprintf(fr.worker, sizeof(fr.worker), "%s", worker);
    snprintf(fr.pinned, sizeof(fr.pinned), "%s", pinned);
    return fr;
}

/* A pinned refusal is put on the latest thing done to its worker: the
 * spare was removed at 25 s, added back, drained at 578 s; a 503 at 579 s
 * is the drain's, not the old removal's. */
static void test_pinned_refusal_names_latest_fault(void **state)
{
    (void)state;
    struct sk_timeline tl = {0};
    long removed = sk_timeline_add(&tl, SK_F_REMOVE, -1, "spare", 25000);
    sk_timeline_end(&tl, removed, 25100);
    long added = sk_timeline_add(&tl, SK_F_ADD, -1, "spare", 30000);
    sk_timeline_end(&tl, added, 30100);
    long drained = sk_timeline_add(&tl, SK_F_DRAIN, -1, "spare", 578000);
    sk_timeline_add(&tl, SK_F_REMOVE, -1, "other", 578500);

    struct sk_failure fr = failure(503, "", "spare", 579000, 579010);
    assert_true(sk_timeline_explain(&tl, &fr, 600000));
    assert_int_equal(fr.explained_by, drained);
    /* A 404 says the worker is gone: only a removal explains it. */
    fr = failure(404, "", "spare", 579000, 579010);
    assert_true(sk_timeline_explain(&tl, &fr, 600000));
    assert_int_equal(fr.explained_by, removed);
    sk_timeline_free(&tl);
}

/* A 404 for a worker only ever drained is not explained, and a refusal
 * of a request pinned elsewhere is not put on this worker's faults. */
static void test_pinned_refusal_needs_matching_fault(void **state)
{
    (void)state;
    struct sk_timeline tl = {0};
    sk_timeline_add(&tl, SK_F_DRAIN, -1, "spare", 1000);
    struct sk_failure fr = failure(404, "", "spare", 2000, 2010);
    assert_false(sk_timeline_explain(&tl, &fr, 5000));
    assert_int_equal(fr.explained_by, -1);
    fr = failure(503, "", "w1", 2000, 2010);
    assert_false(sk_timeline_explain(&tl, &fr, 5000));
    /* A drain after the request ended explains nothing. */
    fr = failure(503, "", "spare", 100, 200);
    assert_false(sk_timeline_explain(&tl, &fr, 5000));
    /* A skipped fault (never applied) explains nothing either. */
    struct sk_timeline tl2 = {0};
    long r = sk_timeline_add(&tl2, SK_F_REMOVE, -1, "spare", 1000);
    sk_timeline_skip(&tl2, r);
    fr = failure(404, "", "spare", 2000, 2010);
    assert_false(sk_timeline_explain(&tl2, &fr, 5000));
    assert_int_equal(tl2.count[SK_F_REMOVE], 0);
    assert_int_equal(tl2.skipped[SK_F_REMOVE], 1);
    sk_timeline_free(&tl);
    sk_timeline_free(&tl2);
}

/* A health flap explains a pinned 503 only not long after it ended. */
static void test_pinned_refusal_after_flap(void **state)
{
    (void)state;
    struct sk_timeline tl = {0};
    long flap = sk_timeline_add(&tl, SK_F_HEALTH_FLAP, -1, "w2", 1000);
    sk_timeline_end(&tl, flap, 2000);
    struct sk_failure fr = failure(503, "", "w2", 2000 + SK_PIN_SLACK_MS - 1, 5500);
    assert_true(sk_timeline_explain(&tl, &fr, 9000));
    assert_int_equal(fr.explained_by, flap);
    fr = failure(503, "", "w2", 2000 + SK_PIN_SLACK_MS + 1, 6000);
    assert_false(sk_timeline_explain(&tl, &fr, 9000));
    sk_timeline_free(&tl);
}

/* Unpinned failures: a data-plane fault first, then a worker fault that
 * produces the outcome, and only faults that overlap the request. */
static void test_unpinned_order_and_overlap(void **state)
{
    (void)state;
    struct sk_timeline tl = {0};
    long chunks = sk_timeline_add(&tl, SK_F_STALL_CHUNKS, -1, "w1", 1000);
    long reset = sk_timeline_add(&tl, SK_F_RESET, -1, "w1", 1000);
    sk_timeline_end(&tl, chunks, 3000);
    sk_timeline_end(&tl, reset, 3000);
    /* A cut 200 is a reset's, though the stall came first. */
    struct sk_failure fr = failure(200, "w1", "", 1500, 1600);
    assert_true(sk_timeline_explain(&tl, &fr, 9000));
    assert_int_equal(fr.explained_by, reset);
    /* A data-plane kill wins over both. */
    long kill = sk_timeline_add(&tl, SK_F_DP_KILL, 0, NULL, 1400);
    sk_timeline_end(&tl, kill, 1450);
    fr = failure(200, "w1", "", 1500, 1600);
    assert_true(sk_timeline_explain(&tl, &fr, 9000));
    assert_int_equal(fr.explained_by, kill);
    /* Another data plane's kill does not touch it. */
    fr = failure(200, "w1", "", 1500, 1600);
    fr.dp = 1;
    assert_true(sk_timeline_explain(&tl, &fr, 9000));
    assert_int_equal(fr.explained_by, reset);
    /* Past the slack after the faults ended: unexplained. */
    fr = failure(502, "w1", "", 3000 + SK_SLACK_MS + 1, 4000);
    fr.dp = 1;
    assert_false(sk_timeline_explain(&tl, &fr, 9000));
    /* A fault on another worker does not explain a response from w1. */
    fr = failure(502, "w1", "", 1500, 1600);
    fr.dp = 1;
    struct sk_timeline tl2 = {0};
    sk_timeline_add(&tl2, SK_F_WORKER_5XX, -1, "w2", 1000);
    assert_false(sk_timeline_explain(&tl2, &fr, 9000));
    /* A router error without a worker may have tried them all. */
    fr = failure(502, "", "", 1500, 1600);
    fr.dp = 1;
    assert_true(sk_timeline_explain(&tl2, &fr, 9000));
    /* Faults that never fail a request explain nothing. */
    struct sk_timeline tl3 = {0};
    sk_timeline_add(&tl3, SK_F_RESET_LOAD, -1, "w1", 1000);
    sk_timeline_add(&tl3, SK_F_ADD, -1, "w1", 1000);
    fr = failure(502, "w1", "", 1500, 1600);
    assert_false(sk_timeline_explain(&tl3, &fr, 9000));
    sk_timeline_free(&tl);
    sk_timeline_free(&tl2);
    sk_timeline_free(&tl3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pinned_refusal_names_latest_fault),
        cmocka_unit_test(test_pinned_refusal_needs_matching_fault),
        cmocka_unit_test(test_pinned_refusal_after_flap),
        cmocka_unit_test(test_unpinned_order_and_overlap),
    };
    return cmocka_run_group_tests_name("soak_timeline", tests, NULL, NULL);
}
