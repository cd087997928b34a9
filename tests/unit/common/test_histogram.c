/*
 * Unit tests of common/histogram.c: values land in the first bucket whose
 * bound they do not exceed (a value equal to a bound included), above every
 * bound in +Inf, negative ones at 0; the page has cumulative buckets, the
 * sum and the count; observers on several threads lose nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <pthread.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/histogram.h"

static const double bounds[] = {0.001, 0.01, 0.1};

static void page_of(struct histogram *h, struct buf *page)
{
    struct prom_writer w;
    prom_init(&w, page);
    assert_int_equal(prom_family(&w, "t_seconds", PROM_HISTOGRAM, "test"), 0);
    assert_int_equal(histogram_write(h, &w, NULL, 0), 0);
    assert_int_equal(prom_error(&w), 0);
    assert_int_equal(buf_append(page, "", 1), 0); /* NUL-terminated for strstr */
}

static void test_buckets_sum_count(void **state)
{
    (void)state;
    struct histogram h;
    histogram_init(&h, bounds, 3);
    histogram_observe(&h, 0.0005); /* <= 0.001 */
    histogram_observe(&h, 0.001);  /* a bound is its own bucket's */
    histogram_observe(&h, 0.05);   /* <= 0.1 */
    histogram_observe(&h, 2.0);    /* +Inf */
    histogram_observe(&h, -1.0);   /* counted as 0 */
    assert_int_equal(histogram_count(&h), 5);
    struct buf page = BUF_INIT(1 << 12);
    page_of(&h, &page);
    const char *p = page.data;
    assert_non_null(strstr(p, "t_seconds_bucket{le=\"0.001\"} 3\n"));
    assert_non_null(strstr(p, "t_seconds_bucket{le=\"0.01\"} 3\n"));
    assert_non_null(strstr(p, "t_seconds_bucket{le=\"0.1\"} 4\n"));
    assert_non_null(strstr(p, "t_seconds_bucket{le=\"+Inf\"} 5\n"));
    assert_non_null(strstr(p, "t_seconds_count 5\n"));
    assert_non_null(strstr(p, "t_seconds_sum 2.051500\n"));
    buf_fini(&page);
}

static struct histogram shared;

static void *observer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100000; i++)
        histogram_observe(&shared, (i % 2) ? 0.005 : 0.5);
    return NULL;
}

static void test_concurrent_observers(void **state)
{
    (void)state;
    histogram_init(&shared, bounds, 3);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, observer, NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct buf page = BUF_INIT(1 << 12);
    page_of(&shared, &page);
    assert_non_null(strstr(page.data, "t_seconds_bucket{le=\"0.01\"} 200000\n"));
    assert_non_null(strstr(page.data, "t_seconds_count 400000\n"));
    assert_int_equal(histogram_count(&shared), 400000);
    assert_non_null(strstr(page.data, "t_seconds_sum 101000.000000\n"));
    buf_fini(&page);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_sum_count),
        cmocka_unit_test(test_concurrent_observers),
    };
    return cmocka_run_group_tests_name("common_histogram", tests, NULL, NULL);
}
