/*
 * The saturation test admission control applies to each candidate worker
 * (dp_adm_worker_is_saturated): the load routing sees against
 * max_inflight_per_worker, and the worker's own fresh load report against
 * max_waiting_per_worker and max_kv_usage. A missing or stale report
 * (passed as NULL) must never saturate a worker: admission fails open to
 * the node's own count, as routing does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dataplane/admission/admission.h"

static void test_inflight_limit(void **state)
{
    (void)state;
    struct cfg_admission a = {.max_inflight_per_worker = 4};
    assert_false(dp_adm_worker_is_saturated(&a, 3, NULL));
    assert_true(dp_adm_worker_is_saturated(&a, 4, NULL));
    a.max_inflight_per_worker = 0; /* no limit */
    assert_false(dp_adm_worker_is_saturated(&a, 1000000, NULL));
}

static void test_waiting_and_kv_from_a_fresh_report(void **state)
{
    (void)state;
    struct cfg_admission a = {.max_waiting_per_worker = 8, .max_kv_usage = 0.9};
    struct shm_load_report r = {.running = 100, .waiting = 7, .kv_cache_usage = 0.5, .unix_ms = 1};
    assert_false(dp_adm_worker_is_saturated(&a, 0, &r));
    r.waiting = 8;
    assert_true(dp_adm_worker_is_saturated(&a, 0, &r));
    r.waiting = 0;
    r.kv_cache_usage = 0.9;
    assert_true(dp_adm_worker_is_saturated(&a, 0, &r));
    /* Without a fresh report the same limits saturate nothing. */
    assert_false(dp_adm_worker_is_saturated(&a, 0, NULL));
    /* 0 turns each limit off. */
    a.max_waiting_per_worker = 0;
    a.max_kv_usage = 0;
    r.waiting = 1000;
    r.kv_cache_usage = 1.0;
    assert_false(dp_adm_worker_is_saturated(&a, 0, &r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inflight_limit),
        cmocka_unit_test(test_waiting_and_kv_from_a_fresh_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
