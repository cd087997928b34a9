/*
 * Unit tests of the adapter-name Bloom set (shm/adapter_set.c): a name
 * added is always found (no false negatives); vLLM's comma-joined label
 * value is split, trimmed and its empty items skipped; union and
 * emptiness; and the false-positive rate the header promises at 8 running
 * adapters (about 0.5%) holds over 20,000 names not in the set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shm/adapter_set.h"

static bool has(const struct shm_adapter_set *s, const char *name)
{
    return shm_adapter_set_may_have(s, shm_adapter_hash(name, strlen(name)));
}

static void test_add_and_find(void **state)
{
    (void)state;
    struct shm_adapter_set s = {{0}};
    assert_true(shm_adapter_set_is_empty(&s));
    assert_false(has(&s, "sql"));
    shm_adapter_set_add(&s, shm_adapter_hash("sql", 3));
    assert_false(shm_adapter_set_is_empty(&s));
    assert_true(has(&s, "sql"));
    assert_false(has(&s, "sq"));
    assert_false(has(&s, "chat-lora"));
}

static void test_list_form(void **state)
{
    (void)state;
    struct shm_adapter_set s = {{0}};
    const char *list = "a, sql-lora,,b ,";
    assert_int_equal(shm_adapter_set_add_list(&s, list, strlen(list)), 3);
    assert_true(has(&s, "a"));
    assert_true(has(&s, "sql-lora"));
    assert_true(has(&s, "b"));
    assert_false(has(&s, " sql-lora"));
    assert_false(has(&s, ""));
    struct shm_adapter_set e = {{0}};
    assert_int_equal(shm_adapter_set_add_list(&e, "", 0), 0);
    assert_int_equal(shm_adapter_set_add_list(&e, ",,", 2), 0);
    assert_true(shm_adapter_set_is_empty(&e));
    /* len bounds the list: "ab" read as "a". */
    assert_int_equal(shm_adapter_set_add_list(&e, "ab", 1), 1);
    assert_true(has(&e, "a"));
    assert_false(has(&e, "ab"));
    shm_adapter_set_union(&e, &s);
    assert_true(has(&e, "a") && has(&e, "b") && has(&e, "sql-lora"));
}

static void test_false_positive_rate(void **state)
{
    (void)state;
    struct shm_adapter_set s = {{0}};
    char name[64];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "tenant-%d-lora", i);
        shm_adapter_set_add(&s, shm_adapter_hash(name, strlen(name)));
    }
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "tenant-%d-lora", i);
        assert_true(has(&s, name));
    }
    int fp = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof(name), "other-%d", i);
        fp += has(&s, name);
    }
    /* (1 - e^(-24/128))^3 = 0.5%: 100 expected; 2% would be a broken hash. */
    assert_true(fp < 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_and_find),
        cmocka_unit_test(test_list_form),
        cmocka_unit_test(test_false_positive_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
