/*
 * Unit tests of the benchmark's pooled percentiles (tests/bench/pooled.c):
 * reading a run's CSV (only successful requests sent inside the window),
 * refusing other files, the pooled percentile being the percentile of all
 * runs' samples together, and the bootstrap interval of a ratio (exact
 * when every run is the same, around the ratio when runs differ, fixed
 * for a seed).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/bench/pooled.c"

/* A temporary file holding text; its path in path[64]. */
static void write_tmp(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/sy-pooled-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* A run of n samples start, start + step, ... (malloc'd, owned by r). */
static void make_run(struct pl_run *r, double start, double step, size_t n)
{
    double *v = malloc(n * sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[n - 1 - i] = start + step * (double)i; /* unsorted on purpose */
    pl_run_adopt(r, v, n);
}

static void test_read_csv_window_and_failures(void **state)
{
    (void)state;
    char path[64];
    write_tmp(path, "index,group,turn,start_s,ttft_ms,e2e_ms,status,curl_rc,output_tokens,ok,sent\n"
                    "0,0,0,1.000000,500.000,600.000,200,0,16,1,1\n" /* before the window */
                    "1,0,1,1.500000,30.000,90.000,200,0,16,1,1\n"
                    "2,1,0,2.000000,10.000,70.000,200,0,16,1,1\n"
                    "3,1,1,2.500000,900.000,0.000,503,0,0,0,1\n" /* failed */
                    "4,2,0,3.000000,20.000,80.000,200,0,16,1,1\n"
                    "5,2,1,5.500000,700.000,750.000,200,0,16,1,1\n"); /* at the end: out */
    struct pl_run r;
    assert_int_equal(pl_read_csv(path, 1.5, 5.5, &r), 0);
    assert_int_equal(r.n, 3);
    assert_true(r.v[0] == 10 && r.v[1] == 20 && r.v[2] == 30); /* sorted */
    pl_run_free(&r);
    unlink(path);

    write_tmp(path, "name value\nttft 3\n");
    assert_int_equal(pl_read_csv(path, 0, 10, &r), -EINVAL);
    unlink(path);
    write_tmp(path, "start_s,ttft_ms,ok\n1.0,abc,1\n");
    assert_int_equal(pl_read_csv(path, 0, 10, &r), -EINVAL);
    unlink(path);
    assert_int_equal(pl_read_csv("/nonexistent/run.csv", 0, 10, &r), -ENOENT);
}

static void test_pooled_pct_is_over_all_samples(void **state)
{
    (void)state;
    /* Run 0: 1..100, run 1: 101..200. Together 1..200: p50 = 100, p99 = 198,
     * where the median of the runs' own p99s would be 149.5. */
    struct pl_run runs[2];
    make_run(&runs[0], 1, 1, 100);
    make_run(&runs[1], 101, 1, 100);
    assert_true(pl_pooled_pct(runs, 2, 50) == 100);
    assert_true(pl_pooled_pct(runs, 2, 99) == 198);
    assert_true(pl_pooled_pct(runs, 1, 99) == 99);
    struct pl_run none = {0};
    assert_true(isnan(pl_pooled_pct(&none, 1, 99)));
    pl_run_free(&runs[0]);
    pl_run_free(&runs[1]);
}

static void test_bootstrap_ratio(void **state)
{
    (void)state;
    /* Every run alike: every resample has the same p99, the interval is the ratio. */
    struct pl_run a[4], b[4];
    for (int i = 0; i < 4; i++) {
        make_run(&a[i], 2, 2, 100); /* 2, 4, ..., 200 */
        make_run(&b[i], 1, 1, 100); /* 1, 2, ..., 100 */
    }
    double lo = 0, hi = 0;
    assert_int_equal(pl_bootstrap_ratio(a, 4, b, 4, 99, 500, 7, &lo, &hi), 0);
    assert_true(lo == 2.0 && hi == 2.0);
    for (int i = 0; i < 4; i++) {
        pl_run_free(&a[i]);
        pl_run_free(&b[i]);
    }

    /* Runs that differ (one slow run in each set): the interval is wide and
     * holds the pooled ratio; the same seed gives the same interval. */
    make_run(&a[0], 1, 1, 100);
    make_run(&a[1], 1, 1, 100);
    make_run(&a[2], 1, 10, 100);
    make_run(&b[0], 1, 1, 100);
    make_run(&b[1], 1, 5, 100);
    make_run(&b[2], 1, 1, 100);
    double ratio = pl_pooled_pct(a, 3, 99) / pl_pooled_pct(b, 3, 99);
    assert_int_equal(pl_bootstrap_ratio(a, 3, b, 3, 99, 2000, 1, &lo, &hi), 0);
    assert_true(lo < ratio && ratio < hi);
    assert_true(lo < 1.0 && hi > 1.0);
    double lo2, hi2;
    assert_int_equal(pl_bootstrap_ratio(a, 3, b, 3, 99, 2000, 1, &lo2, &hi2), 0);
    assert_true(lo2 == lo && hi2 == hi);
    assert_int_equal(pl_bootstrap_ratio(a, 0, b, 3, 99, 10, 1, &lo, &hi), -EINVAL);
    for (int i = 0; i < 3; i++) {
        pl_run_free(&a[i]);
        pl_run_free(&b[i]);
    }
}

/*
 * Runs paired by arrival plan: pair i's tail is set by its plan (step 1 to
 * 6), and under the same plan policy A is always 0.8x policy B. Unpaired,
 * the plans' spread swamps that and the interval spans 1; paired, every
 * draw compares like with like and the interval is 0.8 exactly.
 */
static void test_bootstrap_ratio_paired(void **state)
{
    (void)state;
    struct pl_run a[6], b[6];
    for (int i = 0; i < 6; i++) {
        make_run(&a[i], 0.8, 0.8 * (i + 1), 100);
        make_run(&b[i], 1, i + 1, 100);
    }
    double lo = 0, hi = 0;
    assert_int_equal(pl_bootstrap_ratio_paired(a, b, 6, 99, 2000, 1, &lo, &hi), 0);
    assert_float_equal(lo, 0.8, 1e-9);
    assert_float_equal(hi, 0.8, 1e-9);
    assert_int_equal(pl_bootstrap_ratio(a, 6, b, 6, 99, 2000, 1, &lo, &hi), 0);
    assert_true(lo < 0.8 && hi > 1.0);
    assert_int_equal(pl_bootstrap_ratio_paired(a, b, 0, 99, 10, 1, &lo, &hi), -EINVAL);
    for (int i = 0; i < 6; i++) {
        pl_run_free(&a[i]);
        pl_run_free(&b[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_csv_window_and_failures),
        cmocka_unit_test(test_pooled_pct_is_over_all_samples),
        cmocka_unit_test(test_bootstrap_ratio),
        cmocka_unit_test(test_bootstrap_ratio_paired),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
