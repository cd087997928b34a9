/*
 * End-to-end routing quality: the same shared-prefix workload through
 * round_robin and cache_aware against mock workers whose KV cache cannot
 * hold every prefix — cache_aware must earn clearly more prefix-cache hits
 * (the mocks' own counters) — and a multi-turn chat that stays on its
 * worker, observed through the debug headers.
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

#define GROUPS       8
#define PREFIX_BYTES 2048
#define REQUESTS     64

static const char *const small_cache[] = {"--kv-blocks", "160", "--block-tokens", "16", NULL};

/* A group's shared prefix followed by a question unique to request i. */
static char *prompt_for(int group, int i)
{
    size_t len = PREFIX_BYTES + 300;
    char *p = malloc(len + 1);
    assert_non_null(p);
    for (size_t k = 0; k < len; k++) {
        unsigned salt = k < PREFIX_BYTES ? (unsigned)group : (unsigned)(group * 1000 + i + 17);
        p[k] = (char)('a' + (k * 7 + salt * 11 + (k / 13) * salt) % 26);
    }
    p[len] = '\0';
    return p;
}

static void post_completion(struct h_fleet *f, const char *prompt)
{
    json_t *body =
        json_pack("{s:s, s:s, s:i}", "model", H_FLEET_MODEL, "prompt", prompt, "max_tokens", 1);
    char *text = json_dumps(body, JSON_COMPACT);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f->base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    free(text);
    json_decref(body);
}

/* The fraction of prompt tokens the mocks served from their prefix cache. */
static double run_shared_prefix(const char *policy)
{
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 4, .mock_args = small_cache, .policy = policy};
    h_fleet_start(&f, &o);
    unsigned seed = 12345;
    for (int i = 0; i < REQUESTS; i++) {
        seed = seed * 1103515245u + 12345u;
        int group = (int)((seed >> 16) % GROUPS);
        char *p = prompt_for(group, i);
        post_completion(&f, p);
        free(p);
    }
    long long hits = 0, queries = 0;
    for (size_t i = 0; i < f.n; i++) {
        hits += h_fleet_mock_stat(&f, i, "prefix_hit_tokens");
        queries += h_fleet_mock_stat(&f, i, "prefix_query_tokens");
    }
    h_fleet_stop(&f);
    assert_true(queries > 0);
    double ratio = (double)hits / (double)queries;
    print_message("%s: prefix hit tokens %lld of %lld (%.1f%%)\n", policy, hits, queries,
                  100.0 * ratio);
    return ratio;
}

static void test_cache_aware_beats_round_robin_on_shared_prefixes(void **state)
{
    (void)state;
    double rr = run_shared_prefix("round_robin");
    /* A fresh context: new mocks with cold caches, a new router. */
    h_teardown(state);
    h_setup(state);
    double ca = run_shared_prefix("cache_aware");
    assert_true(ca >= 0.6);
    assert_true(ca >= rr * 1.5);
}

/* Sends the conversation so far; returns the serving worker and decision. */
static void chat_turn(struct h_fleet *f, json_t *messages, char *worker, size_t wlen,
                      char *decision, size_t dlen)
{
    json_t *body =
        json_pack("{s:s, s:O, s:i}", "model", H_FLEET_MODEL, "messages", messages, "max_tokens", 4);
    char *text = json_dumps(body, JSON_COMPACT);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-worker", worker, wlen), 0);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-decision", decision, dlen), 0);
    h_resp_fini(&resp);
    free(text);
    json_decref(body);
}

static void add_message(json_t *messages, const char *role, int turn, size_t len)
{
    char *content = malloc(len + 1);
    assert_non_null(content);
    for (size_t k = 0; k < len; k++)
        content[k] = (char)('a' + (k * 3 + (size_t)turn * 5 + (k / 7) * (size_t)turn) % 26);
    content[len] = '\0';
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", role, "content", content));
    free(content);
}

static void test_multi_turn_chat_stays_on_its_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {
        .n = 4, .policy = "cache_aware", .dataplane_extra = "debug_headers: true\n"};
    h_fleet_start(&f, &o);
    json_t *conv = json_array();
    add_message(conv, "system", 0, 1500);
    char home[64] = "", worker[64], decision[64];
    for (int turn = 1; turn <= 5; turn++) {
        add_message(conv, "user", turn, 300);
        chat_turn(&f, conv, worker, sizeof(worker), decision, sizeof(decision));
        if (turn == 1) {
            snprintf(home, sizeof(home), "%s", worker);
        } else {
            assert_string_equal(worker, home);
            assert_string_equal(decision, "affinity");
        }
        add_message(conv, "assistant", turn, 200);
        /* Another conversation in between must not move this one. */
        json_t *other = json_array();
        add_message(other, "system", 100 + turn, 1500);
        add_message(other, "user", 200 + turn, 300);
        char w2[64], d2[64];
        chat_turn(&f, other, w2, sizeof(w2), d2, sizeof(d2));
        json_decref(other);
    }
    json_decref(conv);
    h_fleet_stop(&f);
}

static void test_debug_headers_off_by_default(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1, .policy = "least_load"};
    h_fleet_start(&f, &o);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    struct h_resp resp = {0};
    assert_int_equal(
        h_http_post_json(url, "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"hi\"}", &resp), 0);
    assert_int_equal(resp.status, 200);
    char v[64];
    assert_int_not_equal(h_resp_header(&resp, "x-switchyard-worker", v, sizeof(v)), 0);
    h_resp_fini(&resp);
    /* The decision is counted in the metrics instead. */
    snprintf(url, sizeof(url), "%s/metrics", f.base);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_non_null(strstr(resp.body, "switchyard_routing_decisions_total{policy=\"least_load\","
                                      "decision=\"least_load\"} 1"));
    h_resp_fini(&resp);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_cache_aware_beats_round_robin_on_shared_prefixes),
        H_TEST(test_multi_turn_chat_stays_on_its_worker),
        H_TEST(test_debug_headers_off_by_default),
    };
    return cmocka_run_group_tests_name("routing", tests, NULL, NULL);
}
