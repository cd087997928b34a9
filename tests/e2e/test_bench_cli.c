/*
 * End-to-end tests of the benchmark's command line (build/switchyard-bench)
 * as make bench uses it for the P/D section: `--seed` replaces a
 * workload's seed (a repetition draws other arrivals; the workload's own
 * seed gives the plan it always gave), and `pooled` reads runs' CSVs and
 * prints pooled percentiles and the two sets' p99 ratio with its interval
 * (paired or not).
 * Nothing is started: the binary runs and exits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/e2e/harness.h"

/* Runs `switchyard-bench ARGS` (a shell word list), its stdout into out;
 * returns its exit status. */
static int bench(const char *args, char *out, size_t len)
{
    char bin[512], cmd[2048];
    assert_int_equal(h_bin_path("switchyard-bench", bin, sizeof(bin)), 0);
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>/dev/null", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The value of "name value" line `name` in out, or NAN. */
static double figure(const char *out, const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *at = strstr(out, key);
    if (at == NULL && strncmp(out, key + 1, strlen(key + 1)) == 0)
        at = out - 1;
    return at == NULL ? NAN : strtod(at + strlen(key), NULL);
}

static void test_seed_replaces_the_workloads(void **state)
{
    (void)state;
    static const char wl[] =
        "plan --workload tests/bench/workloads/pd_agentic_shared.yaml --rate 96";
    char own[4096], five[4096], six[4096], args[256];
    assert_int_equal(bench(wl, own, sizeof(own)), 0);
    snprintf(args, sizeof(args), "%s --seed 5", wl); /* the file's own seed */
    assert_int_equal(bench(args, five, sizeof(five)), 0);
    snprintf(args, sizeof(args), "%s --seed 6", wl);
    assert_int_equal(bench(args, six, sizeof(six)), 0);
    assert_string_equal(own, five);
    assert_non_null(strstr(six, " seed=6"));
    /* Other arrivals: the plan's last arrival moves. */
    assert_true(isfinite(figure(six, "duration_s")));
    assert_true(figure(six, "duration_s") != figure(five, "duration_s"));
    snprintf(args, sizeof(args), "%s --seed x", wl);
    assert_int_equal(bench(args, six, sizeof(six)), 2);
    snprintf(args, sizeof(args), "%s --seed -1", wl);
    assert_int_equal(bench(args, six, sizeof(six)), 2);
}

static void test_duration_replaces_the_workloads(void **state)
{
    (void)state;
    static const char wl[] =
        "plan --workload tests/bench/workloads/pd_agentic_shared.yaml --rate 96";
    char own[4096], longer[4096], args[256];
    assert_int_equal(bench(wl, own, sizeof(own)), 0);
    snprintf(args, sizeof(args), "%s --duration-s 20.5", wl);
    assert_int_equal(bench(args, longer, sizeof(longer)), 0);
    assert_non_null(strstr(longer, " duration_s=20.5 "));
    /* Conversations keep starting until 20.5 s: the plan is longer and larger. */
    assert_true(figure(own, "duration_s") < 5.5);
    assert_true(figure(longer, "duration_s") > 20 && figure(longer, "duration_s") < 20.5);
    assert_true(figure(longer, "requests") > 3 * figure(own, "requests"));
    /* Not at or below the warmup, not a number, not for an open-loop workload. */
    snprintf(args, sizeof(args), "%s --duration-s 1.5", wl);
    assert_int_equal(bench(args, longer, sizeof(longer)), 2);
    snprintf(args, sizeof(args), "%s --duration-s x", wl);
    assert_int_equal(bench(args, longer, sizeof(longer)), 2);
    assert_int_equal(bench("plan --workload tests/bench/workloads/multi_turn.yaml --duration-s 30",
                           longer, sizeof(longer)),
                     2);
}

static const char header[] =
    "index,group,turn,start_s,ttft_ms,e2e_ms,status,curl_rc,output_tokens,ok,sent\n";

/* A run's CSV: n requests in the window [1, 5) with TTFT base + i ms, one
 * before the window and one failed (neither counted). */
static void write_run(const char *name, double base, int n, char *path, size_t len)
{
    char text[8192];
    size_t at =
        (size_t)snprintf(text, sizeof(text), "%s0,0,0,0.5,9999,9999,200,0,16,1,1\n", header);
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%d,0,1,%.3f,%.3f,1,200,0,16,1,1\n",
                               i + 1, 1.0 + 0.01 * i, base + i);
    snprintf(text + at, sizeof(text) - at, "%d,0,1,2.0,8888,1,503,0,0,0,1\n", n + 1);
    assert_int_equal(h_write_file(name, text, path, len), 0);
}

static void test_pooled(void **state)
{
    (void)state;
    char a1[512], a2[512], b1[512], b2[512], args[4096], out[4096];
    write_run("a1.csv", 1, 100, a1, sizeof(a1));   /* 1..100 ms */
    write_run("a2.csv", 101, 100, a2, sizeof(a2)); /* 101..200 ms */
    write_run("b1.csv", 2, 100, b1, sizeof(b1));   /* twice a's */
    write_run("b2.csv", 202, 100, b2, sizeof(b2));
    snprintf(args, sizeof(args), "pooled --window 1 5 '%s' '%s'", a1, a2);
    assert_int_equal(bench(args, out, sizeof(out)), 0);
    assert_true(figure(out, "a_runs") == 2);
    assert_true(figure(out, "a_n") == 200);
    assert_true(figure(out, "a_p50_ms") == 100);
    assert_true(figure(out, "a_p99_ms") == 198);
    assert_true(isnan(figure(out, "ratio")));

    snprintf(args, sizeof(args), "pooled --window 1 5 '%s' '%s' -- '%s' '%s'", a1, a2, b1, b2);
    assert_int_equal(bench(args, out, sizeof(out)), 0);
    assert_true(figure(out, "b_p99_ms") == 299);
    double r = figure(out, "ratio"), lo = figure(out, "ratio_lo"), hi = figure(out, "ratio_hi");
    assert_true(r > 0.66 && r < 0.67); /* 198 / 299 */
    assert_true(lo <= r && r <= hi);
    assert_true(isnan(figure(out, "paired_lo")));

    /* Paired (a1 with b1, a2 with b2): a resample never sets a1 against
     * b2, whose ratio (0.5) bounds the unpaired interval; the paired one
     * lies within [198/299, 199/200]. */
    snprintf(args, sizeof(args), "pooled --window 1 5 --paired '%s' '%s' -- '%s' '%s'", a1, a2, b1,
             b2);
    assert_int_equal(bench(args, out, sizeof(out)), 0);
    assert_true(figure(out, "ratio") == r);
    double plo = figure(out, "paired_lo"), phi = figure(out, "paired_hi");
    assert_true(plo >= 0.66 && phi <= 0.995 && plo <= r && r <= phi);
    assert_true(lo < 0.6 && hi > 1.0); /* the unpaired one is wider */
    snprintf(args, sizeof(args), "pooled --window 1 5 --paired '%s' '%s' -- '%s'", a1, a2, b1);
    assert_int_equal(bench(args, out, sizeof(out)), 2);

    /* Bad input: exit 2 for usage, 1 for a file that is not a run's CSV. */
    assert_int_equal(bench("pooled", out, sizeof(out)), 2);
    snprintf(args, sizeof(args), "pooled --window 5 1 '%s'", a1);
    assert_int_equal(bench(args, out, sizeof(out)), 2);
    snprintf(args, sizeof(args), "pooled --window 1 5 '%s' --", a1);
    assert_int_equal(bench(args, out, sizeof(out)), 2);
    char bad[512];
    assert_int_equal(h_write_file("bad.csv", "name value\n", bad, sizeof(bad)), 0);
    snprintf(args, sizeof(args), "pooled --window 1 5 '%s'", bad);
    assert_int_equal(bench(args, out, sizeof(out)), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_seed_replaces_the_workloads),
        H_TEST(test_duration_replaces_the_workloads),
        H_TEST(test_pooled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
