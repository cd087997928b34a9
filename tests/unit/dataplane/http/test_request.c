/*
 * Unit tests of the dataplane's request handling that needs no sockets:
 * the JSON skeleton (long strings set aside from jansson, and spliced back
 * into a rewritten body), body parsing (model, stream, user, routing text
 * for completions, chat and embeddings, as the route's body shape says),
 * OpenAI error bodies and SSE error events, and the hop-by-hop header list.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"
#include "dataplane/http/errors.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/http/request.h"
#include "dataplane/types/request_types.h"
#include "common/buf.h"

#define NONCE 0x0123456789abcdefull

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* ---- skeleton ---------------------------------------------------------------- */

static void test_short_strings_are_left_in_place(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"m\",\"prompt\":\"hello \\\"you\\\"\",\"n\":[1,2]}";
    struct dp_skel s;
    assert_int_equal(dp_skel_build(&s, body, strlen(body), 16, NONCE), 0);
    assert_string_equal(s.text, body);
    assert_int_equal(s.n_spans, 0);
    dp_skel_fini(&s);
}

static void test_long_strings_become_markers_with_raw_spans(void **state)
{
    (void)state;
    /* Escaped quotes and an even run of backslashes before the real end. */
    const char *body = "{\"model\":\"m\",\"prompt\":\"a \\\"quoted\\\" word and a path C:\\\\\","
                       "\"x\":\"short\"}";
    struct dp_skel s;
    assert_int_equal(dp_skel_build(&s, body, strlen(body), 16, NONCE), 0);
    assert_int_equal(s.n_spans, 1);
    assert_int_equal(s.spans[0].len, strlen("a \\\"quoted\\\" word and a path C:\\\\"));
    assert_memory_equal(body + s.spans[0].off, "a \\\"quoted\\\" word", 17);
    json_error_t e;
    json_t *root = json_loadb(s.text, s.len, 0, &e);
    assert_non_null(root);
    json_t *prompt = json_object_get(root, "prompt");
    const struct dp_skel_span *sp =
        dp_skel_span(&s, json_string_value(prompt), json_string_length(prompt));
    assert_non_null(sp);
    assert_ptr_equal(sp, &s.spans[0]);
    json_t *x = json_object_get(root, "x");
    assert_null(dp_skel_span(&s, json_string_value(x), json_string_length(x)));
    assert_string_equal(json_string_value(json_object_get(root, "model")), "m");
    json_decref(root);
    dp_skel_fini(&s);
}

static void test_marker_needs_the_nonce(void **state)
{
    (void)state;
    char *big = repeat('z', 100);
    char body[256];
    snprintf(body, sizeof(body), "{\"p\":\"%s\"}", big);
    struct dp_skel s;
    assert_int_equal(dp_skel_build(&s, body, strlen(body), 16, NONCE), 0);
    const char fake[] = "\001sy0000000000000000.0";
    assert_null(dp_skel_span(&s, fake, sizeof(fake) - 1));
    const char right[] = "\001sy0123456789abcdef.0";
    assert_non_null(dp_skel_span(&s, right, sizeof(right) - 1));
    const char past[] = "\001sy0123456789abcdef.1";
    assert_null(dp_skel_span(&s, past, sizeof(past) - 1));
    dp_skel_fini(&s);
    free(big);
}

static void test_unterminated_string_is_left_for_jansson(void **state)
{
    (void)state;
    const char *body = "{\"prompt\":\"this string never ends because the client was cut";
    struct dp_skel s;
    assert_int_equal(dp_skel_build(&s, body, strlen(body), 8, NONCE), 0);
    assert_string_equal(s.text, body);
    json_error_t e;
    assert_null(json_loadb(s.text, s.len, 0, &e));
    dp_skel_fini(&s);
}

/* A rewrite done on the skeleton and spliced equals the same rewrite done
 * on the fully parsed body. */
static void test_splice_restores_every_long_string(void **state)
{
    (void)state;
    char *big = repeat('q', 5000);
    char *key = repeat('k', 300);
    size_t cap = 12000;
    char *body = malloc(cap);
    snprintf(body, cap,
             "{\"model\":\"m\",\"max_tokens\":500,\"messages\":[{\"role\":\"system\",\"content\":"
             "\"%s\\n\\u00e9\\\"end\"},{\"role\":\"user\",\"content\":\"hi\"}],\"%s\":1,"
             "\"stream_options\":{\"include_usage\":true}}",
             big, key);
    struct dp_skel s;
    assert_int_equal(dp_skel_build(&s, body, strlen(body), DP_SKEL_MIN_STRING, NONCE), 0);
    assert_int_equal(s.n_spans, 2);
    assert_true(s.len < 400);
    json_error_t e;
    json_t *skel = json_loadb(s.text, s.len, 0, &e);
    json_t *full = json_loadb(body, strlen(body), 0, &e);
    assert_non_null(skel);
    assert_non_null(full);
    json_t *targets[2] = {skel, full};
    for (int i = 0; i < 2; i++) {
        json_object_set_new(targets[i], "max_tokens", json_integer(1));
        json_object_set_new(targets[i], "stream", json_false());
        json_object_del(targets[i], "stream_options");
    }
    char *dumped = json_dumps(skel, JSON_COMPACT);
    size_t out_len = 0;
    char *spliced = dp_skel_splice(&s, body, dumped, strlen(dumped), &out_len);
    assert_non_null(spliced);
    json_t *back = json_loadb(spliced, out_len, 0, &e);
    assert_non_null(back);
    assert_true(json_equal(back, full));
    json_decref(back);
    json_decref(skel);
    json_decref(full);
    free(spliced);
    free(dumped);
    dp_skel_fini(&s);
    free(body);
    free(key);
    free(big);
}

/* ---- request parsing --------------------------------------------------------- */

/* A request of route with body: the route's body shape decides what is parsed. */
static struct dp_request *request_with(enum dp_route route, const char *body)
{
    struct dp_request *req = calloc(1, sizeof(*req));
    req->route = route;
    buf_init(&req->body, strlen(body));
    buf_init(&req->routing_text, DP_ROUTING_TEXT_MAX);
    buf_append(&req->body, body, strlen(body));
    return req;
}

static void request_free(struct dp_request *req)
{
    buf_fini(&req->routing_text);
    buf_fini(&req->body);
    free(req);
}

static void test_parse_chat_routing_text_and_fields(void **state)
{
    (void)state;
    char *big = repeat('s', 1000);
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"llama\",\"stream\":true,\"user\":\"u7\",\"messages\":["
             "{\"role\":\"system\",\"content\":\"%s\\n\"},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
             big);
    struct dp_request *req = request_with(DP_ROUTE_CHAT, body);
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_string_equal(req->model, "llama");
    assert_true(req->stream);
    assert_string_equal(req->user, "u7");
    /* role \n content \n per message; the long content as the client escaped it;
     * an image part by its URL. */
    char want[2048];
    snprintf(want, sizeof(want), "system\n%s\\n\nuser\nhi[image x]\n", big);
    assert_int_equal(req->routing_text.len, strlen(want));
    assert_memory_equal(req->routing_text.data, want, strlen(want));
    request_free(req);
    free(big);
}

static void test_parse_completions_prompt(void **state)
{
    (void)state;
    struct dp_request *req =
        request_with(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"ab\",\"cd\"]}");
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_false(req->stream);
    assert_int_equal(req->routing_text.len, 4);
    assert_memory_equal(req->routing_text.data, "abcd", 4);
    request_free(req);
}

/* A multi-turn conversation's text only grows, whether its messages are
 * short or long: each turn's routing text starts with the previous one's. */
static void test_turns_extend_the_previous_turn(void **state)
{
    (void)state;
    char *big = repeat('h', 600);
    char t1[2048], t2[2048];
    snprintf(t1, sizeof(t1),
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", big);
    snprintf(t2, sizeof(t2),
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"},"
             "{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":"
             "\"more\"}]}",
             big);
    struct dp_request *a = request_with(DP_ROUTE_CHAT, t1), *b = request_with(DP_ROUTE_CHAT, t2);
    assert_int_equal(dp_request_parse(a), DP_PARSE_OK);
    assert_int_equal(dp_request_parse(b), DP_PARSE_OK);
    assert_true(b->routing_text.len > a->routing_text.len);
    assert_memory_equal(a->routing_text.data, b->routing_text.data, a->routing_text.len);
    request_free(a);
    request_free(b);
    free(big);
}

/* Parses body on route; returns the request (routing text set). */
static struct dp_request *parsed(enum dp_route route, const char *body)
{
    struct dp_request *req = request_with(route, body);
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    return req;
}

static bool same_text(const struct dp_request *a, const struct dp_request *b)
{
    return a->routing_text.len == b->routing_text.len &&
           (a->routing_text.len == 0 ||
            memcmp(a->routing_text.data, b->routing_text.data, a->routing_text.len) == 0);
}

/* Token-id prompts key by their ids, 4 bytes each; a batch by every list. */
static void test_token_id_prompts(void **state)
{
    (void)state;
    struct dp_request *a = parsed(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2,3]}");
    struct dp_request *b = parsed(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2,4]}");
    struct dp_request *c =
        parsed(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[[1,2,3],[258]]}");
    static const unsigned char want[] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0};
    assert_int_equal(a->routing_text.len, sizeof(want));
    assert_memory_equal(a->routing_text.data, want, sizeof(want));
    assert_false(same_text(a, b));
    /* Ids share a prefix as the prompts do. */
    assert_memory_equal(a->routing_text.data, b->routing_text.data, 8);
    assert_int_equal(c->routing_text.len, 16);
    assert_memory_equal(c->routing_text.data, want, sizeof(want));
    assert_memory_equal(c->routing_text.data + 12, "\x02\x01\x00\x00", 4);
    request_free(a);
    request_free(b);
    request_free(c);
}

/* Conversations that differ only in a tool call, a tool result's call id
 * or the tool definitions key differently; turns still extend. */
static void test_tools_count_toward_the_prefix(void **state)
{
    (void)state;
    char *args = repeat('q', 400); /* long: set aside by the skeleton */
    char call_a[1024], call_b[1024];
    static const char fmt[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"%s\",\"arguments\":\"{\\\"q\\\":\\\"%s\\\"}\"}}]}]}";
    snprintf(call_a, sizeof(call_a), fmt, "get_weather", args);
    snprintf(call_b, sizeof(call_b), fmt, "get_time", args);
    struct dp_request *a = parsed(DP_ROUTE_CHAT, call_a), *b = parsed(DP_ROUTE_CHAT, call_b);
    assert_false(same_text(a, b));
    struct dp_request *a2 = parsed(DP_ROUTE_CHAT, call_a);
    assert_true(same_text(a, a2)); /* stable: no marker nonce in the text */
    assert_non_null(memmem(a->routing_text.data, a->routing_text.len, args, 400));
    request_free(a2);

    static const char result_fmt[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"%s\","
        "\"content\":\"sunny\"}]}";
    char r1[256], r2[256];
    snprintf(r1, sizeof(r1), result_fmt, "call_1");
    snprintf(r2, sizeof(r2), result_fmt, "call_2");
    struct dp_request *t1 = parsed(DP_ROUTE_CHAT, r1), *t2 = parsed(DP_ROUTE_CHAT, r2);
    assert_false(same_text(t1, t2));

    static const char tools_fmt[] =
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"%s\","
        "\"parameters\":{\"type\":\"object\"}}}],\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}]}";
    char d1[512], d2[512];
    snprintf(d1, sizeof(d1), tools_fmt, "search");
    snprintf(d2, sizeof(d2), tools_fmt, "browse");
    struct dp_request *u1 = parsed(DP_ROUTE_CHAT, d1), *u2 = parsed(DP_ROUTE_CHAT, d2);
    assert_false(same_text(u1, u2));
    /* The tools come first: the next turn extends this one's text. */
    char d3[512];
    snprintf(d3, sizeof(d3),
             "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"search\","
             "\"parameters\":{\"type\":\"object\"}}}],\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"ok\"}]}");
    struct dp_request *u3 = parsed(DP_ROUTE_CHAT, d3);
    assert_true(u3->routing_text.len > u1->routing_text.len);
    assert_memory_equal(u3->routing_text.data, u1->routing_text.data, u1->routing_text.len);
    request_free(a);
    request_free(b);
    request_free(t1);
    request_free(t2);
    request_free(u1);
    request_free(u2);
    request_free(u3);
    free(args);
}

/* Image parts key by URL; a data URL by a hash of its bytes, not the bytes. */
static void test_images_key_by_url_or_data_hash(void **state)
{
    (void)state;
    static const char fmt[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"what is this?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}]}";
    char *data_a = repeat('A', 5000), *data_b = repeat('A', 5000);
    data_b[4000] = 'B';
    char url_a[5100], url_b[5100], body[6000];
    snprintf(url_a, sizeof(url_a), "data:image/png;base64,%s", data_a);
    snprintf(url_b, sizeof(url_b), "data:image/png;base64,%s", data_b);
    snprintf(body, sizeof(body), fmt, url_a);
    struct dp_request *a = parsed(DP_ROUTE_CHAT, body);
    snprintf(body, sizeof(body), fmt, url_b);
    struct dp_request *b = parsed(DP_ROUTE_CHAT, body);
    snprintf(body, sizeof(body), fmt, url_a);
    struct dp_request *a2 = parsed(DP_ROUTE_CHAT, body);
    assert_false(same_text(a, b));
    assert_true(same_text(a, a2));
    assert_true(a->routing_text.len < 100);
    snprintf(body, sizeof(body), fmt, "https://example.com/cat.png");
    struct dp_request *c = parsed(DP_ROUTE_CHAT, body);
    snprintf(body, sizeof(body), fmt, "https://example.com/dog.png");
    struct dp_request *d = parsed(DP_ROUTE_CHAT, body);
    assert_false(same_text(c, d));
    assert_non_null(memmem(c->routing_text.data, c->routing_text.len, "https://example.com/cat.png",
                           strlen("https://example.com/cat.png")));
    request_free(a);
    request_free(a2);
    request_free(b);
    request_free(c);
    request_free(d);
    free(data_a);
    free(data_b);
}

static void test_parse_bad_bodies(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        enum dp_parse_result want;
    } cases[] = {
        {"", DP_PARSE_BAD_JSON},
        {"{\"model\":", DP_PARSE_BAD_JSON},
        {"[1,2]", DP_PARSE_BAD_JSON},
        {"{\"model\":7}", DP_PARSE_BAD_FIELD},
        {"{\"model\":\"\"}", DP_PARSE_BAD_FIELD},
        {"{\"model\":\"m\",\"stream\":\"yes\"}", DP_PARSE_BAD_FIELD},
        {"{\"prompt\":\"x\"}", DP_PARSE_NO_MODEL},
        {"{\"model\":null}", DP_PARSE_NO_MODEL},
        {"{\"model\":\"m\",\"stream\":null}", DP_PARSE_OK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dp_request *req = request_with(DP_ROUTE_CHAT, cases[i].body);
        enum dp_parse_result got = dp_request_parse(req);
        if (got != cases[i].want)
            fail_msg("body %s: got %d, want %d", cases[i].body, got, cases[i].want);
        request_free(req);
    }
}

/* docs/security.md finding 8: a model of CFG_MODEL_MAX (128) bytes or more
 * is refused, below the skeleton's marker length (256) as well as above
 * it; one byte shorter is parsed and kept whole. */
static void test_model_length_bound(void **state)
{
    (void)state;
    static const struct {
        size_t len;
        enum dp_parse_result want;
    } cases[] = {
        {CFG_MODEL_MAX - 1, DP_PARSE_OK},
        {CFG_MODEL_MAX, DP_PARSE_BAD_FIELD},
        {200, DP_PARSE_BAD_FIELD},
        {DP_SKEL_MIN_STRING + 44, DP_PARSE_BAD_FIELD},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *model = repeat('m', cases[i].len);
        char body[512];
        snprintf(body, sizeof(body), "{\"model\":\"%s\"}", model);
        struct dp_request *req = request_with(DP_ROUTE_CHAT, body);
        enum dp_parse_result got = dp_request_parse(req);
        if (got != cases[i].want)
            fail_msg("model of %zu bytes: got %d, want %d", cases[i].len, got, cases[i].want);
        if (got == DP_PARSE_OK)
            assert_string_equal(req->model, model);
        request_free(req);
        free(model);
    }
}

/* Each route's body shape decides the routing text: embeddings' "input" is
 * none, their chat-style messages are; a local route's body is not read. */
static void test_parse_follows_the_route_body_shape(void **state)
{
    (void)state;
    struct dp_request *req =
        request_with(DP_ROUTE_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"embed me\"}");
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_string_equal(req->model, "e");
    assert_int_equal(req->routing_text.len, 0);
    request_free(req);
    req = request_with(DP_ROUTE_EMBEDDINGS,
                       "{\"model\":\"e\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_int_equal(req->routing_text.len, strlen("user\nx\n"));
    assert_memory_equal(req->routing_text.data, "user\nx\n", strlen("user\nx\n"));
    request_free(req);
    req = request_with(DP_ROUTE_HEALTH, "not json");
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_string_equal(req->model, "");
    request_free(req);
}

/* A 400 KB prompt: parsed, its routing text whole (capped at 1 MiB). */
static void test_parse_large_prompt(void **state)
{
    (void)state;
    size_t n = 400 * 1024;
    char *big = repeat('w', n);
    char *body = malloc(n + 64);
    snprintf(body, n + 64, "{\"model\":\"m\",\"prompt\":\"%s\"}", big);
    struct dp_request *req = request_with(DP_ROUTE_COMPLETIONS, body);
    assert_int_equal(dp_request_parse(req), DP_PARSE_OK);
    assert_int_equal(req->routing_text.len, n);
    request_free(req);
    free(body);
    free(big);
}

/* ---- errors and headers ---------------------------------------------------------- */

static void test_error_body_and_sse_event(void **state)
{
    (void)state;
    char *body = dp_error_body(503, "no_healthy_worker", "no healthy worker serves model 'm'");
    json_error_t e;
    json_t *j = json_loads(body, 0, &e);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "no_healthy_worker");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "service_unavailable");
    assert_string_equal(json_string_value(json_object_get(err, "message")),
                        "no healthy worker serves model 'm'");
    json_decref(j);
    char ev[512];
    size_t n = dp_error_sse_event(ev, sizeof(ev), 502, "upstream_error", "cut");
    assert_true(n > 8);
    assert_memory_equal(ev, "data: {", 7);
    assert_memory_equal(ev + n - 2, "\n\n", 2);
    assert_int_equal(dp_error_sse_event(ev, 10, 502, "upstream_error", "cut"), 0);
    free(body);
}

/* Responses: instructions then input (a string or items) are the routing
 * text, and previous_response_id is kept for the response affinity. */
static void test_parse_responses(void **state)
{
    (void)state;
    struct dp_request *a = parsed(DP_ROUTE_RESPONSES, "{\"model\":\"m\",\"instructions\":\"be "
                                                      "brief\",\"input\":\"hi\",\"stream\":true}");
    const char *want = "system\nbe brief\nuser\nhi\n";
    assert_int_equal(a->routing_text.len, strlen(want));
    assert_memory_equal(a->routing_text.data, want, strlen(want));
    assert_true(a->stream);
    assert_string_equal(a->resp_id, "");
    /* The same turn as items keys the same; a function call is keyed whole. */
    struct dp_request *b =
        parsed(DP_ROUTE_RESPONSES,
               "{\"model\":\"m\",\"instructions\":\"be brief\",\"previous_response_id\":"
               "\"resp_1\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
               "\"input_text\",\"text\":\"hi\"}]},{\"type\":\"function_call_output\","
               "\"call_id\":\"c1\",\"output\":\"42\"}]}");
    assert_true(b->routing_text.len > a->routing_text.len);
    assert_memory_equal(b->routing_text.data, want, strlen(want));
    assert_non_null(memmem(b->routing_text.data, b->routing_text.len, "c1", 2));
    assert_string_equal(b->resp_id, "resp_1");
    request_free(a);
    request_free(b);
}

/* Messages: system (a string or blocks) then the messages. */
static void test_parse_anthropic_messages(void **state)
{
    (void)state;
    struct dp_request *a =
        parsed(DP_ROUTE_MESSAGES,
               "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":"
               "\"sys\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
               "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":"
               "\"f\",\"input\":{}}]}]}");
    const char *want = "system\nsys\nuser\nhi\nassistant\n";
    assert_true(a->routing_text.len > strlen(want));
    assert_memory_equal(a->routing_text.data, want, strlen(want));
    assert_non_null(memmem(a->routing_text.data, a->routing_text.len, "t1", 2));
    struct dp_request *b =
        parsed(DP_ROUTE_MESSAGES_COUNT, "{\"model\":\"m\",\"system\":\"sys\",\"messages\":[{"
                                        "\"role\":\"user\",\"content\":\"hi\"}]}");
    assert_memory_equal(b->routing_text.data, want, b->routing_text.len);
    /* Rerank, score and tokenize are routed by load: no text. */
    struct dp_request *c =
        parsed(DP_ROUTE_RERANK, "{\"model\":\"m\",\"query\":\"q\",\"documents\":[\"a\"]}");
    assert_int_equal(c->routing_text.len, 0);
    assert_string_equal(c->model, "m");
    request_free(a);
    request_free(b);
    request_free(c);
}

/* Anthropic's error shape, and its stream event. */
static void test_anthropic_error_shape(void **state)
{
    (void)state;
    char *body = dp_error_body_shaped(true, 404, "model_not_found", "no such model");
    assert_string_equal(body, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\","
                              "\"message\":\"no such model\"}}");
    free(body);
    body = dp_error_body_shaped(false, 404, "model_not_found", "no such model");
    assert_non_null(strstr(body, "\"code\":\"model_not_found\""));
    free(body);
    assert_string_equal(dp_error_anthropic_type(413), "request_too_large");
    assert_string_equal(dp_error_anthropic_type(503), "overloaded_error");
    assert_string_equal(dp_error_anthropic_type(502), "api_error");
    char ev[256];
    size_t n = dp_error_sse_event_shaped(true, ev, sizeof(ev), 504, "upstream_timeout", "slow");
    assert_true(n > 0);
    assert_int_equal(strncmp(ev, "event: error\ndata: {\"type\":\"error\"", 33), 0);
    assert_int_equal(dp_error_sse_event_shaped(true, ev, 10, 504, "upstream_timeout", "slow"), 0);
}

static void test_hop_by_hop_headers(void **state)
{
    (void)state;
    assert_true(dp_header_is_hop_by_hop("Connection", 10));
    assert_true(dp_header_is_hop_by_hop("transfer-encoding", 17));
    assert_true(dp_header_is_hop_by_hop("X-Request-Id", 12));
    assert_false(dp_header_is_hop_by_hop("Authorization", 13));
    assert_false(dp_header_is_hop_by_hop("Content-Type", 12));
    assert_false(dp_header_is_hop_by_hop("te-x", 4));
}

/* /invocations is parsed as the shape vLLM serves it as (sagemaker's
 * first request type that validates): chat by its messages, a completion
 * by its prompt, anything else by load; token-in requests key by ids. */
static void test_invocations_take_their_bodys_shape(void **state)
{
    (void)state;
    struct dp_request *chat = parsed(DP_ROUTE_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":"
                                                    "\"user\",\"content\":\"hello\"}]}");
    struct dp_request *inv =
        parsed(DP_ROUTE_INVOCATIONS, "{\"model\":\"m\",\"prompt\":\"x\",\"messages\":[{\"role\":"
                                     "\"user\",\"content\":\"hello\"}]}");
    assert_int_equal(dp_request_shape(inv), DP_BODY_CHAT);
    assert_true(same_text(chat, inv));
    request_free(inv);
    request_free(chat);
    struct dp_request *cmpl = parsed(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"abc\"}");
    inv = parsed(DP_ROUTE_INVOCATIONS, "{\"model\":\"m\",\"prompt\":\"abc\"}");
    assert_int_equal(dp_request_shape(inv), DP_BODY_COMPLETION);
    assert_true(same_text(cmpl, inv));
    request_free(inv);
    request_free(cmpl);
    inv = parsed(DP_ROUTE_INVOCATIONS, "{\"model\":\"m\",\"input\":\"abc\"}");
    assert_int_equal(dp_request_shape(inv), DP_BODY_BY_LOAD);
    assert_int_equal(inv->routing_text.len, 0);
    request_free(inv);
    cmpl = parsed(DP_ROUTE_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[7,8,9]}");
    struct dp_request *gen =
        parsed(DP_ROUTE_GENERATE,
               "{\"model\":\"m\",\"token_ids\":[7,8,9],\"sampling_params\":{\"max_tokens\":5}}");
    assert_true(same_text(cmpl, gen));
    assert_int_equal(gen->adm.max_tokens, 5);
    request_free(gen);
    request_free(cmpl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_strings_are_left_in_place),
        cmocka_unit_test(test_long_strings_become_markers_with_raw_spans),
        cmocka_unit_test(test_marker_needs_the_nonce),
        cmocka_unit_test(test_unterminated_string_is_left_for_jansson),
        cmocka_unit_test(test_splice_restores_every_long_string),
        cmocka_unit_test(test_parse_chat_routing_text_and_fields),
        cmocka_unit_test(test_parse_completions_prompt),
        cmocka_unit_test(test_turns_extend_the_previous_turn),
        cmocka_unit_test(test_token_id_prompts),
        cmocka_unit_test(test_tools_count_toward_the_prefix),
        cmocka_unit_test(test_images_key_by_url_or_data_hash),
        cmocka_unit_test(test_parse_bad_bodies),
        cmocka_unit_test(test_model_length_bound),
        cmocka_unit_test(test_parse_follows_the_route_body_shape),
        cmocka_unit_test(test_parse_large_prompt),
        cmocka_unit_test(test_error_body_and_sse_event),
        cmocka_unit_test(test_hop_by_hop_headers),
        cmocka_unit_test(test_parse_responses),
        cmocka_unit_test(test_parse_anthropic_messages),
        cmocka_unit_test(test_anthropic_error_shape),
        cmocka_unit_test(test_invocations_take_their_bodys_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
