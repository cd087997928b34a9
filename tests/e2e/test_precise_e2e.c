/*
 * End-to-end: the whole precise_cache_aware chain with nothing filled in by
 * the test. Mock workers publish their LRU's real stores and evictions as
 * vLLM's KV-cache events over ZeroMQ; the control plane, given each
 * worker's kv_events, subscribes, maps the events onto the router's chain
 * and writes the shared holder index; the data plane tokenizes each request
 * through a worker's /tokenize and routes on that index.
 *
 * The test only reads: decisions from the debug headers, counters from the
 * control plane's and the data plane's /metrics, and the holder index
 * itself (attached read-only as the data plane does, to check a prefix is
 * or is no longer held by a worker). Speculative entries are off, so an
 * `affinity` decision comes from the workers' events alone.
 *
 * A SUB socket misses what is published before it joins, so each fleet
 * first sends probe requests straight to every worker until the control
 * plane has delivered a batch of each.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/kv_holders.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"
#include "tests/e2e/harness_routed.h"

#define WAIT_MS    H_PRECISE_WAIT_MS
#define BLOCK_TEXT H_PRECISE_BLOCK_TEXT
#define MAX_CHAIN  64

/* ---- reading the fleet ------------------------------------------------------ */

/* A per-worker control-plane sample, e.g. ("switchyard_kv_events_gaps_total", "w1"). */
static long long cp_worker_metric(const struct h_precise_fleet *f, const char *family,
                                  const char *id)
{
    char sample[160];
    snprintf(sample, sizeof(sample), "%s{worker=\"%s\"}", family, id);
    return h_precise_cp_metric(f, sample);
}

static void wait_batches_ge(const struct h_precise_fleet *f, size_t i, long long want)
{
    char sample[160];
    snprintf(sample, sizeof(sample), "switchyard_kv_events_batches_total{worker=\"%s\"}",
             f->w[i].id);
    h_precise_wait_cp_metric_ge(f, sample, want);
}

/* How many of content's blocks the index says worker i holds. */
static size_t held(struct h_precise_fleet *f, size_t i, const char *content)
{
    uint64_t chain[MAX_CHAIN];
    size_t n = h_precise_chain(content, chain, MAX_CHAIN);
    uint32_t slot = h_precise_slot(&f->fleet, f->w[i].id);
    size_t k = 0;
    for (size_t b = 0; b < n; b++)
        k += kvh_has(f->ix, chain[b], slot);
    return k;
}

static size_t n_blocks(const char *content)
{
    return (4 + strlen(content)) / BLOCK_TEXT;
}

struct held_wait {
    struct h_precise_fleet *f;
    size_t i;
    const char *content;
};

static bool all_held(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->i, h->content) == n_blocks(h->content);
}

/* Waits until the index holds every block of content on worker i. */
static void wait_held(struct h_precise_fleet *f, size_t i, const char *content)
{
    struct held_wait h = {f, i, content};
    if (h_wait_until(all_held, &h, WAIT_MS) != 0)
        fail_msg("%s holds %zu of %zu blocks after %d ms", f->w[i].id, held(f, i, content),
                 n_blocks(content), WAIT_MS);
}

static size_t worker_index(const struct h_precise_fleet *f, const char *id)
{
    for (size_t i = 0; i < f->fleet.n; i++)
        if (strcmp(f->w[i].id, id) == 0)
            return i;
    fail_msg("unknown worker %s", id);
    return 0;
}

/* ---- 1. the whole chain ---------------------------------------------------- */

/* A prompt lands on X, X's BlockStored reaches the index, and the same
 * prompt, then a longer one extending it, go to X as `affinity`. */
static void test_chain_routes_to_the_holder(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 3});
    char *content = h_precise_blocks(1, 10);
    char worker[64], decision[64], x[64];
    long long facts0 = h_precise_cp_metric(&f, "switchyard_kv_index_facts");
    assert_true(facts0 >= 0);
    h_precise_fleet_chat(&f, content, x, sizeof(x), decision, sizeof(decision));
    assert_string_equal(decision, "no_match"); /* nobody held it */
    size_t xi = worker_index(&f, x);
    /* The event crosses the wire, the control plane maps it, the index has it. */
    wait_held(&f, xi, content);
    assert_true(h_precise_cp_metric(&f, "switchyard_kv_index_facts") >= facts0 + 10);
    for (size_t i = 0; i < f.fleet.n; i++)
        if (i != xi)
            assert_int_equal(held(&f, i, content), 0);
    h_precise_fleet_chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* A longer prompt extending it: its first 10 blocks are held by X. */
    size_t len = strlen(content);
    char *longer = malloc(len + 5 * BLOCK_TEXT + 1);
    assert_non_null(longer);
    char *tail = h_routed_text(2, 5 * BLOCK_TEXT);
    memcpy(longer, content, len);
    memcpy(longer + len, tail, 5 * BLOCK_TEXT + 1);
    h_precise_fleet_chat(&f, longer, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* And X's events of the extension make the whole of it held there. */
    wait_held(&f, xi, longer);
    assert_int_equal(
        h_precise_cp_metric(&f, "switchyard_kv_events_skipped_total{reason=\"unknown_parent\"}"),
        0);
    /* Every tokenize round trip is timed, and every applied batch's lag
     * (on loopback, well under 10 s). */
    long long trips =
        h_fleet_dp_metric(&f.fleet, "switchyard_tokenize_requests_total{result=\"ok\"}") +
        h_fleet_dp_metric(&f.fleet, "switchyard_tokenize_requests_total{result=\"timeout\"}") +
        h_fleet_dp_metric(&f.fleet, "switchyard_tokenize_requests_total{result=\"error\"}");
    assert_true(trips >= 2);
    assert_int_equal(h_fleet_dp_metric(&f.fleet, "switchyard_tokenize_duration_seconds_count"),
                     trips);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_block_size_mismatches_total"), 0);
    long long lagged = h_precise_cp_metric(&f, "switchyard_kv_events_lag_seconds_count");
    assert_true(lagged >= 2);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_events_lag_seconds_bucket{le=\"10\"}"),
                     lagged);
    free(tail);
    free(longer);
    free(content);
    h_precise_fleet_stop(&f);
}

/* ---- 2. a prefix computed by a request that bypassed the router ------------ */

/* A client sends a prompt straight to Y; Y's event teaches the router, and
 * the next request with that prefix through the router goes to Y. */
static void test_bypassed_prefix_matched(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 3});
    char worker[64], decision[64];
    for (size_t y = 0; y < f.fleet.n; y++) {
        char *content = h_precise_blocks(10 + (unsigned)y, 8);
        h_precise_fleet_chat_direct(&f, y, content);
        wait_held(&f, y, content);
        /* The router never saw it, yet sends it (and a longer one) to Y. */
        h_precise_fleet_chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
        assert_string_equal(worker, f.w[y].id);
        assert_string_equal(decision, "affinity");
        free(content);
    }
    h_precise_fleet_stop(&f);
}

/* ---- 3. evictions ------------------------------------------------------------ */

/* X's LRU (16 blocks) evicts a prefix under pressure: within the one event
 * batch of the request that evicted it the index no longer holds it, and a
 * request for it goes by load, not to the stale holder. */
static void test_evicted_prefix_not_matched(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 3, .kv_blocks = "16"});
    char *content = h_precise_blocks(20, 6);
    char worker[64], decision[64], x[64];
    h_precise_fleet_chat(&f, content, x, sizeof(x), decision, sizeof(decision));
    size_t xi = worker_index(&f, x);
    wait_held(&f, xi, content);
    h_precise_fleet_chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* A prompt as large as X's whole cache, straight to X: one batch that
     * stores it and removes everything else, the prefix included. */
    long long batches = cp_worker_metric(&f, "switchyard_kv_events_batches_total", x);
    long long removed = h_precise_cp_metric(&f, "switchyard_kv_blocks_total{op=\"removed\"}");
    assert_true(batches >= 1);
    char *filler = h_precise_blocks(21, 16);
    h_precise_fleet_chat_direct(&f, xi, filler);
    wait_batches_ge(&f, xi, batches + 1);
    assert_int_equal(held(&f, xi, content), 0);
    assert_true(h_precise_cp_metric(&f, "switchyard_kv_blocks_total{op=\"removed\"}") >=
                removed + 6);
    assert_int_equal(cp_worker_metric(&f, "switchyard_kv_events_gaps_total", x), 0);
    /* Nobody holds it now: by load. */
    h_precise_fleet_chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "no_match");
    free(filler);
    free(content);
    h_precise_fleet_stop(&f);
}

/* ---- 4. dropped batches, replay off, a restarted worker -------------------- */

static bool none_held(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->i, h->content) == 0;
}

/* Waits until the index holds none of content's blocks on worker i. */
static void wait_not_held(struct h_precise_fleet *f, size_t i, const char *content)
{
    struct held_wait h = {f, i, content};
    if (h_wait_until(none_held, &h, WAIT_MS) != 0)
        fail_msg("%s still holds %zu of %zu blocks after %d ms", f->w[i].id, held(f, i, content),
                 n_blocks(content), WAIT_MS);
}

static void test_dropped_batches_replayed_or_resynced(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 2});
    char worker[64], decision[64];
    /* w2's facts: untouched by everything w1 goes through below. */
    char *other = h_precise_blocks(30, 3);
    h_precise_fleet_chat_direct(&f, 1, other);
    wait_held(&f, 1, other);

    /* Two batches of w1 dropped on PUB: the third shows the gap, replay
     * brings the two back, and the index ends holding all three prompts. */
    char *d[3];
    for (unsigned k = 0; k < 3; k++)
        d[k] = h_precise_blocks(31 + k, 2);
    assert_int_equal(h_mock_faults(f.fleet.mock[0].url, "{\"kv_events_drop_batches\": 2}"), 0);
    for (unsigned k = 0; k < 3; k++)
        h_precise_fleet_chat_direct(&f, 0, d[k]);
    for (unsigned k = 0; k < 3; k++)
        wait_held(&f, 0, d[k]);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_events_replayed_batches_total"), 2);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_events_replays_total"), 1);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_events_gaps_total{worker=\"w1\"}"), 1);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}"),
                     0);
    h_precise_fleet_chat(&f, d[0], worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, "w1");
    assert_string_equal(decision, "affinity");

    /* Replay switched off: the next gap cannot be filled, so w1's facts are
     * forgotten (a resync) and the index rebuilds from the batch after. */
    long long forgets = h_precise_cp_metric(&f, "switchyard_kv_worker_forgets_total");
    assert_true(forgets >= 0);
    char *e1 = h_precise_blocks(40, 2), *e2 = h_precise_blocks(41, 2);
    assert_int_equal(
        h_mock_faults(f.fleet.mock[0].url,
                      "{\"kv_events_drop_batches\": 1, \"kv_events_replay_off\": true}"),
        0);
    h_precise_fleet_chat_direct(&f, 0, e1); /* dropped, and never replayed */
    h_precise_fleet_chat_direct(&f, 0, e2); /* shows the gap */
    h_precise_wait_cp_metric_ge(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}", 1);
    wait_held(&f, 0, e2);
    assert_true(h_precise_cp_metric(&f, "switchyard_kv_worker_forgets_total") >= forgets + 1);
    for (unsigned k = 0; k < 3; k++)
        assert_int_equal(held(&f, 0, d[k]), 0);
    assert_int_equal(held(&f, 0, e1), 0);
    assert_int_equal(held(&f, 1, other), n_blocks(other));
    /* w1 still caches d[0], but the router no longer knows it: by load. */
    h_precise_fleet_chat(&f, d[0], worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "no_match");

    /* w1 restarts on the same ports: its entries are cleared. */
    wait_held(&f, 0, e2);
    long long resyncs =
        h_precise_cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}");
    h_precise_fleet_restart_mock(&f, 0);
    h_precise_fleet_probe_until(&f, 0, "switchyard_kv_events_restarts_total");
    wait_not_held(&f, 0, e2);
    assert_true(h_precise_cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}") >=
                resyncs + 1);
    assert_int_equal(held(&f, 1, other), n_blocks(other));
    /* And w1's new events are learned again. */
    char *after = h_precise_blocks(42, 2);
    h_precise_fleet_chat_direct(&f, 0, after);
    wait_held(&f, 0, after);
    free(after);
    free(e1);
    free(e2);
    for (unsigned k = 0; k < 3; k++)
        free(d[k]);
    free(other);
    h_precise_fleet_stop(&f);
}

/* ---- 5. the tokenizer down or slow while events flow ------------------------ */

/* Requests keep being answered through a tokenizer that fails as `reason`
 * says, each counted as a fallback and never waiting much beyond the
 * 50 ms budget, while w2's events keep filling the index. */
static void run_tokenizer_fallback(const char *tokenizer_url, const char *reason)
{
    struct h_precise_fleet f;
    char extra[256];
    snprintf(extra, sizeof(extra), "  tokenizer_url: \"%s\"\n  tokenize_timeout: 50ms\n",
             tokenizer_url);
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 2, .policy_extra = extra});
    char *content = h_precise_blocks(50, 4);
    h_precise_fleet_chat_direct(&f, 1, content);
    wait_held(&f, 1, content); /* the events flow: the index knows w2 holds it */
    char worker[64], decision[64], first[64];
    int64_t worst = 0;
    for (unsigned k = 0; k < 4; k++) {
        int64_t t0 = h_now_ms();
        h_precise_fleet_chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
        int64_t took = h_now_ms() - t0;
        worst = took > worst ? took : worst;
        if (k == 0) {
            snprintf(first, sizeof(first), "%s", worker);
        } else {
            /* cache_aware's approximate match from the first turn. */
            assert_string_equal(worker, first);
            assert_string_equal(decision, "affinity");
        }
        /* More events meanwhile, learned as ever. */
        char *more = h_precise_blocks(60 + k, 2);
        h_precise_fleet_chat_direct(&f, 1, more);
        wait_held(&f, 1, more);
        free(more);
    }
    assert_true(worst < 1500); /* generous: a loaded CI */
    char sample[128];
    snprintf(sample, sizeof(sample), "switchyard_precise_fallbacks_total{reason=\"%s\"}", reason);
    assert_int_equal(h_fleet_dp_metric(&f.fleet, sample), 4);
    assert_int_equal(
        h_fleet_dp_metric(&f.fleet, "switchyard_tokenize_requests_total{result=\"ok\"}"), 0);
    free(content);
    h_precise_fleet_stop(&f);
}

static void test_tokenizer_down_falls_back(void **state)
{
    (void)state;
    char url[96];
    h_precise_dead_tokenizer(url, sizeof(url));
    run_tokenizer_fallback(url, "error");
}

static void test_tokenizer_slow_falls_back(void **state)
{
    (void)state;
    char url[96];
    int fd = h_precise_silent_tokenizer(url, sizeof(url));
    run_tokenizer_fallback(url, "timeout");
    close(fd);
}

/* ---- 6. the workers' block size against the policy's ----------------------- */

/* The mocks say block_size 16 in vllm:cache_config_info (as vLLM does);
 * a policy hashing 32-token blocks could never match their events: each
 * worker is logged and counted once, not at every scrape. */
static bool cp_logged_block_size(void *arg)
{
    return h_proc_log_contains(arg, "vllm:cache_config_info says block_size 16");
}

static void test_block_size_mismatch_reported(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(
        &f, &(struct h_precise_fleet_opts){.n = 2, .policy_extra = "  block_size: 32\n"});
    h_precise_wait_cp_metric_ge(&f, "switchyard_kv_block_size_mismatches_total", 2);
    assert_int_equal(h_wait_until(cp_logged_block_size, f.fleet.cp, WAIT_MS), 0);
    /* More scrapes of both workers: still counted once each. */
    char sample[160];
    snprintf(sample, sizeof(sample),
             "switchyard_load_report_scrapes_total{worker=\"%s\",result=\"success\"}", f.w[1].id);
    h_precise_wait_cp_metric_ge(&f, sample, h_precise_cp_metric(&f, sample) + 3);
    assert_int_equal(h_precise_cp_metric(&f, "switchyard_kv_block_size_mismatches_total"), 2);
    h_precise_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_chain_routes_to_the_holder),
        H_TEST(test_bypassed_prefix_matched),
        H_TEST(test_evicted_prefix_not_matched),
        H_TEST(test_dropped_batches_replayed_or_resynced),
        H_TEST(test_block_size_mismatch_reported),
        H_TEST(test_tokenizer_down_falls_back),
        H_TEST(test_tokenizer_slow_falls_back),
    };
    return cmocka_run_group_tests_name("precise_e2e", tests, NULL, NULL);
}
