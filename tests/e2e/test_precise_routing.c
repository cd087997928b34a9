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
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/token_chain.h"
#include "shm/kv_holders.h"
#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS    20000
#define BLOCK_SIZE 16

/* A chat turn's content of len bytes, distinct per seed from byte 0. */
static char *content_of(unsigned seed, size_t len)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    unsigned long long x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[k] = (char)('a' + x % 26);
    }
    t[len] = '\0';
    return t;
}

/* The chain the data plane computes for one user message: the mock's
 * tokens of "user" + content, in blocks of BLOCK_SIZE, seeded by the model. */
static size_t chain_of(const char *content, uint64_t *out, size_t max)
{
    size_t len = 4 + strlen(content);
    char *text = malloc(len);
    assert_non_null(text);
    memcpy(text, "user", 4);
    memcpy(text + 4, content, len - 4);
    size_t n_tok = (len + 3) / 4;
    uint32_t *tok = calloc(n_tok, sizeof(*tok));
    assert_non_null(tok);
    for (size_t i = 0; i < len; i++)
        tok[i / 4] |= (uint32_t)(unsigned char)text[i] << (8 * (i % 4));
    size_t n = tkc_chain(tkc_seed(H_FLEET_MODEL), tok, n_tok, BLOCK_SIZE, out, max);
    free(tok);
    free(text);
    return n;
}

/* POSTs one chat turn; the worker and decision from the debug headers. */
static void chat(const char *base, const char *content, char *worker, size_t wlen, char *decision,
                 size_t dlen)
{
    json_t *body = json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", H_FLEET_MODEL, "messages",
                             "role", "user", "content", content, "max_tokens", 4);
    char *text = json_dumps(body, JSON_COMPACT);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-worker", worker, wlen), 0);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-decision", decision, dlen), 0);
    h_resp_fini(&resp);
    free(text);
    json_decref(body);
}

static uint32_t slot_of(struct h_fleet *f, const char *id)
{
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&f->seg, id, &w), 0);
    return w.slot;
}

static struct kvh_index *attach_holders(struct h_fleet *f)
{
    char name[128], err[256];
    assert_int_equal(kvh_segment_name(f->cfg.shm_name, name, sizeof(name)), 0);
    struct kvh_index *ix = NULL;
    int rc = kvh_attach(name, &ix, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "kvh_attach: %s\n", err);
    assert_int_equal(rc, 0);
    return ix;
}

static bool dp_attached_holders(void *arg)
{
    return h_proc_log_contains(arg, "KV holder index: attached");
}

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
                          .policy_extra = "precise_cache_aware:\n  speculative_ttl: 0ms\n"
                                          "  tokenize_timeout: 2s\n",
                          /* One event loop: one tokenize cache. */
                          .dataplane_extra = "debug_headers: true\nthreads: 1\n",
                      });
    assert_int_equal(h_wait_until(dp_attached_holders, f.dp, WAIT_MS), 0);
    struct kvh_index *ix = attach_holders(&f);
    char *content = content_of(1, 636); /* "user" + 636 bytes: 160 tokens, 10 blocks */
    uint64_t chain[64];
    size_t n = chain_of(content, chain, 64);
    assert_int_equal(n, 10);
    /* w2 holds the first 6 blocks, w3 all 10: w3 is the longest match. */
    uint32_t w2 = slot_of(&f, "w2"), w3 = slot_of(&f, "w3");
    for (size_t i = 0; i < n; i++) {
        if (i < 6)
            kvh_add(ix, chain[i], w2);
        kvh_add(ix, chain[i], w3);
    }
    char worker[64], decision[64];
    for (int k = 0; k < 3; k++) {
        chat(f.base, content, worker, sizeof(worker), decision, sizeof(decision));
        assert_string_equal(worker, "w3");
        assert_string_equal(decision, "affinity");
    }
    /* w3 evicts its blocks (its events would say so): w2 is now the holder. */
    kvh_forget_slot(ix, w3);
    chat(f.base, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, "w2");
    assert_string_equal(decision, "affinity");
    /* Nobody holds it: by load, no_match. */
    kvh_forget_slot(ix, w2);
    chat(f.base, content, worker, sizeof(worker), decision, sizeof(decision));
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

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
    char *content = content_of(2, 2000);
    char worker[64], decision[64], first[64];
    uint64_t worst = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t t0 = now_ms();
        chat(f.base, content, worker, sizeof(worker), decision, sizeof(decision));
        uint64_t took = now_ms() - t0;
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
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0); /* nothing listens there */
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), port, "/tokenize"), 0);
    run_fallback(url, "error");
}

static void test_tokenizer_slow_falls_back(void **state)
{
    (void)state;
    /* Listens, never accepts nor answers: every tokenize times out. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), ntohs(a.sin_port), "/tokenize"), 0);
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
