/*
 * Unit tests of the JSON arena (dataplane/http/json_arena.c): a parse inside a
 * window gives the same values as outside one, and its allocations come
 * from the arena (they leave the heap alone); a parse too large for the
 * arena falls back to the heap; values made outside a window are freed
 * normally even from inside one; windows reset the arena.
 */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "dataplane/http/json_arena.h"

static const char small_body[] = "{\"model\":\"mock\",\"stream\":true,\"messages\":[{\"role\":"
                                 "\"user\",\"content\":\"Say hello to the router.\"}]}";

/* Bytes the heap has handed out and not taken back. */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks;
}

static void check_small(json_t *root)
{
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "mock");
    assert_true(json_is_true(json_object_get(root, "stream")));
    json_t *m = json_array_get(json_object_get(root, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "content")),
                        "Say hello to the router.");
}

static void test_parse_in_window(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) { /* each window starts afresh */
        dp_json_arena_begin();
        size_t before = heap_in_use();
        json_error_t err;
        json_t *root = json_loads(small_body, 0, &err);
        check_small(root);
        /* The tree is in the arena: the heap did not grow for it. */
        assert_true(heap_in_use() <= before);
        json_decref(root);
        dp_json_arena_end();
    }
}

static void test_large_parse_falls_back(void **state)
{
    (void)state;
    /* Far more values than the arena holds: the rest comes from the heap. */
    size_t n = 4 * DP_JSON_ARENA_BYTES / 16;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer((json_int_t)i));
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    assert_non_null(text);
    dp_json_arena_begin();
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    assert_non_null(root);
    assert_int_equal(json_array_size(root), n);
    assert_int_equal(json_integer_value(json_array_get(root, n - 1)), (json_int_t)(n - 1));
    json_decref(root);
    dp_json_arena_end();
    free(text);
}

static void test_outside_values_freed_normally(void **state)
{
    (void)state;
    json_t *outside = json_string("made before the window");
    dp_json_arena_begin();
    json_t *inside = json_loads(small_body, 0, NULL);
    check_small(inside);
    json_decref(outside); /* a heap value freed inside a window: free() */
    json_decref(inside);
    dp_json_arena_end();
    json_t *after = json_loads(small_body, 0, NULL); /* no window: the heap */
    check_small(after);
    json_decref(after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_in_window),
        cmocka_unit_test(test_large_parse_falls_back),
        cmocka_unit_test(test_outside_values_freed_normally),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
