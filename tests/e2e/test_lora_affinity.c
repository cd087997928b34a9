/*
 * End-to-end: LoRA affinity (docs/routing.md "LoRA adapters"). Adapter a
 * is loaded on both workers; round_robin spreads its requests while
 * neither runs it. A long stream on a held by worker 2 makes its /metrics
 * say running_lora_adapters="a" (checked on the mock's own page, with the
 * control plane's parser); once scraped, every new request for a goes to
 * worker 2, while the base model still spreads. When worker 2's reports
 * stop (garbage /metrics) its last one goes stale and a spreads by policy
 * again although the stream still runs; reports back: preferred again;
 * stream over: by policy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "controlplane/load_report_parse.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS 15000

static const char reports_yaml[] = "load_reports:\n"
                                   "  interval: 100ms\n"
                                   "  timeout: 300ms\n"
                                   "  stale_after: 500ms\n";

/* A one-token chat for model through the router; the worker that answered. */
static void chat(const struct h_fleet *f, const char *model, char *worker, size_t cap)
{
    char url[128], body[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}",
             model);
    struct h_resp r = {0};
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    assert_int_equal(r.status, 200);
    if (h_resp_header(&r, "x-switchyard-worker", worker, cap) != 0)
        worker[0] = '\0';

    h_resp_fini(&r);
}

/* Sends n requests for model; counts per worker. */
static void spread(const struct h_fleet *f, const char *model, int n, int *w1, int *w2)
{
    *w1 = *w2 = 0;
    for (int i = 0; i < n; i++) {
        char w[64];
        chat(f, model, w, sizeof(w));
        *w1 += strcmp(w, "w1") == 0;
        *w2 += strcmp(w, "w2") == 0;
    }
}

static bool a_routes(void *arg)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/models", ((const struct h_fleet *)arg)->base);
    struct h_resp r = {0};
    bool ok = h_http_get(url, &r) == 0 && r.status == 200 && strstr(r.body, "\"a\"") != NULL;
    h_resp_fini(&r);
    return ok;
}

static bool all_on_w2(void *arg)
{
    int w1, w2;
    spread(arg, "a", 6, &w1, &w2);
    return w2 == 6;
}

static bool both_used(void *arg)
{
    int w1, w2;
    spread(arg, "a", 6, &w1, &w2);
    return w1 >= 2 && w2 >= 2;
}

/* What mock i's own /metrics says about adapter a (via the router's parser). */
static bool mock_runs_a(const struct h_fleet *f, size_t i)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", f->mock[i].url);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    struct lrp_report rep;
    assert_int_equal(lrp_parse(r.body, r.body_len, NULL, &rep), 0);
    assert_true(rep.has_lora);
    h_resp_fini(&r);
    return shm_adapter_set_may_have(&rep.lora_running, shm_adapter_hash("a", 1));
}

/* GET /workers/w2's reported.running_adapters names a (h_wait_until). */
static bool admin_shows_w2_running_a(void *arg)
{
    const struct h_fleet *f = arg;
    char url[256];
    h_url(url, sizeof(url), f->cfg.admin_port, "/workers/w2");
    struct h_resp r = {0};
    bool yes = false;
    if (h_http_get(url, &r) == 0 && r.status == 200) {
        json_t *j = h_resp_json(&r);
        json_t *names = json_object_get(json_object_get(j, "reported"), "running_adapters");
        yes = json_array_size(names) == 1 &&
              strcmp(json_string_value(json_array_get(names, 0)), "a") == 0;
        json_decref(j);
    }
    h_resp_fini(&r);
    return yes;
}

static void test_running_adapter_preferred(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--lora-adapters", "a", "--tpot-ms", "10", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .mock_args = mock_args,
                                             .policy = "round_robin",
                                             .dataplane_extra = "debug_headers: true\n",
                                             .health_extra = "models_interval: 200ms\n",
                                             .controlplane_extra = reports_yaml});
    assert_int_equal(h_wait_until(a_routes, &f, WAIT_MS), 0);
    /* Nobody runs a: by policy. */
    int w1, w2;
    spread(&f, "a", 8, &w1, &w2);
    assert_true(w1 >= 3 && w2 >= 3);
    assert_false(mock_runs_a(&f, 1));

    /* A long stream on a, straight to worker 2 (not through this router:
     * its own count of w2 stays 0, only the report knows). */
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.mock[1].url);
    struct h_async *stream = NULL;
    assert_int_equal(
        h_async_start(url,
                      "{\"model\":\"a\",\"stream\":true,\"max_tokens\":6000,\"messages\":"
                      "[{\"role\":\"user\",\"content\":\"write a long story\"}]}",
                      &(struct h_async_opts){.timeout_ms = 120000}, &stream),
        0);
    assert_int_equal(h_async_wait_body(stream, 1, WAIT_MS), 0);
    assert_true(mock_runs_a(&f, 1));
    assert_false(mock_runs_a(&f, 0));
    /* Once the report says so (the admin API shows it), a goes to worker 2 only. */
    assert_int_equal(h_wait_until(admin_shows_w2_running_a, &f, WAIT_MS), 0);

    assert_int_equal(h_wait_until(all_on_w2, &f, WAIT_MS), 0);
    spread(&f, "a", 12, &w1, &w2);
    assert_int_equal(w2, 12);
    /* The base model is no adapter: it still spreads. */
    spread(&f, H_FLEET_MODEL, 8, &w1, &w2);
    assert_true(w1 >= 3 && w2 >= 3);

    /* Worker 2's reports stop: its last one goes stale, a is by policy
     * again although the stream still runs there. */
    assert_int_equal(h_mock_faults(f.mock[1].url, "{\"metrics_garbage\":true}"), 0);
    assert_int_equal(h_wait_until(both_used, &f, WAIT_MS), 0);
    spread(&f, "a", 8, &w1, &w2);
    assert_true(w1 >= 3 && w2 >= 3);
    /* Reports back: preferred again. */
    assert_int_equal(h_mock_faults(f.mock[1].url, "{\"metrics_garbage\":false}"), 0);
    assert_int_equal(h_wait_until(all_on_w2, &f, WAIT_MS), 0);

    /* The stream ends: nobody runs a, by policy. */
    h_async_destroy(stream);
    assert_int_equal(h_wait_until(both_used, &f, WAIT_MS), 0);
    assert_false(mock_runs_a(&f, 1));
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_running_adapter_preferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
