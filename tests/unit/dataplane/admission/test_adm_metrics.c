/*
 * Unit tests of the admission metrics' page (dataplane/admission/adm_metrics.c): the
 * queue-wait histogram per model and band (its buckets, count and sum as
 * Prometheus reads them, and no series for a band nobody waited in), and
 * the queue's conservation law on the page: queued_total equals the sum
 * of left_total plus the depth.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/prom.h"
#include "dataplane/admission/adm_metrics.h"

static void page_of(const struct dp_adm_metrics *m, struct buf *page)
{
    struct prom_writer w;
    prom_init(&w, page);
    dp_adm_metrics_render(m, &w);
    assert_int_equal(prom_error(&w), 0);
    assert_int_equal(buf_append(page, "", 1), 0); /* NUL-terminated for strstr */
}

static void test_wait_histogram(void **state)
{
    (void)state;
    struct dp_adm_metrics *m = dp_adm_metrics_create();
    assert_non_null(m);
    dp_adm_metrics_wait(m, "llama", DP_PRIO_NORMAL, 3000);     /* <= 5 ms */
    dp_adm_metrics_wait(m, "llama", DP_PRIO_NORMAL, 5000);     /* a bound is its own bucket's */
    dp_adm_metrics_wait(m, "llama", DP_PRIO_NORMAL, 200000);   /* <= 0.5 s */
    dp_adm_metrics_wait(m, "llama", DP_PRIO_NORMAL, 90000000); /* +Inf */
    dp_adm_metrics_wait(m, "llama", DP_PRIO_UNSET, 1000);      /* no band: not counted */
    struct buf page = BUF_INIT(1 << 16);
    page_of(m, &page);
    const char *p = page.data;
    const char *series = "switchyard_admission_queue_wait_seconds_bucket{model=\"llama\","
                         "band=\"normal\",le=";
    char want[256];
    snprintf(want, sizeof(want), "%s\"0.005\"} 2\n", series);
    assert_non_null(strstr(p, want));
    snprintf(want, sizeof(want), "%s\"0.1\"} 2\n", series);
    assert_non_null(strstr(p, want));
    snprintf(want, sizeof(want), "%s\"0.5\"} 3\n", series);
    assert_non_null(strstr(p, want));
    snprintf(want, sizeof(want), "%s\"+Inf\"} 4\n", series);
    assert_non_null(strstr(p, want));
    assert_non_null(strstr(p, "switchyard_admission_queue_wait_seconds_count{model=\"llama\","
                              "band=\"normal\"} 4\n"));
    assert_non_null(strstr(p, "switchyard_admission_queue_wait_seconds_sum{model=\"llama\","
                              "band=\"normal\"} 90.208"));
    /* Bands nobody waited in have no series. */
    assert_null(strstr(p, "queue_wait_seconds_count{model=\"llama\",band=\"high\"}"));
    assert_null(strstr(p, "queue_wait_seconds_count{model=\"llama\",band=\"low\"}"));
    buf_fini(&page);
    dp_adm_metrics_destroy(m);
}

static void test_queue_conservation_on_page(void **state)
{
    (void)state;
    struct dp_adm_metrics *m = dp_adm_metrics_create();
    assert_non_null(m);
    for (int i = 0; i < 5; i++) {
        dp_adm_metrics_enqueued(m);
        dp_adm_metrics_depth(m, "llama", DP_PRIO_LOW, 1);
    }
    dp_adm_metrics_left(m, DP_ADM_LEFT_DISPATCHED);
    dp_adm_metrics_depth(m, "llama", DP_PRIO_LOW, -1);
    dp_adm_metrics_left(m, DP_ADM_LEFT_TIMEOUT);
    dp_adm_metrics_depth(m, "llama", DP_PRIO_LOW, -1);
    assert_int_equal(dp_adm_metrics_model_depth(m, "llama"), 3);
    struct buf page = BUF_INIT(1 << 16);
    page_of(m, &page);
    const char *p = page.data;
    assert_non_null(strstr(p, "switchyard_admission_queued_total 5\n"));
    assert_non_null(strstr(p, "switchyard_admission_queue_left_total{reason=\"dispatched\"} 1\n"));
    assert_non_null(strstr(p, "switchyard_admission_queue_left_total{reason=\"timeout\"} 1\n"));
    assert_non_null(
        strstr(p, "switchyard_admission_queue_depth{model=\"llama\",band=\"low\"} 3\n"));
    buf_fini(&page);
    dp_adm_metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_histogram),
        cmocka_unit_test(test_queue_conservation_on_page),
    };
    return cmocka_run_group_tests_name("dp_adm_metrics", tests, NULL, NULL);
}
