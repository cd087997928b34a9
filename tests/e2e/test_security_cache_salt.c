/*
 * Security finding 23 (review II): the prefix index was not keyed by
 * tenant, so one tenant saw "affinity" (the routing decision, in the debug
 * headers, the metrics and a faster first token) for another tenant's
 * prompt: a prefix oracle across tenants. vLLM isolates its cache by the
 * request's cache_salt; the router now keys its prefixes with the same
 * salt, and a tenant with cache_isolation in the keys file is forwarded a
 * salt derived from the router's secret (HMAC-SHA256 of its name, and of
 * the client's own salt when it sent one), so tenants neither share nor
 * time each other's cached prompts.
 *
 * Each test runs cache_aware over two mock workers with debug headers on
 * and reads the decision of every request (x-switchyard-decision) and the
 * cache_salt the worker received (the mock's last request). The expected
 * salts are computed here with nettle's HMAC, the oracle the router must
 * agree with.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>
#include <nettle/hmac.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_routed.h"

#define SECRET     "router-cache-salt-secret-0123456789abcdef"
#define PROMPT_LEN 3000u /* a dozen blocks of the prefix index */
#define SALT_HEX   64u

/* ---- set-up -------------------------------------------------------------------- */

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

/* tenants: "name", "key", "extra lines" triples, NULL-terminated. */
static void write_keys(const char *const *tenants, char *path, size_t len)
{
    char text[2048];
    size_t n = (size_t)snprintf(text, sizeof(text), "tenants:\n");
    for (size_t i = 0; tenants[i] != NULL; i += 3) {
        char hex[65];
        sha_hex(tenants[i + 1], hex);
        n += (size_t)snprintf(text + n, sizeof(text) - n, "  - name: %s\n    key_sha256: %s\n%s",
                              tenants[i], hex, tenants[i + 2]);
    }
    assert_int_equal(h_write_file("keys.yaml", text, path, len), 0);
}

static void write_secret(const char *text, mode_t mode, char *path, size_t len)
{
    assert_int_equal(h_write_file("salt-key", text, path, len), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* Team a plain, teams b and c with cache_isolation. */
static const char *const tenants[] = {
    "team-a", "key-a", "",
    "team-b", "key-b", "    cache_isolation: true\n",
    "team-c", "key-c", "    cache_isolation: true\n",
    NULL,
};

static void start_fleet(struct h_fleet *f)
{
    static char keys[H_PATH_MAX], secret[H_PATH_MAX], extra[3 * H_PATH_MAX];
    write_keys(tenants, keys, sizeof(keys));
    write_secret(SECRET "\n", 0600, secret, sizeof(secret));
    snprintf(extra, sizeof(extra),
             "debug_headers: true\napi_keys_file: %s\ncache_salt_key_file: %s\n", keys, secret);
    h_fleet_start(
        f, &(struct h_fleet_opts){.n = 2, .policy = "cache_aware", .dataplane_extra = extra});
}

/* ---- requests ------------------------------------------------------------------- */

struct routed {
    char worker[32];
    char decision[64];
};

/* POSTs body (consumed) to path as the tenant of key; asserts 200 and
 * reads the debug headers. */
static void post_as(const struct h_fleet *f, const char *key, const char *path, json_t *body,
                    struct routed *out)
{
    assert_non_null(body);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    char url[160], auth[64];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    const char *headers[] = {"Content-Type: application/json", auth, NULL};
    struct h_req req = {.url = url, .body = text, .headers = headers};
    struct h_resp r = {0};
    assert_int_equal(h_http(&req, &r), 0);
    if (r.status != 200)
        fail_msg("%s: status %ld: %s", path, r.status, r.body);
    assert_int_equal(h_resp_header(&r, "x-switchyard-worker", out->worker, sizeof(out->worker)), 0);
    assert_int_equal(
        h_resp_header(&r, "x-switchyard-decision", out->decision, sizeof(out->decision)), 0);
    h_resp_fini(&r);
    free(text);
}

/* A chat request of prompt (and cache_salt, when salt is not NULL) as the
 * tenant of key; asserts 200 and reads the debug headers. */
static void chat(const struct h_fleet *f, const char *key, const char *prompt, const char *salt,
                 struct routed *out)
{
    json_t *body = json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", H_FLEET_MODEL, "messages",
                             "role", "user", "content", prompt, "max_tokens", 2);
    assert_non_null(body);
    if (salt != NULL)
        assert_int_equal(json_object_set_new(body, "cache_salt", json_string(salt)), 0);
    post_as(f, key, "/v1/chat/completions", body, out);
}

/* The cache_salt of the last request mock "w<i>" received ("" when none). */
static void last_salt(struct h_fleet *f, const char *worker, char *out, size_t len)
{
    assert_true(worker[0] == 'w');
    size_t i = (size_t)atoi(worker + 1) - 1;
    assert_true(i < f->n);
    json_t *st = h_mock_stats(f->mock[i].url);
    assert_non_null(st);
    json_t *salt = json_object_get(json_object_get(st, "last_request"), "cache_salt");
    snprintf(out, len, "%s", json_is_string(salt) ? json_string_value(salt) : "");
    json_decref(st);
}

/* The salt the router must forward: hex HMAC-SHA256(secret, tenant), with
 * "\0" and the client's salt appended when there is one. */
static void expected_salt(const char *tenant, const char *client, char out[SALT_HEX + 1])
{
    struct hmac_sha256_ctx c;
    hmac_sha256_set_key(&c, strlen(SECRET), (const uint8_t *)SECRET);
    hmac_sha256_update(&c, strlen(tenant), (const uint8_t *)tenant);
    if (client != NULL) {
        hmac_sha256_update(&c, 1, (const uint8_t *)"");
        hmac_sha256_update(&c, strlen(client), (const uint8_t *)client);
    }
    uint8_t d[32];
    hmac_sha256_digest(&c, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* ---- tests ----------------------------------------------------------------------- */

/* Tenant b (cache_isolation) sends the prompt tenant a warmed: before the
 * fix it was told "affinity" for a's blocks. */
static void test_isolated_tenant_sees_no_affinity_for_another_tenants_prompt(void **state)
{
    (void)state;
    struct h_fleet f;
    start_fleet(&f);
    char *prompt = h_routed_text(23, PROMPT_LEN);
    struct routed r;
    chat(&f, "key-a", prompt, NULL, &r);
    chat(&f, "key-a", prompt, NULL, &r);
    assert_string_equal(r.decision, "affinity"); /* a's own prompt is cached */
    char got[128];
    last_salt(&f, r.worker, got, sizeof(got));
    assert_string_equal(got, ""); /* a plain tenant's body is forwarded as it came */

    chat(&f, "key-b", prompt, NULL, &r);
    assert_string_equal(r.decision, "no_match");
    char want[SALT_HEX + 1];
    expected_salt("team-b", NULL, want);
    last_salt(&f, r.worker, got, sizeof(got));
    assert_string_equal(got, want);

    /* The same salt (the same tenant) gets affinity, on the same worker. */
    char first[32];
    snprintf(first, sizeof(first), "%s", r.worker);
    chat(&f, "key-b", prompt, NULL, &r);
    assert_string_equal(r.decision, "affinity");
    assert_string_equal(r.worker, first);

    /* Another isolated tenant is apart from both. */
    chat(&f, "key-c", prompt, NULL, &r);
    assert_string_equal(r.decision, "no_match");
    free(prompt);
    h_fleet_stop(&f);
}

/* An isolated tenant's own cache_salt is combined with the tenant's: it
 * partitions the tenant's cache, and reaches no other tenant's. */
static void test_client_salt_is_combined_with_the_tenants(void **state)
{
    (void)state;
    struct h_fleet f;
    start_fleet(&f);
    char *prompt = h_routed_text(2323, PROMPT_LEN);
    struct routed r;
    chat(&f, "key-b", prompt, NULL, &r);
    chat(&f, "key-b", prompt, NULL, &r);
    assert_string_equal(r.decision, "affinity");

    chat(&f, "key-b", prompt, "conversation-1", &r);
    assert_string_equal(r.decision, "no_match");
    char want[SALT_HEX + 1], bare[SALT_HEX + 1], got[128];
    expected_salt("team-b", "conversation-1", want);
    expected_salt("team-b", NULL, bare);
    assert_string_not_equal(want, bare);
    last_salt(&f, r.worker, got, sizeof(got));
    assert_string_equal(got, want);
    chat(&f, "key-b", prompt, "conversation-1", &r);
    assert_string_equal(r.decision, "affinity");

    /* Tenant c sending b's client salt does not land in b's partition. */
    chat(&f, "key-c", prompt, "conversation-1", &r);
    assert_string_equal(r.decision, "no_match");
    expected_salt("team-c", "conversation-1", want);
    last_salt(&f, r.worker, got, sizeof(got));
    assert_string_equal(got, want);

    /* Not a non-empty string: vLLM's own rule, answered by the router. */
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    const char *headers[] = {"Content-Type: application/json", "Authorization: Bearer key-b", NULL};
    struct h_req req = {.url = url,
                        .body = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":"
                                "\"user\",\"content\":\"hi\"}],\"cache_salt\":7}",
                        .headers = headers};
    struct h_resp resp = {0};
    assert_int_equal(h_http(&req, &resp), 0);
    assert_int_equal(resp.status, 400);
    h_resp_fini(&resp);
    free(prompt);
    h_fleet_stop(&f);
}

/* Without cache_isolation a client's own cache_salt still keys routing as
 * it keys the worker's cache: a salted prompt is never told "affinity" for
 * the unsalted one's blocks (vLLM would not hit them), and is forwarded
 * with its salt as sent. A salt long enough for the parser to set it
 * aside is read whole. */
static void test_plain_tenants_salt_keys_routing(void **state)
{
    (void)state;
    struct h_fleet f;
    start_fleet(&f);
    char *prompt = h_routed_text(230, PROMPT_LEN);
    char *long_salt = h_routed_text(99, 400);
    struct routed r;
    chat(&f, "key-a", prompt, NULL, &r);
    chat(&f, "key-a", prompt, "salt-1", &r);
    assert_string_equal(r.decision, "no_match");
    char got[512];
    last_salt(&f, r.worker, got, sizeof(got));
    assert_string_equal(got, "salt-1");
    chat(&f, "key-a", prompt, "salt-1", &r);
    assert_string_equal(r.decision, "affinity");

    chat(&f, "key-a", prompt, long_salt, &r);
    assert_string_equal(r.decision, "no_match");
    chat(&f, "key-a", prompt, long_salt, &r);
    assert_string_equal(r.decision, "affinity");
    long_salt[399] = long_salt[399] == 'a' ? 'b' : 'a'; /* differs in its last byte */
    chat(&f, "key-a", prompt, long_salt, &r);
    assert_string_equal(r.decision, "no_match");
    free(long_salt);
    free(prompt);
    h_fleet_stop(&f);
}

/* The body of path (tmpl, copied per request) through the rounds of the
 * first test: a plain tenant warms it and is forwarded no salt, each
 * isolated tenant is told no_match for it and its worker receives that
 * tenant's derived salt, and the tenant's own repeat is affinity. */
static void assert_route_isolated(struct h_fleet *f, const char *path, json_t *tmpl)
{
    struct routed r;
    char got[128], want[SALT_HEX + 1];
    post_as(f, "key-a", path, json_deep_copy(tmpl), &r);
    post_as(f, "key-a", path, json_deep_copy(tmpl), &r);
    assert_string_equal(r.decision, "affinity");
    last_salt(f, r.worker, got, sizeof(got));
    assert_string_equal(got, "");

    const char *iso[][2] = {{"key-b", "team-b"}, {"key-c", "team-c"}};
    for (size_t i = 0; i < 2; i++) {
        post_as(f, iso[i][0], path, json_deep_copy(tmpl), &r);
        if (strcmp(r.decision, "no_match") != 0)
            fail_msg("%s as %s: decision %s, want no_match", path, iso[i][1], r.decision);
        expected_salt(iso[i][1], NULL, want);
        last_salt(f, r.worker, got, sizeof(got));
        if (strcmp(got, want) != 0)
            fail_msg("%s as %s: the worker got cache_salt \"%s\", want %s", path, iso[i][1], got,
                     want);
        char first[32];
        snprintf(first, sizeof(first), "%s", r.worker);
        post_as(f, iso[i][0], path, json_deep_copy(tmpl), &r);
        assert_string_equal(r.decision, "affinity");
        assert_string_equal(r.worker, first);
    }
    json_decref(tmpl);
}

/* /invocations is chat or completion by its body's shape, and salted as
 * that endpoint is: before, the route's own "by load" shape left an
 * isolated tenant's body unsalted, so the worker's cache was shared. */
static void test_invocations_bodies_are_salted(void **state)
{
    (void)state;
    struct h_fleet f;
    start_fleet(&f);
    char *prompt = h_routed_text(2301, PROMPT_LEN);
    assert_route_isolated(&f, "/invocations",
                          json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", H_FLEET_MODEL,
                                    "messages", "role", "user", "content", prompt, "max_tokens",
                                    2));
    free(prompt);
    prompt = h_routed_text(2302, PROMPT_LEN);
    assert_route_isolated(
        &f, "/invocations",
        json_pack("{s:s, s:s, s:i}", "model", H_FLEET_MODEL, "prompt", prompt, "max_tokens", 2));
    free(prompt);
    h_fleet_stop(&f);
}

/* The token-in /inference/v1/generate body takes a cache_salt in vLLM
 * (GenerateRequest) and is keyed by its token ids here. */
static void test_generate_bodies_are_salted(void **state)
{
    (void)state;
    struct h_fleet f;
    start_fleet(&f);
    json_t *ids = json_array();
    for (size_t i = 0; i < 800; i++)
        json_array_append_new(ids,
                              json_integer((json_int_t)((23u * 7919u + i * 104729u) % 50000u)));
    assert_route_isolated(&f, "/inference/v1/generate",
                          json_pack("{s:s, s:o, s:{s:i}}", "model", H_FLEET_MODEL, "token_ids", ids,
                                    "sampling_params", "max_tokens", 2));
    h_fleet_stop(&f);
}

/* The daemon must exit non-zero with a log line holding every needle. */
static void assert_dataplane_refuses(const char *config, const char *want1, const char *want2)
{
    struct h_proc *p = NULL;
    assert_int_equal(h_start_dataplane(config, &p), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(p, 10000, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
    if (!h_proc_log_contains(p, want1) || (want2 != NULL && !h_proc_log_contains(p, want2))) {
        h_proc_print_log(p, 20);
        fail_msg("dataplane log lacks \"%s\" / \"%s\"", want1, want2 != NULL ? want2 : "");
    }
}

/* cache_isolation without a secret, a secret others may read, a short one:
 * each refused at start, naming what is wrong. */
static void test_isolation_needs_a_private_secret(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", H_FLEET_MODEL, NULL), 0);
    char keys[H_PATH_MAX], secret[H_PATH_MAX], extra[3 * H_PATH_MAX];
    write_keys(tenants, keys, sizeof(keys));

    struct h_config cfg = {0};
    assert_int_equal(h_config_add_worker(&cfg, m.url, "w1", H_FLEET_MODEL, NULL), 0);
    snprintf(extra, sizeof(extra), "api_keys_file: %s\n", keys);
    cfg.dataplane_extra = extra;
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    struct h_proc *cp = NULL;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    assert_dataplane_refuses(cfg.path, "asks for cache_isolation",
                             "dataplane.cache_salt_key_file is not set");

    write_secret(SECRET "\n", 0644, secret, sizeof(secret));
    snprintf(extra, sizeof(extra), "api_keys_file: %s\ncache_salt_key_file: %s\n", keys, secret);
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    assert_dataplane_refuses(cfg.path, "cache_salt_key_file", "other users may read it");

    write_secret("too-short\n", 0600, secret, sizeof(secret));
    assert_dataplane_refuses(cfg.path, "cache_salt_key_file", "shorter than 32 characters");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_isolated_tenant_sees_no_affinity_for_another_tenants_prompt),
        H_TEST(test_client_salt_is_combined_with_the_tenants),
        H_TEST(test_plain_tenants_salt_keys_routing),
        H_TEST(test_invocations_bodies_are_salted),
        H_TEST(test_generate_bodies_are_salted),
        H_TEST(test_isolation_needs_a_private_secret),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
