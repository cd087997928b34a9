/*
 * End-to-end: precise_cache_aware routes a request to the worker the node's
 * KV holder index names, using the token ids the worker's own /tokenize
 * gives (the mock: 4 bytes of text a token, the id those bytes read
 * little-endian; a chat prompt is each message's role then content). The
 * index is filled here by the test, as the control plane would from the
 * workers' KV-cache events: the test attaches "<shm.name>.kvholders" and
 * records the chain the data plane will compute.
 *
 * And when the tokenizer is down (nothing listens at tokenizer_url) or slow
 * (a socket that never answers), requests keep flowing, routed by
 * cache_aware's approximate match within the tokenize budget, and each is
 * counted in switchyard_precise_fallbacks_total.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/kv_holders.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"
#include "tests/e2e/harness_routed.h"

#define WAIT_MS     20000
#define TURN_TOKENS 4 /* max_tokens of every chat turn */

static const char *const DEBUG = "debug_headers: true\n";

static void test_routed_to_the_exact_holder(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 3,
                          .policy = "precise_cache_aware",
                          /* No speculative entries: each decision below is
                           * the index's alone. */
                          .policy_extra = H_PRECISE_POLICY_EXACT "  tokenize_timeout: 2s\n",
                          /* One event loop: one tokenize cache. */
                          .dataplane_extra = H_PRECISE_DATAPLANE_EXTRA,
                      });
    assert_int_equal(h_wait_until(h_precise_dp_attached, f.dp, WAIT_MS), 0);
    struct kvh_index *ix = h_precise_attach_holders(f.cfg.shm_name);
    char *content = h_routed_text(1, 636); /* "user" + 636 bytes: 160 tokens, 10 blocks */
    uint64_t chain[64];
    size_t n = h_precise_chain(content, chain, 64);
    assert_int_equal(n, 10);
    /* w2 holds the first 6 blocks, w3 all 10: w3 is the longest match. */
    uint32_t w2 = h_precise_slot(&f, "w2"), w3 = h_precise_slot(&f, "w3");
    for (size_t i = 0; i < n; i++) {
        if (i < 6)
            kvh_add(ix, chain[i], w2);
        kvh_add(ix, chain[i], w3);
    }
    char worker[64], decision[64];
    for (int k = 0; k < 3; k++) {
        h_precise_chat(f.base, content, TURN_TOKENS, worker, sizeof(worker), decision,
                       sizeof(decision));
        assert_string_equal(worker, "w3");
        assert_string_equal(decision, "affinity");
    }
    /* w3 evicts its blocks (its events would say so): w2 is now the holder. */
    kvh_forget_slot(ix, w3);
    h_precise_chat(f.base, content, TURN_TOKENS, worker, sizeof(worker), decision,
                   sizeof(decision));
    assert_string_equal(worker, "w2");
    assert_string_equal(decision, "affinity");
    /* Nobody holds it: by load, no_match. */
    kvh_forget_slot(ix, w2);
    h_precise_chat(f.base, content, TURN_TOKENS, worker, sizeof(worker), decision,
                   sizeof(decision));
    assert_string_equal(decision, "no_match");
    /* The tokens came from a worker's /tokenize once, then from the cache
     * (five turns of one prompt), never from a fallback. */
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_tokenize_requests_total{result=\"ok\"}"), 1);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_tokenize_cache_hits_total"), 4);
    assert_int_equal(
        h_fleet_dp_metric(&f, "switchyard_precise_fallbacks_total{reason=\"timeout\"}"), 0);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_precise_fallbacks_total{reason=\"error\"}"),
                     0);
    free(content);
    kvh_destroy(ix);
    h_fleet_stop(&f);
}

/* Requests keep flowing through a tokenizer that fails as `how`; each is
 * counted under reason, and a repeated prompt keeps cache_aware's affinity. */
static void run_fallback(const char *tokenizer_url, const char *reason)
{
    struct h_fleet f;
    char extra[512];
    snprintf(extra, sizeof(extra),
             "precise_cache_aware:\n  tokenizer_url: \"%s\"\n  tokenize_timeout: 50ms\n",
             tokenizer_url);
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 3,
                          .policy = "precise_cache_aware",
                          .policy_extra = extra,
                          .dataplane_extra = DEBUG,
                      });
    char *content = h_routed_text(2, 2000);
    char worker[64], decision[64], first[64];
    int64_t worst = 0;
    for (int k = 0; k < 4; k++) {
        int64_t t0 = h_now_ms();
        h_precise_chat(f.base, content, TURN_TOKENS, worker, sizeof(worker), decision,
                       sizeof(decision));
        int64_t took = h_now_ms() - t0;
        worst = took > worst ? took : worst;
        if (k == 0) {
            snprintf(first, sizeof(first), "%s", worker);
            assert_string_equal(decision, "no_match");
        } else {
            /* cache_aware's guess from the first turn. */
            assert_string_equal(worker, first);
            assert_string_equal(decision, "affinity");
        }
    }
    /* Never waiting much beyond the 50 ms budget (generous: a loaded CI). */
    assert_true(worst < 1500);
    char sample[128];
    snprintf(sample, sizeof(sample), "switchyard_precise_fallbacks_total{reason=\"%s\"}", reason);
    assert_int_equal(h_fleet_dp_metric(&f, sample), 4);
    snprintf(sample, sizeof(sample), "switchyard_tokenize_requests_total{result=\"%s\"}", reason);
    assert_int_equal(h_fleet_dp_metric(&f, sample), 4);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_tokenize_requests_total{result=\"ok\"}"), 0);
    free(content);
    h_fleet_stop(&f);
}

static void test_tokenizer_down_falls_back(void **state)
{
    (void)state;
    char url[96];
    h_precise_dead_tokenizer(url, sizeof(url));
    run_fallback(url, "error");
}

static void test_tokenizer_slow_falls_back(void **state)
{
    (void)state;
    char url[96];
    int fd = h_precise_silent_tokenizer(url, sizeof(url));
    run_fallback(url, "timeout");
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_routed_to_the_exact_holder),
        H_TEST(test_tokenizer_down_falls_back),
        H_TEST(test_tokenizer_slow_falls_back),
    };
    return cmocka_run_group_tests_name("precise_routing", tests, NULL, NULL);
}
