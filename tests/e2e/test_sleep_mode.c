/*
 * Sleeping workers (vLLM's sleep mode): a worker put to sleep with
 * POST /sleep still answers /health 200 but queues every request until
 * POST /wake_up. The control plane reads vllm:engine_sleep_state from the
 * worker's /metrics (the load-report scrape) and marks the slot sleeping;
 * the data plane routes around it while it sleeps and back once it wakes.
 * GET /workers and the control plane's /metrics say so.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_routed.h"

#define WAIT_MS 10000

static const char chat_body[] = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":\"user\","
                                "\"content\":\"hello\"}],\"max_tokens\":2}";

static void post_status(const char *url, long want)
{
    struct h_req req = {.method = "POST", .url = url};
    struct h_resp r = {0};
    assert_int_equal(h_http(&req, &r), 0);
    if (r.status != want)
        fail_msg("POST %s: %ld, want %ld (%s)", url, r.status, want, r.body ? r.body : "");
    h_resp_fini(&r);
}

static bool mock_is_sleeping(const struct h_mock *m)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/is_sleeping", m->url);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    json_t *v = json_object_get(j, "is_sleeping");
    assert_true(json_is_boolean(v));
    bool sleeping = json_is_true(v);
    json_decref(j);
    h_resp_fini(&r);
    return sleeping;
}

/* GET /workers/w1's "sleeping". */
static int admin_sleeping(const struct h_fleet *f, const char *id)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/workers/%s", f->cfg.admin_port, id);
    struct h_resp r = {0};
    if (h_http_get(url, &r) != 0 || r.status != 200) {
        h_resp_fini(&r);
        return -1;
    }
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    json_t *v = json_object_get(j, "sleeping");
    int out = json_is_boolean(v) ? json_is_true(v) : -1;
    json_decref(j);
    return out;
}

struct want_sleep {
    const struct h_fleet *f;
    int sleeping;
};

static bool w1_sleep_is(void *arg)
{
    const struct want_sleep *w = arg;
    return admin_sleeping(w->f, "w1") == w->sleeping;
}

/* n chats through the router; how many w1 served. */
static int served_by_w1(const struct h_fleet *f, int n)
{
    int w1 = 0;
    for (int i = 0; i < n; i++) {
        char worker[32];
        h_routed_post(f->base, "/v1/chat/completions", chat_body, worker, sizeof(worker), NULL, 0);
        w1 += strcmp(worker, "w1") == 0;
    }
    return w1;
}

struct direct {
    const char *url;
    long status;
};

/* A chat sent straight to a mock; the status it got (0: no answer). */
static void *direct_chat(void *arg)
{
    struct direct *d = arg;
    struct h_req req = {.url = d->url, .body = chat_body, .timeout_ms = WAIT_MS};
    const char *headers[] = {"Content-Type: application/json", NULL};
    req.headers = headers;
    struct h_resp r = {0};
    if (h_http(&req, &r) == 0)
        d->status = r.status;
    h_resp_fini(&r);
    return NULL;
}

static bool mock_waiting(void *arg)
{
    const struct h_mock *m = arg;
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", m->url);
    return h_metric_at(url, "vllm:num_requests_waiting{model_name=\"" H_FLEET_MODEL
                            "\",engine=\"0\"}") == 1;
}

/* The mock as vLLM: /sleep and /wake_up answer 200, /is_sleeping and the
 * gauge follow, /health stays 200 and a request waits until the wake-up. */
static void test_mock_sleeps_as_vllm(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", H_FLEET_MODEL, NULL), 0);
    char url[160];
    assert_false(mock_is_sleeping(&m));
    snprintf(url, sizeof(url), "%s/metrics", m.url);
    const char *awake = "vllm:engine_sleep_state{model_name=\"" H_FLEET_MODEL
                        "\",engine=\"0\",sleep_state=\"awake\"}";
    const char *level1 = "vllm:engine_sleep_state{model_name=\"" H_FLEET_MODEL
                         "\",engine=\"0\",sleep_state=\"weights_offloaded\"}";
    const char *level2 = "vllm:engine_sleep_state{model_name=\"" H_FLEET_MODEL
                         "\",engine=\"0\",sleep_state=\"discard_all\"}";
    assert_int_equal(h_metric_at(url, awake), 1);
    assert_int_equal(h_metric_at(url, level1), 0);

    snprintf(url, sizeof(url), "%s/sleep?level=3", m.url);
    post_status(url, 400);
    snprintf(url, sizeof(url), "%s/sleep?level=1&mode=abort", m.url);
    post_status(url, 200);
    assert_true(mock_is_sleeping(&m));
    snprintf(url, sizeof(url), "%s/metrics", m.url);
    assert_int_equal(h_metric_at(url, awake), 0);
    assert_int_equal(h_metric_at(url, level1), 1);
    assert_int_equal(h_metric_at(url, level2), 0);
    snprintf(url, sizeof(url), "%s/health", m.url);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);

    /* A request waits while the engine sleeps; waking one tag is not enough. */
    char chat[160];
    snprintf(chat, sizeof(chat), "%s/v1/chat/completions", m.url);
    struct direct d = {.url = chat};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, direct_chat, &d), 0);
    assert_int_equal(h_wait_until(mock_waiting, &m, WAIT_MS), 0);
    snprintf(url, sizeof(url), "%s/wake_up?tags=weights", m.url);
    post_status(url, 200);
    assert_true(mock_is_sleeping(&m));
    assert_true(mock_waiting(&m));
    snprintf(url, sizeof(url), "%s/wake_up?tags=kv_cache", m.url);
    post_status(url, 200);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(d.status, 200);
    assert_false(mock_is_sleeping(&m));

    snprintf(url, sizeof(url), "%s/sleep?level=2", m.url);
    post_status(url, 200);
    snprintf(url, sizeof(url), "%s/metrics", m.url);
    assert_int_equal(h_metric_at(url, level2), 1);
    assert_int_equal(h_metric_at(url, level1), 0);
    snprintf(url, sizeof(url), "%s/wake_up", m.url);
    post_status(url, 200);
    assert_false(mock_is_sleeping(&m));
}

/* Sleep w1: the router learns it from w1's /metrics and sends everything
 * to w2; wake it: traffic comes back. */
static void test_router_routes_around_a_sleeping_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "round_robin",
                                             .dataplane_extra = "debug_headers: true\n",
                                             .controlplane_extra = "load_reports:\n"
                                                                   "  interval: 100ms\n"});
    assert_true(served_by_w1(&f, 6) > 0);
    struct want_sleep ws = {.f = &f, .sleeping = 0};
    assert_int_equal(h_wait_until(w1_sleep_is, &ws, WAIT_MS), 0);

    char url[160];
    snprintf(url, sizeof(url), "%s/sleep?level=1", f.mock[0].url);
    post_status(url, 200);
    ws.sleeping = 1;
    assert_int_equal(h_wait_until(w1_sleep_is, &ws, WAIT_MS), 0);
    assert_int_equal(served_by_w1(&f, 8), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", f.cfg.admin_port);
    assert_int_equal(h_metric_at(url, "switchyard_worker_sleeping{worker=\"w1\"}"), 1);
    assert_int_equal(h_metric_at(url, "switchyard_worker_sleeping{worker=\"w2\"}"), 0);
    assert_int_equal(
        h_metric_at(url, "switchyard_model_healthy_workers{model=\"" H_FLEET_MODEL "\"}"), 1);

    snprintf(url, sizeof(url), "%s/wake_up", f.mock[0].url);
    post_status(url, 200);
    ws.sleeping = 0;
    assert_int_equal(h_wait_until(w1_sleep_is, &ws, WAIT_MS), 0);
    assert_true(served_by_w1(&f, 6) > 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", f.cfg.admin_port);
    assert_int_equal(h_metric_at(url, "switchyard_worker_sleeping{worker=\"w1\"}"), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_mock_sleeps_as_vllm),
        H_TEST(test_router_routes_around_a_sleeping_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
