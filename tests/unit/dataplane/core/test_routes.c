/*
 * Unit tests of the data plane's route table (dataplane/core/routes.h): every
 * route has a row, every row's path resolves to it and allows exactly its
 * methods, unknown paths are "other", and the labels, Allow headers,
 * upstream paths and body shapes are the ones clients and dashboards see.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/core/routes.h"

static void test_every_route_has_a_row(void **state)
{
    (void)state;
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++) {
        const struct dp_route_row *row = dp_route_row((enum dp_route)r);
        assert_non_null(row->label);
        assert_true(row->serve != DP_SERVE_UNSET);
        assert_true(row->body != DP_BODY_UNSET);
        if (row->serve == DP_SERVE_NOT_FOUND) {
            assert_int_equal(r, DP_ROUTE_OTHER);
            continue;
        }
        assert_non_null(row->path);
        assert_non_null(row->allow);
        assert_true(row->methods != 0);
        if (row->serve == DP_SERVE_PROXY) {
            assert_non_null(row->upstream_path);
            assert_true(row->body > DP_BODY_NONE && row->body < DP_BODY_COUNT);
            assert_null(row->answer);
        } else {
            assert_int_equal(row->serve, DP_SERVE_LOCAL);
            assert_non_null(row->answer);
            assert_null(row->upstream_path);
            assert_int_equal(row->body, DP_BODY_NONE);
            assert_false(row->prefill_decode);
        }
    }
}

/* Each row's path finds it; its Allow header names exactly its methods. */
static void test_paths_and_methods_resolve(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned bit;
    } methods[] = {{"GET", DP_METHOD_GET}, {"HEAD", DP_METHOD_HEAD}, {"POST", DP_METHOD_POST}};
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++) {
        const struct dp_route_row *row = dp_route_row((enum dp_route)r);
        if (row->path == NULL)
            continue;
        char path[128];
        snprintf(path, sizeof(path), "%s%s%s", row->path, row->id_suffix != NULL ? "resp_1" : "",
                 row->id_suffix != NULL ? row->id_suffix : "");
        assert_int_equal(dp_route_find(path), r);
        char allow[64] = "";
        for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
            bool ok = (row->methods & methods[m].bit) != 0;
            assert_int_equal(dp_route_allows((enum dp_route)r, methods[m].name), ok);
            if (ok)
                snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                         allow[0] != '\0' ? ", " : "", methods[m].name);
        }
        assert_string_equal(row->allow, allow);
        assert_false(dp_route_allows((enum dp_route)r, "DELETE"));
        assert_false(dp_route_allows((enum dp_route)r, "get"));
    }
}

static void test_unknown_paths_are_other(void **state)
{
    (void)state;
    const char *paths[] = {"/",
                           "",
                           "/v1",
                           "/v1/chat/completions/",
                           "/v1/chat/completions?x=1",
                           "/V1/models",
                           "/healthz",
                           "/v1/responses/",
                           "/v1/responses//cancel",
                           "/v1/responses/a/b",
                           "/v1/responses/a/cancel/",
                           "/v1/messages/"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        assert_int_equal(dp_route_find(paths[i]), DP_ROUTE_OTHER);
    assert_true(dp_route_allows(DP_ROUTE_OTHER, "DELETE"));
    assert_string_equal(dp_route_row(DP_ROUTE_OTHER)->label, "other");
    assert_ptr_equal(dp_route_row(DP_ROUTE_UNSET), dp_route_row(DP_ROUTE_OTHER));
    assert_ptr_equal(dp_route_row(DP_ROUTE_COUNT), dp_route_row(DP_ROUTE_OTHER));
}

/* What clients, workers and dashboards see, spelled out. */
static void test_rows_as_published(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        enum dp_route route;
        const char *allow;
        enum dp_serve serve;
        enum dp_body body;
        bool prefill_decode;
    } want[] = {
        {"/v1/chat/completions", DP_ROUTE_CHAT, "POST", DP_SERVE_PROXY, DP_BODY_CHAT, true},
        {"/v1/completions", DP_ROUTE_COMPLETIONS, "POST", DP_SERVE_PROXY, DP_BODY_COMPLETION, true},
        {"/v1/embeddings", DP_ROUTE_EMBEDDINGS, "POST", DP_SERVE_PROXY, DP_BODY_EMBEDDINGS, false},
        {"/v1/models", DP_ROUTE_MODELS, "GET, HEAD", DP_SERVE_LOCAL, DP_BODY_NONE, false},
        {"/health", DP_ROUTE_HEALTH, "GET, HEAD", DP_SERVE_LOCAL, DP_BODY_NONE, false},
        {"/metrics", DP_ROUTE_METRICS, "GET, HEAD", DP_SERVE_LOCAL, DP_BODY_NONE, false},
        {"/v1/responses", DP_ROUTE_RESPONSES, "POST", DP_SERVE_PROXY, DP_BODY_RESPONSES, false},
        {"/v1/messages", DP_ROUTE_MESSAGES, "POST", DP_SERVE_PROXY, DP_BODY_MESSAGES, false},
        {"/v1/messages/count_tokens", DP_ROUTE_MESSAGES_COUNT, "POST", DP_SERVE_PROXY,
         DP_BODY_MESSAGES, false},
        {"/rerank", DP_ROUTE_RERANK, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/v1/rerank", DP_ROUTE_RERANK_V1, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/v2/rerank", DP_ROUTE_RERANK_V2, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/score", DP_ROUTE_SCORE, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/v1/score", DP_ROUTE_SCORE_V1, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/pooling", DP_ROUTE_POOLING, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/classify", DP_ROUTE_CLASSIFY, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/tokenize", DP_ROUTE_TOKENIZE, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/detokenize", DP_ROUTE_DETOKENIZE, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/ping", DP_ROUTE_PING, "GET, HEAD, POST", DP_SERVE_LOCAL, DP_BODY_NONE, false},
        {"/v2/embed", DP_ROUTE_EMBED_V2, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD, false},
        {"/invocations", DP_ROUTE_INVOCATIONS, "POST", DP_SERVE_PROXY, DP_BODY_INVOCATIONS, false},
        {"/v1/chat/completions/render", DP_ROUTE_CHAT_RENDER, "POST", DP_SERVE_PROXY,
         DP_BODY_BY_LOAD, false},
        {"/v1/completions/render", DP_ROUTE_COMPLETIONS_RENDER, "POST", DP_SERVE_PROXY,
         DP_BODY_BY_LOAD, false},
        {"/v1/messages/render", DP_ROUTE_MESSAGES_RENDER, "POST", DP_SERVE_PROXY, DP_BODY_BY_LOAD,
         false},
        {"/inference/v1/generate", DP_ROUTE_GENERATE, "POST", DP_SERVE_PROXY, DP_BODY_GENERATE,
         false},
        {"/v1/audio/transcriptions", DP_ROUTE_TRANSCRIPTIONS, "POST", DP_SERVE_PROXY, DP_BODY_FORM,
         false},
        {"/v1/audio/translations", DP_ROUTE_TRANSLATIONS, "POST", DP_SERVE_PROXY, DP_BODY_FORM,
         false},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        enum dp_route r = dp_route_find(want[i].path);
        assert_int_equal(r, want[i].route);
        const struct dp_route_row *row = dp_route_row(r);
        assert_string_equal(row->label, want[i].path);
        assert_string_equal(row->allow, want[i].allow);
        assert_int_equal(row->serve, want[i].serve);
        assert_int_equal(row->body, want[i].body);
        assert_int_equal(row->prefill_decode, want[i].prefill_decode);
        if (want[i].serve == DP_SERVE_PROXY && row->id_suffix == NULL)
            assert_string_equal(row->upstream_path, want[i].path);
    }
}

/* The id routes: the id is one segment, the worker path keeps it. */
static void test_id_routes(void **state)
{
    (void)state;
    const char *id;
    size_t len;
    assert_int_equal(dp_route_match("/v1/responses/resp_abc", &id, &len), DP_ROUTE_RESPONSES_GET);
    assert_int_equal(len, 8);
    assert_memory_equal(id, "resp_abc", 8);
    assert_int_equal(dp_route_match("/v1/responses/resp_abc/cancel", &id, &len),
                     DP_ROUTE_RESPONSES_CANCEL);
    assert_int_equal(len, 8);
    assert_int_equal(dp_route_match("/v1/responses", &id, &len), DP_ROUTE_RESPONSES);
    assert_null(id);
    const struct dp_route_row *get = dp_route_row(DP_ROUTE_RESPONSES_GET);
    assert_string_equal(get->label, "/v1/responses/{id}");
    assert_string_equal(get->allow, "GET, HEAD");
    assert_int_equal(get->body, DP_BODY_ID);
    assert_string_equal(dp_route_row(DP_ROUTE_RESPONSES_CANCEL)->label,
                        "/v1/responses/{id}/cancel");
    /* Anthropic's error shape on the Messages routes only. */
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++)
        assert_int_equal(dp_route_row((enum dp_route)r)->anthropic_errors,
                         r == DP_ROUTE_MESSAGES || r == DP_ROUTE_MESSAGES_COUNT ||
                             r == DP_ROUTE_MESSAGES_RENDER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route_has_a_row),
        cmocka_unit_test(test_paths_and_methods_resolve),
        cmocka_unit_test(test_unknown_paths_are_other),
        cmocka_unit_test(test_rows_as_published),
        cmocka_unit_test(test_id_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
