/*
 * End-to-end tests of security review II's findings on the data plane's
 * client port (docs/security.md, rows 14, 16, 18, 19, 24, 25): framing that
 * smuggles a second request, bodies read before the key is checked, client
 * credentials reaching workers, tenant names on /metrics, worker names in
 * errors, and a token estimate that ignores what a Responses request asks.
 * Each test sends what the review sent and asserts the fix; each failed on
 * the code before it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_raw.h"

/* ---- row 16: request framing desync ----------------------------------------- */

/*
 * Sends head (request line and headers, without the blank line) and then
 * body on one connection, and reads until the router closes it. Returns
 * the number of HTTP responses that came back; the first is in out.
 */
static int responses_until_close(const struct h_fleet *f, const char *head, const char *body,
                                 char *out, size_t cap)
{
    int fd = h_raw_connect(f->cfg.dataplane_port);
    h_raw_send_text(fd, head);
    h_raw_send_text(fd, "\r\n");
    h_raw_send_text(fd, body);
    int64_t closed = h_raw_ms_until_closed(fd, out, cap, H_READY_TIMEOUT_MS);
    close(fd);
    assert_true(closed >= 0); /* the router closed: it did not wait for more */
    int n = 0;
    for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        n++;
    return n;
}

/* The smuggled request: a GET the worker would answer (and count). */
static const char smuggled[] = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

static void test_two_content_lengths_are_refused_and_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char body[256], head[512], out[8192];
    snprintf(body, sizeof(body), "{\"a\":1}%s", smuggled);
    /* One reader takes the first length (7: the JSON), another the second
     * (the whole): the tail then runs as a request of its own. */
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: 7\r\nContent-Length: %zu\r\n",
             strlen(body));
    int n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_non_null(strstr(out, "invalid_framing"));
    /* Same values twice: refused as well (no reader has to guess). */
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: 7\r\nContent-Length: 7\r\n");
    n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

static void test_transfer_encoding_with_content_length_is_refused_and_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char body[256], head[512], out[8192];
    /* Chunked says the body ends at the 0 chunk; Content-Length says it
     * runs on over the smuggled request. */
    snprintf(body, sizeof(body), "7\r\n{\"a\":1}\r\n0\r\n\r\n%s", smuggled);
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
             "Content-Length: %zu\r\n",
             strlen(body));
    int n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_non_null(strstr(out, "invalid_framing"));
    /* A coding other than a lone chunked: its end is unknown to us. */
    n = responses_until_close(&f,
                              "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Content-Type: application/json\r\n"
                              "Transfer-Encoding: gzip, chunked\r\n",
                              "7\r\n{\"a\":1}\r\n0\r\n\r\n", out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);

    /* Plain chunked alone is fine and keeps the connection usable. */
    int fd = h_raw_connect(f.cfg.dataplane_port);
    static const char chunked[] =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "24\r\n{\"model\":\"mock-model\",\"prompt\":\"hi\"}\r\n0\r\n\r\n";
    h_raw_send_text(fd, chunked);
    size_t len = 0;
    assert_int_equal(h_raw_read_response(fd, out, sizeof(out), &len, H_READY_TIMEOUT_MS), 200);
    h_raw_send_text(fd, chunked);
    assert_int_equal(h_raw_read_response(fd, out, sizeof(out), &len, H_READY_TIMEOUT_MS), 200);
    close(fd);
    h_fleet_stop(&f);
}

/* ---- row 14: bodies read in full before the key is checked -------------------- */

#define KEY_A "key-of-team-a"

/* A fleet with one tenant, team-a (tenant_extra: more of its keys, each
 * line indented by four spaces), and dp_more more data-plane keys. */
static void start_with_keys(struct h_fleet *f, const char *tenant_extra, const char *dp_more)
{
    char hex[65], text[512], keys[H_PATH_MAX], dp_extra[H_PATH_MAX + 256];
    h_sha256_hex(KEY_A, hex);
    snprintf(text, sizeof(text), "tenants:\n  - name: team-a\n    key_sha256: %s\n%s", hex,
             tenant_extra != NULL ? tenant_extra : "");
    assert_int_equal(h_write_file("keys.yaml", text, keys, sizeof(keys)), 0);
    snprintf(dp_extra, sizeof(dp_extra), "api_keys_file: %s\n%s", keys,
             dp_more != NULL ? dp_more : "");
    h_fleet_start(f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = dp_extra});
}

/*
 * Announces a body of 31 MiB with credential header auth and sends none of
 * it: the answer must come at the headers (the old code waited for the
 * body). Returns the status; the router must then close the connection.
 */
static int status_before_body(const struct h_fleet *f, const char *auth)
{
    int fd = h_raw_connect(f->cfg.dataplane_port);
    char head[512];
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\n%s\r\nContent-Length: %d\r\n\r\n{",
             auth, 31 << 20);
    h_raw_send_text(fd, head);
    char buf[8192];
    size_t len = 0;
    int status = h_raw_read_response(fd, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS);
    if (status <= 0)
        fail_msg("no answer before the body (rc %d): the body is read before the key", status);
    int64_t closed = h_raw_ms_until_closed(fd, buf, sizeof(buf), H_READY_TIMEOUT_MS);
    close(fd);
    assert_true(closed >= 0);
    return status;
}

static void test_wrong_key_is_refused_before_the_body(void **state)
{
    (void)state;
    struct h_fleet f;
    start_with_keys(&f, NULL, NULL);
    assert_int_equal(status_before_body(&f, "Authorization: Bearer wrong"), 401);
    assert_int_equal(status_before_body(&f, "X-Api-Key: wrong"), 401);
    assert_int_equal(status_before_body(&f, "X-Nothing: 1"), 401);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_admission_rejected_total{reason="
                                           "\"unauthorized\",tenant=\"unknown\"}"),
                     3);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

static const char chat[] = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":\"user\","
                           "\"content\":\"hi\"}],\"max_tokens\":2}";

/* POSTs chat with headers; the status (asserts a response came). */
static long post_chat(const struct h_fleet *f, const char *const *headers)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_req req = {.url = url, .body = chat, .headers = headers};
    struct h_resp r;
    assert_int_equal(h_http(&req, &r), 0);
    long status = r.status;
    h_resp_fini(&r);
    return status;
}

/* An exhausted rate bucket refuses at the headers too. */
static void test_exhausted_rate_limit_is_refused_before_the_body(void **state)
{
    (void)state;
    struct h_fleet f;
    start_with_keys(&f, "    requests_per_s: 0.01\n    burst: 1\n", NULL);
    const char *hdrs[] = {"Content-Type: application/json", "Authorization: Bearer " KEY_A, NULL};
    assert_int_equal(post_chat(&f, hdrs), 200);
    assert_int_equal(status_before_body(&f, "Authorization: Bearer " KEY_A), 429);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 1);
    h_fleet_stop(&f);
}

/* ---- row 18: client credentials reach the workers ----------------------------- */

/* The headers the mock saw last, as a JSON object (owned). */
static json_t *mock_last_headers(struct h_fleet *f)
{
    json_t *stats = h_mock_stats(f->mock[0].url);
    assert_non_null(stats);
    json_t *hdrs = json_incref(json_object_get(stats, "last_request_headers"));
    json_decref(stats);
    assert_true(json_is_object(hdrs));
    return hdrs;
}

static void test_client_keys_and_strip_headers_do_not_reach_workers(void **state)
{
    (void)state;
    struct h_fleet f;
    start_with_keys(&f, NULL, "strip_headers: [X-Internal-User]\n");
    /* Anthropic's SDKs send the key as x-api-key: accepted, and stripped. */
    const char *anthropic[] = {"Content-Type: application/json", "x-api-key: " KEY_A,
                               "X-Internal-User: alice", "X-Kept: 1", NULL};
    assert_int_equal(post_chat(&f, anthropic), 200);
    json_t *h = mock_last_headers(&f);
    assert_null(json_object_get(h, "x-api-key"));
    assert_null(json_object_get(h, "authorization"));
    assert_null(json_object_get(h, "x-internal-user"));
    assert_non_null(json_object_get(h, "x-kept"));
    json_decref(h);
    /* Both sent: Authorization decides, neither goes on. */
    const char *both[] = {"Content-Type: application/json", "Authorization: Bearer " KEY_A,
                          "x-api-key: something-else", NULL};
    assert_int_equal(post_chat(&f, both), 200);
    h = mock_last_headers(&f);
    assert_null(json_object_get(h, "x-api-key"));
    assert_null(json_object_get(h, "authorization"));
    json_decref(h);
    h_fleet_stop(&f);
}

/* ---- row 19: tenant names and bucket levels on the client port's /metrics ------ */

/* The data plane's /metrics page (owned). */
static char *dp_metrics_page(const struct h_fleet *f)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", f->base);
    struct h_resp r;
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    char *page = strndup(r.body, r.body_len);
    h_resp_fini(&r);
    assert_non_null(page);
    return page;
}

static void test_metrics_can_hide_tenants(void **state)
{
    (void)state;
    struct h_fleet f;
    start_with_keys(&f, "    requests_per_s: 100\n    burst: 10\n",
                    "metrics_tenant_labels: false\n");
    const char *hdrs[] = {"Content-Type: application/json", "Authorization: Bearer " KEY_A, NULL};
    assert_int_equal(post_chat(&f, hdrs), 200);
    const char *wrong[] = {"Content-Type: application/json", "Authorization: Bearer x", NULL};
    assert_int_equal(post_chat(&f, wrong), 401);
    char *page = dp_metrics_page(&f);
    if (strstr(page, "team-a") != NULL || strstr(page, "tenant=") != NULL)
        fail_msg("/metrics names tenants:\n%s", strstr(page, "tenant="));
    assert_null(strstr(page, "switchyard_admission_ratelimit_available{"));
    free(page);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_admission_admitted_total"), 1);
    assert_int_equal(
        h_fleet_dp_metric(&f, "switchyard_admission_rejected_total{reason=\"unauthorized\"}"), 1);
    h_fleet_stop(&f);

    /* The default still labels by tenant (dashboards depend on it). */
    start_with_keys(&f, NULL, NULL);
    assert_int_equal(post_chat(&f, hdrs), 200);
    assert_int_equal(
        h_fleet_dp_metric(&f, "switchyard_admission_admitted_total{tenant=\"team-a\"}"), 1);
    h_fleet_stop(&f);
}

/* ---- row 24: errors name internal worker ids ------------------------------------ */

static void test_errors_do_not_name_workers(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .dataplane_extra = "first_byte_timeout: 300ms\n"
                                                                "debug_headers: true\n"});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_before_headers_ms\":2000}"), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, chat, &r), 0);
    assert_int_equal(r.status, 504);
    if (strstr(r.body, "w1") != NULL || strstr(r.body, "127.0.0.1") != NULL)
        fail_msg("the error names the worker: %s", r.body);
    assert_non_null(strstr(r.body, "upstream_timeout"));
    /* The operator's debug header keeps the detail. */
    char cause[256];
    assert_int_equal(h_resp_header(&r, "x-switchyard-error-cause", cause, sizeof(cause)), 0);
    assert_non_null(strstr(cause, "worker w1"));
    h_resp_fini(&r);
    h_fleet_stop(&f);

    /* Off by default: the detail stays in the log. */
    h_fleet_start(&f,
                  &(struct h_fleet_opts){.n = 1, .dataplane_extra = "first_byte_timeout: 300ms\n"});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_before_headers_ms\":2000}"), 0);
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    assert_int_equal(h_http_post_json(url, chat, &r), 0);
    assert_int_equal(r.status, 504);
    assert_null(strstr(r.body, "w1"));
    assert_int_not_equal(h_resp_header(&r, "x-switchyard-error-cause", cause, sizeof(cause)), 0);
    h_resp_fini(&r);
    assert_true(h_proc_log_contains(f.dp, "worker w1 sent no response headers"));
    h_fleet_stop(&f);
}

/* ---- row 25: the token estimate ignores max_output_tokens and n ------------------ */

#define TOKENS_LEFT "switchyard_admission_ratelimit_available{tenant=\"team-a\",limit=\"tokens\"}"

/* POSTs body to path as team-a; the status. */
static long post_as_a(const struct h_fleet *f, const char *path, const char *body)
{
    char url[128];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    const char *hdrs[] = {"Content-Type: application/json", "Authorization: Bearer " KEY_A, NULL};
    struct h_req req = {.url = url, .body = body, .headers = hdrs};
    struct h_resp r;
    assert_int_equal(h_http(&req, &r), 0);
    long status = r.status;
    h_resp_fini(&r);
    return status;
}

/*
 * 600 tokens a minute refill 10 a second. A Responses request capped at
 * 500 output tokens costs about 500, not the 1 of its 4-byte input; so do
 * 5 choices of 100 tokens each.
 */
static void test_token_estimate_counts_output_cap_and_choices(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"/v1/responses", "{\"model\":\"" H_FLEET_MODEL "\",\"input\":\"abcd\","
                          "\"max_output_tokens\":500}"},
        {"/v1/completions", "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"abcd\","
                            "\"max_tokens\":100,\"n\":5}"},
    };
    for (size_t i = 0; i < 2; i++) {
        struct h_fleet f;
        start_with_keys(&f, "    tokens_per_min: 600\n", NULL);
        assert_int_equal(post_as_a(&f, cases[i][0], cases[i][1]), 200);
        long long left = h_fleet_dp_metric(&f, TOKENS_LEFT);
        /* About 600 - 501, plus what refilled meanwhile (10 a second). */
        if (left < 0 || left > 600 - 500 + 40)
            fail_msg("case %zu: %lld tokens left, the estimate ignored the output", i, left);
        /* The next one cannot be paid. */
        assert_int_equal(post_as_a(&f, cases[i][0], cases[i][1]), 429);
        h_fleet_stop(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_two_content_lengths_are_refused_and_closed),
        H_TEST(test_transfer_encoding_with_content_length_is_refused_and_closed),
        H_TEST(test_wrong_key_is_refused_before_the_body),
        H_TEST(test_exhausted_rate_limit_is_refused_before_the_body),
        H_TEST(test_client_keys_and_strip_headers_do_not_reach_workers),
        H_TEST(test_metrics_can_hide_tenants),
        H_TEST(test_errors_do_not_name_workers),
        H_TEST(test_token_estimate_counts_output_cap_and_choices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
