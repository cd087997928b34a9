/*
 * Unit tests of the intrusive list (common/list.h): order of push_back and
 * push_front, removal at the front, in the middle and at the back, removal
 * twice being a no-op, list_entry back to the containing struct, the safe
 * iterator surviving removal of the visited node, splice keeping order and
 * emptying its source, and a static head.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/list.h"

struct item {
    int value;
    struct list_node link;
};

/* Writes the values front to back into out, returns the count. */
static size_t values(const struct list_node *head, int *out, size_t max)
{
    size_t n = 0;
    struct list_node *it;
    list_foreach(it, head)
    {
        if (n < max)
            out[n] = list_entry(it, struct item, link)->value;
        n++;
    }
    return n;
}

/* Checks that prev pointers mirror next pointers all the way round. */
static void assert_consistent(const struct list_node *head)
{
    const struct list_node *it = head;
    do {
        assert_ptr_equal(it->next->prev, it);
        it = it->next;
    } while (it != head);
}

static void test_push_order_and_entry(void **state)
{
    (void)state;
    struct list_node head;
    list_init(&head);
    assert_true(list_is_empty(&head));
    assert_null(list_first(&head));
    assert_null(list_last(&head));
    struct item a = {.value = 1}, b = {.value = 2}, c = {.value = 3};
    assert_false(list_is_linked(&a.link));
    list_push_back(&head, &b.link);
    list_push_back(&head, &c.link);
    list_push_front(&head, &a.link);
    assert_false(list_is_empty(&head));
    assert_true(list_is_linked(&a.link));
    int v[4];
    assert_int_equal(values(&head, v, 4), 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 2);
    assert_int_equal(v[2], 3);
    assert_ptr_equal(list_entry(list_first(&head), struct item, link), &a);
    assert_ptr_equal(list_entry(list_last(&head), struct item, link), &c);
    assert_consistent(&head);
}

static void test_remove_middle_front_back(void **state)
{
    (void)state;
    struct list_node head;
    list_init(&head);
    struct item it[5];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 5; i++) {
        it[i].value = i;
        list_push_back(&head, &it[i].link);
    }
    list_remove(&it[2].link); /* middle */
    assert_false(list_is_linked(&it[2].link));
    assert_consistent(&head);
    int v[5];
    assert_int_equal(values(&head, v, 5), 4);
    assert_int_equal(v[0], 0);
    assert_int_equal(v[1], 1);
    assert_int_equal(v[2], 3);
    assert_int_equal(v[3], 4);

    list_remove(&it[2].link); /* twice: no-op */
    assert_int_equal(values(&head, v, 5), 4);

    list_remove(&it[0].link); /* front */
    list_remove(&it[4].link); /* back */
    assert_consistent(&head);
    assert_int_equal(values(&head, v, 5), 2);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 3);

    assert_ptr_equal(list_pop_front(&head), &it[1].link);
    assert_ptr_equal(list_pop_front(&head), &it[3].link);
    assert_null(list_pop_front(&head));
    assert_true(list_is_empty(&head));
}

static void test_insert_before_after(void **state)
{
    (void)state;
    struct list_node head;
    list_init(&head);
    struct item a = {.value = 1}, b = {.value = 2}, c = {.value = 3};
    list_push_back(&head, &b.link);
    list_insert_before(&b.link, &a.link);
    list_insert_after(&b.link, &c.link);
    int v[3];
    assert_int_equal(values(&head, v, 3), 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 2);
    assert_int_equal(v[2], 3);
    assert_consistent(&head);
}

static void test_foreach_safe_removes(void **state)
{
    (void)state;
    struct list_node head;
    list_init(&head);
    struct item it[6];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 6; i++) {
        it[i].value = i;
        list_push_back(&head, &it[i].link);
    }
    struct list_node *n, *tmp;
    list_foreach_safe(n, tmp, &head)
    {
        if (list_entry(n, struct item, link)->value % 2 == 0)
            list_remove(n);
    }
    int v[6];
    assert_int_equal(values(&head, v, 6), 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 3);
    assert_int_equal(v[2], 5);
    assert_consistent(&head);
}

static void test_splice_back(void **state)
{
    (void)state;
    struct list_node to, from;
    list_init(&to);
    list_init(&from);
    struct item a = {.value = 1}, b = {.value = 2}, c = {.value = 3};
    list_splice_back(&to, &from); /* empty source: nothing happens */
    assert_true(list_is_empty(&to));
    list_push_back(&to, &a.link);
    list_push_back(&from, &b.link);
    list_push_back(&from, &c.link);
    list_splice_back(&to, &from);
    assert_true(list_is_empty(&from));
    int v[3];
    assert_int_equal(values(&to, v, 3), 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 2);
    assert_int_equal(v[2], 3);
    assert_consistent(&to);
}

static struct list_node static_head = LIST_STATIC_INIT(static_head);

static void test_static_head(void **state)
{
    (void)state;
    assert_true(list_is_empty(&static_head));
    struct item a = {.value = 7};
    list_push_back(&static_head, &a.link);
    assert_ptr_equal(list_first(&static_head), &a.link);
    list_remove(&a.link);
    assert_true(list_is_empty(&static_head));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_order_and_entry),
        cmocka_unit_test(test_remove_middle_front_back),
        cmocka_unit_test(test_insert_before_after),
        cmocka_unit_test(test_foreach_safe_removes),
        cmocka_unit_test(test_splice_back),
        cmocka_unit_test(test_static_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
