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
#include "tests/e2e/harness_routed.h"

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
    h_routed_post(f->base, "/v1/chat/completions", text, worker, wlen, decision, dlen);
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

/* Starts the conversation's next turn as a stream in the background; the
 * worker's stall fault holds it in flight. */
static void hold_turn(struct h_fleet *f, json_t *messages)
{
    json_t *body = json_pack("{s:s, s:O, s:i, s:b}", "model", H_FLEET_MODEL, "messages", messages,
                             "max_tokens", 4, "stream", 1);
    char *text = json_dumps(body, JSON_COMPACT);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_async *a;
    assert_int_equal(h_async_start(url, text, NULL, &a), 0);
    free(text);
    json_decref(body);
}

struct load_is {
    struct h_fleet *f;
    size_t worker;
    long long want;
};

static bool load_reached(void *arg)
{
    struct load_is *l = arg;
    return h_fleet_load(l->f, l->worker) == l->want;
}

/*
 * Invariant 9 through the real dataplane. Two conversations live on two
 * workers; the "hot" one's worker gets 3 requests held in flight
 * (balance_abs_threshold 2: overloaded against the idle third worker), the
 * "calm" one's worker 1. The calm conversation's next turn is then routed
 * with the given gate and must go to the calm worker (stays) or to the idle
 * one, with the given decision.
 */
static void hot_worker_elsewhere(const char *gate, bool stays, const char *want_decision)
{
    struct h_fleet f;
    char extra[128];
    snprintf(extra, sizeof(extra), "balance_abs_threshold: 2\nbalance_gate: %s\n", gate);
    struct h_fleet_opts o = {.n = 3,
                             .policy = "cache_aware",
                             .policy_extra = extra,
                             .dataplane_extra = "debug_headers: true\n"};
    h_fleet_start(&f, &o);
    json_t *hot = json_array(), *calm = NULL;
    add_message(hot, "system", 0, 1500);
    add_message(hot, "user", 1, 300);
    char hot_w[64], calm_w[64], d[64];
    chat_turn(&f, hot, hot_w, sizeof(hot_w), d, sizeof(d));
    /* On an idle fleet a new prompt's worker follows its hash: try other
     * prompts until the calm conversation lives elsewhere. */
    for (int seed = 10;; seed++) {
        assert_true(seed < 60);
        calm = json_array();
        add_message(calm, "system", seed, 1500);
        add_message(calm, "user", seed + 1, 300);
        chat_turn(&f, calm, calm_w, sizeof(calm_w), d, sizeof(d));
        if (strcmp(calm_w, hot_w) != 0)
            break;
        json_decref(calm);
    }
    size_t h = (size_t)atoi(hot_w + 1) - 1, c = (size_t)atoi(calm_w + 1) - 1, idle = 3 - h - c;
    /* Their workers stall every stream after its first event. */
    const char *stall = "{\"stall_after_chunks\":1,\"stall_ms\":30000}";
    assert_int_equal(h_mock_faults(f.mock[h].url, stall), 0);
    assert_int_equal(h_mock_faults(f.mock[c].url, stall), 0);
    hold_turn(&f, calm);
    struct load_is l = {&f, c, 1};
    assert_int_equal(h_wait_until(load_reached, &l, H_READY_TIMEOUT_MS), 0);
    for (long long k = 1; k <= 3; k++) {
        hold_turn(&f, hot);
        l = (struct load_is){&f, h, k};
        assert_int_equal(h_wait_until(load_reached, &l, H_READY_TIMEOUT_MS), 0);
    }
    assert_int_equal(h_fleet_load(&f, idle), 0);
    /* The calm conversation's next turn (not streamed: no stall). */
    char worker[64], decision[64], want_worker[16];
    chat_turn(&f, calm, worker, sizeof(worker), decision, sizeof(decision));
    snprintf(want_worker, sizeof(want_worker), "w%zu", (stays ? c : idle) + 1);
    assert_string_equal(worker, want_worker);
    assert_string_equal(decision, want_decision);
    json_decref(hot);
    json_decref(calm);
    h_fleet_stop(&f);
}

/* A hot worker elsewhere does not switch affinity off (invariant 9); the
 * fleet gate (balance_gate: fleet, vllm-router before #238) does. */
static void test_hot_worker_elsewhere_keeps_affinity(void **state)
{
    (void)state;
    hot_worker_elsewhere("per_request", true, "affinity_despite_imbalance");
}

static void test_fleet_gate_moves_everyone(void **state)
{
    (void)state;
    hot_worker_elsewhere("fleet", false, "fleet_imbalanced");
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
        H_TEST(test_hot_worker_elsewhere_keeps_affinity),
        H_TEST(test_fleet_gate_moves_everyone),
    };
    return cmocka_run_group_tests_name("routing", tests, NULL, NULL);
}
