/*
 * Unit tests of the client keys file (dataplane/admission/api_keys.c): the example
 * of the docs parses with its defaults, malformed files are refused with
 * the file, line, column and field (never the hash), and the bearer check
 * finds exactly the tenant whose key hashes to its key_sha256.
 */
#include "dataplane/admission/api_keys.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* sha256("test") and sha256("other") */
#define HASH_TEST  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define HASH_OTHER "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"

static int parse(struct dp_keys *k, const char *yaml, char *err)
{
    return dp_keys_parse(k, "keys.yaml", yaml, strlen(yaml), err, 256);
}

static void test_example(void **state)
{
    (void)state;
    struct dp_keys k;
    char err[256] = "";
    const char *y = "tenants:\n"
                    "  - name: team-a\n"
                    "    key_sha256: " HASH_TEST "\n"
                    "    priority: normal\n"
                    "    requests_per_s: 20\n"
                    "    burst: 40\n"
                    "    tokens_per_min: 200000\n"
                    "  - name: team-b\n"
                    "    key_sha256: " HASH_OTHER "\n"
                    "    priority: high\n"
                    "    requests_per_s: 2.5\n";
    assert_int_equal(parse(&k, y, err), 0);
    assert_int_equal(k.n, 2);
    assert_string_equal(k.tenants[0].name, "team-a");
    assert_int_equal(k.tenants[0].priority, DP_PRIO_NORMAL);
    assert_true(k.tenants[0].requests_per_s == 20.0);
    assert_int_equal(k.tenants[0].burst, 40);
    assert_int_equal(k.tenants[0].tokens_per_min, 200000);
    assert_int_equal(k.tenants[1].priority, DP_PRIO_HIGH);
    assert_int_equal(k.tenants[1].burst, 3); /* default: requests_per_s rounded up */
    assert_int_equal(k.tenants[1].tokens_per_min, 0);
    assert_ptr_equal(dp_keys_match(&k, "Bearer test"), &k.tenants[0]);
    assert_ptr_equal(dp_keys_match(&k, "bearer other"), &k.tenants[1]);
    assert_null(dp_keys_match(&k, "Bearer tes"));
    assert_null(dp_keys_match(&k, "Bearer "));
    assert_null(dp_keys_match(&k, "Basic test"));
    assert_null(dp_keys_match(&k, NULL));
    dp_keys_fini(&k);
}

static void test_defaults_and_empty(void **state)
{
    (void)state;
    struct dp_keys k;
    char err[256] = "";
    assert_int_equal(parse(&k, "tenants:\n  - name: x\n    key_sha256: " HASH_TEST "\n", err), 0);
    assert_int_equal(k.tenants[0].priority, DP_PRIO_NORMAL);
    assert_true(k.tenants[0].requests_per_s == 0);
    assert_int_equal(k.tenants[0].burst, 0);
    dp_keys_fini(&k);
    assert_int_equal(parse(&k, "tenants: []\n", err), 0);
    assert_int_equal(k.n, 0);
    assert_null(dp_keys_match(&k, "Bearer test"));
    dp_keys_fini(&k);
}

static void expect_error(const char *yaml, const char *msg)
{
    struct dp_keys k;
    char err[256] = "";
    assert_int_equal(parse(&k, yaml, err), -EINVAL);
    assert_string_equal(err, msg);
    assert_null(k.tenants);
    /* A hash never reaches a message. */
    assert_null(strstr(err, "9f86d0"));
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("tenants:\n  - name: a\n    key_sha256: 9f86d0\n",
                 "keys.yaml:3:17: tenants[0].key_sha256: expected 64 hexadecimal digits");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n    priority: urgent\n",
                 "keys.yaml:4:15: tenants[0].priority: expected one of high|normal|low, got "
                 "'urgent'");
    expect_error("tenants:\n  - key_sha256: " HASH_TEST "\n",
                 "keys.yaml:2:5: tenants[0]: name is required");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n    burst: 4\n",
                 "keys.yaml:2:5: tenants[0].burst: needs requests_per_s");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n    rps: 4\n",
                 "keys.yaml:4:5: tenants[0]: unknown key 'rps' (expected "
                 "name|key_sha256|priority|requests_per_s|burst|tokens_per_min|"
                 "cache_isolation)");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n    cache_isolation: yes\n",
                 "keys.yaml:4:22: tenants[0].cache_isolation: expected true or false, got 'yes'");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n"
                 "  - name: a\n    key_sha256: " HASH_OTHER "\n",
                 "keys.yaml:4:5: tenants[1].name: 'a' is also tenants[0]'s");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n"
                 "  - name: b\n    key_sha256: " HASH_TEST "\n",
                 "keys.yaml:4:5: tenants[1].key_sha256: the same as tenants[0]'s");
    expect_error("tenants:\n  - name: a\n    key_sha256: " HASH_TEST "\n    requests_per_s: -1\n",
                 "keys.yaml:4:21: tenants[0].requests_per_s: expected a number in (0, 1000000], "
                 "got '-1'");
    expect_error("users: []\n", "keys.yaml:1:1: unknown key 'users' (expected tenants)");
    expect_error("tenants: [\n", "keys.yaml:2:1: did not find expected node content");
}

/* cache_isolation defaults to off, and a file asking for it is refused
 * unless the router has a salt secret, naming the tenant and both keys. */
static void test_cache_isolation(void **state)
{
    (void)state;
    struct dp_keys k;
    char err[256] = "";
    const char *y = "tenants:\n"
                    "  - name: team-a\n"
                    "    key_sha256: " HASH_TEST "\n"
                    "  - name: team-b\n"
                    "    key_sha256: " HASH_OTHER "\n"
                    "    cache_isolation: true\n";
    assert_int_equal(parse(&k, y, err), 0);
    assert_false(k.tenants[0].cache_isolation);
    assert_true(k.tenants[1].cache_isolation);
    assert_int_equal(dp_keys_check_isolation(&k, "keys.yaml", true, err, sizeof(err)), 0);
    assert_int_equal(dp_keys_check_isolation(&k, "keys.yaml", false, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "keys.yaml: tenants[1] ('team-b') asks for cache_isolation, but "
                             "dataplane.cache_salt_key_file is not set (the salts derive from "
                             "its secret)");
    k.tenants[1].cache_isolation = false;
    assert_int_equal(dp_keys_check_isolation(&k, "keys.yaml", false, err, sizeof(err)), 0);
    dp_keys_fini(&k);
}

static void test_sha256(void **state)
{
    (void)state;
    uint8_t h[32], want[32];
    dp_keys_sha256("test", 4, h);
    assert_true(keys_parse_hash(HASH_TEST, want));
    assert_memory_equal(h, want, 32);
}

/* A key must match its tenant's whole digest: one whose SHA-256 differs
 * only in the last byte (or only in the first) is refused, so a compare cut
 * short over part of the digest cannot go unnoticed. No key with such a
 * digest can be found, so the tenant's digest is the one edited. */
static void keys_with_digest_edited_at(size_t byte)
{
    struct dp_keys k;
    char err[256] = "";
    const char *y = "tenants:\n"
                    "  - name: team-a\n"
                    "    key_sha256: " HASH_TEST "\n";
    assert_int_equal(parse(&k, y, err), 0);
    assert_ptr_equal(dp_keys_match(&k, "Bearer test"), &k.tenants[0]);
    k.tenants[0].key_sha256[byte] ^= 0x01;
    assert_null(dp_keys_match(&k, "Bearer test"));
    k.tenants[0].key_sha256[byte] ^= 0x01;
    assert_ptr_equal(dp_keys_match(&k, "Bearer test"), &k.tenants[0]);
    dp_keys_fini(&k);
}

static void test_whole_digest_compared(void **state)
{
    (void)state;
    keys_with_digest_edited_at(DP_KEY_HASH_LEN - 1);
    keys_with_digest_edited_at(DP_KEY_HASH_LEN / 2);
    keys_with_digest_edited_at(0);
}

static void test_secret(void **state)
{
    (void)state;
    char path[] = "/tmp/sy-secret-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "worker-key\n", 11), 11);
    close(fd);
    char out[64];
    assert_int_equal(dp_keys_read_secret(path, out, sizeof(out)), 0);
    assert_string_equal(out, "worker-key");
    assert_int_equal(dp_keys_read_secret(path, out, 5), -EINVAL);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(dp_keys_read_secret(path, out, sizeof(out)), -EPERM);
    unlink(path);
    assert_int_equal(dp_keys_read_secret(path, out, sizeof(out)), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example),
        cmocka_unit_test(test_defaults_and_empty),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cache_isolation),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_secret),
        cmocka_unit_test(test_whole_digest_compared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
