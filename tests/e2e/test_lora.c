/*
 * End-to-end: LoRA-aware routing (docs/api.md). An adapter loaded on
 * worker 1 only is learned from its /v1/models and all its requests go
 * there, whatever the policy (round_robin here); an unknown adapter is a
 * 404 model_not_found. POST /adapters on the admin API loads it on another
 * worker of the base model, and its requests spread over both; /v1/models
 * lists the base model and the adapter once each; DELETE /adapters/{name}
 * unloads it everywhere.
 *
 * LoRA affinity (docs/routing.md "LoRA adapters"): adapter a on both
 * workers; round_robin spreads it while neither runs it. A long stream on
 * a held by worker 2 makes its /metrics say running_lora_adapters="a"
 * (checked on the mock's own page with the control plane's parser, and in
 * GET /workers); once scraped, every new request for a goes to worker 2,
 * while the base model still spreads. When worker 2's reports stop
 * (garbage /metrics) its last one goes stale and a spreads by policy again
 * although the stream still runs; reports back: preferred again; stream
 * over: by policy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "controlplane/probes/load_report_parse.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS 15000

/* stale_after leaves room for scrapes delayed by a loaded machine: the
 * test asserts that a fresh report keeps every request on one worker, and
 * a report that went stale by accident would spread them. */
static const char reports_yaml[] = "load_reports:\n"
                                   "  interval: 100ms\n"
                                   "  timeout: 1s\n"
                                   "  stale_after: 2s\n";

/* A chat for model; returns the status and the worker that answered. */
static long chat(const struct h_fleet *f, const char *model, char *worker, size_t cap, char *code,
                 size_t code_cap)
{
    char url[128], body[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}",
             model);
    struct h_resp r = {0};
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    if (worker != NULL && h_resp_header(&r, "x-switchyard-worker", worker, cap) != 0)
        worker[0] = '\0';
    if (code != NULL) {
        json_t *j = h_resp_json(&r);
        json_t *c = json_object_get(json_object_get(j, "error"), "code");
        snprintf(code, code_cap, "%s", json_is_string(c) ? json_string_value(c) : "");
        json_decref(j);
    }
    long st = r.status;
    h_resp_fini(&r);
    return st;
}

static bool adapter_routes(void *arg)
{
    return chat(arg, "a", NULL, 0, NULL, 0) == 200;
}

static long admin(const struct h_fleet *f, const char *method, const char *path, const char *body,
                  json_t **out)
{
    char url[256];
    h_url(url, sizeof(url), f->cfg.admin_port, path);
    const char *const hdrs[] = {"Content-Type: application/json", NULL};
    struct h_req q = {.method = method, .url = url, .body = body, .headers = hdrs};
    struct h_resp r = {0};
    assert_int_equal(h_http(&q, &r), 0);
    if (out != NULL)
        *out = h_resp_json(&r);
    long st = r.status;
    h_resp_fini(&r);
    return st;
}

/* Sends n requests for model; counts per worker id w1/w2. */
static void spread(const struct h_fleet *f, const char *model, int n, int *w1, int *w2)
{
    *w1 = *w2 = 0;
    for (int i = 0; i < n; i++) {
        char w[64];
        assert_int_equal(chat(f, model, w, sizeof(w), NULL, 0), 200);
        if (strcmp(w, "w1") == 0)
            (*w1)++;
        else if (strcmp(w, "w2") == 0)
            (*w2)++;
    }
}

static int models_count(const struct h_fleet *f, const char *id)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/models", f->base);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(j, "data"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "id")), id) == 0)
            n++;
    }
    json_decref(j);
    return n;
}

static void test_adapter_routing(void **state)
{
    (void)state;
    struct h_fleet f;
    /* Load reports off: this test is about the names each worker serves.
     * With them on, a scrape that catches one of the test's requests for a
     * on worker 1 rightly prefers it as the worker running a
     * (test_running_adapter_preferred), and a would not spread. */
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "round_robin",
                                             .dataplane_extra = "debug_headers: true\n",
                                             .health_extra = "models_interval: 200ms\n",
                                             .controlplane_extra = "load_reports:\n"
                                                                   "  interval: 0\n"});
    /* Worker 1 has adapter a (loaded on it directly, as if started with it). */
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/load_lora_adapter", f.mock[0].url);
    struct h_resp r = {0};
    assert_int_equal(
        h_http_post_json(url, "{\"lora_name\":\"a\",\"lora_path\":\"/adapters/a\"}", &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(adapter_routes, &f, WAIT_MS), 0);
    long before = h_fleet_mock_stat(&f, 1, "requests_total");
    int w1, w2;
    spread(&f, "a", 12, &w1, &w2);
    assert_int_equal(w1, 12); /* all on the worker that has it */
    assert_int_equal(h_fleet_mock_stat(&f, 1, "requests_total"), before);
    /* The base model still spreads; an unknown adapter is a 404. */
    spread(&f, H_FLEET_MODEL, 8, &w1, &w2);
    assert_true(w1 > 0 && w2 > 0);
    char code[64];
    assert_int_equal(chat(&f, "zzz", NULL, 0, code, sizeof(code)), 404);
    assert_string_equal(code, "model_not_found");

    /* Loaded on one more worker through the admin API: load spreads. */
    json_t *j = NULL;
    assert_int_equal(admin(&f, "POST", "/adapters",
                           "{\"lora_name\":\"a\",\"lora_path\":\"/adapters/a\",\"count\":1}", &j),
                     200);
    json_t *loaded = json_object_get(j, "loaded");
    assert_int_equal(json_array_size(loaded), 1);
    assert_string_equal(json_string_value(json_array_get(loaded, 0)), "w2");
    assert_int_equal(json_integer_value(json_object_get(j, "already_loaded_on")), 1);
    json_decref(j);
    spread(&f, "a", 12, &w1, &w2);
    assert_true(w1 >= 3 && w2 >= 3);
    assert_int_equal(models_count(&f, "a"), 1);
    assert_int_equal(models_count(&f, H_FLEET_MODEL), 1);
    /* Loading again: nothing to do. */
    assert_int_equal(
        admin(&f, "POST", "/adapters", "{\"lora_name\":\"a\",\"lora_path\":\"/adapters/a\"}", &j),
        200);
    assert_int_equal(json_array_size(json_object_get(j, "loaded")), 0);
    json_decref(j);

    /* Unloaded everywhere: a 404 again, at once. */
    assert_int_equal(admin(&f, "DELETE", "/adapters/a", NULL, &j), 200);
    assert_int_equal(json_array_size(json_object_get(j, "unloaded")), 2);
    json_decref(j);
    assert_int_equal(chat(&f, "a", NULL, 0, code, sizeof(code)), 404);
    assert_string_equal(code, "model_not_found");
    assert_int_equal(models_count(&f, "a"), 0);
    assert_int_equal(admin(&f, "DELETE", "/adapters/a", NULL, NULL), 404);
    /* Bad requests. */
    assert_int_equal(admin(&f, "POST", "/adapters",
                           "{\"lora_name\":\"b\",\"lora_path\":\"/p\",\"base_model\":\"nope\"}",
                           NULL),
                     404);
    assert_int_equal(admin(&f, "POST", "/adapters", "{\"lora_name\":\"b\"}", NULL), 400);
    assert_int_equal(admin(&f, "GET", "/adapters", NULL, NULL), 405);
    h_fleet_stop(&f);
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

/* Neither mock runs a (h_wait_until): a request's end reaches the client
 * before the mock's own bookkeeping of it, so right after a burst of
 * requests for a, a mock may still list it for a moment. */
static bool no_mock_runs_a(void *arg)
{
    const struct h_fleet *f = arg;
    return !mock_runs_a(f, 0) && !mock_runs_a(f, 1);
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
    assert_int_equal(h_wait_until(adapter_routes, &f, WAIT_MS), 0);
    /* Nobody runs a: by policy. Waited for, not asserted at once: a scrape
     * that catches one of these requests on its worker rightly makes that
     * worker the one running a until the next scrape. */
    int w1, w2;
    assert_int_equal(h_wait_until(both_used, &f, WAIT_MS), 0);
    assert_int_equal(h_wait_until(no_mock_runs_a, &f, WAIT_MS), 0);

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
    /* Reports back: preferred again. */
    assert_int_equal(h_mock_faults(f.mock[1].url, "{\"metrics_garbage\":false}"), 0);
    assert_int_equal(h_wait_until(all_on_w2, &f, WAIT_MS), 0);

    /* The stream ends: nobody runs a, by policy. */
    h_async_destroy(stream);
    assert_int_equal(h_wait_until(both_used, &f, WAIT_MS), 0);
    assert_int_equal(h_wait_until(no_mock_runs_a, &f, WAIT_MS), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_adapter_routing),
        H_TEST(test_running_adapter_preferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
