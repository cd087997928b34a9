/*
 * End-to-end tests of tracing: W3C trace context from the client through
 * the router to the workers (the mock worker reports the last traceparent
 * it received in /mock/stats), and span export as OTLP/HTTP JSON to
 * switchyard-fakecollector, which checks the encoding and hands back what
 * it accepted.
 *
 *  - the worker gets the client's trace id with a new span id of the
 *    router's (one per attempt), the client's tracestate passes; an
 *    invalid or absent traceparent starts a new trace;
 *  - the collector receives request -> routing decision -> attempt spans,
 *    correctly parented (under the client's span), with the attempt's span
 *    id the one its worker received, and P/D leg spans;
 *  - a slow collector, and one that is down, never slow requests: spans
 *    are dropped and counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS 10000

#define CLIENT_TRACE  "4bf92f3577b34da6a3ce929d0e0e4736"
#define CLIENT_PARENT "00f067aa0ba902b7"
#define CLIENT_TP     "00-" CLIENT_TRACE "-" CLIENT_PARENT "-01"

static const char *const CHAT = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":4,"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"trace me\"}]}";

/* ---- helpers ------------------------------------------------------------------- */

static long post_chat(const char *base, const char *const *extra_headers)
{
    char url[160];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *headers[8] = {"Content-Type: application/json"};
    size_t n = 1;
    for (size_t i = 0; extra_headers != NULL && extra_headers[i] != NULL && n < 7; i++)
        headers[n++] = extra_headers[i];
    headers[n] = NULL;
    struct h_req req = {.url = url, .body = CHAT, .headers = headers};
    struct h_resp resp;
    assert_int_equal(h_http(&req, &resp), 0);
    long status = resp.status;
    h_resp_fini(&resp);
    return status;
}

/* The mock's last_traceparent (copied into out), or "" when none. */
static void mock_traceparent(const char *mock_url, char *out, size_t len)
{
    json_t *st = h_mock_stats(mock_url);
    assert_non_null(st);
    json_t *tp = json_object_get(st, "last_traceparent");
    snprintf(out, len, "%s", json_is_string(tp) ? json_string_value(tp) : "");
    json_decref(st);
}

/* The mock's last request header name (lower case), or NULL; new reference. */
static json_t *mock_header(const char *mock_url, const char *name)
{
    json_t *st = h_mock_stats(mock_url);
    assert_non_null(st);
    json_t *v = json_object_get(json_object_get(st, "last_request_headers"), name);
    json_incref(v);
    json_decref(st);
    return v;
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Checks tp is a well-formed version-00 traceparent with non-zero ids. */
static void assert_valid_traceparent(const char *tp)
{
    assert_int_equal(strlen(tp), 55);
    assert_memory_equal(tp, "00-", 3);
    assert_true(is_hex(tp + 3, 32) && tp[35] == '-' && is_hex(tp + 36, 16) && tp[52] == '-' &&
                is_hex(tp + 53, 2));
    assert_memory_not_equal(tp + 3, "00000000000000000000000000000000", 32);
    assert_memory_not_equal(tp + 36, "0000000000000000", 16);
}

/* A fake collector on a free port; its base URL into url. */
static struct h_proc *start_collector(char *url, size_t len)
{
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0);
    char bin[H_PATH_MAX], listen[32];
    assert_int_equal(h_bin_path("switchyard-fakecollector", bin, sizeof(bin)), 0);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    const char *argv[] = {bin, "--listen", listen, NULL};
    struct h_proc *p;
    assert_int_equal(h_spawn("fakecollector", argv, &p), 0);
    assert_int_equal(h_url(url, len, port, NULL), 0);
    char health[128];
    snprintf(health, sizeof(health), "%s/health", url);
    assert_int_equal(h_wait_http_ok(health, H_READY_TIMEOUT_MS), 0);
    return p;
}

static void collector_config(const char *url, const char *json)
{
    char u[160];
    snprintf(u, sizeof(u), "%s/fake/config", url);
    struct h_resp resp;
    assert_int_equal(h_http_post_json(u, json, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
}

/* Every span the collector accepted whose traceId is trace; new reference. */
static json_t *collector_spans(const char *url, const char *trace)
{
    char u[160];
    snprintf(u, sizeof(u), "%s/fake/spans", url);
    struct h_resp resp;
    assert_int_equal(h_http_get(u, &resp), 0);
    json_t *body = h_resp_json(&resp);
    h_resp_fini(&resp);
    assert_non_null(body);
    assert_int_equal(json_integer_value(json_object_get(body, "rejected")), 0);
    json_t *out = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(body, "spans"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "traceId")), trace) == 0)
            json_array_append(out, s);
    }
    json_decref(body);
    return out;
}

struct spans_wait {
    const char *url, *trace;
    size_t want;
};

static bool spans_arrived(void *arg)
{
    struct spans_wait *c = arg;
    json_t *s = collector_spans(c->url, c->trace);
    bool ok = json_array_size(s) >= c->want;
    json_decref(s);
    return ok;
}

static const char *sfield(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        fail_msg("span field %s is not a string", key);
    return json_string_value(v);
}

/* The string form of attribute key of span (stringValue or intValue), or NULL. */
static const char *attr(json_t *span, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(span, "attributes"), i, a)
    {
        if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0) {
            json_t *v = json_object_get(a, "value");
            json_t *s = json_object_get(v, "stringValue");
            if (s == NULL)
                s = json_object_get(v, "intValue");
            return json_string_value(s);
        }
    }
    return NULL;
}

/* Spans named name (in order). */
static size_t spans_named(json_t *spans, const char *name, json_t **out, size_t max)
{
    size_t n = 0, i;
    json_t *s;
    json_array_foreach(spans, i, s)
    {
        if (strcmp(sfield(s, "name"), name) == 0 && n < max)
            out[n++] = s;
    }
    return n;
}

static bool registry_has(void *arg)
{
    struct h_fleet *f = arg;
    struct shm_worker_info w[H_FLEET_MAX_MOCKS];
    return shm_registry_snapshot(&f->seg, w, H_FLEET_MAX_MOCKS) >= f->cfg.n_workers;
}

static char yaml[512];

/* Starts n mocks (role per roles[i], NULL = regular) and a router whose
 * config adds top (top-level YAML) and dp (dataplane keys). */
static void fleet_start(struct h_fleet *f, size_t n, const char *const *roles, const char *policy,
                        const char *dp, const char *top)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    for (size_t i = 0; i < n; i++) {
        const char *role = roles != NULL && roles[i] != NULL ? roles[i] : "regular";
        char engine[32], id[32];
        snprintf(engine, sizeof(engine), "eng-%zu", i + 1);
        snprintf(id, sizeof(id), "w%zu", i + 1);
        assert_int_equal(h_mock_start(&f->mock[i], "--model", H_FLEET_MODEL, "--role", role,
                                      "--engine-id", engine, NULL),
                         0);
        assert_int_equal(h_config_add_worker(&f->cfg, f->mock[i].url, id, H_FLEET_MODEL, role), 0);
    }
    f->cfg.policy = policy;
    f->cfg.dataplane_extra = dp;
    f->cfg.extra_yaml = top;
    assert_int_equal(h_config_write(&f->cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f->cfg.path, &f->cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, f, H_READY_TIMEOUT_MS), 0);
    f->attached = true;
    assert_int_equal(h_wait_until(registry_has, f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_start_dataplane(f->cfg.path, &f->dp), 0);
    assert_int_equal(h_url(f->base, sizeof(f->base), f->cfg.dataplane_port, NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

/* ---- propagation ------------------------------------------------------------------ */

static void test_worker_gets_trace_context(void **state)
{
    (void)state;
    struct h_fleet f;
    fleet_start(&f, 2, NULL, "round_robin", "retry:\n  backoff: 10ms\n", NULL);
    char tp[128], tp2[128];

    /* The client's trace goes on, under a span of the router's. */
    const char *h1[] = {"traceparent: " CLIENT_TP, "tracestate: vendor=abc,other=1", NULL};
    assert_int_equal(post_chat(f.base, h1), 200);
    const char *served = NULL;
    for (size_t i = 0; i < 2 && served == NULL; i++) {
        mock_traceparent(f.mock[i].url, tp, sizeof(tp));
        if (tp[0] != '\0')
            served = f.mock[i].url;
    }
    assert_non_null(served);
    print_message("client %s -> worker %s\n", CLIENT_TP, tp);
    assert_valid_traceparent(tp);
    assert_memory_equal(tp + 3, CLIENT_TRACE, 32);
    assert_memory_not_equal(tp + 36, CLIENT_PARENT, 16);
    assert_memory_equal(tp + 53, "01", 2);
    json_t *ts = mock_header(served, "tracestate");
    assert_true(json_is_string(ts));
    assert_string_equal(json_string_value(ts), "vendor=abc,other=1");
    json_decref(ts);

    /* Invalid (upper case, all-zero ids, wrong length): a new trace, no tracestate. */
    static const char *const bad[] = {
        "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "traceparent: 00-" CLIENT_TRACE "-0000000000000000-01",
        "traceparent: 00-" CLIENT_TRACE "-" CLIENT_PARENT "-01-extra",
        "traceparent: ff-" CLIENT_TRACE "-" CLIENT_PARENT "-01",
    };
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        const char *h[] = {bad[b], "tracestate: vendor=abc", NULL};
        /* Twice: round robin gives each worker one; then look at both. */
        assert_int_equal(post_chat(f.base, h), 200);
        assert_int_equal(post_chat(f.base, h), 200);
        for (size_t i = 0; i < 2; i++) {
            mock_traceparent(f.mock[i].url, tp, sizeof(tp));
            assert_valid_traceparent(tp);
            assert_memory_not_equal(tp + 3, CLIENT_TRACE, 32);
        }
    }
    for (size_t i = 0; i < 2; i++) {
        json_t *v = mock_header(f.mock[i].url, "tracestate");
        assert_null(v); /* the last request each saw carried an invalid traceparent */
    }

    /* Absent: a new sampled trace. */
    assert_int_equal(post_chat(f.base, NULL), 200);
    assert_int_equal(post_chat(f.base, NULL), 200);
    mock_traceparent(f.mock[0].url, tp, sizeof(tp));
    mock_traceparent(f.mock[1].url, tp2, sizeof(tp2));
    assert_valid_traceparent(tp);
    assert_valid_traceparent(tp2);
    assert_memory_equal(tp + 53, "01", 2);
    assert_memory_not_equal(tp + 3, tp2 + 3, 32); /* two requests, two traces */

    /* A retry: each attempt its own span id, one trace. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":503,\"fail_count\":1}"), 0);
    assert_int_equal(h_mock_faults(f.mock[1].url, "{\"fail_status\":503,\"fail_count\":1}"), 0);
    assert_int_equal(post_chat(f.base, h1), 200);
    mock_traceparent(f.mock[0].url, tp, sizeof(tp));
    mock_traceparent(f.mock[1].url, tp2, sizeof(tp2));
    print_message("retry: w1 got %s, w2 got %s\n", tp, tp2);
    assert_memory_equal(tp + 3, CLIENT_TRACE, 32);
    assert_memory_equal(tp2 + 3, CLIENT_TRACE, 32);
    assert_memory_not_equal(tp + 36, tp2 + 36, 16);
    h_fleet_stop(&f);
}

static void test_propagate_off_passes_client_headers(void **state)
{
    (void)state;
    struct h_fleet f;
    fleet_start(&f, 1, NULL, NULL, NULL, "tracing:\n  propagate: false\n");
    const char *h[] = {"traceparent: " CLIENT_TP, "tracestate: a=b", NULL};
    assert_int_equal(post_chat(f.base, h), 200);
    char tp[128];
    mock_traceparent(f.mock[0].url, tp, sizeof(tp));
    assert_string_equal(tp, CLIENT_TP); /* an ordinary end-to-end header then */
    assert_int_equal(post_chat(f.base, NULL), 200);
    json_t *v = mock_header(f.mock[0].url, "traceparent");
    assert_null(v);
    h_fleet_stop(&f);
}

/* ---- export ----------------------------------------------------------------------- */

static void test_spans_request_decision_attempt(void **state)
{
    (void)state;
    char coll[64];
    start_collector(coll, sizeof(coll));
    snprintf(yaml, sizeof(yaml), "tracing:\n  otlp_endpoint: %s\n  batch_interval: 50ms\n", coll);
    struct h_fleet f;
    fleet_start(&f, 2, NULL, "round_robin", "retry:\n  backoff: 10ms\n", yaml);
    /* Both fail once: w?, then the other, answer 503; the third attempt succeeds. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":503,\"fail_count\":1}"), 0);
    assert_int_equal(h_mock_faults(f.mock[1].url, "{\"fail_status\":503,\"fail_count\":1}"), 0);
    const char *h[] = {"traceparent: " CLIENT_TP, NULL};
    assert_int_equal(post_chat(f.base, h), 200);

    struct spans_wait w = {.url = coll, .trace = CLIENT_TRACE, .want = 7};
    assert_int_equal(h_wait_until(spans_arrived, &w, WAIT_MS), 0);
    json_t *spans = collector_spans(coll, CLIENT_TRACE);
    assert_int_equal(json_array_size(spans), 7);

    json_t *req[2], *dec[4], *att[4];
    assert_int_equal(spans_named(spans, "POST /v1/chat/completions", req, 2), 1);
    assert_int_equal(spans_named(spans, "routing decision", dec, 4), 3);
    assert_int_equal(spans_named(spans, "attempt", att, 4), 3);
    /* The request hangs under the client's span. */
    assert_string_equal(sfield(req[0], "parentSpanId"), CLIENT_PARENT);
    assert_int_equal(json_integer_value(json_object_get(req[0], "kind")), 2);
    assert_string_equal(attr(req[0], "http.response.status_code"), "200");
    assert_string_equal(attr(req[0], "gen_ai.request.model"), H_FLEET_MODEL);
    assert_string_equal(attr(req[0], "switchyard.attempts"), "3");
    assert_string_equal(sfield(req[0], "_service"), "switchyard");
    const char *req_id = sfield(req[0], "spanId");
    /* Decisions under the request; each attempt under its decision. */
    for (int i = 0; i < 3; i++) {
        assert_string_equal(sfield(dec[i], "parentSpanId"), req_id);
        assert_string_equal(attr(dec[i], "switchyard.decision"), "round_robin");
        assert_string_equal(sfield(att[i], "parentSpanId"), sfield(dec[i], "spanId"));
        assert_string_equal(attr(att[i], "switchyard.worker"), attr(dec[i], "switchyard.worker"));
        assert_int_equal(json_integer_value(json_object_get(att[i], "kind")), 3);
        assert_true(strtoull(sfield(att[i], "startTimeUnixNano"), NULL, 10) >=
                    strtoull(sfield(req[0], "startTimeUnixNano"), NULL, 10));
        assert_true(strtoull(sfield(att[i], "endTimeUnixNano"), NULL, 10) >=
                    strtoull(sfield(att[i], "startTimeUnixNano"), NULL, 10));
    }
    for (int i = 0; i < 2; i++) {
        assert_string_equal(attr(att[i], "switchyard.outcome"), "retryable_status");
        assert_string_equal(attr(att[i], "http.response.status_code"), "503");
    }
    assert_string_equal(attr(att[2], "switchyard.outcome"), "ok");
    assert_string_equal(attr(att[2], "http.response.status_code"), "200");
    /* Each worker's last traceparent names its last attempt's span. */
    for (int i = 1; i < 3; i++) {
        const char *worker = attr(att[i], "switchyard.worker");
        char tp[128];
        mock_traceparent(f.mock[strcmp(worker, "w1") == 0 ? 0 : 1].url, tp, sizeof(tp));
        assert_memory_equal(tp + 36, sfield(att[i], "spanId"), 16);
    }
    json_decref(spans);
    assert_int_equal(h_fleet_dp_metric_checked(&f, "switchyard_trace_spans_dropped_total"), 0);
    assert_true(h_fleet_dp_metric_checked(&f, "switchyard_trace_spans_exported_total") >= 7);

    /* A client that says "not sampled" is obeyed: no spans, context still passed. */
    const char *h0[] = {"traceparent: 00-" CLIENT_PARENT CLIENT_PARENT "-" CLIENT_PARENT "-00",
                        NULL};
    assert_int_equal(post_chat(f.base, h0), 200);
    assert_int_equal(post_chat(f.base, h), 200); /* a sampled one after it, as a marker */
    w.want = 10;                                 /* 7 + request, decision, attempt */
    assert_int_equal(h_wait_until(spans_arrived, &w, WAIT_MS), 0);
    json_t *none = collector_spans(coll, CLIENT_PARENT CLIENT_PARENT);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    h_fleet_stop(&f);
}

static void test_pd_leg_spans(void **state)
{
    (void)state;
    char coll[64];
    start_collector(coll, sizeof(coll));
    snprintf(yaml, sizeof(yaml),
             "tracing:\n  otlp_endpoint: %s/v1/traces\n  batch_interval: 50ms\n", coll);
    static const char *const roles[] = {"prefill", "decode"};
    struct h_fleet f;
    fleet_start(&f, 2, roles, NULL, NULL, yaml);
    const char *h[] = {"traceparent: " CLIENT_TP, NULL};
    assert_int_equal(post_chat(f.base, h), 200);
    /* request, 2 legs, 2 decisions, 2 attempts */
    struct spans_wait w = {.url = coll, .trace = CLIENT_TRACE, .want = 7};
    assert_int_equal(h_wait_until(spans_arrived, &w, WAIT_MS), 0);
    json_t *spans = collector_spans(coll, CLIENT_TRACE);
    json_t *req[2], *pre[2], *dec_leg[2], *dec[4], *att[4];
    assert_int_equal(spans_named(spans, "POST /v1/chat/completions", req, 2), 1);
    assert_int_equal(spans_named(spans, "prefill", pre, 2), 1);
    assert_int_equal(spans_named(spans, "decode", dec_leg, 2), 1);
    assert_int_equal(spans_named(spans, "routing decision", dec, 4), 2);
    assert_int_equal(spans_named(spans, "attempt", att, 4), 2);
    const char *req_id = sfield(req[0], "spanId");
    assert_string_equal(sfield(pre[0], "parentSpanId"), req_id);
    assert_string_equal(sfield(dec_leg[0], "parentSpanId"), req_id);
    assert_string_equal(sfield(dec[0], "parentSpanId"), sfield(pre[0], "spanId"));
    assert_string_equal(sfield(dec[1], "parentSpanId"), sfield(dec_leg[0], "spanId"));
    assert_string_equal(sfield(att[0], "parentSpanId"), sfield(dec[0], "spanId"));
    assert_string_equal(sfield(att[1], "parentSpanId"), sfield(dec[1], "spanId"));
    assert_string_equal(attr(att[0], "switchyard.worker"), "w1");
    assert_string_equal(attr(att[0], "switchyard.leg"), "prefill");
    assert_string_equal(attr(att[1], "switchyard.worker"), "w2");
    assert_string_equal(attr(att[1], "switchyard.leg"), "decode");
    assert_string_equal(attr(req[0], "switchyard.prefill_worker"), "w1");
    json_decref(spans);
    h_fleet_stop(&f);
}

/* ---- a slow or absent collector ----------------------------------------------------- */

static void test_slow_or_down_collector_never_slows_requests(void **state)
{
    (void)state;
    char coll[64];
    struct h_proc *cp = start_collector(coll, sizeof(coll));
    collector_config(coll, "{\"delay_ms\":3000}");
    snprintf(yaml, sizeof(yaml),
             "tracing:\n  otlp_endpoint: %s\n  batch_interval: 20ms\n  batch_size: 8\n"
             "  queue_size: 4KiB\n  export_timeout: 5s\n",
             coll);
    struct h_fleet f;
    fleet_start(&f, 1, NULL, NULL, NULL, yaml);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    int64_t worst = 0, t0 = h_now_ms();
    for (int i = 0; i < 300; i++) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, CHAT, &resp), 0);
        assert_int_equal(resp.status, 200);
        if (resp.elapsed_ms > worst)
            worst = resp.elapsed_ms;
        h_resp_fini(&resp);
    }
    long long dropped = h_fleet_dp_metric_checked(&f, "switchyard_trace_spans_dropped_total");
    print_message("slow collector: 300 requests in %lld ms, slowest %lld ms, %lld spans dropped\n",
                  (long long)(h_now_ms() - t0), (long long)worst, dropped);
    assert_true(worst < 1000);
    assert_true(dropped > 0);

    /* The collector goes away: exports fail, requests do not notice. */
    assert_int_equal(h_proc_stop(cp, H_STOP_TIMEOUT_MS), 0);
    t0 = h_now_ms();
    for (int i = 0; i < 50; i++) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, CHAT, &resp), 0);
        assert_int_equal(resp.status, 200);
        if (resp.elapsed_ms > worst)
            worst = resp.elapsed_ms;
        h_resp_fini(&resp);
    }
    assert_true(worst < 1000);
    int64_t deadline = h_now_ms() + WAIT_MS;
    long long failures = 0;
    while ((failures = h_fleet_dp_metric_checked(&f, "switchyard_trace_export_failures_total")) <
               1 &&
           h_now_ms() < deadline) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, CHAT, &resp), 0);
        h_resp_fini(&resp);
    }
    print_message("collector down: %lld failed exports\n", failures);
    assert_true(failures >= 1);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_worker_gets_trace_context),
        H_TEST(test_propagate_off_passes_client_headers),
        H_TEST(test_spans_request_decision_attempt),
        H_TEST(test_pd_leg_spans),
        H_TEST(test_slow_or_down_collector_never_slows_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
