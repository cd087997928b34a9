/*
 * Unit tests of the load routing sees (shm/effective_load.c): with one
 * router node a fresh report changes nothing (the worker counts only this
 * node's requests); another node's requests are added; what this node
 * dispatched since the report is counted once; never below own; a stale,
 * missing or future report and load_signal: own fall back to own; KV-cache
 * usage above kv_overload marks the worker, and cache_aware then treats
 * its prefix-matched worker as overloaded.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/effective_load.h"
#include "dataplane/policy/cache_aware.h"

static const struct shm_el_params combined = {
    .signal = CFG_LOAD_SIGNAL_COMBINED,
    .reports_on = true,
    .stale_after_ms = 1000,
    .kv_overload = 0.9,
};

static struct shm_load_report report(uint32_t running, uint32_t waiting, uint32_t own, uint64_t at)
{
    return (struct shm_load_report){
        .running = running, .waiting = waiting, .own_inflight = own, .unix_ms = at};
}

static void test_one_node_routes_as_today(void **state)
{
    (void)state;
    struct shm_el_load el;
    /* The worker counts exactly this node's 3 requests. */
    struct shm_load_report r = report(2, 1, 3, 10000);
    shm_el_combine(&combined, 3, &r, 10100, &el);
    assert_true(el.fresh);
    assert_false(el.stale);
    assert_int_equal(el.effective, 3);
    /* Since the report, 2 finished and 4 were dispatched: own says 5. */
    shm_el_combine(&combined, 5, &r, 10100, &el);
    assert_int_equal(el.effective, 5);
    /* The worker had not yet seen one of ours (reported < own at report). */
    r = report(2, 0, 3, 10000);
    shm_el_combine(&combined, 3, &r, 10100, &el);
    assert_int_equal(el.effective, 3);
}

static void test_other_nodes_are_added(void **state)
{
    (void)state;
    struct shm_el_load el;
    /* 10 running + 4 waiting, 2 of them ours: 12 are another node's. */
    struct shm_load_report r = report(10, 4, 2, 5000);
    shm_el_combine(&combined, 2, &r, 5200, &el);
    assert_int_equal(el.effective, 14);
    /* This node dispatched 3 more since (own 5): counted once. */
    shm_el_combine(&combined, 5, &r, 5200, &el);
    assert_int_equal(el.effective, 17);
    /* Never below own, whatever the report says. */
    r = report(0, 0, 0, 5000);
    shm_el_combine(&combined, 7, &r, 5200, &el);
    assert_int_equal(el.effective, 7);
}

static void test_stale_missing_future_and_own(void **state)
{
    (void)state;
    struct shm_el_load el;
    struct shm_load_report r = report(50, 0, 0, 1000);
    shm_el_combine(&combined, 4, &r, 2000, &el); /* age 1000: still fresh */
    assert_true(el.fresh);
    assert_int_equal(el.effective, 54);
    shm_el_combine(&combined, 4, &r, 2001, &el); /* age 1001: stale */
    assert_false(el.fresh);
    assert_true(el.stale);
    assert_int_equal(el.effective, 4);
    shm_el_combine(&combined, 4, NULL, 2000, &el);
    assert_true(el.stale);
    assert_int_equal(el.effective, 4);
    shm_el_combine(&combined, 4, &r, 500, &el); /* a clock step back: age 0 */
    assert_true(el.fresh);
    /* load_signal: own ignores reports, and is not "stale". */
    struct shm_el_params own = combined;
    own.signal = CFG_LOAD_SIGNAL_OWN;
    shm_el_combine(&own, 4, &r, 1100, &el);
    assert_false(el.fresh);
    assert_false(el.stale);
    assert_int_equal(el.effective, 4);
    /* Scraping off: no report is expected, none is stale. */
    struct shm_el_params off = combined;
    off.reports_on = false;
    shm_el_combine(&off, 4, NULL, 1100, &el);
    assert_false(el.stale);
    assert_int_equal(el.effective, 4);
}

static void test_kv_overload(void **state)
{
    (void)state;
    struct shm_el_load el;
    struct shm_load_report r = report(1, 0, 1, 1000);
    r.kv_cache_usage = 0.9;
    shm_el_combine(&combined, 1, &r, 1000, &el);
    assert_false(el.kv_overloaded); /* "above" */
    r.kv_cache_usage = 0.95;
    shm_el_combine(&combined, 1, &r, 1000, &el);
    assert_true(el.kv_overloaded);
    shm_el_combine(&combined, 1, &r, 5000, &el); /* a stale report says nothing */
    assert_false(el.kv_overloaded);
}

/* cache_aware: a prefix-matched worker whose KV cache is over the line is
 * overloaded; the request goes to the least-loaded worker instead. */
static void test_cache_aware_kv_gate(void **state)
{
    (void)state;
    static const struct ca_params p = {
        .cache_threshold = 0.5,
        .balance_abs_threshold = 32,
        .balance_rel_threshold = 1.5,
        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
    };
    struct pix_index *ix = pix_create(1 << 16);
    assert_non_null(ix);
    char text[2048];
    for (size_t i = 0; i < sizeof(text) - 1; i++)
        text[i] = (char)('a' + (i * 7) % 26);
    text[sizeof(text) - 1] = '\0';
    struct ca_candidate only = {.slot = 5, .load = 0};
    struct ca_choice ch;
    assert_int_equal(ca_decide(ix, &p, "m", text, strlen(text), &only, 1, &ch), 0);
    struct ca_candidate c[2] = {{.slot = 4, .load = 1}, {.slot = 5, .load = 1}};
    assert_int_equal(ca_decide(ix, &p, "m", text, strlen(text), c, 2, &ch), 0);
    assert_int_equal(ch.index, 1);
    assert_int_equal(ch.decision, POL_DECISION_AFFINITY);
    c[1].kv_overloaded = true;
    assert_int_equal(ca_decide(ix, &p, "m", text, strlen(text), c, 2, &ch), 0);
    assert_int_equal(ch.index, 0);
    assert_int_equal(ch.decision, POL_DECISION_OVERLOADED_FALLBACK);
    pix_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_node_routes_as_today),
        cmocka_unit_test(test_other_nodes_are_added),
        cmocka_unit_test(test_stale_missing_future_and_own),
        cmocka_unit_test(test_kv_overload),
        cmocka_unit_test(test_cache_aware_kv_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
