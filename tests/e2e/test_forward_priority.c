/*
 * admission.forward_priority: a tenant's band reaches the worker as vLLM's
 * request priority (high -1, normal 0, low 1) on chat, completions and
 * /inference/v1/generate, replacing the client's own; off (the default),
 * or without a keys file, the body goes as it came.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

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

static void start(struct h_fleet *f, bool on)
{
    static char keys[H_PATH_MAX], extra[H_PATH_MAX + 64];
    char text[1024], a[65], b[65], c[65];
    sha_hex("key-hi", a);
    sha_hex("key-lo", b);
    sha_hex("key-mid", c);
    snprintf(text, sizeof(text),
             "tenants:\n  - name: hi\n    key_sha256: %s\n    priority: high\n"
             "  - name: lo\n    key_sha256: %s\n    priority: low\n"
             "  - name: mid\n    key_sha256: %s\n",
             a, b, c);
    assert_int_equal(h_write_file("keys.yaml", text, keys, sizeof(keys)), 0);
    snprintf(extra, sizeof(extra), "api_keys_file: %s\n", keys);
    h_fleet_start(f, &(struct h_fleet_opts){
                         .n = 1,
                         .dataplane_extra = extra,
                         .extra_yaml = on ? "admission:\n  forward_priority: true\n" : NULL});
}

/* POSTs body to path as key; the priority the mock received (INT64_MIN: none). */
static long long sent_priority(struct h_fleet *f, const char *key, const char *path,
                               const char *body)
{
    char url[160], auth[64];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    const char *headers[] = {"Content-Type: application/json", auth, NULL};
    struct h_resp r = {0};
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = body, .headers = headers}, &r), 0);
    if (r.status != 200)
        fail_msg("%s: %ld %s", path, r.status, r.body);
    h_resp_fini(&r);
    json_t *st = h_mock_stats(f->mock[0].url);
    assert_non_null(st);
    json_t *p = json_object_get(json_object_get(st, "last_request"), "priority");
    long long v = json_is_integer(p) ? (long long)json_integer_value(p) : INT64_MIN;
    json_decref(st);
    return v;
}

#define CHAT                                                                                       \
    "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define COMPLETION "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"hi\",\"max_tokens\":2"
#define GENERATE                                                                                   \
    "{\"model\":\"" H_FLEET_MODEL "\",\"token_ids\":[1,2,3],\"sampling_params\":{\"max_tokens\":"  \
    "2}"

static void test_band_becomes_the_request_priority(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f, true);
    assert_int_equal(sent_priority(&f, "key-hi", "/v1/chat/completions", CHAT "}"), -1);
    assert_int_equal(sent_priority(&f, "key-lo", "/v1/chat/completions", CHAT "}"), 1);
    assert_int_equal(sent_priority(&f, "key-mid", "/v1/chat/completions", CHAT "}"), 0);
    /* The band wins over the client's own. */
    assert_int_equal(
        sent_priority(&f, "key-lo", "/v1/chat/completions", CHAT ",\"priority\":-100}"), 1);
    assert_int_equal(sent_priority(&f, "key-hi", "/v1/completions", COMPLETION "}"), -1);
    assert_int_equal(sent_priority(&f, "key-lo", "/inference/v1/generate", GENERATE "}"), 1);
    assert_int_equal(sent_priority(&f, "key-hi", "/invocations", COMPLETION "}"), -1);
    /* Embeddings are not touched. */
    assert_int_equal(sent_priority(&f, "key-hi", "/v1/embeddings",
                                   "{\"model\":\"" H_FLEET_MODEL "\",\"input\":\"hi\"}"),
                     INT64_MIN);
    h_fleet_stop(&f);
}

static void test_off_by_default(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f, false);
    assert_int_equal(sent_priority(&f, "key-hi", "/v1/chat/completions", CHAT "}"), INT64_MIN);
    assert_int_equal(
        sent_priority(&f, "key-lo", "/v1/chat/completions", CHAT ",\"priority\":-100}"), -100);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_band_becomes_the_request_priority),
        H_TEST(test_off_by_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
