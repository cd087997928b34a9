/*
 * End-to-end: the rest of vLLM's API through the router (docs/api.md).
 * Every new route reaches the mock worker and its answer comes back as
 * the worker wrote it (JSON, or an event stream with event:/data: pairs),
 * and every route's bad input gets the right status in the right error
 * shape: OpenAI's {"error":{...}} on the OpenAI routes, Anthropic's
 * {"type":"error","error":{...}} on /v1/messages and
 * /v1/messages/count_tokens, the router's own errors included.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

static void url_of(const struct h_fleet *f, const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s", f->base, path);
}

/* POSTs body to path; returns the parsed answer (the status must be want). */
static json_t *post_ok(const struct h_fleet *f, const char *path, const char *body, long want)
{
    char url[512];
    url_of(f, path, url, sizeof(url));
    struct h_resp r = {0};
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    if (r.status != want)
        fprintf(stderr, "%s: %ld %s\n", path, r.status, r.body);
    assert_int_equal(r.status, want);
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    assert_non_null(j);
    return j;
}

/* An event stream of event:/data: pairs: its event names in order, comma-joined. */
static void stream_events(const char *body, char *names, size_t cap)
{
    names[0] = '\0';
    const char *p = body;
    while ((p = strstr(p, "event: ")) != NULL) {
        p += 7;
        size_t n = strcspn(p, "\n");
        const char *data = p + n + 1;
        assert_true(strncmp(data, "data: {", 7) == 0); /* each event: line has its data: line */
        snprintf(names + strlen(names), cap - strlen(names), "%s%.*s", names[0] ? "," : "", (int)n,
                 p);
        p += n;
    }
}

static void test_routes_reach_the_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1};
    h_fleet_start(&f, &o);

    /* Responses: create, then GET and cancel by id. */
    json_t *r =
        post_ok(&f, "/v1/responses",
                "{\"model\":\"mock-model\",\"input\":\"hello\",\"max_output_tokens\":3}", 200);
    assert_string_equal(json_string_value(json_object_get(r, "object")), "response");
    const char *id = json_string_value(json_object_get(r, "id"));
    assert_non_null(id);
    char path[256], url[512];
    snprintf(path, sizeof(path), "/v1/responses/%s?stream=false", id);
    url_of(&f, path, url, sizeof(url));
    struct h_resp g = {0};
    assert_int_equal(h_http_get(url, &g), 0);
    assert_int_equal(g.status, 200);
    json_t *gj = h_resp_json(&g);
    assert_string_equal(json_string_value(json_object_get(gj, "id")), id);
    json_decref(gj);
    h_resp_fini(&g);
    snprintf(path, sizeof(path), "/v1/responses/%s/cancel", id);
    json_t *c = post_ok(&f, path, "", 400); /* vLLM: a finished response cannot be cancelled */
    assert_non_null(json_object_get(c, "error"));
    json_decref(c);
    json_decref(r);
    /* An id the worker does not know: its own 404, relayed. */
    r = post_ok(&f, "/v1/responses",
                "{\"model\":\"mock-model\",\"input\":\"x\",\"previous_response_id\":\"resp_x\"}",
                404);
    json_t *e = json_object_get(r, "error");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "param")), "response_id");
    json_decref(r);

    /* A streamed response: event:/data: pairs, no [DONE]. */
    url_of(&f, "/v1/responses", url, sizeof(url));
    struct h_resp s = {0};
    assert_int_equal(h_http_post_json(url,
                                      "{\"model\":\"mock-model\",\"input\":\"hi\",\"stream\":true,"
                                      "\"max_output_tokens\":2}",
                                      &s),
                     0);
    assert_int_equal(s.status, 200);
    char names[1024];
    stream_events(s.body, names, sizeof(names));
    assert_string_equal(names, "response.created,response.in_progress,response.output_item.added,"
                               "response.content_part.added,response.output_text.delta,"
                               "response.output_text.delta,response.output_text.done,"
                               "response.content_part.done,response.output_item.done,"
                               "response.completed");
    assert_null(strstr(s.body, "[DONE]"));
    h_resp_fini(&s);

    /* Messages, plain and streamed, and count_tokens. */
    r = post_ok(&f, "/v1/messages",
                "{\"model\":\"mock-model\",\"max_tokens\":2,\"system\":\"be brief\","
                "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                200);
    assert_string_equal(json_string_value(json_object_get(r, "type")), "message");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r, "usage"), "output_tokens")), 2);
    json_decref(r);
    url_of(&f, "/v1/messages", url, sizeof(url));
    assert_int_equal(h_http_post_json(url,
                                      "{\"model\":\"mock-model\",\"max_tokens\":1,\"stream\":true,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                                      &s),
                     0);
    assert_int_equal(s.status, 200);
    stream_events(s.body, names, sizeof(names));
    assert_string_equal(names, "message_start,content_block_start,content_block_delta,"
                               "content_block_stop,message_delta,message_stop");
    h_resp_fini(&s);
    r = post_ok(
        &f, "/v1/messages/count_tokens",
        "{\"model\":\"mock-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", 200);
    assert_int_equal(json_integer_value(json_object_get(r, "input_tokens")), 3); /* "userhello" */
    json_decref(r);

    /* Rerank on its three paths, score on two, pooling, classify. */
    const char *rerank = "{\"model\":\"mock-model\",\"query\":\"q\",\"documents\":[\"a\",\"b\","
                         "\"c\"],\"top_n\":2}";
    const char *rerank_paths[] = {"/rerank", "/v1/rerank", "/v2/rerank"};
    for (size_t i = 0; i < 3; i++) {
        r = post_ok(&f, rerank_paths[i], rerank, 200);
        assert_int_equal(json_array_size(json_object_get(r, "results")), 2);
        json_decref(r);
    }
    const char *score_paths[] = {"/score", "/v1/score"};
    for (size_t i = 0; i < 2; i++) {
        r = post_ok(&f, score_paths[i],
                    "{\"model\":\"mock-model\",\"text_1\":\"q\",\"text_2\":[\"a\",\"b\"]}", 200);
        assert_int_equal(json_array_size(json_object_get(r, "data")), 2);
        json_decref(r);
    }
    r = post_ok(&f, "/pooling", "{\"model\":\"mock-model\",\"input\":\"abc\"}", 200);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(r, "data"), 0), "object")),
        "pooling");
    json_decref(r);
    r = post_ok(&f, "/classify", "{\"model\":\"mock-model\",\"input\":[\"a\",\"b\"]}", 200);
    assert_int_equal(json_array_size(json_object_get(r, "data")), 2);
    json_decref(r);

    /* Tokenize (prompt, and chat messages) and detokenize round-trip. */
    r = post_ok(&f, "/tokenize", "{\"model\":\"mock-model\",\"prompt\":\"hello world\"}", 200);
    assert_int_equal(json_integer_value(json_object_get(r, "count")), 3);
    char *tokens = json_dumps(json_object_get(r, "tokens"), JSON_COMPACT);
    json_decref(r);
    char body[512];
    snprintf(body, sizeof(body), "{\"model\":\"mock-model\",\"tokens\":%s}", tokens);
    free(tokens);
    r = post_ok(&f, "/detokenize", body, 200);
    assert_string_equal(json_string_value(json_object_get(r, "prompt")), "hello world");
    json_decref(r);
    r = post_ok(&f, "/tokenize",
                "{\"model\":\"mock-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                200);
    assert_int_equal(json_integer_value(json_object_get(r, "count")), 2); /* "userhi" */
    json_decref(r);
    /* Every one was forwarded (and counted by the worker). */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 18);
    h_fleet_stop(&f);
}

/* The router's own error in the route's shape. */
static void expect_error(const struct h_resp *r, long status, bool anthropic)
{
    if (r->status != status)
        fprintf(stderr, "got %ld %s\n", r->status, r->body);
    assert_int_equal(r->status, status);
    json_t *j = h_resp_json(r);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    if (anthropic) {
        assert_true(json_is_string(json_object_get(j, "type")));
        assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
        assert_true(json_is_string(json_object_get(e, "type")));
        assert_null(json_object_get(e, "code"));
    } else {
        assert_null(json_object_get(j, "type"));
        assert_true(json_is_string(json_object_get(e, "code")));
    }
    json_decref(j);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {
        .n = 1, .dataplane_extra = "max_body: 4KiB\n", .health_interval = "100ms"};
    h_fleet_start(&f, &o);
    static const struct {
        const char *path;
        bool anthropic;
    } posts[] = {
        {"/v1/responses", false}, {"/v1/messages", true}, {"/v1/messages/count_tokens", true},
        {"/rerank", false},       {"/v1/rerank", false},  {"/v2/rerank", false},
        {"/score", false},        {"/v1/score", false},   {"/pooling", false},
        {"/classify", false},     {"/tokenize", false},   {"/detokenize", false},
    };
    char *big = malloc(8192);
    assert_non_null(big);
    memset(big, 'x', 8191);
    big[8191] = '\0';
    memcpy(big, "{\"model\":\"", 10);
    memcpy(big + 8189, "\"}", 2);
    for (size_t i = 0; i < sizeof(posts) / sizeof(posts[0]); i++) {
        char url[512];
        url_of(&f, posts[i].path, url, sizeof(url));
        struct h_resp r = {0};
        assert_int_equal(h_http_post_json(url, "{\"model\": ", &r), 0);
        expect_error(&r, 400, posts[i].anthropic);
        h_resp_fini(&r);
        assert_int_equal(h_http_post_json(url, "{\"model\":\"nope\"}", &r), 0);
        expect_error(&r, 404, posts[i].anthropic);
        h_resp_fini(&r);
        assert_int_equal(h_http_post_json(url, big, &r), 0);
        expect_error(&r, 413, posts[i].anthropic);
        h_resp_fini(&r);
        struct h_req g = {.method = "GET", .url = url};
        assert_int_equal(h_http(&g, &r), 0);
        expect_error(&r, 405, posts[i].anthropic);
        char allow[64];
        assert_int_equal(h_resp_header(&r, "Allow", allow, sizeof(allow)), 0);
        assert_string_equal(allow, "POST");
        h_resp_fini(&r);
    }
    free(big);
    /* The id routes: their methods, and an id that is not one segment. */
    char url[512];
    url_of(&f, "/v1/responses/resp_1", url, sizeof(url));
    struct h_resp r = {0};
    struct h_req d = {.method = "DELETE", .url = url};
    assert_int_equal(h_http(&d, &r), 0);
    expect_error(&r, 405, false);
    char allow[64];
    assert_int_equal(h_resp_header(&r, "Allow", allow, sizeof(allow)), 0);
    assert_string_equal(allow, "GET, HEAD");
    h_resp_fini(&r);
    url_of(&f, "/v1/responses/resp_1/cancel", url, sizeof(url));
    struct h_req g = {.method = "GET", .url = url};
    assert_int_equal(h_http(&g, &r), 0);
    expect_error(&r, 405, false);
    h_resp_fini(&r);
    url_of(&f, "/v1/responses/a/b", url, sizeof(url));
    assert_int_equal(h_http_get(url, &r), 0);
    expect_error(&r, 404, false);
    h_resp_fini(&r);
    /* No worker left: 503 in each shape. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"health_status\":503}"), 0);
    url_of(&f, "/v1/messages", url, sizeof(url));
    int64_t deadline = h_now_ms() + 30000;
    for (;;) {
        assert_int_equal(h_http_post_json(url,
                                          "{\"model\":\"mock-model\",\"max_tokens\":1,"
                                          "\"messages\":[]}",
                                          &r),
                         0);
        if (r.status == 503 || h_now_ms() > deadline)
            break;
        h_resp_fini(&r);
    }
    expect_error(&r, 503, true);
    h_resp_fini(&r);
    url_of(&f, "/tokenize", url, sizeof(url));
    assert_int_equal(h_http_post_json(url, "{\"model\":\"mock-model\",\"prompt\":\"a\"}", &r), 0);
    expect_error(&r, 503, false);
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

/* A worker that fails: the router's 502 after its retries, in each shape. */
static void test_upstream_failure_shapes(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1};
    h_fleet_start(&f, &o);
    char url[512];
    url_of(&f, "/v1/messages", url, sizeof(url));
    struct h_resp r = {0};
    /* The worker is gone: connect failures, then no healthy worker. */
    assert_int_equal(h_proc_stop(f.mock[0].proc, H_STOP_TIMEOUT_MS), 0);
    assert_int_equal(
        h_http_post_json(url, "{\"model\":\"mock-model\",\"max_tokens\":1,\"messages\":[]}", &r),
        0);
    assert_true(r.status == 502 || r.status == 503);
    expect_error(&r, r.status, true);
    h_resp_fini(&r);
    url_of(&f, "/v1/responses", url, sizeof(url));
    assert_int_equal(h_http_post_json(url, "{\"model\":\"mock-model\",\"input\":\"a\"}", &r), 0);
    assert_true(r.status == 502 || r.status == 503);
    expect_error(&r, r.status, false);
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_routes_reach_the_worker),
        H_TEST(test_bad_input),
        H_TEST(test_upstream_failure_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
