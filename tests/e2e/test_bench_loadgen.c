/*
 * End-to-end tests of the benchmark's load generator (tests/bench/loadgen.c)
 * against a real mock worker: a sequential_turns plan (workload.h) is sent
 * as agents would send it — a conversation's turn t+1 only once turn t has
 * completed and its think time has passed, conversations not before their
 * arrival, never more than max_concurrency at once, nothing after stop_s —
 * and an open-loop plan still sends every request at its arrival time.
 *
 * The load generator's sources are included (they are not in any archive
 * the e2e tests link). Timing assertions are lower bounds or orderings of
 * the generator's own clock readings, so a slow machine cannot make them
 * flaky.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "tests/bench/loadgen.c"
#include "tests/bench/workload.c"
#include "tests/e2e/harness.h"

/* Clock readings of one run are compared with this much slack (rounding). */
#define SLACK_S 0.0005

static void build_plan(const char *yaml, struct wl_plan *plan)
{
    struct wl_spec spec;
    char err[256] = "";
    int rc = wl_parse_string(yaml, strlen(yaml), "t.yaml", false, &spec, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_int_equal(wl_plan_build(&spec, plan), 0);
}

static void start_mock(struct h_mock *m)
{
    /* Each request takes a few ms: 4 tokens 5 ms apart. */
    assert_int_equal(h_mock_start(m, "--model", "mock", "--tpot-ms", "5", NULL), 0);
}

static void test_sequential_turns(void **state)
{
    (void)state;
    struct h_mock m;
    start_mock(&m);
    /* 20 conversations a second offered, at most 2 at once, each 4 turns
     * with 50 ms think times: the slots are the bottleneck, so
     * conversations wait for one. */
    struct wl_plan plan;
    build_plan("name: t\nkind: multi_turn\nsequential_turns: true\nturns: 4\nthink_ms: 50\n"
               "max_concurrency: 2\nduration_s: 1.5\nsystem_tokens: 32\nquestion_tokens: 8\n"
               "output_tokens: 4\nrate: 80\nseed: 7\n",
               &plan);
    size_t n_conv = plan.n / 4;
    assert_true(n_conv > 10);
    struct lg_result *res = calloc(plan.n, sizeof(*res));
    assert_non_null(res);
    double wall = 0;
    assert_int_equal(lg_replay(&plan, m.url, NULL, res, &wall), 0);

    size_t sent = 0, held = 0;
    double *from = calloc(n_conv, sizeof(*from)), *to = calloc(n_conv, sizeof(*to));
    assert_non_null(from);
    assert_non_null(to);
    for (size_t c = 0; c < n_conv; c++) {
        from[c] = to[c] = -1;
        for (unsigned t = 0; t < 4; t++) {
            size_t i = c * 4 + t;
            const struct lg_result *r = &res[i];
            if (!r->sent) {
                /* Once a turn is unsent, so are the later ones. */
                for (unsigned u = t; u < 4; u++)
                    assert_false(res[c * 4 + u].sent);
                break;
            }
            sent++;
            assert_true(r->ok);
            assert_int_equal(r->output_tokens, 4);
            /* Nothing is sent after the stop. */
            assert_true(r->start_s < plan.stop_s + SLACK_S);
            if (t == 0) {
                assert_true(r->start_s >= plan.req[i].at_s - SLACK_S);
                held += r->start_s > plan.req[i].at_s + 0.02;
                from[c] = r->start_s;
            } else {
                /* Turn t only after turn t-1 completed and the think time passed. */
                const struct lg_result *p = &res[i - 1];
                assert_true(plan.req[i].think_s >= 0);
                assert_true(r->start_s >= p->start_s + p->e2e_s + plan.req[i].think_s - SLACK_S);
            }
            to[c] = r->start_s + r->e2e_s;
        }
    }
    assert_true(sent > 8);
    assert_true(held > 0); /* conversations waited for a slot */
    /* At most 2 conversations at once: a conversation holds its slot from
     * its first turn's start to its last sent turn's end. */
    for (size_t c = 0; c < n_conv; c++) {
        if (from[c] < 0)
            continue;
        size_t overlapping = 0;
        for (size_t d = 0; d < n_conv; d++)
            if (from[d] >= 0 && from[d] <= from[c] + SLACK_S && to[d] > from[c] + SLACK_S)
                overlapping++;
        if (overlapping > 2)
            fail_msg("conversation %zu started while %zu ran", c, overlapping - 1);
    }
    free(from);
    free(to);
    free(res);
    wl_plan_fini(&plan);
}

static void test_open_loop_unchanged(void **state)
{
    (void)state;
    struct h_mock m;
    start_mock(&m);
    /* Turn-major open loop: every turn at its own arrival time, sent
     * whether or not the conversation's previous turn is done. */
    struct wl_plan plan;
    build_plan("name: o\nkind: multi_turn\nconversations: 3\nturns: 4\nsystem_tokens: 32\n"
               "question_tokens: 8\noutput_tokens: 4\nrate: 200\nseed: 7\n",
               &plan);
    assert_false(plan.sequential);
    struct lg_result *res = calloc(plan.n, sizeof(*res));
    assert_non_null(res);
    double wall = 0;
    assert_int_equal(lg_replay(&plan, m.url, NULL, res, &wall), 0);
    size_t overlapped = 0;
    long opened = 0;
    for (size_t i = 0; i < plan.n; i++) {
        assert_true(res[i].sent);
        assert_true(res[i].ok);
        assert_true(res[i].start_s >= plan.req[i].at_s - SLACK_S);
        /* The client's breakdown is in order: the request written, then its
         * first byte, then done; curl's own clock is inside that. */
        const struct lg_result *r = &res[i];
        assert_true(r->sent_s >= 0 && r->sent_s <= r->ttft_s + SLACK_S);
        assert_true(r->ttft_s <= r->e2e_s + SLACK_S);
        assert_true(r->connect_s >= 0 && r->curl_total_s > 0);
        assert_true(r->curl_total_s <= r->e2e_s + SLACK_S);
        assert_true(r->new_conns == 0 || r->new_conns == 1);
        opened += r->new_conns;
        if (i >= 3 && res[i].start_s < res[i - 3].start_s + res[i - 3].e2e_s)
            overlapped++;
    }
    /* At 200/s a turn is due 15 ms after the conversation's previous one,
     * which takes longer than that: the open loop does not wait. */
    assert_true(overlapped > 0);
    /* The first request opened a connection; overlapping ones need their own. */
    assert_true(opened >= 2 && opened <= (long)plan.n);
    free(res);
    wl_plan_fini(&plan);
}

/* --url A,B,C: requests go to the routers round robin (the mocks' own
 * request counters), and a bad list is refused. */
static void test_urls_round_robin(void **state)
{
    (void)state;
    struct h_mock m[3];
    for (int i = 0; i < 3; i++)
        start_mock(&m[i]);
    struct wl_plan plan;
    build_plan("name: r\nkind: multi_turn\nconversations: 3\nturns: 3\nsystem_tokens: 32\n"
               "question_tokens: 8\noutput_tokens: 4\nrate: 100\nseed: 7\n",
               &plan);
    struct lg_result *res = calloc(plan.n, sizeof(*res));
    assert_non_null(res);
    char urls[256];
    snprintf(urls, sizeof(urls), "%s,%s,%s", m[0].url, m[1].url, m[2].url);
    double wall = 0;
    assert_int_equal(lg_replay(&plan, urls, NULL, res, &wall), 0);
    for (size_t i = 0; i < plan.n; i++)
        assert_true(res[i].ok);
    for (int i = 0; i < 3; i++) {
        long long n = -1;
        assert_int_equal(h_mock_stat_int(m[i].url, "requests_total", &n), 0);
        assert_int_equal(n, (long long)plan.n / 3);
    }
    assert_int_equal(lg_replay(&plan, "", NULL, res, &wall), -EINVAL);
    snprintf(urls, sizeof(urls), "%s,,%s", m[0].url, m[1].url);
    assert_int_equal(lg_replay(&plan, urls, NULL, res, &wall), -EINVAL);
    free(res);
    wl_plan_fini(&plan);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        H_TEST(test_sequential_turns),
        H_TEST(test_open_loop_unchanged),
        H_TEST(test_urls_round_robin),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
