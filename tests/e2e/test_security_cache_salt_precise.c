/*
 * Security finding 23 (review II), the precise_cache_aware half: the data
 * plane salts a tenant's request chain (test_security_cache_salt covers
 * cache_aware), but the control plane used to map every block a worker
 * stored under the unsalted key. An isolated tenant's prompt, stored by
 * the worker under its salt, was then "held" under the plain key, and
 * another tenant's unsalted request for the same text was told
 * `affinity`: the prefix oracle in one direction.
 *
 * vLLM puts the request's cache_salt in the first block's extra keys
 * (vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys) and
 * sends them in BlockStored.extra_keys; the mocks do the same and salt
 * their own hashes. The control plane now seeds such a chain with the
 * router's salted seed (common/token_chain.h), so the stored blocks are
 * found only by a request of the same salt.
 *
 * The fleet: two mocks publishing their KV events, precise_cache_aware
 * without speculative entries (an `affinity` comes from the events
 * alone), tenant a plain, tenant b with cache_isolation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <nettle/hmac.h>

#include "common/token_chain.h"
#include "shm/kv_holders.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"

#define SECRET    "router-cache-salt-secret-0123456789abcdef"
#define SALT_HEX  64u
#define MAX_CHAIN 64

static void sha_hex(const char *key, char out[65])
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "printf %%s '%s' | sha256sum", key);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(out, 65, p));
    pclose(p);
    out[64] = '\0';
}

/* The salt the router forwards for an isolated tenant without a client
 * salt: hex HMAC-SHA256(secret, tenant). */
static void tenant_salt(const char *tenant, char out[SALT_HEX + 1])
{
    struct hmac_sha256_ctx c;
    hmac_sha256_set_key(&c, strlen(SECRET), (const uint8_t *)SECRET);
    hmac_sha256_update(&c, strlen(tenant), (const uint8_t *)tenant);
    uint8_t d[32];
    hmac_sha256_digest(&c, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void start_fleet(struct h_precise_fleet *f)
{
    static char keys[H_PATH_MAX], secret[H_PATH_MAX], extra[3 * H_PATH_MAX];
    char a[65], b[65], text[512];
    sha_hex("key-a", a);
    sha_hex("key-b", b);
    snprintf(text, sizeof(text),
             "tenants:\n  - name: team-a\n    key_sha256: %s\n"
             "  - name: team-b\n    key_sha256: %s\n    cache_isolation: true\n",
             a, b);
    assert_int_equal(h_write_file("keys.yaml", text, keys, sizeof(keys)), 0);
    assert_int_equal(h_write_file("salt-key", SECRET "\n", secret, sizeof(secret)), 0);
    assert_int_equal(chmod(secret, 0600), 0);
    snprintf(extra, sizeof(extra), "api_keys_file: %s\ncache_salt_key_file: %s\n", keys, secret);
    h_precise_fleet_start(f, &(struct h_precise_fleet_opts){.n = 2, .dataplane_extra = extra});
}

/* One chat turn of content through the router as the tenant of key. */
static void chat(const struct h_precise_fleet *f, const char *key, const char *content,
                 char worker[64], char decision[64])
{
    char *body = h_precise_chat_body(content, 2);
    char url[128], auth[64];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->fleet.base);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    const char *headers[] = {"Content-Type: application/json", auth, NULL};
    struct h_req req = {.url = url, .body = body, .headers = headers};
    struct h_resp r = {0};
    assert_int_equal(h_http(&req, &r), 0);
    if (r.status != 200)
        fail_msg("status %ld: %s", r.status, r.body);
    assert_int_equal(h_resp_header(&r, "x-switchyard-worker", worker, 64), 0);
    assert_int_equal(h_resp_header(&r, "x-switchyard-decision", decision, 64), 0);
    h_resp_fini(&r);
    free(body);
}

/* Blocks of content the index says worker `id` holds under the chain of seed. */
static size_t held(struct h_precise_fleet *f, const char *id, uint64_t seed, const char *content)
{
    uint64_t chain[MAX_CHAIN];
    size_t n = h_precise_chain_seeded(seed, content, chain, MAX_CHAIN);
    uint32_t slot = h_precise_slot(&f->fleet, id);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += kvh_has(f->ix, chain[i], slot);
    return k;
}

struct held_wait {
    struct h_precise_fleet *f;
    const char *id;
    uint64_t seed;
    const char *content;
    size_t want;
};

static bool held_enough(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->id, h->seed, h->content) >= h->want;
}

static void test_isolated_tenants_blocks_match_only_its_salt(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    start_fleet(&f);
    char *content = h_precise_blocks(2323, 8);
    size_t blocks = (4 + strlen(content)) / H_PRECISE_BLOCK_TEXT;
    char salt[SALT_HEX + 1];
    tenant_salt("team-b", salt);
    uint64_t plain = tkc_seed(H_FLEET_MODEL);
    uint64_t salted = tkc_salt_seed(plain, tkc_salt_hash(salt, SALT_HEX));

    /* Tenant b's prompt: the worker stores it under b's salt, and the
     * control plane learns it under b's salted chain. */
    char x[64], worker[64], decision[64];
    chat(&f, "key-b", content, x, decision);
    assert_string_equal(decision, "no_match");
    struct held_wait h = {&f, x, salted, content, blocks};
    if (h_wait_until(held_enough, &h, H_PRECISE_WAIT_MS) != 0)
        fail_msg("%s holds %zu of b's %zu salted blocks; %zu under the plain chain", x,
                 held(&f, x, salted, content), blocks, held(&f, x, plain, content));
    assert_int_equal(held(&f, x, plain, content), 0);

    /* Tenant a, unsalted, sends the same text: nobody holds it for a. */
    chat(&f, "key-a", content, worker, decision);
    assert_string_equal(decision, "no_match");

    /* Tenant b again: its own salt matches, on the same worker. */
    chat(&f, "key-b", content, worker, decision);
    assert_string_equal(decision, "affinity");
    assert_string_equal(worker, x);
    free(content);
    h_precise_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_isolated_tenants_blocks_match_only_its_salt),
    };
    return cmocka_run_group_tests_name("security_cache_salt_precise", tests, NULL, NULL);
}
