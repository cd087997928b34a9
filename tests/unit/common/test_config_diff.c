/*
 * Unit tests of common/config_diff.c: cfg_diff names exactly the keys that
 * changed (leaf keys by their dotted names, "workers" for the list), and
 * cfg_each_key lists every key of the schema.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"

#define ERR_LEN 512

static void load(struct cfg *cfg, const char *yaml)
{
    char err[ERR_LEN];
    if (cfg_load_string(cfg, "t.yaml", yaml, strlen(yaml), err, sizeof(err)) != 0)
        fail_msg("%s", err);
}

static void test_identical_configs_differ_nowhere(void **state)
{
    (void)state;
    struct cfg a, b;
    const char *y = "workers:\n  - url: http://a:1\n    id: w1\n";
    load(&a, y);
    load(&b, y);
    char names[8][CFG_KEY_NAME_MAX];
    assert_int_equal(cfg_diff(&a, &b, names, 8), 0);
    cfg_fini(&a);
    cfg_fini(&b);
}

static void test_changed_keys_are_named(void **state)
{
    (void)state;
    struct cfg a, b;
    load(&a, "workers:\n  - url: http://a:1\n    id: w1\n");
    load(&b, "shm:\n  max_workers: 64\ncontrolplane:\n  health:\n    initial: healthy\n"
             "dataplane:\n  retry:\n    on_status: [502]\npolicy:\n  decode: { name: random }\n"
             "workers:\n  - url: http://a:1\n    id: w1\n    role: decode\n");
    char names[8][CFG_KEY_NAME_MAX];
    assert_int_equal(cfg_diff(&a, &b, names, 8), 5);
    assert_string_equal(names[0], "shm.max_workers");
    assert_string_equal(names[1], "controlplane.health.initial");
    assert_string_equal(names[2], "dataplane.retry.on_status");
    assert_string_equal(names[3], "policy.decode.name");
    assert_string_equal(names[4], "workers");
    /* More changes than room: the count is still right. */
    assert_int_equal(cfg_diff(&a, &b, names, 2), 5);
    cfg_fini(&a);
    cfg_fini(&b);
}

static void count_key(const char *name, void *arg)
{
    size_t *n = arg;
    (*n)++;
    assert_true(strlen(name) > 0);
}

static void test_each_key_lists_the_schema(void **state)
{
    (void)state;
    size_t n = 0;
    cfg_each_key(count_key, &n);
    /* At least the keys this test knows of; new keys only add. */
    assert_true(n >= 39);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_configs_differ_nowhere),
        cmocka_unit_test(test_changed_keys_are_named),
        cmocka_unit_test(test_each_key_lists_the_schema),
    };
    return cmocka_run_group_tests_name("config_diff", tests, NULL, NULL);
}
