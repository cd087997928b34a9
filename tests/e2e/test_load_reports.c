/*
 * End-to-end tests of worker-reported load (docs/routing.md, "Two truths"):
 * two router nodes (two control planes, two data planes, two segments) in
 * front of the same three mock workers. Node A holds streams on worker 1;
 * node B sees them only through worker 1's /metrics, scraped by B's own
 * control plane.
 *
 *  - least_load and cache_aware on node B avoid worker 1 within two scrape
 *    intervals of the streams being held, and use it again once they end;
 *  - a worker with data-parallel engines: its series are summed;
 *  - a worker whose /metrics answers garbage or hangs: its report on B goes
 *    stale, B routes on its own counts again (worker 1 is picked), no
 *    request fails, and B's switchyard_load_reports_stale_total{worker="w1"}
 *    moves; once /metrics is back, B avoids worker 1 again;
 *  - a worker that reports itself idle (0 running, 0 waiting: the requests
 *    this node counts on it, held by a lease holder acting as another of
 *    the node's data planes, never reached it) while this node holds 3
 *    there: after several reports were read, GET /workers still shows
 *    load 3 and 3 in the holder's inflight_by_dataplane, effective_load and
 *    the data plane's effective-load gauge are not below 3, and least_load
 *    sends nothing there (invariant 10: reports never write a lease).
 *
 * Mutation-verified: with the report ignored in shm_el_combine (effective =
 * own) every test fails; with the forwarder handing policies the own count
 * (the admin API still combining) every test fails on its routing
 * assertions; with the staleness check removed the stale test fails; with
 * the scraper "correcting" this node's count from the report
 * (tests/mutants/report-writes-lease.mutant) the idle-report test fails.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "shm/registry.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_holder.h"
#include "tests/e2e/harness_routed.h"

#define SCRAPE_INTERVAL_MS 200
#define HELD               4 /* streams node A holds on worker 1 */
#define WAIT_MS            10000

/* Both nodes scrape every 200 ms; a report older than 600 ms is stale. */
static const char load_reports_yaml[] = "load_reports:\n"
                                        "  interval: 200ms\n"
                                        "  timeout: 300ms\n"
                                        "  stale_after: 600ms\n";

/* A second router node over fleet a's workers: its own segment, admin
 * socket and ports, the same workers (ids w1..w3). */
struct node {
    struct h_config cfg;
    struct h_proc *cp, *dp;
    char base[64];
    char admin[64];
};

static void node_start(struct node *b, const struct h_fleet *a, const char *policy,
                       const char *policy_extra)
{
    memset(b, 0, sizeof(*b));
    for (size_t i = 0; i < a->n; i++)
        assert_int_equal(
            h_config_add_worker(&b->cfg, a->mock[i].url, a->cfg.workers[i].id, H_FLEET_MODEL, NULL),
            0);
    b->cfg.policy = policy;
    b->cfg.policy_extra = policy_extra;
    b->cfg.controlplane_extra = load_reports_yaml;
    b->cfg.dataplane_extra = "debug_headers: true\n";
    assert_int_equal(h_config_write(&b->cfg, "node-b.yaml"), 0);
    assert_int_equal(h_start_controlplane(b->cfg.path, &b->cp), 0);
    assert_int_equal(h_url(b->admin, sizeof(b->admin), b->cfg.admin_port, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/workers", b->admin);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
    assert_int_equal(h_start_dataplane(b->cfg.path, &b->dp), 0);
    assert_int_equal(h_url(b->base, sizeof(b->base), b->cfg.dataplane_port, NULL), 0);
    snprintf(url, sizeof(url), "%s/health", b->base);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
}

/* Node A: round robin on one event loop, so every third request is w1's. */
static void node_a_start(struct h_fleet *a)
{
    h_fleet_start(a, &(struct h_fleet_opts){
                         .n = 3,
                         .policy = "round_robin",
                         .dataplane_extra = "threads: 1\n",
                         .controlplane_extra = load_reports_yaml,
                     });
}

/* Holds HELD streams on worker 1 through node A (the rest of the round
 * robin goes to w2 and w3 and ends at once). */
static void hold_on_w1(struct h_fleet *a, struct h_async **held)
{
    assert_int_equal(h_mock_faults(a->mock[0].url, "{\"stall_after_chunks\":1,\"stall_ms\":60000}"),
                     0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", a->base);
    static const char body[] = "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"held stream\","
                               "\"stream\":true,\"max_tokens\":64}";
    size_t n = 0;
    for (int i = 0; i < 3 * HELD; i++) {
        struct h_async *r;
        assert_int_equal(h_async_start(url, body, &(struct h_async_opts){.timeout_ms = 120000}, &r),
                         0);
        assert_int_equal(h_async_wait_headers(r, WAIT_MS), 0);
        if (i % 3 == 0)
            held[n++] = r; /* round robin starts at w1 or not: checked below */
        else
            assert_int_equal(h_async_wait(r, WAIT_MS), 0);
    }
    assert_int_equal(h_wait_mock_stat(a->mock[0].url, "running", HELD, WAIT_MS), 0);
    /* Later requests to w1 (node B's) are served normally. */
    assert_int_equal(h_mock_faults(a->mock[0].url, "{\"stall_ms\":0,\"stall_after_chunks\":0}"), 0);
}

static void release_w1(struct h_fleet *a, struct h_async **held)
{
    for (int i = 0; i < HELD; i++) {
        h_async_destroy(held[i]);
        held[i] = NULL;
    }
    assert_int_equal(h_wait_mock_stat(a->mock[0].url, "running", 0, WAIT_MS), 0);
}

/* w1 in node B's GET /workers: effective_load, and the report's age (-1 = none). */
static long long b_worker_field(const struct node *b, const char *id, const char *field)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/workers", b->admin);
    struct h_resp r = {0};
    long long v = -2;
    if (h_http_get(url, &r) == 0 && r.status == 200) {
        json_t *j = h_resp_json(&r);
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(j, "workers"), i, w)
        {
            if (strcmp(json_string_value(json_object_get(w, "id")), id) != 0)
                continue;
            if (strcmp(field, "age_ms") == 0) {
                json_t *rep = json_object_get(w, "reported");
                v = json_is_object(rep) ? json_integer_value(json_object_get(rep, "age_ms")) : -1;
            } else {
                v = json_integer_value(json_object_get(w, field));
            }
        }
        json_decref(j);
    }
    h_resp_fini(&r);
    return v;
}

struct wait_field {
    const struct node *b;
    const char *field;
    long long min, max;
};

static bool field_in_range(void *arg)
{
    struct wait_field *w = arg;
    long long v = b_worker_field(w->b, "w1", w->field);
    return v >= w->min && v <= w->max;
}

/* One non-streaming request through node B: must succeed; returns 1..3. */
static int b_route(const struct node *b, const char *prompt, char *decision, size_t dlen)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"%s\",\"max_tokens\":1}", prompt);
    char worker[64];
    h_routed_post(b->base, "/v1/completions", body, worker, sizeof(worker), decision, dlen);
    assert_true(worker[0] == 'w' && worker[1] >= '1' && worker[1] <= '3');
    return worker[1] - '0';
}

/* How many of n requests through node B landed on w1. */
static int b_count_w1(const struct node *b, int n)
{
    int on_w1 = 0;
    for (int i = 0; i < n; i++) {
        char prompt[64];
        snprintf(prompt, sizeof(prompt), "short request %d", i);
        on_w1 += b_route(b, prompt, NULL, 0) == 1;
    }
    return on_w1;
}

/* Waits until node B's effective load of w1 counts node A's streams,
 * measured from when worker 1 runs them: at most two scrape intervals
 * (plus the admin round trip on a loaded machine). */
static void wait_b_sees_held(const struct node *b)
{
    int64_t t0 = h_now_ms();
    struct wait_field wf = {b, "effective_load", HELD, HELD};
    assert_int_equal(h_wait_until(field_in_range, &wf, WAIT_MS), 0);
    int64_t took = h_now_ms() - t0;
    if (took > 2 * SCRAPE_INTERVAL_MS + 100)
        fail_msg("node B saw node A's streams after %lld ms (> 2 scrape intervals)",
                 (long long)took);
}

static void test_least_load_avoids_other_nodes_worker(void **state)
{
    (void)state;
    struct h_fleet a;
    node_a_start(&a);
    struct node b;
    node_start(&b, &a, "least_load", NULL);
    /* Idle fleet: B spreads over all three, w1 included. */
    assert_true(b_count_w1(&b, 6) > 0);

    struct h_async *held[HELD];
    hold_on_w1(&a, held);
    wait_b_sees_held(&b);
    /* B's own count of w1 is 0, yet it sends nothing there. */
    assert_int_equal(b_count_w1(&b, 9), 0);
    assert_int_equal(b_worker_field(&b, "w1", "load"), 0);

    release_w1(&a, held);
    struct wait_field wf = {&b, "effective_load", 0, 0};
    assert_int_equal(h_wait_until(field_in_range, &wf, WAIT_MS), 0);
    assert_true(b_count_w1(&b, 6) > 0);
    h_fleet_stop(&a);
}

/* A long prompt (salted) whose first placement on node B is w1; node B then
 * holds its prefix for w1 only. */
static void prompt_on_w1(const struct node *b, int *salt, char *prompt, size_t len)
{
    int w = 0;
    for (; *salt < 256 && w != 1; (*salt)++) {
        for (size_t k = 0; k < len - 1; k++)
            prompt[k] = (char)('a' + (k * 7 + (size_t)*salt * 11 + k / 13) % 26);
        prompt[len - 1] = '\0';
        w = b_route(b, prompt, NULL, 0);
    }
    assert_int_equal(w, 1);
    char decision[64];
    assert_int_equal(b_route(b, prompt, decision, sizeof(decision)), 1);
    assert_string_equal(decision, "affinity");
}

static void test_cache_aware_affinity_yields_to_other_nodes_load(void **state)
{
    (void)state;
    struct h_fleet a;
    node_a_start(&a);
    struct node b;
    node_start(&b, &a, "cache_aware", "balance_abs_threshold: 2\n");
    char p1[400], p2[400], decision[64];
    int salt = 0;
    prompt_on_w1(&b, &salt, p1, sizeof(p1));
    prompt_on_w1(&b, &salt, p2, sizeof(p2));

    struct h_async *held[HELD];
    hold_on_w1(&a, held);
    wait_b_sees_held(&b);
    /* w1 has 4 in flight from node A, the others none: affinity yields,
     * and no new prompt goes there either. */
    assert_int_not_equal(b_route(&b, p1, decision, sizeof(decision)), 1);
    assert_string_equal(decision, "overloaded_fallback");
    assert_int_equal(b_count_w1(&b, 9), 0);

    release_w1(&a, held);
    struct wait_field wf = {&b, "effective_load", 0, 0};
    assert_int_equal(h_wait_until(field_in_range, &wf, WAIT_MS), 0);
    assert_int_equal(b_route(&b, p2, decision, sizeof(decision)), 1);
    assert_string_equal(decision, "affinity");
    h_fleet_stop(&a);
}

/* switchyard_load_reports_stale_total{worker="w1"} on node B's data plane. */
static long long b_stale_count(const struct node *b)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", b->base);
    return h_metric_at(url, "switchyard_load_reports_stale_total{worker=\"w1\"}");
}

/* w1's report on B goes stale: B routes on its own count (0 for w1), so w1
 * is picked again, every request succeeds and the stale counter moves. */
static void expect_stale_fallback(const struct node *b)
{
    struct wait_field stale = {b, "age_ms", 600 + 1, 1LL << 40};
    assert_int_equal(h_wait_until(field_in_range, &stale, WAIT_MS), 0);
    assert_int_equal(b_worker_field(b, "w1", "effective_load"), 0);
    long long before = b_stale_count(b);
    assert_true(before >= 0);
    assert_true(b_count_w1(b, 9) > 0);
    assert_true(b_stale_count(b) > before);
}

static void test_stale_report_falls_back_to_own_counts(void **state)
{
    (void)state;
    struct h_fleet a;
    node_a_start(&a);
    struct node b;
    node_start(&b, &a, "least_load", NULL);
    struct h_async *held[HELD];
    hold_on_w1(&a, held);
    wait_b_sees_held(&b);
    assert_int_equal(b_count_w1(&b, 6), 0);

    /* Garbage on /metrics. */
    assert_int_equal(h_mock_faults(a.mock[0].url, "{\"metrics_garbage\":true}"), 0);
    expect_stale_fallback(&b);

    /* Back: B avoids w1 again. */
    assert_int_equal(h_mock_faults(a.mock[0].url, "{\"metrics_garbage\":false}"), 0);
    struct wait_field fresh = {&b, "effective_load", HELD, HELD};
    assert_int_equal(h_wait_until(field_in_range, &fresh, WAIT_MS), 0);
    assert_int_equal(b_count_w1(&b, 6), 0);

    /* A hanging /metrics (longer than the scrape timeout). */
    assert_int_equal(h_mock_faults(a.mock[0].url, "{\"metrics_stall_ms\":60000}"), 0);
    expect_stale_fallback(&b);
    assert_int_equal(h_mock_faults(a.mock[0].url, "{\"metrics_stall_ms\":0}"), 0);

    release_w1(&a, held);
    h_fleet_stop(&a);
}

/* A worker with internal data parallelism shows one series per engine:
 * the report sums them. 5 requests held directly on the worker (outside
 * the router: another node's, as far as this one knows), 2 running and 3
 * waiting, spread over 3 engine series. */
static void test_data_parallel_engines_are_summed(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--data-parallel-size", "3", "--max-num-seqs", "2",
                                            NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1,
                          .mock_args = mock_args,
                          .policy = "least_load",
                          .controlplane_extra = load_reports_yaml,
                      });
    struct node view = {0};
    assert_int_equal(h_url(view.admin, sizeof(view.admin), f.cfg.admin_port, NULL), 0);
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_after_chunks\":1,\"stall_ms\":60000}"),
                     0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.mock[0].url);
    static const char body[] = "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"dp\","
                               "\"stream\":true,\"max_tokens\":64}";
    struct h_async *held[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(
            h_async_start(url, body, &(struct h_async_opts){.timeout_ms = 120000}, &held[i]), 0);
        assert_int_equal(h_async_wait_headers(held[i], WAIT_MS), 0);
    }
    assert_int_equal(h_wait_mock_stat(f.mock[0].url, "waiting", 3, WAIT_MS), 0);
    struct wait_field wf = {&view, "effective_load", 5, 5};
    assert_int_equal(h_wait_until(field_in_range, &wf, WAIT_MS), 0);
    assert_int_equal(b_worker_field(&view, "w1", "load"), 0);

    char murl[128];
    snprintf(murl, sizeof(murl), "%s/workers", view.admin);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(murl, &r), 0);
    json_t *j = h_resp_json(&r);
    json_t *rep = json_object_get(json_array_get(json_object_get(j, "workers"), 0), "reported");
    assert_int_equal(json_integer_value(json_object_get(rep, "running")), 2);
    assert_int_equal(json_integer_value(json_object_get(rep, "waiting")), 3);
    json_decref(j);
    h_resp_fini(&r);
    for (int i = 0; i < 5; i++)
        h_async_destroy(held[i]);
    h_fleet_stop(&f);
}

/* The control plane's switchyard_load_report_scrapes_total{worker="w1",result="success"}. */
static long long cp_w1_scrapes(const struct node *v)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", v->admin);
    return h_metric_at(url,
                       "switchyard_load_report_scrapes_total{worker=\"w1\",result=\"success\"}");
}

/* Several reports of w1 read since `since` scrapes, the last one fresh and
 * saying 0 running, 0 waiting (the mock's truth: nothing reached it). */
struct idle_reports {
    const struct node *v;
    long long since;
};

static bool w1_reported_idle(void *arg)
{
    struct idle_reports *w = arg;
    if (cp_w1_scrapes(w->v) < w->since + 3)
        return false;
    char url[128];
    snprintf(url, sizeof(url), "%s/workers/w1", w->v->admin);
    struct h_resp r = {0};
    bool ok = false;
    if (h_http_get(url, &r) == 0 && r.status == 200) {
        json_t *j = h_resp_json(&r);
        json_t *rep = json_object_get(j, "reported");
        ok = json_is_object(rep) && json_integer_value(json_object_get(rep, "running")) == 0 &&
             json_integer_value(json_object_get(rep, "waiting")) == 0 &&
             json_integer_value(json_object_get(rep, "age_ms")) < 600;
        json_decref(j);
    }
    h_resp_fini(&r);
    return ok;
}

#define OWN_HELD 3

/*
 * Invariant 10: a report never writes a lease counter. This node holds
 * OWN_HELD requests on w1 (a lease holder: another of the node's data
 * planes as far as the segment and the admin channel see it) that never
 * reached the worker, so w1's /metrics honestly says 0 running, 0 waiting.
 * After several such reports were read, the node's own count is intact
 * everywhere it shows, and routing does not see less than it.
 */
static void test_idle_report_leaves_own_count(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 2,
                          .policy = "least_load",
                          .dataplane_extra = "debug_headers: true\n",
                          .controlplane_extra = load_reports_yaml,
                      });
    struct node v = {0};
    assert_int_equal(h_url(v.admin, sizeof(v.admin), f.cfg.admin_port, NULL), 0);
    snprintf(v.base, sizeof(v.base), "%s", f.base);
    struct shm_worker_info w1;
    assert_int_equal(shm_registry_find(&f.seg, "w1", &w1), 0);
    struct h_holder h;
    h_holder_start(&h, &(struct h_holder_spec){.shm = f.cfg.shm_name,
                                               .socket = f.cfg.admin_socket,
                                               .slot = w1.slot,
                                               .generation = w1.generation,
                                               .guards = OWN_HELD,
                                               .answer = OWN_HELD});
    assert_int_equal(h_fleet_load(&f, 0), OWN_HELD);

    struct idle_reports wr = {&v, cp_w1_scrapes(&v)};
    assert_true(wr.since >= 0);
    assert_int_equal(h_wait_until(w1_reported_idle, &wr, WAIT_MS), 0);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);

    /* The node's own count, in the segment and in GET /workers. */
    assert_int_equal(h_fleet_load(&f, 0), OWN_HELD);
    char url[128];
    snprintf(url, sizeof(url), "%s/workers/w1", v.admin);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "load")), OWN_HELD);
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)h.pid);
    json_t *by = json_object_get(j, "inflight_by_dataplane");
    assert_int_equal(json_integer_value(json_object_get(by, pid)), OWN_HELD);
    assert_true(json_integer_value(json_object_get(j, "effective_load")) >= OWN_HELD);
    json_decref(j);
    h_resp_fini(&r);

    /* What routing sees: the data plane's gauge, and least_load's choices. */
    assert_true(h_fleet_dp_metric(&f, "switchyard_worker_effective_load{worker=\"w1\"}") >=
                OWN_HELD);
    assert_int_equal(b_count_w1(&v, 6), 0);
    assert_int_equal(b_worker_field(&v, "w1", "load"), OWN_HELD);

    h_holder_finish(&h);
    assert_int_equal(h_fleet_load(&f, 0), 0);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_load_underflows_total"), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_least_load_avoids_other_nodes_worker),
        H_TEST(test_cache_aware_affinity_yields_to_other_nodes_load),
        H_TEST(test_stale_report_falls_back_to_own_counts),
        H_TEST(test_data_parallel_engines_are_summed),
        H_TEST(test_idle_report_leaves_own_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
