/*
 * End-to-end: the routes of vLLM's surface beyond the OpenAI core, through
 * the router (docs/api.md). /ping is the router's own health answer, GET
 * and POST; /v2/embed, /invocations, the render endpoints,
 * /inference/v1/generate and the audio uploads reach the mock worker and
 * come back as it wrote them. /invocations is routed as the shape vLLM
 * serves it as (a chat body by its messages), /inference/v1/generate by
 * its token ids: a conversation that grows keeps its worker. The audio
 * routes are multipart/form-data: the router reads the model field as
 * the upload passes (an unknown one is its own 404) and forwards the bytes
 * exactly as they came.
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
#include "tests/e2e/harness_routed.h"

static json_t *post(const struct h_fleet *f, const char *path, const char *body, long want)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
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

static const char *str_at(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    assert_non_null(s);
    return s;
}

static void test_ping_is_the_routers_health(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1};
    h_fleet_start(&f, &o);
    char url[256];
    snprintf(url, sizeof(url), "%s/ping", f.base);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_string_equal(str_at(j, "status"), "ok");
    json_decref(j);
    h_resp_fini(&r);
    /* SageMaker pings with POST too (vLLM registers both). */
    struct h_req pr = {.method = "POST", .url = url, .body = ""};
    assert_int_equal(h_http(&pr, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    /* Answered here: the worker saw neither. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

static void test_json_routes_reach_the_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1};
    h_fleet_start(&f, &o);

    json_t *r = post(&f, "/v2/embed",
                     "{\"model\":\"mock-model\",\"texts\":[\"a\",\"b\"],\"input_type\":"
                     "\"search_document\"}",
                     200);
    assert_string_equal(str_at(r, "response_type"), "embeddings_by_type");
    assert_int_equal(json_array_size(json_object_get(json_object_get(r, "embeddings"), "float")),
                     2);
    json_decref(r);
    /* vLLM's model is optional there: the fleet's one model serves it. */
    r = post(&f, "/v2/embed", "{\"texts\":[\"a\"]}", 200);
    json_decref(r);

    /* /invocations answers as the endpoint its body fits. */
    r = post(&f, "/invocations",
             "{\"model\":\"mock-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"max_tokens\":2}",
             200);
    assert_string_equal(str_at(r, "object"), "chat.completion");
    json_decref(r);
    r = post(&f, "/invocations", "{\"model\":\"mock-model\",\"prompt\":\"hi\",\"max_tokens\":2}",
             200);
    assert_string_equal(str_at(r, "object"), "text_completion");
    json_decref(r);
    r = post(&f, "/invocations", "{\"model\":\"mock-model\",\"input\":\"hi\"}", 200);
    assert_int_equal(json_array_size(json_object_get(r, "data")), 1);
    json_decref(r);
    r = post(&f, "/invocations", "{\"model\":\"mock-model\",\"nothing\":1}", 400);
    assert_non_null(
        strstr(str_at(json_object_get(r, "error"), "message"), "Cannot find suitable handler"));
    json_decref(r);

    /* Render: a GenerateRequest (chat, messages), a list of them (completions). */
    r = post(&f, "/v1/chat/completions/render",
             "{\"model\":\"mock-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             200);
    assert_int_equal(json_array_size(json_object_get(r, "token_ids")), 2); /* "userhi" */
    json_decref(r);
    r = post(&f, "/v1/completions/render", "{\"model\":\"mock-model\",\"prompt\":[\"ab\",\"cd\"]}",
             200);
    assert_int_equal(json_array_size(r), 2);
    json_decref(r);
    r = post(&f, "/v1/messages/render",
             "{\"model\":\"mock-model\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}",
             200);
    assert_true(json_is_array(json_object_get(r, "token_ids")));
    json_decref(r);

    /* Token in, token out. */
    r = post(&f, "/inference/v1/generate",
             "{\"model\":\"mock-model\",\"token_ids\":[1,2,3],\"sampling_params\":{\"max_tokens\":"
             "3}}",
             200);
    json_t *c0 = json_array_get(json_object_get(r, "choices"), 0);
    assert_int_equal(json_array_size(json_object_get(c0, "token_ids")), 3);
    json_decref(r);
    char url[256];
    snprintf(url, sizeof(url), "%s/inference/v1/generate", f.base);
    struct h_sse s = {0};
    assert_int_equal(h_http_stream(url,
                                   "{\"token_ids\":[1,2],\"stream\":true,\"sampling_params\":{"
                                   "\"max_tokens\":2}}",
                                   &s),
                     0);
    assert_int_equal(s.resp.status, 200);
    assert_true(s.saw_done);
    assert_int_equal(s.n_events, 3);
    h_sse_fini(&s);
    /* Every one was forwarded. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 11);
    h_fleet_stop(&f);
}

/* A multipart upload: a model field (NULL: none), a file of n bytes, a stream field. */
static char *form_body(const char *model, size_t n, bool stream, size_t *len)
{
    static const char b[] = "----sytestboundary7MA4YWxk";
    struct {
        char *p;
        size_t len, cap;
    } o = {malloc(n + 4096), 0, n + 4096};
    assert_non_null(o.p);
#define PUT(s, l)                                                                                  \
    do {                                                                                           \
        memcpy(o.p + o.len, (s), (l));                                                             \
        o.len += (l);                                                                              \
    } while (0)
#define PUTS(s) PUT((s), strlen(s))
    if (model != NULL) {
        PUTS("--");
        PUTS(b);
        PUTS("\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n");
        PUTS(model);
        PUTS("\r\n");
    }
    PUTS("--");
    PUTS(b);
    PUTS("\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
         "Content-Type: audio/wav\r\n\r\n");
    /* Text, so the mock's stats can show it, but with what a careless
     * splitter trips on: CRLF, dashes, the boundary's start. */
    static const char set[] = "ab\r\n--cd\r\n----sytest0123xyz";
    for (size_t i = 0; i < n; i++)
        o.p[o.len++] = set[(i * 7 + (i >> 8)) % (sizeof(set) - 1)];
    PUTS("\r\n");
    if (stream) {
        PUTS("--");
        PUTS(b);
        PUTS("\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n");
    }
    PUTS("--");
    PUTS(b);
    PUTS("--\r\n");
#undef PUTS
#undef PUT
    *len = o.len;
    return o.p;
}

static void upload(const struct h_fleet *f, const char *path, const char *model, size_t n,
                   bool stream, struct h_resp *r)
{
    size_t len;
    char *body = form_body(model, n, stream, &len);
    char url[256];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    const char *hdrs[] = {"Content-Type: multipart/form-data; boundary=----sytestboundary7MA4YWxk",
                          NULL};
    struct h_req q = {.method = "POST", .url = url, .body = body, .body_len = len, .headers = hdrs};
    assert_int_equal(h_http(&q, r), 0);
    free(body);
}

/* The size of the last request body mock 0 received. */
static size_t mock_last_body_len(const struct h_fleet *f)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/mock/stats", f->mock[0].url);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    json_t *last = json_object_get(j, "last_request");
    size_t n = json_is_string(last) ? json_string_length(last) : 0;
    json_decref(j);
    return n;
}

static void test_audio_uploads_go_by_their_form_model(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1};
    h_fleet_start(&f, &o);
    struct h_resp r = {0};
    upload(&f, "/v1/audio/transcriptions", H_FLEET_MODEL, 100000, false, &r);
    if (r.status != 200)
        fprintf(stderr, "%ld %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_true(strlen(str_at(j, "text")) > 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "seconds")),
                     4); /* 100000 bytes at 32000 a second */
    json_decref(j);
    h_resp_fini(&r);
    size_t sent;
    free(form_body(H_FLEET_MODEL, 100000, false, &sent));
    assert_int_equal(mock_last_body_len(&f), sent); /* byte for byte */

    upload(&f, "/v1/audio/translations", H_FLEET_MODEL, 5000, false, &r);
    assert_int_equal(r.status, 200);
    j = h_resp_json(&r);
    assert_non_null(json_object_get(j, "text"));
    json_decref(j);
    h_resp_fini(&r);

    char url[256];
    snprintf(url, sizeof(url), "%s/v1/audio/transcriptions", f.base);
    upload(&f, "/v1/audio/transcriptions", H_FLEET_MODEL, 3000, true, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"object\":\"transcription.chunk\""));
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_fini(&r);

    /* The router read the field: a model no worker serves is its own 404. */
    long long before = h_fleet_mock_stat(&f, 0, "requests_total");
    upload(&f, "/v1/audio/transcriptions", "no-such-model", 2000, false, &r);
    assert_int_equal(r.status, 404);
    j = h_resp_json(&r);
    assert_non_null(strstr(str_at(json_object_get(j, "error"), "message"), "no-such-model"));
    json_decref(j);
    h_resp_fini(&r);
    /* No model field: the fleet's one model. */
    upload(&f, "/v1/audio/transcriptions", NULL, 2000, false, &r);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    /* Not a form at all: refused here. */
    assert_int_equal(h_http_post_json(url, "{\"model\":\"mock-model\"}", &r), 0);
    assert_int_equal(r.status, 400);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), before + 1);
    h_fleet_stop(&f);
}

/* A token-in body of n ids from seed. */
static char *generate_body(unsigned seed, size_t n)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(ids,
                              json_integer((json_int_t)((seed * 7919u + i * 104729u) % 50000u)));
    json_t *b = json_pack("{s:s, s:o, s:{s:i}}", "model", H_FLEET_MODEL, "token_ids", ids,
                          "sampling_params", "max_tokens", 2);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

/* A conversation grows; each turn must come back to its worker by prefix. */
static void test_invocations_and_generate_keep_their_prefix(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {
        .n = 4, .policy = "cache_aware", .dataplane_extra = "debug_headers: true\n"};
    h_fleet_start(&f, &o);
    char home[64], worker[64], decision[64];
    /* The same token ids, longer each time (the last ids differ). */
    for (size_t turn = 0; turn < 4; turn++) {
        char *body = generate_body(1, 600 + turn * 50);
        h_routed_post(f.base, "/inference/v1/generate", body, worker, sizeof(worker), decision,
                      sizeof(decision));
        free(body);
        if (turn == 0)
            snprintf(home, sizeof(home), "%s", worker);
        else {
            assert_string_equal(worker, home);
            assert_string_equal(decision, "affinity");
        }
        /* Another prompt in between does not move it. */
        body = generate_body(100 + (unsigned)turn, 600);
        h_routed_post(f.base, "/inference/v1/generate", body, worker, sizeof(worker), decision,
                      sizeof(decision));
        free(body);
    }
    /* A chat body on /invocations is routed by its messages. */
    char *sys = h_routed_text(7, 2000);
    for (int turn = 0; turn < 3; turn++) {
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content", sys);
        for (int k = 0; k <= turn; k++)
            json_array_append_new(msgs,
                                  json_pack("{s:s, s:s}", "role", k % 2 ? "assistant" : "user",
                                            "content", k % 2 ? "ok" : "next question"));
        json_t *b =
            json_pack("{s:s, s:o, s:i}", "model", H_FLEET_MODEL, "messages", msgs, "max_tokens", 2);
        char *text = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        h_routed_post(f.base, "/invocations", text, worker, sizeof(worker), decision,
                      sizeof(decision));
        free(text);
        if (turn == 0)
            snprintf(home, sizeof(home), "%s", worker);
        else {
            assert_string_equal(worker, home);
            assert_string_equal(decision, "affinity");
        }
    }
    free(sys);
    h_fleet_stop(&f);
}

/* The last request body mock m received, parsed (a new reference). */
static json_t *mock_last_request(const char *mock_url)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/mock/stats", mock_url);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    json_t *last = json_incref(json_object_get(j, "last_request"));
    json_decref(j);
    return last;
}

/*
 * precise_cache_aware's /tokenize body carries what changes the prompt's
 * tokens: vLLM's chat endpoint renders with chat_template and tools, and
 * with chat_template_kwargs merged with add_generation_prompt,
 * continue_final_message, documents and reasoning_effort (and
 * enable_thinking); /tokenize takes the last two only inside
 * chat_template_kwargs. A stand-alone mock is the tokenizer, so its last
 * request is the router's /tokenize body.
 */
static void test_tokenize_body_carries_the_template_inputs(void **state)
{
    (void)state;
    struct h_mock tok;
    assert_int_equal(h_mock_start(&tok, NULL), 0);
    char extra[256];
    snprintf(extra, sizeof(extra), "precise_cache_aware:\n  tokenizer_url: \"%s/tokenize\"\n",
             tok.url);
    struct h_fleet f;
    /* Two workers: with one there is no choice and nothing to tokenize for. */
    struct h_fleet_opts o = {.n = 2, .policy = "precise_cache_aware", .policy_extra = extra};
    h_fleet_start(&f, &o);
    json_t *r =
        post(&f, "/v1/chat/completions",
             "{\"model\":\"mock-model\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"he\"}],"
             "\"chat_template\":\"{{ messages }}\",\"chat_template_kwargs\":{\"x\":1},"
             "\"reasoning_effort\":\"low\",\"documents\":[{\"title\":\"t\",\"text\":\"d\"}],"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
             "\"add_generation_prompt\":false,\"continue_final_message\":true}",
             200);
    json_decref(r);
    json_t *t = mock_last_request(tok.url);
    assert_non_null(json_object_get(t, "messages"));
    assert_string_equal(str_at(t, "chat_template"), "{{ messages }}");
    assert_true(json_is_array(json_object_get(t, "tools")));
    assert_true(json_is_false(json_object_get(t, "add_generation_prompt")));
    assert_true(json_is_true(json_object_get(t, "continue_final_message")));
    json_t *kw = json_object_get(t, "chat_template_kwargs");
    assert_int_equal(json_integer_value(json_object_get(kw, "x")), 1);
    assert_string_equal(str_at(kw, "reasoning_effort"), "low");
    assert_true(json_is_array(json_object_get(kw, "documents")));
    assert_true(json_is_true(json_object_get(kw, "enable_thinking")));
    /* Not top-level: vLLM's TokenizeChatRequest has no such fields. */
    assert_null(json_object_get(t, "documents"));
    assert_null(json_object_get(t, "reasoning_effort"));
    json_decref(t);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_ping_is_the_routers_health),
        H_TEST(test_json_routes_reach_the_worker),
        H_TEST(test_audio_uploads_go_by_their_form_model),
        H_TEST(test_invocations_and_generate_keep_their_prefix),
        H_TEST(test_tokenize_body_carries_the_template_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
