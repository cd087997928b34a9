/*
 * End-to-end tests of switchyard-mockworker itself, against its contract:
 * the OpenAI API shapes and SSE framing, the cost model (prefix hits, LRU
 * eviction, FIFO admission above --max-num-seqs, latencies), every fault of
 * POST /mock/faults, client-abort accounting, the prefill/decode
 * kv_transfer_params round trip, /metrics in Prometheus text format and the
 * OpenAI error body. Every other e2e test trusts the mock, so the mock is
 * tested first.
 *
 * Each test starts its own mock worker on a free port (H_TEST gives it a
 * context that teardown cleans up) and waits on conditions with deadlines.
 * Timing assertions are lower bounds only (a stall of T ms lasts at least
 * T ms) so a slow machine or a sanitizer build cannot make them flaky.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/e2e/harness.h"

#define MODEL        "mock-model"
#define WAIT_MS      5000 /* generous deadline for state changes */
#define ABORT_MS     1000 /* the contract: an abort is noticed within 1 s */
#define BLOCK_TOKENS 16
#define BLOCK_BYTES  (4 * BLOCK_TOKENS)

/* ---- helpers ------------------------------------------------------------- */

/* Starts a mock worker with the default model name plus extra flags. */
#define START_MOCK(m, ...) assert_int_equal(h_mock_start((m), "--model", MODEL, __VA_ARGS__), 0)

/* Deterministic text of n bytes; different seeds differ at every byte. */
static void make_text(char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)('a' + (i * 7 + seed * 11 + (i / 26) * 3) % 26);
    buf[n] = '\0';
}

static char *dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    assert_non_null(s);
    json_decref(j);
    return s;
}

static char *completion_body(const char *prompt, int max_tokens, bool stream)
{
    return dump(json_pack("{s:s, s:s, s:i, s:b}", "model", MODEL, "prompt", prompt, "max_tokens",
                          max_tokens, "stream", stream));
}

static char *chat_body(const char *content, int max_tokens, bool stream)
{
    return dump(json_pack("{s:s, s:[{s:s, s:s}], s:i, s:b}", "model", MODEL, "messages", "role",
                          "user", "content", content, "max_tokens", max_tokens, "stream", stream));
}

static void mock_url(const struct h_mock *m, const char *path, char *buf, size_t len)
{
    assert_true((size_t)snprintf(buf, len, "%s%s", m->url, path) < len);
}

/* POSTs body to the mock and returns the parsed JSON answer; status checked. */
static json_t *post_expect(const struct h_mock *m, const char *path, const char *body,
                           long want_status)
{
    char url[H_URL_MAX];
    mock_url(m, path, url, sizeof(url));
    struct h_resp resp;
    assert_int_equal(h_http_post_json(url, body, &resp), 0);
    if (resp.status != want_status)
        fail_msg("POST %s: status %ld, want %ld; body %s", path, resp.status, want_status,
                 resp.body);
    json_t *j = h_resp_json(&resp);
    if (j == NULL)
        fail_msg("POST %s: body is not JSON: %s", path, resp.body);
    h_resp_fini(&resp);
    return j;
}

/* One completion (non-streaming) that must succeed. */
static void complete(const struct h_mock *m, const char *prompt)
{
    char *body = completion_body(prompt, 1, false);
    json_decref(post_expect(m, "/v1/completions", body, 200));
    free(body);
}

static long long stat_of(const struct h_mock *m, const char *key)
{
    long long v = -1;
    int rc = h_mock_stat_int(m->url, key, &v);
    if (rc != 0)
        fail_msg("/mock/stats: no integer '%s' (rc %d)", key, rc);
    return v;
}

static void wait_stat(const struct h_mock *m, const char *key, long long want, int timeout_ms)
{
    if (h_wait_mock_stat(m->url, key, want, timeout_ms) != 0)
        fail_msg("/mock/stats %s stayed %lld, want %lld within %d ms", key, stat_of(m, key), want,
                 timeout_ms);
}

struct status_count {
    const char *url;
    const char *status;
    json_int_t want;
};

static bool status_count_cond(void *arg)
{
    const struct status_count *c = arg;
    json_t *stats = h_mock_stats(c->url);
    json_t *v = json_object_get(json_object_get(stats, "by_status"), c->status);
    bool ok = json_is_integer(v) && json_integer_value(v) == c->want;
    json_decref(stats);
    return ok;
}

/* Waits until /mock/stats by_status[status] == want. */
static void wait_status_count(const struct h_mock *m, const char *status, json_int_t want)
{
    struct status_count c = {.url = m->url, .status = status, .want = want};
    if (h_wait_until(status_count_cond, &c, WAIT_MS) != 0) {
        json_t *stats = h_mock_stats(m->url);
        char *text = json_dumps(json_object_get(stats, "by_status"), JSON_COMPACT);
        fail_msg("by_status[%s] never became %lld: %s", status, (long long)want, text);
    }
}

static json_int_t int_field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("field '%s' is not an integer", key);
    return json_integer_value(v);
}

static const char *str_field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        fail_msg("field '%s' is not a string", key);
    return json_string_value(v);
}

/* Checks the OpenAI error body {"error":{"message","type","code"}}. */
static void assert_openai_error(json_t *j)
{
    json_t *err = json_object_get(j, "error");
    assert_true(json_is_object(err));
    assert_true(json_string_length(json_object_get(err, "message")) > 0);
    assert_true(json_is_string(json_object_get(err, "type")));
    assert_non_null(json_object_get(err, "code"));
}

static void assert_usage(json_t *usage, json_int_t completion_tokens)
{
    assert_true(json_is_object(usage));
    json_int_t p = int_field(usage, "prompt_tokens");
    json_int_t c = int_field(usage, "completion_tokens");
    assert_true(p > 0);
    assert_int_equal(c, completion_tokens);
    assert_int_equal(int_field(usage, "total_tokens"), p + c);
}

/* The events of a finished stream parsed as JSON; [DONE] must be last. */
static void assert_sse_well_formed(const struct h_sse *s)
{
    assert_int_equal(s->resp.status, 200);
    assert_int_equal(s->resp.curl_code, 0);
    char ctype[128];
    assert_int_equal(h_resp_header(&s->resp, "Content-Type", ctype, sizeof(ctype)), 0);
    assert_non_null(strstr(ctype, "text/event-stream"));
    if (s->malformed)
        fail_msg("stream is not 'data: <json>\\n\\n' events: %s", s->resp.body);
    assert_true(s->saw_done);
    assert_true(s->n_events >= 2);
    assert_string_equal(s->events[s->n_events - 1].data, "[DONE]");
    for (size_t i = 0; i + 1 < s->n_events; i++) {
        json_t *j = json_loads(s->events[i].data, 0, NULL);
        if (!json_is_object(j))
            fail_msg("event %zu is not a JSON object: %s", i, s->events[i].data);
        json_decref(j);
    }
}

static json_t *event_json(const struct h_sse *s, size_t i)
{
    assert_true(i < s->n_events);
    json_t *j = json_loads(s->events[i].data, 0, NULL);
    assert_non_null(j);
    return j;
}

/* Streams body to path and checks the framing. */
static void stream_ok(const struct h_mock *m, const char *path, const char *body, struct h_sse *s)
{
    char url[H_URL_MAX];
    mock_url(m, path, url, sizeof(url));
    assert_int_equal(h_http_stream(url, body, s), 0);
    assert_sse_well_formed(s);
}

/* ---- API shapes and SSE framing ------------------------------------------ */

static void test_health_models_and_help(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    char url[H_URL_MAX];
    struct h_resp resp;

    mock_url(&m, "/v1/models", url, sizeof(url));
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    json_t *j = h_resp_json(&resp);
    assert_non_null(j);
    assert_string_equal(str_field(j, "object"), "list");
    json_t *first = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(str_field(first, "id"), MODEL);
    json_decref(j);
    h_resp_fini(&resp);

    /* --help prints the flags and exits 0; an unknown flag exits non-zero. */
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-mockworker", bin, sizeof(bin)), 0);
    const char *help_argv[] = {bin, "--help", NULL};
    struct h_proc *help;
    assert_int_equal(h_spawn("mockworker-help", help_argv, &help), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(help, WAIT_MS, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    FILE *f = fopen(help->log_path, "r");
    assert_non_null(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "--listen"));
    assert_non_null(strstr(text, "--max-num-seqs"));

    uint16_t port;
    assert_int_equal(h_free_port(&port), 0);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    const char *bad_argv[] = {bin, "--listen", listen, "--no-such-flag", NULL};
    struct h_proc *bad;
    assert_int_equal(h_spawn("mockworker-bad", bad_argv, &bad), 0);
    assert_int_equal(h_proc_wait(bad, WAIT_MS, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
}

static void test_chat_stream_framing(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    char *body = chat_body("Say something about switchyards.", 5, true);
    struct h_sse s;
    stream_ok(&m, "/v1/chat/completions", body, &s);

    /* Exactly "data: <payload>\n\n" per event, nothing else in the body. */
    size_t expect_len = 0;
    for (size_t i = 0; i < s.n_events; i++)
        expect_len += 6 + s.events[i].len + 2;
    assert_int_equal(s.resp.body_len, expect_len);

    bool saw_finish = false;
    for (size_t i = 0; i + 1 < s.n_events; i++) {
        json_t *j = event_json(&s, i);
        assert_string_equal(str_field(j, "object"), "chat.completion.chunk");
        assert_string_equal(str_field(j, "model"), MODEL);
        assert_true(json_string_length(json_object_get(j, "id")) > 0);
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        assert_true(json_is_object(choice));
        assert_true(json_is_object(json_object_get(choice, "delta")));
        if (json_is_string(json_object_get(choice, "finish_reason")))
            saw_finish = true;
        /* Without stream_options.include_usage no chunk carries usage. */
        assert_false(json_is_object(json_object_get(j, "usage")));
        json_decref(j);
    }
    assert_true(saw_finish);
    h_sse_fini(&s);
    free(body);
}

static void test_completion_stream_usage_chunk(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    json_t *req =
        json_pack("{s:s, s:s, s:i, s:b, s:{s:b}}", "model", MODEL, "prompt", "Once upon a time",
                  "max_tokens", 7, "stream", true, "stream_options", "include_usage", true);
    char *body = dump(req);
    struct h_sse s;
    stream_ok(&m, "/v1/completions", body, &s);

    for (size_t i = 0; i + 2 < s.n_events; i++) {
        json_t *j = event_json(&s, i);
        assert_string_equal(str_field(j, "object"), "text_completion");
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        assert_true(json_is_string(json_object_get(choice, "text")));
        assert_false(json_is_object(json_object_get(j, "usage")));
        json_decref(j);
    }
    /* The chunk right before [DONE] is the usage chunk with no choices. */
    json_t *last = event_json(&s, s.n_events - 2);
    assert_usage(json_object_get(last, "usage"), 7);
    assert_int_equal(json_array_size(json_object_get(last, "choices")), 0);
    json_decref(last);
    h_sse_fini(&s);
    free(body);
}

static void test_non_streaming_shapes(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);

    char *body = chat_body("Hello there, mock.", 4, false);
    json_t *j = post_expect(&m, "/v1/chat/completions", body, 200);
    assert_string_equal(str_field(j, "object"), "chat.completion");
    assert_string_equal(str_field(j, "model"), MODEL);
    assert_true(json_string_length(json_object_get(j, "id")) > 0);
    assert_true(json_is_integer(json_object_get(j, "created")));
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    assert_string_equal(str_field(msg, "role"), "assistant");
    assert_true(json_string_length(json_object_get(msg, "content")) > 0);
    assert_true(json_is_string(json_object_get(choice, "finish_reason")));
    assert_usage(json_object_get(j, "usage"), 4);
    json_decref(j);
    free(body);

    body = completion_body("The quick brown fox", 3, false);
    j = post_expect(&m, "/v1/completions", body, 200);
    assert_string_equal(str_field(j, "object"), "text_completion");
    choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_true(json_is_string(json_object_get(choice, "text")));
    assert_usage(json_object_get(j, "usage"), 3);
    json_decref(j);
    free(body);

    body = dump(json_pack("{s:s, s:s}", "model", MODEL, "input", "embed me"));
    j = post_expect(&m, "/v1/embeddings", body, 200);
    assert_string_equal(str_field(j, "object"), "list");
    json_t *d0 = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(str_field(d0, "object"), "embedding");
    json_t *vec = json_object_get(d0, "embedding");
    assert_true(json_array_size(vec) > 0);
    assert_true(json_is_number(json_array_get(vec, 0)));
    json_decref(j);
    free(body);
}

static void test_seed_and_output_tokens(void **state)
{
    (void)state;
    struct h_mock a, b;
    START_MOCK(&a, "--seed", "7", "--threads", "1", "--output-tokens", "6", NULL);
    START_MOCK(&b, "--seed", "7", "--threads", "3", "--output-tokens", "6", NULL);
    /* Without max_tokens the completion has --output-tokens tokens. */
    char *body = dump(json_pack("{s:s, s:s}", "model", MODEL, "prompt", "seeded"));
    json_t *ja = post_expect(&a, "/v1/completions", body, 200);
    json_t *jb = post_expect(&b, "/v1/completions", body, 200);
    assert_usage(json_object_get(ja, "usage"), 6);
    /* The same seed gives the same text. */
    json_t *ca = json_array_get(json_object_get(ja, "choices"), 0);
    json_t *cb = json_array_get(json_object_get(jb, "choices"), 0);
    assert_string_equal(str_field(ca, "text"), str_field(cb, "text"));
    json_decref(ja);
    json_decref(jb);
    free(body);
}

static void test_stats_record_requests(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));
    char *body = completion_body("remember me", 2, false);
    const char *const headers[] = {"X-Request-Id: req-42", "X-Custom-Thing: yes", NULL};
    const struct h_req req = {.url = url, .body = body, .headers = headers};
    struct h_resp resp;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(h_http(&req, &resp), 0);
        assert_int_equal(resp.status, 200);
        h_resp_fini(&resp);
    }

    /* A request leaves the counters just after its last byte: wait for it. */
    wait_stat(&m, "inflight", 0, WAIT_MS);
    wait_stat(&m, "requests_total", 3, WAIT_MS);
    wait_status_count(&m, "200", 3);
    json_t *stats = h_mock_stats(m.url);
    assert_non_null(stats);
    assert_int_equal(int_field(stats, "waiting"), 0);
    assert_int_equal(int_field(stats, "running"), 0);
    assert_int_equal(int_field(stats, "client_aborts"), 0);
    json_t *sent = json_loads(body, 0, NULL);
    assert_true(json_equal(json_object_get(stats, "last_request"), sent));
    json_decref(sent);
    json_t *hdrs = json_object_get(stats, "last_request_headers");
    assert_string_equal(str_field(hdrs, "x-request-id"), "req-42");
    assert_string_equal(str_field(hdrs, "x-custom-thing"), "yes");
    json_decref(stats);

    /* reset clears the counters. */
    assert_int_equal(h_mock_reset(m.url), 0);
    assert_int_equal(stat_of(&m, "requests_total"), 0);
    free(body);
}

/* As vLLM: /v1/models lists every served name and adapter, each name
 * serves, /ping is health (GET and POST), and --legacy-errors answers the
 * old top-level error shape. */
static void test_names_adapters_ping_legacy_errors(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--served-model-name", "a", "b", "--lora-modules",
                                  "sql=/adapters/sql", "--legacy-errors", NULL),
                     0);
    char url[H_URL_MAX];
    struct h_resp resp;
    mock_url(&m, "/v1/models", url, sizeof(url));
    assert_int_equal(h_http_get(url, &resp), 0);
    json_t *j = h_resp_json(&resp);
    h_resp_fini(&resp);
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 3);
    static const char *const ids[] = {"a", "b", "sql"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(str_field(json_array_get(data, i), "id"), ids[i]);
    json_t *lora = json_array_get(data, 2);
    assert_string_equal(str_field(lora, "root"), "/adapters/sql");
    assert_string_equal(str_field(lora, "parent"), "a");
    assert_true(json_is_null(json_object_get(json_array_get(data, 1), "parent")));
    json_decref(j);

    /* Every name serves; responses carry the first one, as vLLM's. */
    for (size_t i = 0; i < 3; i++) {
        char *body =
            dump(json_pack("{s:s, s:s, s:i}", "model", ids[i], "prompt", "hi", "max_tokens", 1));
        j = post_expect(&m, "/v1/completions", body, 200);
        assert_string_equal(str_field(j, "model"), "a");
        json_decref(j);
        free(body);
    }

    /* The old error shape: top-level object "error", message, type, code. */
    char *body = dump(json_pack("{s:s, s:s}", "model", "nope", "prompt", "hi"));
    j = post_expect(&m, "/v1/completions", body, 404);
    free(body);
    assert_string_equal(str_field(j, "object"), "error");
    assert_non_null(strstr(str_field(j, "message"), "nope"));
    assert_string_equal(str_field(j, "type"), "NotFoundError");
    assert_int_equal(json_integer_value(json_object_get(j, "code")), 404);
    assert_null(json_object_get(j, "error"));
    json_decref(j);

    mock_url(&m, "/ping", url, sizeof(url));
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    assert_int_equal(h_http_post_json(url, "{}", &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\":503}"), 0);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 503);
    h_resp_fini(&resp);
}

static void test_bad_input_errors(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    static const char *const paths[] = {"/v1/chat/completions", "/v1/completions",
                                        "/v1/embeddings"};
    static const char *const bodies[] = {"{not json", "", "[1, 2", "{\"model\": }"};
    for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
        for (size_t b = 0; b < sizeof(bodies) / sizeof(bodies[0]); b++) {
            json_t *j = post_expect(&m, paths[p], bodies[b], 400);
            assert_openai_error(j);
            json_decref(j);
        }
    }
    /* The mock still serves after bad input. */
    complete(&m, "still alive");
}

/* ---- cost model ---------------------------------------------------------- */

/* Completes prompt and returns the (hit, query) token deltas it caused. */
static void prefix_delta(const struct h_mock *m, const char *prompt, long long *hit,
                         long long *query)
{
    long long h0 = stat_of(m, "prefix_hit_tokens");
    long long q0 = stat_of(m, "prefix_query_tokens");
    complete(m, prompt);
    *hit = stat_of(m, "prefix_hit_tokens") - h0;
    *query = stat_of(m, "prefix_query_tokens") - q0;
}

static void test_prefix_hits(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, "--block-tokens", "16", "--kv-blocks", "64", NULL);
    /* 4 full blocks plus a partial tail that is never cached. */
    char prompt[4 * BLOCK_BYTES + 10 + 1];
    make_text(prompt, sizeof(prompt) - 1, 1);
    long long hit, query;

    prefix_delta(&m, prompt, &hit, &query);
    assert_int_equal(hit, 0);
    /* tokens ~ bytes / 4 */
    assert_in_range(query, (sizeof(prompt) - 1) / 4, (sizeof(prompt) - 1) / 4 + 1);

    prefix_delta(&m, prompt, &hit, &query);
    assert_int_equal(hit, 4 * BLOCK_TOKENS);

    /* Same first 2 blocks, different rest: hits exactly the shared blocks. */
    char other[sizeof(prompt)];
    make_text(other, sizeof(other) - 1, 2);
    memcpy(other, prompt, 2 * BLOCK_BYTES);
    prefix_delta(&m, other, &hit, &query);
    assert_int_equal(hit, 2 * BLOCK_TOKENS);

    /* A prompt differing in its first byte shares nothing (chained hashes). */
    char first_differs[sizeof(prompt)];
    memcpy(first_differs, prompt, sizeof(prompt));
    first_differs[0] = first_differs[0] == 'x' ? 'y' : 'x';
    prefix_delta(&m, first_differs, &hit, &query);
    assert_int_equal(hit, 0);

    /* Chat prompts hit too (role + content are the prompt text). */
    char content[6 * BLOCK_BYTES + 1];
    make_text(content, sizeof(content) - 1, 3);
    char *chat = chat_body(content, 1, false);
    json_decref(post_expect(&m, "/v1/chat/completions", chat, 200));
    long long h0 = stat_of(&m, "prefix_hit_tokens");
    json_decref(post_expect(&m, "/v1/chat/completions", chat, 200));
    assert_true(stat_of(&m, "prefix_hit_tokens") - h0 >= 5 * BLOCK_TOKENS);
    free(chat);

    /* reset empties the cache. */
    assert_int_equal(h_mock_reset(m.url), 0);
    prefix_delta(&m, prompt, &hit, &query);
    assert_int_equal(hit, 0);
}

static void test_lru_eviction(void **state)
{
    (void)state;
    struct h_mock m;
    /*
     * Prompts of 2 full blocks plus a partial one; 5 blocks of cache hold two
     * such prompts (and the partial block of a running one) but not three.
     * The sequence gives the same answers whether or not a running request's
     * partial block takes a cache slot.
     */
    START_MOCK(&m, "--block-tokens", "16", "--kv-blocks", "5", NULL);
    char p[3][2 * BLOCK_BYTES + 5 + 1];
    for (unsigned i = 0; i < 3; i++)
        make_text(p[i], sizeof(p[i]) - 1, 10 + i);
    long long hit, query;

    prefix_delta(&m, p[0], &hit, &query);
    assert_int_equal(hit, 0);
    prefix_delta(&m, p[1], &hit, &query);
    assert_int_equal(hit, 0);
    prefix_delta(&m, p[0], &hit, &query);
    assert_int_equal(hit, 2 * BLOCK_TOKENS); /* both fit; p[0] is now the most recent */
    /* p[2] needs room: it comes from p[1], the least recently used. */
    prefix_delta(&m, p[2], &hit, &query);
    assert_int_equal(hit, 0);
    prefix_delta(&m, p[0], &hit, &query);
    assert_int_equal(hit, 2 * BLOCK_TOKENS);
    prefix_delta(&m, p[2], &hit, &query);
    assert_int_equal(hit, 2 * BLOCK_TOKENS);
    prefix_delta(&m, p[1], &hit, &query);
    if (hit >= 2 * BLOCK_TOKENS)
        fail_msg("the least recently used prefix was not evicted (hit %lld tokens)", hit);
}

static void test_latency_model(void **state)
{
    (void)state;
    struct h_mock m;
    /* 100 ms base, 2 ms per uncached token, 30 ms per output token. */
    START_MOCK(&m, "--block-tokens", "16", "--kv-blocks", "64", "--prefill-base-us", "100000",
               "--prefill-us-per-token", "2000", "--tpot-ms", "30", NULL);
    char prompt[8 * BLOCK_BYTES + 1]; /* 128 tokens: 256 ms uncached */
    make_text(prompt, sizeof(prompt) - 1, 4);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));

    char *body = completion_body(prompt, 1, false);
    struct h_resp resp;
    assert_int_equal(h_http_post_json(url, body, &resp), 0);
    assert_int_equal(resp.status, 200);
    int64_t cold = resp.elapsed_ms;
    h_resp_fini(&resp);
    assert_true(cold >= 100 + 256 - 5);
    free(body);

    /* Streamed: tokens arrive one tpot apart (prefix now cached). */
    body = completion_body(prompt, 8, true);
    struct h_sse s;
    stream_ok(&m, "/v1/completions", body, &s);
    assert_true(s.resp.elapsed_ms >= 100 + 7 * 30 - 5);
    h_sse_fini(&s);
    free(body);
}

/* ---- scheduler: FIFO above --max-num-seqs -------------------------------- */

struct held {
    struct h_async *a;
};

/* Starts a streamed completion of 50 tokens in the background. */
static void start_held(const struct h_mock *m, struct held *h, unsigned seed)
{
    char prompt[2 * BLOCK_BYTES + 20 + 1];
    make_text(prompt, sizeof(prompt) - 1, seed);
    char *body = completion_body(prompt, 50, true);
    char url[H_URL_MAX];
    mock_url(m, "/v1/completions", url, sizeof(url));
    const struct h_async_opts opts = {.abort_at = H_ABORT_NEVER};
    assert_int_equal(h_async_start(url, body, &opts, &h->a), 0);
    free(body);
}

static size_t held_bytes(const struct held *h)
{
    struct h_async_state st;
    h_async_get_state(h->a, &st);
    return st.body_bytes;
}

static bool has_body_cond(void *arg)
{
    return held_bytes(arg) > 0;
}

static void wait_body(struct held *h)
{
    if (h_wait_until(has_body_cond, h, WAIT_MS) != 0)
        fail_msg("a held request got no body bytes within %d ms", WAIT_MS);
}

static void test_fifo_waiting(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, "--max-num-seqs", "1", NULL);
    /* Every request stalls for a long time after its first chunk: a running
     * request stays running until its client goes away. */
    assert_int_equal(h_mock_faults(m.url, "{\"stall_after_chunks\":1,\"stall_ms\":30000}"), 0);

    struct held h[3];
    start_held(&m, &h[0], 20);
    wait_body(&h[0]);
    wait_stat(&m, "running", 1, WAIT_MS);
    start_held(&m, &h[1], 21);
    wait_stat(&m, "waiting", 1, WAIT_MS);
    start_held(&m, &h[2], 22);
    wait_stat(&m, "waiting", 2, WAIT_MS);
    assert_int_equal(stat_of(&m, "running"), 1);
    assert_int_equal(stat_of(&m, "inflight"), 3);
    assert_int_equal(held_bytes(&h[1]), 0);
    assert_int_equal(held_bytes(&h[2]), 0);
    /* As vLLM: a stream's 200 headers go out before the engine queues it. */
    for (int i = 1; i < 3; i++) {
        assert_int_equal(h_async_wait_headers(h[i].a, WAIT_MS), 0);
        struct h_async_state st;
        h_async_get_state(h[i].a, &st);
        assert_true(st.got_headers && !st.done);
        assert_int_equal(st.status, 200);
        assert_int_equal(st.body_bytes, 0);
    }

    /* The first to wait is the first admitted. */
    assert_int_equal(h_async_abort(h[0].a), 0);
    wait_body(&h[1]);
    wait_stat(&m, "waiting", 1, WAIT_MS);
    assert_int_equal(stat_of(&m, "running"), 1);
    assert_int_equal(held_bytes(&h[2]), 0);

    assert_int_equal(h_async_abort(h[1].a), 0);
    wait_body(&h[2]);
    wait_stat(&m, "waiting", 0, WAIT_MS);

    assert_int_equal(h_async_abort(h[2].a), 0);
    wait_stat(&m, "inflight", 0, WAIT_MS);
    wait_stat(&m, "running", 0, WAIT_MS);
    wait_stat(&m, "client_aborts", 3, WAIT_MS);
    for (int i = 0; i < 3; i++)
        h_async_destroy(h[i].a);
}

static void test_abort_while_waiting(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, "--max-num-seqs", "1", NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"stall_after_chunks\":1,\"stall_ms\":30000}"), 0);
    struct held run, wait;
    start_held(&m, &run, 30);
    wait_body(&run);
    start_held(&m, &wait, 31);
    wait_stat(&m, "waiting", 1, WAIT_MS);

    /* A queued request whose client leaves leaves the queue. */
    assert_int_equal(h_async_abort(wait.a), 0);
    wait_stat(&m, "waiting", 0, ABORT_MS);
    wait_stat(&m, "inflight", 1, ABORT_MS);
    wait_stat(&m, "client_aborts", 1, ABORT_MS);
    assert_int_equal(stat_of(&m, "running"), 1);
    h_async_destroy(run.a);
    h_async_destroy(wait.a);
    wait_stat(&m, "inflight", 0, ABORT_MS);
}

/* ---- faults -------------------------------------------------------------- */

static void test_fault_fail_status(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    char *body = completion_body("fail me", 2, false);
    assert_int_equal(h_mock_faults(m.url, "{\"fail_status\":503,\"fail_count\":2}"), 0);
    for (int i = 0; i < 2; i++) {
        json_t *j = post_expect(&m, "/v1/completions", body, 503);
        assert_openai_error(j);
        json_decref(j);
    }
    json_decref(post_expect(&m, "/v1/completions", body, 200));

    /* Without fail_count every request fails until fail_status is 0. */
    assert_int_equal(h_mock_faults(m.url, "{\"fail_status\":429}"), 0);
    for (int i = 0; i < 3; i++)
        json_decref(post_expect(&m, "/v1/completions", body, 429));
    assert_int_equal(h_mock_faults(m.url, "{\"fail_status\":0}"), 0);
    json_decref(post_expect(&m, "/v1/completions", body, 200));

    wait_status_count(&m, "503", 2);
    wait_status_count(&m, "429", 3);
    wait_status_count(&m, "200", 2);

    /* A streaming request fails the same way, before any event. */
    assert_int_equal(h_mock_faults(m.url, "{\"fail_status\":500,\"fail_count\":1}"), 0);
    char *sbody = completion_body("fail me", 2, true);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));
    struct h_sse s;
    assert_int_equal(h_http_stream(url, sbody, &s), 0);
    assert_int_equal(s.resp.status, 500);
    json_t *j = h_resp_json(&s.resp);
    assert_openai_error(j);
    json_decref(j);
    h_sse_fini(&s);
    free(sbody);
    free(body);
}

static void test_fault_fail_body_hold(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(
        h_mock_faults(m.url, "{\"fail_status\":502,\"fail_count\":1,\"fail_body_hold_ms\":400}"),
        0);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));
    char *body = completion_body("hold", 2, false);
    struct h_async *a;
    assert_int_equal(h_async_start(url, body, NULL, &a), 0);
    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_true(st.got_headers);
    assert_int_equal(st.status, 502);
    assert_int_equal(st.curl_code, 0);
    /* Headers and half the body first, the rest after the hold. */
    assert_true(st.body_ms >= 0);
    assert_true(st.done_ms - st.body_ms >= 400 - 5);
    struct h_resp resp;
    assert_int_equal(h_async_take_resp(a, &resp), 0);
    json_t *j = h_resp_json(&resp);
    assert_openai_error(j);
    json_decref(j);
    h_resp_fini(&resp);
    h_async_destroy(a);
    free(body);
}

static void test_fault_stall_before_headers(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"stall_before_headers_ms\":400}"), 0);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));
    char *body = completion_body("stall", 2, true);
    struct h_async *a;
    assert_int_equal(h_async_start(url, body, NULL, &a), 0);
    wait_stat(&m, "inflight", 1, WAIT_MS);
    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_int_equal(st.status, 200);
    assert_true(st.headers_ms >= 400 - 5);
    h_async_destroy(a);

    /* 0 turns it off. */
    assert_int_equal(h_mock_faults(m.url, "{\"stall_before_headers_ms\":0}"), 0);
    struct h_resp resp;
    assert_int_equal(h_http_post_json(url, body, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_true(resp.elapsed_ms < 400);
    h_resp_fini(&resp);
    free(body);
}

static void test_fault_stall_after_chunks(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"stall_after_chunks\":2,\"stall_ms\":400}"), 0);
    char *body = completion_body("stall later", 6, true);
    struct h_sse s;
    stream_ok(&m, "/v1/completions", body, &s);
    assert_true(s.n_events >= 4);
    /* Silence of stall_ms between event 2 and event 3. */
    assert_true(s.events[2].t_ms - s.events[1].t_ms >= 400 - 5);
    h_sse_fini(&s);
    free(body);
}

static void test_fault_reset_after_chunks(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"reset_after_chunks\":2}"), 0);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));

    /* Streaming: K events, then the connection closes (no [DONE]). */
    char *body = completion_body("reset me", 8, true);
    const struct h_req sreq = {.url = url, .body = body, .timeout_ms = WAIT_MS};
    struct h_sse s;
    assert_int_equal(h_http_stream_req(&sreq, &s), -EIO);
    if (s.resp.curl_code == CURLE_OPERATION_TIMEDOUT)
        fail_msg("stream not closed after reset_after_chunks (still open after %d ms)", WAIT_MS);
    assert_int_equal(s.resp.status, 200);
    assert_int_equal(s.n_events, 2);
    assert_false(s.saw_done);
    h_sse_fini(&s);
    free(body);

    /* Non-streaming: the connection closes without a response. */
    body = completion_body("reset me", 8, false);
    const struct h_req req = {.url = url, .body = body, .timeout_ms = WAIT_MS};
    struct h_resp resp;
    assert_int_equal(h_http(&req, &resp), -EIO);
    if (resp.curl_code == CURLE_OPERATION_TIMEDOUT)
        fail_msg("connection not closed after reset_after_chunks (non-streaming)");
    assert_int_equal(resp.status, 0);
    h_resp_fini(&resp);
    free(body);
    wait_stat(&m, "inflight", 0, WAIT_MS);
}

/* vLLM's failure inside a 200 stream: an error event, then [DONE]. */
static void test_fault_stream_error(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"stream_error\":\"KV load failed\"}"), 0);
    char *body = completion_body("fail in band", 8, true);
    struct h_sse s;
    stream_ok(&m, "/v1/completions", body, &s);
    assert_int_equal(s.n_events, 2);
    json_t *j = event_json(&s, 0);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(str_field(e, "message"), "KV load failed");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), 500);
    json_decref(j);
    h_sse_fini(&s);
    free(body);

    /* After K events; non-streaming requests are unaffected. */
    assert_int_equal(h_mock_faults(m.url, "{\"stream_error_after_chunks\":3}"), 0);
    body = completion_body("fail in band", 8, true);
    stream_ok(&m, "/v1/completions", body, &s);
    assert_int_equal(s.n_events, 5);
    j = event_json(&s, 3);
    assert_non_null(json_object_get(j, "error"));
    json_decref(j);
    h_sse_fini(&s);
    free(body);
    complete(&m, "not streamed");
    wait_stat(&m, "inflight", 0, WAIT_MS);
    wait_stat(&m, "running", 0, WAIT_MS);

    /* Bad values are refused; "" turns it off. */
    char url[H_URL_MAX];
    mock_url(&m, "/mock/faults", url, sizeof(url));
    struct h_resp resp;
    assert_int_equal(h_http_post_json(url, "{\"stream_error\":5}", &resp), 0);
    assert_int_equal(resp.status, 400);
    h_resp_fini(&resp);
    assert_int_equal(h_mock_faults(m.url, "{\"stream_error\":\"\"}"), 0);
    body = completion_body("fine", 2, true);
    stream_ok(&m, "/v1/completions", body, &s);
    j = event_json(&s, 0);
    assert_null(json_object_get(j, "error"));
    json_decref(j);
    h_sse_fini(&s);
    free(body);
}

static void test_fault_health_status(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    char url[H_URL_MAX];
    mock_url(&m, "/health", url, sizeof(url));
    struct h_resp resp;
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\":503}"), 0);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 503);
    h_resp_fini(&resp);
    /* Inference is unaffected. */
    complete(&m, "still serving");
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\":0}"), 0);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);

    /* reset clears faults too. */
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\":500}"), 0);
    assert_int_equal(h_mock_reset(m.url), 0);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
}

static void test_fault_extra_latency(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"extra_latency_ms\":300}"), 0);
    char url[H_URL_MAX];
    mock_url(&m, "/v1/completions", url, sizeof(url));
    char *body = completion_body("slow", 2, false);
    struct h_resp resp;
    assert_int_equal(h_http_post_json(url, body, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_true(resp.elapsed_ms >= 300 - 5);
    h_resp_fini(&resp);
    free(body);

    body = completion_body("slow", 2, true);
    struct h_sse s;
    stream_ok(&m, "/v1/completions", body, &s);
    assert_true(s.events[0].t_ms >= 300 - 5);
    h_sse_fini(&s);
    free(body);
}

/* ---- client aborts ------------------------------------------------------- */

/*
 * Streams a chat completion under faults, closes the connection as opts
 * says (H_ABORT_NEVER: by hand once the first chunk arrived), and checks the
 * mock noticed within 1 s of the close. Returns the client's view.
 */
static void abort_case(const struct h_mock *m, const char *faults, const struct h_async_opts *opts,
                       struct h_async_state *st)
{
    assert_int_equal(h_mock_reset(m->url), 0);
    assert_int_equal(h_mock_faults(m->url, faults), 0);
    char url[H_URL_MAX];
    mock_url(m, "/v1/chat/completions", url, sizeof(url));
    char *body = chat_body("abort me", 20, true);
    struct held h;
    assert_int_equal(h_async_start(url, body, opts, &h.a), 0);
    free(body);
    if (opts->abort_at == H_ABORT_NEVER) {
        wait_body(&h);
        wait_stat(m, "inflight", 1, WAIT_MS);
        assert_int_equal(h_async_abort(h.a), 0);
    }
    assert_int_equal(h_async_wait(h.a, WAIT_MS), 0);
    h_async_get_state(h.a, st);
    assert_true(st->aborted);
    int64_t t0 = h_now_ms();
    wait_stat(m, "inflight", 0, ABORT_MS);
    int left = ABORT_MS - (int)(h_now_ms() - t0);
    wait_stat(m, "client_aborts", 1, left > 0 ? left : 0);
    h_async_destroy(h.a);
}

static void test_client_abort_counting(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, NULL);
    static const char stalled[] = "{\"stall_after_chunks\":1,\"stall_ms\":30000}";
    struct h_async_state st;

    /* Mid-stream while the worker is silent. */
    const struct h_async_opts manual = {.abort_at = H_ABORT_NEVER};
    abort_case(&m, stalled, &manual, &st);
    assert_true(st.body_bytes > 0);
    /* As soon as the first chunk arrives (the worker stalls after it). */
    const struct h_async_opts after_bytes = {.abort_at = H_ABORT_AFTER_BYTES, .bytes = 1};
    abort_case(&m, stalled, &after_bytes, &st);
    assert_true(st.body_bytes > 0);
    /* As soon as the headers are complete. */
    const struct h_async_opts after_headers = {.abort_at = H_ABORT_AFTER_HEADERS};
    abort_case(&m, stalled, &after_headers, &st);
    assert_true(st.got_headers);
    assert_int_equal(st.body_bytes, 0);
    /* Before any byte of the response. */
    const struct h_async_opts after_ms = {.abort_at = H_ABORT_AFTER_MS, .ms = 200};
    abort_case(&m, "{\"stall_before_headers_ms\":30000}", &after_ms, &st);
    assert_false(st.got_headers);

    /* A finished request is not an abort. */
    assert_int_equal(h_mock_faults(m.url, "{\"stall_before_headers_ms\":0}"), 0);
    complete(&m, "normal");
    wait_stat(&m, "inflight", 0, WAIT_MS);
    assert_int_equal(stat_of(&m, "client_aborts"), 1);
}

/* ---- prefill / decode ---------------------------------------------------- */

static void test_pd_round_trip(void **state)
{
    (void)state;
    struct h_mock prefill, decode;
    START_MOCK(&prefill, "--role", "prefill", NULL);
    START_MOCK(&decode, "--role", "decode", NULL);
    char prompt[3 * BLOCK_BYTES + 1];
    make_text(prompt, sizeof(prompt) - 1, 40);

    /* The prefill leg as vLLM's proxy sends it. */
    json_t *req =
        json_pack("{s:s, s:s, s:i, s:b, s:{s:b, s:b, s:n, s:n, s:n, s:n}}", "model", MODEL,
                  "prompt", prompt, "max_tokens", 1, "stream", false, "kv_transfer_params",
                  "do_remote_decode", true, "do_remote_prefill", false, "remote_engine_id",
                  "remote_block_ids", "remote_host", "remote_port");
    char *body = dump(req);
    json_t *resp = post_expect(&prefill, "/v1/completions", body, 200);
    free(body);
    json_t *kv = json_object_get(resp, "kv_transfer_params");
    assert_true(json_is_object(kv));
    assert_true(json_is_true(json_object_get(kv, "do_remote_prefill")));
    assert_true(json_is_false(json_object_get(kv, "do_remote_decode")));
    assert_true(json_string_length(json_object_get(kv, "remote_engine_id")) > 0);
    assert_true(json_array_size(json_object_get(kv, "remote_block_ids")) > 0);
    assert_true(json_string_length(json_object_get(kv, "remote_host")) > 0);
    assert_true(int_field(kv, "remote_port") > 0);
    assert_true(int_field(kv, "tp_size") >= 1);

    /* The decode leg: the original request plus those params. */
    req = json_pack("{s:s, s:s, s:i, s:b, s:O}", "model", MODEL, "prompt", prompt, "max_tokens", 4,
                    "stream", false, "kv_transfer_params", kv);
    body = dump(req);
    json_decref(resp);
    json_decref(post_expect(&decode, "/v1/completions", body, 200));
    free(body);
    wait_stat(&decode, "remote_prefill_used", 1, WAIT_MS);
    assert_int_equal(stat_of(&decode, "local_prefill"), 0);

    /* Without params the decode worker prefills locally. */
    body = completion_body(prompt, 4, false);
    json_decref(post_expect(&decode, "/v1/completions", body, 200));
    free(body);
    wait_stat(&decode, "local_prefill", 1, WAIT_MS);
    assert_int_equal(stat_of(&decode, "remote_prefill_used"), 1);

    /* A regular worker does not answer with kv_transfer_params. */
    struct h_mock regular;
    START_MOCK(&regular, NULL);
    body = completion_body(prompt, 1, false);
    resp = post_expect(&regular, "/v1/completions", body, 200);
    assert_false(json_is_object(json_object_get(resp, "kv_transfer_params")));
    json_decref(resp);
    free(body);
}

/* ---- /metrics ------------------------------------------------------------ */

#define PROM_MAX_FAMILIES 128
#define PROM_NAME_MAX     128

/* Families seen while validating an exposition; test-local. */
struct prom_state {
    char typed[PROM_MAX_FAMILIES][PROM_NAME_MAX]; /* names with a TYPE line */
    char types[PROM_MAX_FAMILIES][16];
    size_t n_typed;
    char sampled[PROM_MAX_FAMILIES][PROM_NAME_MAX]; /* families that had samples */
    size_t n_sampled;
    char current[PROM_NAME_MAX]; /* family of the previous sample */
};

static bool prom_name_char(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && isdigit((unsigned char)c));
}

static bool prom_label_char(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || (!first && isdigit((unsigned char)c));
}

static int prom_find(char list[][PROM_NAME_MAX], size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i], name) == 0)
            return (int)i;
    }
    return -1;
}

/* The family a sample name belongs to: a typed name it equals or extends
 * with a standard suffix, else the name itself (untyped). */
static void prom_family(struct prom_state *ps, const char *name, char *family)
{
    static const char *const suffixes[] = {"_total", "_count", "_sum", "_bucket", "_created"};
    snprintf(family, PROM_NAME_MAX, "%s", name);
    if (prom_find(ps->typed, ps->n_typed, name) >= 0)
        return;
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t sl = strlen(suffixes[i]);
        if (len > sl && strcmp(name + len - sl, suffixes[i]) == 0) {
            char base[PROM_NAME_MAX];
            snprintf(base, sizeof(base), "%.*s", (int)(len - sl), name);
            if (prom_find(ps->typed, ps->n_typed, base) >= 0) {
                snprintf(family, PROM_NAME_MAX, "%s", base);
                return;
            }
        }
    }
}

/* Reads a metric name at *p into out; false if there is none. */
static bool prom_read_name(const char **p, char *out, bool label)
{
    size_t n = 0;
    while (label ? prom_label_char(**p, n == 0) : prom_name_char(**p, n == 0)) {
        if (n + 1 >= PROM_NAME_MAX)
            return false;
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return n > 0;
}

static bool prom_read_value(const char **p)
{
    char *end;
    errno = 0;
    strtod(*p, &end);
    if (end == *p || errno == ERANGE)
        return false;
    *p = end;
    return true;
}

/* Validates one sample line; err names the problem. */
static bool prom_sample(struct prom_state *ps, const char *line, char *err, size_t len)
{
    const char *p = line;
    char name[PROM_NAME_MAX];
    if (!prom_read_name(&p, name, false)) {
        snprintf(err, len, "bad metric name");
        return false;
    }
    if (*p == '{') {
        p++;
        while (*p != '}') {
            char label[PROM_NAME_MAX];
            if (!prom_read_name(&p, label, true) || *p++ != '=' || *p++ != '"') {
                snprintf(err, len, "bad label");
                return false;
            }
            while (*p != '"') {
                if (*p == '\0' || *p == '\n') {
                    snprintf(err, len, "unterminated label value");
                    return false;
                }
                if (*p == '\\' && (p[1] == '\\' || p[1] == '"' || p[1] == 'n'))
                    p++;
                else if (*p == '\\') {
                    snprintf(err, len, "bad escape in label value");
                    return false;
                }
                p++;
            }
            p++;
            if (*p == ',')
                p++;
            else if (*p != '}') {
                snprintf(err, len, "expected , or } after label");
                return false;
            }
        }
        p++;
    }
    if (*p++ != ' ' || !prom_read_value(&p)) {
        snprintf(err, len, "bad value");
        return false;
    }
    if (*p == ' ') {
        p++;
        char *end;
        strtoll(p, &end, 10);
        if (end == p) {
            snprintf(err, len, "bad timestamp");
            return false;
        }
        p = end;
    }
    if (*p != '\0') {
        snprintf(err, len, "trailing characters");
        return false;
    }

    char family[PROM_NAME_MAX];
    prom_family(ps, name, family);
    int t = prom_find(ps->typed, ps->n_typed, family);
    if (t >= 0 && strcmp(ps->types[t], "counter") == 0 &&
        (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total") != 0) &&
        (strlen(name) < 8 || strcmp(name + strlen(name) - 8, "_created") != 0)) {
        snprintf(err, len, "counter sample '%.100s' not named *_total", name);
        return false;
    }
    if (strcmp(family, ps->current) != 0) {
        if (prom_find(ps->sampled, ps->n_sampled, family) >= 0) {
            snprintf(err, len, "samples of '%.100s' are not grouped together", family);
            return false;
        }
        if (ps->n_sampled == PROM_MAX_FAMILIES) {
            snprintf(err, len, "too many families");
            return false;
        }
        snprintf(ps->sampled[ps->n_sampled++], PROM_NAME_MAX, "%s", family);
        snprintf(ps->current, sizeof(ps->current), "%s", family);
    }
    return true;
}

/* Validates a "# HELP" / "# TYPE" / other comment line. */
static bool prom_comment(struct prom_state *ps, const char *line, char *err, size_t len)
{
    bool is_type = strncmp(line, "# TYPE ", 7) == 0;
    bool is_help = strncmp(line, "# HELP ", 7) == 0;
    if (!is_type && !is_help)
        return true; /* a plain comment */
    const char *p = line + 7;
    char name[PROM_NAME_MAX];
    if (!prom_read_name(&p, name, false) || (*p != ' ' && !(is_help && *p == '\0'))) {
        snprintf(err, len, "bad name in HELP/TYPE");
        return false;
    }
    if (!is_type)
        return true;
    p++;
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    bool known = false;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        known = known || strcmp(p, types[i]) == 0;
    if (!known) {
        snprintf(err, len, "unknown type '%s'", p);
        return false;
    }
    if (prom_find(ps->typed, ps->n_typed, name) >= 0) {
        snprintf(err, len, "second TYPE line for '%s'", name);
        return false;
    }
    /* TYPE must come before any sample of its family. */
    static const char *const suffixes[] = {"", "_total", "_count", "_sum", "_bucket", "_created"};
    for (size_t i = 0; i < ps->n_sampled; i++) {
        for (size_t s = 0; s < sizeof(suffixes) / sizeof(suffixes[0]); s++) {
            char full[PROM_NAME_MAX * 2];
            snprintf(full, sizeof(full), "%s%s", name, suffixes[s]);
            if (strcmp(ps->sampled[i], full) == 0) {
                snprintf(err, len, "TYPE of '%s' after its samples", name);
                return false;
            }
        }
    }
    if (ps->n_typed == PROM_MAX_FAMILIES) {
        snprintf(err, len, "too many families");
        return false;
    }
    snprintf(ps->typed[ps->n_typed], PROM_NAME_MAX, "%s", name);
    snprintf(ps->types[ps->n_typed], sizeof(ps->types[0]), "%s", p);
    ps->n_typed++;
    return true;
}

/* Validates a whole exposition; on failure err holds "line N: problem". */
static bool prom_validate(const char *text, struct prom_state *ps, char *err, size_t len)
{
    memset(ps, 0, sizeof(*ps));
    size_t n = strlen(text);
    if (n == 0 || text[n - 1] != '\n') {
        snprintf(err, len, "exposition must end with a newline");
        return false;
    }
    int lineno = 0;
    const char *line = text;
    while (*line != '\0') {
        const char *nl = strchr(line, '\n');
        lineno++;
        char buf[1024];
        size_t ll = (size_t)(nl - line);
        if (ll >= sizeof(buf)) {
            snprintf(err, len, "line %d: too long", lineno);
            return false;
        }
        memcpy(buf, line, ll);
        buf[ll] = '\0';
        char why[160] = "";
        bool ok = true;
        if (buf[0] == '#')
            ok = prom_comment(ps, buf, why, sizeof(why));
        else if (buf[0] != '\0')
            ok = prom_sample(ps, buf, why, sizeof(why));
        if (!ok) {
            snprintf(err, len, "line %d: %.160s: '%.200s'", lineno, why, buf);
            return false;
        }
        line = nl + 1;
    }
    return true;
}

/* Sum of the values of every sample named exactly name; -1 when none. */
static double prom_sum(const char *text, const char *name)
{
    size_t nl = strlen(name);
    double sum = -1;
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, name, nl) == 0 && (line[nl] == ' ' || line[nl] == '{')) {
            const char *v = line + nl;
            if (*v == '{')
                v = strchr(v, '}') + 1;
            sum = (sum < 0 ? 0 : sum) + strtod(v, NULL);
        }
        line = end != NULL ? end + 1 : line + strlen(line);
    }
    return sum;
}

static void test_prom_validator_rejects(void **state)
{
    (void)state;
    /* The validator itself: good text passes, each defect is caught. */
    static const char good[] = "# HELP a_total A.\n# TYPE a_total counter\n"
                               "a_total{engine=\"0\",x=\"q\\\"\"} 1\n"
                               "# TYPE g gauge\ng 0.5\ng{k=\"v\"} NaN 1700000000000\n";
    static const char *const bad[] = {
        "a 1",                                      /* no final newline */
        "# TYPE c counter\nc 1\n",                  /* counter sample not *_total */
        "g 1\n# TYPE g gauge\n",                    /* TYPE after sample */
        "# TYPE g gauge\ng 1\nh 2\ng{a=\"b\"} 3\n", /* not grouped */
        "g{a=b} 1\n",                               /* unquoted label */
        "g one\n",                                  /* bad value */
        "# TYPE g gauges\n",                        /* unknown type */
        "9g 1\n",                                   /* bad name */
    };
    struct prom_state ps;
    char err[256];
    if (!prom_validate(good, &ps, err, sizeof(err)))
        fail_msg("good exposition rejected: %s", err);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (prom_validate(bad[i], &ps, err, sizeof(err)))
            fail_msg("bad exposition %zu accepted: %s", i, bad[i]);
    }
}

static void test_metrics_prometheus(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, "--block-tokens", "16", NULL);
    char prompt[3 * BLOCK_BYTES + 1];
    make_text(prompt, sizeof(prompt) - 1, 50);
    complete(&m, prompt);
    complete(&m, prompt);
    wait_stat(&m, "inflight", 0, WAIT_MS);

    char url[H_URL_MAX];
    mock_url(&m, "/metrics", url, sizeof(url));
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    char ctype[128];
    assert_int_equal(h_resp_header(&resp, "Content-Type", ctype, sizeof(ctype)), 0);
    assert_non_null(strstr(ctype, "text/plain"));

    struct prom_state *ps = malloc(sizeof(*ps));
    assert_non_null(ps);
    char err[512];
    if (!prom_validate(resp.body, ps, err, sizeof(err)))
        fail_msg("/metrics is not Prometheus text: %s", err);

    static const char *const gauges[] = {"vllm:num_requests_running", "vllm:num_requests_waiting",
                                         "vllm:kv_cache_usage_perc"};
    for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++) {
        if (prom_sum(resp.body, gauges[i]) < 0)
            fail_msg("/metrics lacks %s", gauges[i]);
    }
    static const char *const counters[] = {"vllm:prefix_cache_queries", "vllm:prefix_cache_hits"};
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        char sample[PROM_NAME_MAX];
        snprintf(sample, sizeof(sample), "%s_total", counters[i]);
        char family[PROM_NAME_MAX];
        prom_family(ps, sample, family);
        int t = prom_find(ps->typed, ps->n_typed, family);
        if (t < 0 || strcmp(ps->types[t], "counter") != 0)
            fail_msg("%s is not declared a counter", counters[i]);
        if (prom_sum(resp.body, sample) < 0)
            fail_msg("/metrics lacks %s", sample);
    }
    /* The counters agree with /mock/stats. */
    assert_true(prom_sum(resp.body, "vllm:prefix_cache_hits_total") ==
                (double)stat_of(&m, "prefix_hit_tokens"));
    assert_true(prom_sum(resp.body, "vllm:prefix_cache_queries_total") ==
                (double)stat_of(&m, "prefix_query_tokens"));
    assert_true(prom_sum(resp.body, "vllm:prefix_cache_hits_total") >= 3 * BLOCK_TOKENS);
    assert_true(prom_sum(resp.body, "vllm:num_requests_running") == 0);
    free(ps);
    h_resp_fini(&resp);
}

static void test_metrics_running_gauge(void **state)
{
    (void)state;
    struct h_mock m;
    START_MOCK(&m, "--max-num-seqs", "1", NULL);
    assert_int_equal(h_mock_faults(m.url, "{\"stall_after_chunks\":1,\"stall_ms\":30000}"), 0);
    struct held a, b;
    start_held(&m, &a, 60);
    wait_body(&a);
    start_held(&m, &b, 61);
    wait_stat(&m, "waiting", 1, WAIT_MS);
    char url[H_URL_MAX];
    mock_url(&m, "/metrics", url, sizeof(url));
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_true(prom_sum(resp.body, "vllm:num_requests_running") == 1);
    assert_true(prom_sum(resp.body, "vllm:num_requests_waiting") == 1);
    double usage = prom_sum(resp.body, "vllm:kv_cache_usage_perc");
    assert_true(usage > 0 && usage <= 1);
    h_resp_fini(&resp);
    h_async_destroy(a.a);
    h_async_destroy(b.a);
    wait_stat(&m, "inflight", 0, WAIT_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_health_models_and_help),
        H_TEST(test_chat_stream_framing),
        H_TEST(test_completion_stream_usage_chunk),
        H_TEST(test_non_streaming_shapes),
        H_TEST(test_seed_and_output_tokens),
        H_TEST(test_stats_record_requests),
        H_TEST(test_bad_input_errors),
        H_TEST(test_names_adapters_ping_legacy_errors),
        H_TEST(test_prefix_hits),
        H_TEST(test_lru_eviction),
        H_TEST(test_latency_model),
        H_TEST(test_fifo_waiting),
        H_TEST(test_abort_while_waiting),
        H_TEST(test_fault_fail_status),
        H_TEST(test_fault_fail_body_hold),
        H_TEST(test_fault_stall_before_headers),
        H_TEST(test_fault_stall_after_chunks),
        H_TEST(test_fault_reset_after_chunks),
        H_TEST(test_fault_stream_error),
        H_TEST(test_fault_health_status),
        H_TEST(test_fault_extra_latency),
        H_TEST(test_client_abort_counting),
        H_TEST(test_pd_round_trip),
        cmocka_unit_test(test_prom_validator_rejects),
        H_TEST(test_metrics_prometheus),
        H_TEST(test_metrics_running_gauge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
