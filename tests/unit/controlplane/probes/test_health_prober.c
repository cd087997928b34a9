/*
 * Unit tests of the health prober's pure parts: the jittered interval stays
 * within +-10 % and actually varies, and the threshold logic marks a worker
 * unhealthy only after failure_threshold consecutive failures and healthy
 * again after success_threshold consecutive successes, on a real (private)
 * segment. Includes the .c file to reach statics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "controlplane/probes/health_prober.c"
#include "tests/unit/unit_shm.h"

static void test_jitter_bounds(void **state)
{
    (void)state;
    struct cfg_health h = {.interval_ms = 1000};
    struct hc_prober p = {.health = &h, .rng = 12345};
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = hc_jittered_interval(&p);
        assert_true(v >= 900 && v <= 1100);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    assert_true(hi - lo > 150);
    h.interval_ms = 10;
    for (int i = 0; i < 100; i++)
        assert_true(hc_jittered_interval(&p) >= 9 && hc_jittered_interval(&p) <= 11);
}

static void test_thresholds(void **state)
{
    (void)state;
    struct shm_segment seg;
    struct shm_worker_info w;
    unit_segment_with_worker(&seg, "hc", "", &w);
    struct cfg_health h = {.interval_ms = 1000, .failure_threshold = 3, .success_threshold = 2};
    struct hc_prober p = {.seg = &seg, .health = &h};
    struct wp_target t = {.active = true, .slot = w.slot, .generation = w.generation};
    struct hc_state st;
    hc_state_reset(&st, &w, false);

    hc_apply_probe(&p, &t, &st, false, "x");
    hc_apply_probe(&p, &t, &st, false, "x");
    hc_apply_probe(&p, &t, &st, true, "");
    hc_apply_probe(&p, &t, &st, false, "x");
    hc_apply_probe(&p, &t, &st, false, "x");
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_true(w.healthy); /* never 3 in a row */
    hc_apply_probe(&p, &t, &st, false, "x");
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_false(w.healthy);
    hc_apply_probe(&p, &t, &st, true, "");
    hc_apply_probe(&p, &t, &st, false, "x");
    hc_apply_probe(&p, &t, &st, true, "");
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_false(w.healthy);
    hc_apply_probe(&p, &t, &st, true, "");
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_true(w.healthy);
    /* What each probe counts as in the stats. */
    assert_int_equal(hc_apply_probe(&p, &t, &st, true, ""), WP_OK);
    assert_int_equal(hc_apply_probe(&p, &t, &st, false, "x"), WP_FAILED);
    assert_int_equal(hc_apply_probe(&p, &t, &st, true, ""), WP_OK);
    assert_true(w.healthy);

    /* A result for a previous occupant of the slot is dropped. */
    struct shm_worker_info again = w;
    again.healthy = true;
    shm_registry_remove(&seg, w.slot);
    assert_int_equal(shm_registry_add(&seg, &again, &w), 0);
    assert_int_not_equal(w.generation, t.generation);
    for (int i = 0; i < 5; i++)
        assert_int_equal(hc_apply_probe(&p, &t, &st, false, "x"), WP_UNCOUNTED);
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_true(w.healthy);
    shm_segment_close(&seg);
}

/* A /v1/models answer to a lookup that left before the admin API changed
 * the worker's names (an adapter loaded) is dropped: applied, it would take
 * the new adapter away until the next lookup. */
static void test_stale_models_answer_dropped(void **state)
{
    (void)state;
    struct shm_segment seg;
    struct shm_worker_info w;
    unit_segment_with_worker(&seg, "hcm", "m", &w);
    struct cfg_health h = {.interval_ms = 1000};
    struct hc_prober p = {.seg = &seg, .health = &h};
    struct wp_target t = {.active = true, .slot = w.slot, .generation = w.generation};
    struct hc_state st;
    hc_state_reset(&st, &w, false);
    static const char without_a[] = "{\"data\":[{\"id\":\"m\"}]}";
    static const char with_a[] = "{\"data\":[{\"id\":\"m\"},{\"id\":\"a\"}]}";

    /* A lookup leaves; meanwhile a is loaded and named in the registry. */
    hc_models_lookup_started(&st);
    assert_int_equal(shm_registry_set_names(&seg, w.slot, "m", "a"), 0);
    hc_names_changed(&st);
    hc_apply_models(&p, &t, &st, true, without_a, sizeof(without_a) - 1);
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_string_equal(w.aliases, "a");
    /* The lookup that leaves after the change is applied, whatever it says. */
    hc_models_lookup_started(&st);
    hc_apply_models(&p, &t, &st, true, with_a, sizeof(with_a) - 1);
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_string_equal(w.aliases, "a");
    hc_models_lookup_started(&st);
    hc_apply_models(&p, &t, &st, true, without_a, sizeof(without_a) - 1);
    assert_int_equal(shm_registry_find(&seg, "w1", &w), 0);
    assert_string_equal(w.aliases, "");
    shm_segment_close(&seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jitter_bounds),
        cmocka_unit_test(test_thresholds),
        cmocka_unit_test(test_stale_models_answer_dropped),
    };
    return cmocka_run_group_tests_name("cp_health_prober", tests, NULL, NULL);
}
