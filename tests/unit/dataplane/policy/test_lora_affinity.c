/*
 * Unit tests of LoRA affinity (dataplane/policy/lora_affinity.c) over a real
 * segment: among candidates that have adapter "a", those whose fresh
 * report says they run it are kept; a stale, missing or future report, a
 * request for the base model, reports switched off, or every candidate
 * running it leave the candidates as they were; a running candidate that
 * is KV-full or overloaded by the balance gate is not preferred.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/policy/lora_affinity.h"
#include "shm/load_report.h"
#include "shm/registry.h"

#define NOW 1000000u

static char test_name[64];
static struct shm_segment seg;
static struct shm_worker_info w[3];
static const struct shm_el_params elp = {
    .signal = CFG_LOAD_SIGNAL_COMBINED, .reports_on = true, .stale_after_ms = 1000};
static const struct cfg_policy pol = {.balance_abs_threshold = 4, .balance_rel_threshold = 1.5};

static int setup(void **state)
{
    (void)state;
    static int n;
    snprintf(test_name, sizeof(test_name), "/sy-unit-lora-%d-%d", (int)getpid(), n++);
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    if (shm_segment_open_owner(&seg, test_name, 8, 2, &outcome, err, sizeof(err)) != 0)
        fail_msg("open_owner: %s", err);
    for (int i = 0; i < 3; i++) {
        struct shm_worker_info in = {.role = CFG_ROLE_REGULAR, .healthy = true};
        snprintf(in.id, sizeof(in.id), "w%d", i + 1);
        snprintf(in.url, sizeof(in.url), "http://127.0.0.1:%d", i + 1);
        snprintf(in.model, sizeof(in.model), "base");
        assert_int_equal(shm_registry_add(&seg, &in, &w[i]), 0);
        snprintf(w[i].aliases, sizeof(w[i].aliases), "a\nb");
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    shm_segment_close(&seg);
    shm_unlink(test_name);
    return 0;
}

/* Worker i reports running list at unix_ms. */
static void report(int i, const char *list, uint64_t unix_ms)
{
    struct shm_load_report r = {.unix_ms = unix_ms};
    shm_adapter_set_add_list(&r.running_adapters, list, strlen(list));
    assert_int_equal(shm_load_report_write(&seg, w[i].slot, w[i].generation, &r), 0);
}

static size_t cands_of(struct pol_candidate *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c[i] = (struct pol_candidate){.worker = &w[i]};
    return n;
}

static size_t keep(struct pol_candidate *c, size_t n, const char *model)
{
    return dp_lora_keep_running(&seg, &elp, &pol, model, c, n, NOW);
}

static void test_prefers_running(void **state)
{
    (void)state;
    struct pol_candidate c[3];
    /* No report anywhere: by policy. */
    assert_int_equal(keep(c, cands_of(c, 2), "a"), 2);
    /* w2 runs a (and b), w1 runs b. */
    report(0, "b", NOW - 10);
    report(1, "b,a", NOW - 10);
    assert_int_equal(keep(c, cands_of(c, 2), "a"), 1);
    assert_ptr_equal(c[0].worker, &w[1]);
    assert_int_equal(keep(c, cands_of(c, 2), "b"), 2); /* both run b */
    /* Three candidates, two run a: both kept, in order. */
    report(2, "a", NOW);
    assert_int_equal(keep(c, cands_of(c, 3), "a"), 2);
    assert_ptr_equal(c[0].worker, &w[1]);
    assert_ptr_equal(c[1].worker, &w[2]);
    /* A single candidate is left alone. */
    assert_int_equal(keep(c, cands_of(c, 1), "a"), 1);
}

static void test_stale_base_off(void **state)
{
    (void)state;
    struct pol_candidate c[3];
    report(0, "", NOW);
    report(1, "a,base", NOW - 1001); /* stale */
    assert_int_equal(keep(c, cands_of(c, 2), "a"), 2);
    assert_ptr_equal(c[0].worker, &w[0]);
    report(1, "a,base", NOW - 1000); /* just fresh */
    assert_int_equal(keep(c, cands_of(c, 2), "a"), 1);
    report(1, "a,base", NOW + 5000); /* from the future (a clock step): fresh */
    assert_int_equal(keep(c, cands_of(c, 2), "a"), 1);
    /* A request for the base model is no adapter request. */
    assert_int_equal(keep(c, cands_of(c, 2), "base"), 2);
    assert_int_equal(keep(c, cands_of(c, 2), ""), 2);
    /* Reports off: nothing to go by. */
    struct shm_el_params off = elp;
    off.reports_on = false;
    cands_of(c, 2);
    assert_int_equal(dp_lora_keep_running(&seg, &off, &pol, "a", c, 2, NOW), 2);
}

static void test_overloaded_not_preferred(void **state)
{
    (void)state;
    struct pol_candidate c[3];
    report(0, "", NOW);
    report(1, "a", NOW);
    /* Within the gate (least 0, abs 4): still preferred. */
    cands_of(c, 2);
    c[1].load = 4;
    assert_int_equal(keep(c, 2, "a"), 1);
    /* Past both thresholds: by policy. */
    cands_of(c, 2);
    c[1].load = 5;
    assert_int_equal(keep(c, 2, "a"), 2);
    /* Both thresholds must be passed: 26 > 20 + 4, but 26 <= 20 * 1.5. */
    cands_of(c, 2);
    c[0].load = 20;
    c[1].load = 26;
    assert_int_equal(keep(c, 2, "a"), 1);
    /* KV cache over policy.kv_overload: not preferred. */
    cands_of(c, 2);
    c[1].kv_overloaded = true;
    assert_int_equal(keep(c, 2, "a"), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prefers_running, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_base_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overloaded_not_preferred, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
