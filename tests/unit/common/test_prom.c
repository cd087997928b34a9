/*
 * Unit tests of the Prometheus writer (common/prom.c): HELP/TYPE written
 * once per family even when prom_family is called per sample; a family
 * reopened after another is refused; label values escape backslash, quote
 * and newline; histograms write cumulative buckets, +Inf, _sum, _count;
 * doubles spell NaN/Inf and round-trip; a page past the buffer's cap fails
 * as a whole; a sample without a family is refused.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/prom.c"

static void test_family_once_and_samples(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(4096);
    struct prom_writer w;
    prom_init(&w, &b);
    struct prom_label l[2] = {{"worker", "w1"}, {"result", "ok"}};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(prom_family(&w, "sy_checks", PROM_COUNTER, "Checks by worker."), 0);
        assert_int_equal(prom_sample_u64(&w, "_total", l, 2, 7 + (uint64_t)i), 0);
    }
    assert_int_equal(prom_family(&w, "sy_up", PROM_GAUGE, "Up."), 0);
    assert_int_equal(prom_sample_i64(&w, NULL, NULL, 0, -3), 0);
    assert_int_equal(prom_error(&w), 0);
    assert_string_equal(b.data, "# HELP sy_checks Checks by worker.\n"
                                "# TYPE sy_checks counter\n"
                                "sy_checks_total{worker=\"w1\",result=\"ok\"} 7\n"
                                "sy_checks_total{worker=\"w1\",result=\"ok\"} 8\n"
                                "# HELP sy_up Up.\n"
                                "# TYPE sy_up gauge\n"
                                "sy_up -3\n");
    /* Going back to a family that was left: refused, sticky. */
    assert_int_equal(prom_family(&w, "sy_checks", PROM_COUNTER, "x"), -EEXIST);
    assert_int_equal(prom_sample_u64(&w, NULL, NULL, 0, 1), -EEXIST);
    assert_int_equal(prom_error(&w), -EEXIST);
    buf_fini(&b);
}

static void test_label_escaping(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(4096);
    struct prom_writer w;
    prom_init(&w, &b);
    assert_int_equal(prom_family(&w, "m", PROM_GAUGE, "back\\slash\nnewline"), 0);
    struct prom_label l = {"id", "a\\b\"c\nd"};
    assert_int_equal(prom_sample_u64(&w, "", &l, 1, 1), 0);
    assert_string_equal(b.data, "# HELP m back\\\\slash\\nnewline\n"
                                "# TYPE m gauge\n"
                                "m{id=\"a\\\\b\\\"c\\nd\"} 1\n");
    buf_fini(&b);
}

static void test_histogram(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(4096);
    struct prom_writer w;
    prom_init(&w, &b);
    static const double bounds[] = {0.005, 0.1, 2.5};
    const uint64_t counts[] = {1, 0, 2, 4};
    struct prom_label l = {"phase", "decode"};
    assert_int_equal(prom_family(&w, "d_seconds", PROM_HISTOGRAM, "D."), 0);
    assert_int_equal(prom_histogram(&w, &l, 1, bounds, counts, 3, 12.25), 0);
    assert_int_equal(prom_histogram(&w, NULL, 0, bounds, counts, 3, 0.5), 0);
    assert_string_equal(b.data, "# HELP d_seconds D.\n"
                                "# TYPE d_seconds histogram\n"
                                "d_seconds_bucket{phase=\"decode\",le=\"0.005\"} 1\n"
                                "d_seconds_bucket{phase=\"decode\",le=\"0.1\"} 1\n"
                                "d_seconds_bucket{phase=\"decode\",le=\"2.5\"} 3\n"
                                "d_seconds_bucket{phase=\"decode\",le=\"+Inf\"} 7\n"
                                "d_seconds_sum{phase=\"decode\"} 12.250000\n"
                                "d_seconds_count{phase=\"decode\"} 7\n"
                                "d_seconds_bucket{le=\"0.005\"} 1\n"
                                "d_seconds_bucket{le=\"0.1\"} 1\n"
                                "d_seconds_bucket{le=\"2.5\"} 3\n"
                                "d_seconds_bucket{le=\"+Inf\"} 7\n"
                                "d_seconds_sum 0.500000\n"
                                "d_seconds_count 7\n");
    /* A histogram in a gauge family is a caller bug. */
    assert_int_equal(prom_family(&w, "g", PROM_GAUGE, "G."), 0);
    assert_int_equal(prom_histogram(&w, NULL, 0, bounds, counts, 3, 0), -EINVAL);
    buf_fini(&b);
}

static void test_doubles(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(4096);
    struct prom_writer w;
    prom_init(&w, &b);
    assert_int_equal(prom_family(&w, "f", PROM_GAUGE, "F."), 0);
    prom_sample_f64(&w, NULL, NULL, 0, 0.1);
    prom_sample_f64(&w, NULL, NULL, 0, NAN);
    prom_sample_f64(&w, NULL, NULL, 0, -INFINITY);
    prom_sample_f64(&w, NULL, NULL, 0, 1.0 / 3.0);
    prom_sample_text(&w, NULL, NULL, 0, "3.0");
    assert_int_equal(prom_error(&w), 0);
    assert_string_equal(b.data, "# HELP f F.\n# TYPE f gauge\n"
                                "f 0.1\nf NaN\nf -Inf\nf 0.3333333333333333\nf 3.0\n");
    buf_fini(&b);
}

static void test_errors(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(40);
    struct prom_writer w;
    prom_init(&w, &b);
    /* No family open yet. */
    assert_int_equal(prom_sample_u64(&w, NULL, NULL, 0, 1), -EINVAL);
    prom_init(&w, &b);
    assert_int_equal(prom_family(&w, "bad name", PROM_GAUGE, "x"), -EINVAL);
    prom_init(&w, &b);
    assert_int_equal(prom_family(&w, "ok", PROM_TYPE_NONE, "x"), -EINVAL);
    /* Past the buffer's cap: the page fails as a whole. */
    prom_init(&w, &b);
    assert_int_equal(prom_family(&w, "a_rather_long_metric_name", PROM_GAUGE, "Long help."),
                     -E2BIG);
    assert_int_equal(prom_error(&w), -E2BIG);
    buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_once_and_samples),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
