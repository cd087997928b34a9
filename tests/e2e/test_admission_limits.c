/*
 * End-to-end tests of the admission limits nothing else drives end to end
 * (docs/configuration.md, "admission" and "The keys file"):
 *
 *  - a tenant's tokens_per_min: a request's cost is its prompt bytes / 4
 *    plus max_tokens; a request the token bucket cannot pay is answered
 *    429 rate_limit with the Retry-After its refill needs, a small one
 *    still passes, and the large one passes again once the bucket has
 *    refilled at tokens_per_min / 60 per second (not sooner);
 *  - admission.max_waiting_per_worker and admission.max_kv_usage, judged on
 *    the worker's fresh load report only: while the worker's /metrics says
 *    it is over the limit, a request waits in the router's queue (it is not
 *    sent, even after several fresh reports); once /metrics hangs and the
 *    report is older than controlplane.load_reports.stale_after, the same
 *    request is admitted and answered (a stale report saturates nothing),
 *    although the worker's truth has not changed in the kv case.
 *
 * The worker's numbers are real: requests held directly on the mock worker
 * (outside the router: another node's, as far as this one knows) with its
 * stall fault, against --max-num-seqs 1 (so the rest wait in its FIFO) or a
 * tiny --kv-blocks (so one running request fills its cache).
 *
 * Mutation-verified: tests/mutants/token-bucket-refills-fast.mutant (the
 * token bucket refilling 1000x too fast) fails the first test;
 * tests/mutants/admission-reads-stale-report.mutant (admission using a
 * report whatever its age) fails the other two.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS 5000

/* ---- helpers ------------------------------------------------------------------ */

struct post_result {
    long status;
    char rejected[64];
    char retry_after[16];
    char code[64];
};

/* A non-streaming completion through the router, with a tenant key. */
static void post_completion(const char *base, const char *body, const char *key,
                            struct post_result *out)
{
    char url[128], auth[128];
    snprintf(url, sizeof(url), "%s/v1/completions", base);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    const char *headers[] = {"Content-Type: application/json", auth, NULL};
    struct h_req req = {.url = url, .body = body, .headers = headers};
    struct h_resp r = {0};
    memset(out, 0, sizeof(*out));
    assert_int_equal(h_http(&req, &r), 0);
    out->status = r.status;
    (void)h_resp_header(&r, "x-switchyard-rejected", out->rejected, sizeof(out->rejected));
    (void)h_resp_header(&r, "Retry-After", out->retry_after, sizeof(out->retry_after));
    json_t *j = h_resp_json(&r);
    json_t *code = json_object_get(json_object_get(j, "error"), "code");
    if (json_is_string(code))
        snprintf(out->code, sizeof(out->code), "%s", json_string_value(code));
    json_decref(j);
    h_resp_fini(&r);
}

/* ---- tokens_per_min --------------------------------------------------------------- */

/*
 * 600 tokens a minute: one token every 100 ms, a bucket of 600. BIG costs
 * 1 (the 4-byte prompt) + 309 = 310 tokens, SMALL 1 + 3 = 4.
 */
#define TPM        600
#define BIG_COST   310
#define SMALL_COST 4
#define BIG        "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"abcd\",\"max_tokens\":309}"
#define SMALL      "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"abcd\",\"max_tokens\":3}"

#define TOKENS_AVAILABLE                                                                           \
    "switchyard_admission_ratelimit_available{tenant=\"team-t\",limit=\"tokens\"}"

struct avail_cond {
    const struct h_fleet *f;
    long long want;
};

static bool tokens_available(void *arg)
{
    struct avail_cond *c = arg;
    return h_fleet_dp_metric(c->f, TOKENS_AVAILABLE) >= c->want;
}

static void test_tokens_per_min(void **state)
{
    (void)state;
    char hex[65], text[512], keys[H_PATH_MAX], dp_extra[H_PATH_MAX + 32];
    h_sha256_hex("key-t", hex);
    snprintf(text, sizeof(text),
             "tenants:\n  - name: team-t\n    key_sha256: %s\n    tokens_per_min: %d\n", hex, TPM);
    assert_int_equal(h_write_file("keys.yaml", text, keys, sizeof(keys)), 0);
    snprintf(dp_extra, sizeof(dp_extra), "api_keys_file: %s\n", keys);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = dp_extra});

    /* A full bucket pays the first large request: 600 - 310 left (a
     * token more for every 100 ms the gauge is read later). */
    struct post_result r;
    int64_t t0 = h_now_ms();
    post_completion(f.base, BIG, "key-t", &r);
    assert_int_equal(r.status, 200);
    long long avail = h_fleet_dp_metric(&f, TOKENS_AVAILABLE);
    assert_true(avail >= TPM - BIG_COST && avail <= TPM - BIG_COST + 5);

    /* The second cannot be paid: 20 tokens short, 2 s of refill. */
    post_completion(f.base, BIG, "key-t", &r);
    assert_int_equal(r.status, 429);
    assert_string_equal(r.rejected, "rate_limit");
    assert_string_equal(r.code, "rate_limit_exceeded");
    assert_string_equal(r.retry_after, "2");
    /* A refused request takes nothing; one the bucket can pay passes. */
    post_completion(f.base, SMALL, "key-t", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_admission_rejected_total{reason="
                                           "\"rate_limit\",tenant=\"team-t\"}"),
                     1);

    /* Refilled at 10 tokens/s: the large one passes again 2.4 s after the
     * first (20 + 4 tokens short), not before 2 s. */
    struct avail_cond c = {&f, BIG_COST};
    assert_int_equal(h_wait_until(tokens_available, &c, WAIT_MS), 0);
    assert_true(h_now_ms() - t0 >= 2000);
    post_completion(f.base, BIG, "key-t", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 3);
    h_fleet_stop(&f);
}

/* ---- saturation from a stale report ------------------------------------------------- */

/* Scraped every 100 ms; older than 500 ms is stale. */
#define STALE_AFTER_MS 500
static const char load_reports_yaml[] = "load_reports:\n"
                                        "  interval: 100ms\n"
                                        "  timeout: 200ms\n"
                                        "  stale_after: 500ms\n";

#define ROUTED "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"routed\",\"max_tokens\":2}"

/* w1's last load report on the control plane's GET /workers: one field
 * (age_ms, waiting, kv_cache_usage); -1 when there is no report. */
static double report_field(const struct h_fleet *f, const char *field)
{
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), f->cfg.admin_port, "/workers"), 0);
    struct h_resp r = {0};
    double v = -1;
    if (h_http_get(url, &r) == 0 && r.status == 200) {
        json_t *j = h_resp_json(&r);
        json_t *rep = json_object_get(json_array_get(json_object_get(j, "workers"), 0), "reported");
        json_t *x = json_object_get(rep, field);
        if (json_is_number(x))
            v = json_number_value(x);
        json_decref(j);
    }
    h_resp_fini(&r);
    return v;
}

/* The report says field >= min, and it was taken after `after` (h_now_ms). */
struct report_cond {
    const struct h_fleet *f;
    const char *field;
    double min;
    int64_t after;
};

static bool report_says(void *arg)
{
    struct report_cond *c = arg;
    double age = report_field(c->f, "age_ms");
    return age >= 0 && h_now_ms() - (int64_t)age > c->after &&
           report_field(c->f, c->field) >= c->min;
}

static long long queue_depth(const struct h_fleet *f)
{
    return h_fleet_dp_metric(f, "switchyard_admission_queue_depth{model=\"" H_FLEET_MODEL
                                "\",band=\"normal\"}");
}

static bool depth_is_one(void *arg)
{
    return queue_depth(arg) == 1;
}

static long long stale_count(const struct h_fleet *f)
{
    return h_fleet_dp_metric(f, "switchyard_load_reports_stale_total{worker=\"w1\"}");
}

/* Holds n streams directly on the mock: the first its engine admits goes
 * silent after one event (keeping its place and KV blocks), the rest wait
 * in its FIFO. Later requests are not stalled. */
static void hold_on_mock(struct h_fleet *f, const char *prompt, struct h_async **held, int n)
{
    assert_int_equal(h_mock_faults(f->mock[0].url, "{\"stall_after_chunks\":1,\"stall_ms\":60000}"),
                     0);
    char url[128], body[512];
    snprintf(url, sizeof(url), "%s/v1/completions", f->mock[0].url);
    snprintf(body, sizeof(body),
             "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"%s\",\"stream\":true,"
             "\"max_tokens\":8}",
             prompt);
    for (int i = 0; i < n; i++) {
        assert_int_equal(
            h_async_start(url, body, &(struct h_async_opts){.timeout_ms = 60000}, &held[i]), 0);
        assert_int_equal(h_async_wait_headers(held[i], WAIT_MS), 0);
    }
    assert_int_equal(h_wait_mock_stat(f->mock[0].url, "running", 1, WAIT_MS), 0);
    assert_int_equal(h_mock_faults(f->mock[0].url, "{\"stall_ms\":0,\"stall_after_chunks\":0}"), 0);
}

/*
 * The common part: the worker's report says `field` >= min (over the
 * limit). A request through the router waits in the queue, unsent, even
 * after a report taken more than stale_after after it queued; then the
 * worker's /metrics hangs and, once its report is stale, the request is
 * sent and answered. release (may be NULL) runs after /metrics hangs and
 * before the answer is awaited.
 */
static void expect_wait_until_stale(struct h_fleet *f, const char *field, double min,
                                    void (*release)(void *), void *release_arg)
{
    /* The router sees the worker over the limit. */
    struct report_cond rc = {f, field, min, 0};
    assert_int_equal(h_wait_until(report_says, &rc, WAIT_MS), 0);
    long long sent = h_fleet_mock_stat(f, 0, "requests_total");

    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f->base);
    struct h_async *a;
    assert_int_equal(h_async_start(url, ROUTED, &(struct h_async_opts){0}, &a), 0);
    int64_t queued_at = h_now_ms();
    assert_int_equal(h_wait_until(depth_is_one, f, WAIT_MS), 0);

    /* Fresh reports keep it waiting: still queued and unsent after a
     * report taken more than stale_after after it arrived. */
    rc.after = queued_at + STALE_AFTER_MS;
    assert_int_equal(h_wait_until(report_says, &rc, WAIT_MS), 0);
    struct h_async_state s;
    h_async_get_state(a, &s);
    assert_false(s.done);
    assert_int_equal(queue_depth(f), 1);
    assert_int_equal(h_fleet_mock_stat(f, 0, "requests_total"), sent);
    long long stale_before = stale_count(f);
    assert_true(stale_before >= 0);

    /* /metrics hangs (past the scrape timeout): no report is fresh after
     * stale_after, and a stale report saturates nothing. */
    assert_int_equal(h_mock_faults(f->mock[0].url, "{\"metrics_stall_ms\":60000}"), 0);
    if (release != NULL)
        release(release_arg);
    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    h_async_get_state(a, &s);
    assert_int_equal(s.status, 200);
    assert_true(report_field(f, "age_ms") > STALE_AFTER_MS);
    assert_int_equal(h_fleet_mock_stat(f, 0, "requests_total"), sent + 1);
    assert_int_equal(queue_depth(f), 0);
    assert_int_equal(h_fleet_dp_metric(f, "switchyard_admission_queue_left_total{reason="
                                          "\"dispatched\"}"),
                     1);
    assert_true(stale_count(f) > stale_before);
    h_async_destroy(a);
    assert_int_equal(h_mock_faults(f->mock[0].url, "{\"metrics_stall_ms\":0}"), 0);
}

#define WAITING_HELD 3 /* one running, two waiting on the worker */

struct held {
    struct h_fleet *f;
    struct h_async *a[WAITING_HELD];
    int n;
};

/* Ends the held streams: the worker is idle again (but /metrics hangs,
 * so only the report's age can tell the router). */
static void release_held(void *arg)
{
    struct held *h = arg;
    for (int i = 0; i < h->n; i++) {
        h_async_destroy(h->a[i]);
        h->a[i] = NULL;
    }
    assert_int_equal(h_wait_mock_stat(h->f->mock[0].url, "running", 0, WAIT_MS), 0);
    assert_int_equal(h_wait_mock_stat(h->f->mock[0].url, "waiting", 0, WAIT_MS), 0);
}

static void test_max_waiting_judged_on_fresh_reports(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--max-num-seqs", "1", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args,
                                             .controlplane_extra = load_reports_yaml,
                                             .extra_yaml = "admission:\n"
                                                           "  max_waiting_per_worker: 2\n"
                                                           "  queue:\n"
                                                           "    max_wait: 30s\n"});
    /* An idle worker is not saturated. */
    struct h_resp r = {0};
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    assert_int_equal(h_http_post_json(url, ROUTED, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);

    struct held h = {.f = &f, .n = WAITING_HELD};
    hold_on_mock(&f, "held", h.a, WAITING_HELD);
    assert_int_equal(h_wait_mock_stat(f.mock[0].url, "waiting", 2, WAIT_MS), 0);
    expect_wait_until_stale(&f, "waiting", 2, release_held, &h);
    h_fleet_stop(&f);
}

/* 256 bytes: 64 tokens, 4 blocks of 16, the whole cache of --kv-blocks 4. */
#define KV_PROMPT                                                                                  \
    "kvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkv"                             \
    "kvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkv"                             \
    "kvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkv"                             \
    "kvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkvkv"

static void test_max_kv_usage_judged_on_fresh_reports(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--kv-blocks", "4", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args,
                                             .controlplane_extra = load_reports_yaml,
                                             .extra_yaml = "admission:\n"
                                                           "  max_kv_usage: 0.5\n"
                                                           "  queue:\n"
                                                           "    max_wait: 30s\n"});
    struct h_resp r = {0};
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    assert_int_equal(h_http_post_json(url, ROUTED, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);

    /* One running stream fills the cache, and keeps it full throughout:
     * only the report's age lets the request through. */
    struct h_async *held;
    hold_on_mock(&f, KV_PROMPT, &held, 1);
    assert_int_equal(h_wait_mock_stat(f.mock[0].url, "kv_blocks_used", 4, WAIT_MS), 0);
    expect_wait_until_stale(&f, "kv_cache_usage", 0.99, NULL, NULL);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "kv_blocks_used"), 4);
    h_async_destroy(held);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_tokens_per_min),
        H_TEST(test_max_waiting_judged_on_fresh_reports),
        H_TEST(test_max_kv_usage_judged_on_fresh_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
