/*
 * Unit tests of the capped buffer (common/buf.c): appends up to exactly the
 * cap succeed and one byte more is refused with -E2BIG leaving the contents
 * intact; the refusal is sticky until buf_reset; memory never exceeds
 * max + 1; printf grows and formats, and refuses past the cap without
 * leaving a partial line; consume keeps the tail; detach hands over a
 * NUL-terminated copy (an empty string when nothing was appended); shrink
 * gives back the growth slack and keeps contents, cap and later growth.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.c"

static void test_cap_refuses_past_max(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 10);
    assert_null(b.data);
    assert_int_equal(buf_append(&b, "hello", 5), 0);
    assert_int_equal(buf_append(&b, "world", 5), 0); /* exactly at the cap */
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "helloworld");
    assert_int_equal(buf_room(&b), 0);
    assert_true(b.alloc <= b.max + 1);
    assert_int_equal(buf_append(&b, "!", 1), -E2BIG);
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "helloworld");
    /* Sticky: even an append that would fit now fails the same way. */
    assert_int_equal(buf_append(&b, "", 0), -E2BIG);
    assert_int_equal(buf_error(&b), -E2BIG);
    buf_reset(&b);
    assert_int_equal(buf_error(&b), 0);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(buf_append_str(&b, "abc"), 0);
    assert_string_equal(b.data, "abc");
    buf_fini(&b);
    assert_null(b.data);
    assert_int_equal(b.max, 10);
}

static void test_one_big_append_refused(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(4);
    assert_int_equal(buf_append(&b, "12345", 5), -E2BIG);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    buf_fini(&b);
}

static void test_growth_keeps_bytes(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(100000);
    char chunk[97];
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)('a' + i % 26);
    size_t total = 0;
    while (buf_append(&b, chunk, sizeof(chunk)) == 0)
        total += sizeof(chunk);
    assert_int_equal(total, (100000 / sizeof(chunk)) * sizeof(chunk));
    assert_int_equal(b.len, total);
    assert_true(b.alloc <= b.max + 1);
    for (size_t i = 0; i < total; i++)
        assert_int_equal(b.data[i], chunk[i % sizeof(chunk)]);
    assert_int_equal(b.data[total], '\0');
    buf_fini(&b);
}

static void test_printf(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(1000);
    assert_int_equal(buf_printf(&b, "%s=%d;", "a", 1), 0);
    /* Longer than the first allocation: grows and formats again. */
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(buf_printf(&b, "[%s]", big), 0);
    assert_int_equal(b.len, 4 + 601);
    assert_memory_equal(b.data, "a=1;[xxx", 8);
    assert_int_equal(b.data[b.len - 1], ']');
    assert_int_equal(b.data[b.len], '\0');
    /* Past the cap: refused, no partial text left behind. */
    size_t before = b.len;
    assert_int_equal(buf_printf(&b, "%s", big), -E2BIG);
    assert_int_equal(b.len, before);
    assert_int_equal(strlen(b.data), before);
    buf_fini(&b);
}

static void test_consume(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(64);
    buf_consume(&b, 3); /* nothing allocated: no-op */
    assert_int_equal(buf_append_str(&b, "event1\n\nrest"), 0);
    buf_consume(&b, 8);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "rest");
    buf_consume(&b, 100);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    buf_fini(&b);
}

static void test_shrink(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1000);
    buf_shrink(&b); /* nothing allocated: a no-op */
    assert_null(b.data);
    assert_int_equal(buf_append(&b, "hello", 5), 0);
    assert_true(b.alloc > 6);
    buf_shrink(&b);
    assert_int_equal(b.alloc, 6);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "hello");
    assert_int_equal(b.max, 1000);
    assert_int_equal(buf_append(&b, " world", 6), 0);
    assert_string_equal(b.data, "hello world");
    assert_true(b.alloc >= 12 && b.alloc <= 1001);
    buf_fini(&b);
}

static void test_reserve(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(100);
    assert_int_equal(buf_reserve(&b, 101), -E2BIG); /* past the cap: refused, not sticky */
    assert_null(b.data);
    assert_int_equal(buf_reserve(&b, 60), 0);
    assert_int_equal(b.alloc, 61);
    assert_int_equal(b.len, 0);
    assert_int_equal(buf_error(&b), 0);
    char *at = b.data;
    for (int i = 0; i < 6; i++)
        assert_int_equal(buf_append(&b, "0123456789", 10), 0);
    assert_ptr_equal(b.data, at); /* no reallocation up to the reserve */
    assert_int_equal(b.alloc, 61);
    assert_int_equal(buf_reserve(&b, 41), -E2BIG);
    assert_int_equal(buf_append(&b, "abc", 3), 0); /* grows past it as usual */
    assert_int_equal(b.len, 63);
    assert_int_equal(buf_reserve(&b, 10), 0);
    assert_true(b.alloc >= 74);
    assert_string_equal(b.data + 60, "abc");
    buf_fini(&b);
}

/* Back-pressure: refusing room records nothing, so the writer tries again
 * once a reader consumed; room made is room an append cannot be refused. */
static void test_make_room(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(1000);
    assert_int_equal(buf_make_room(&b, 1001), -E2BIG);
    assert_int_equal(buf_error(&b), 0);
    assert_null(b.data);
    assert_int_equal(buf_make_room(&b, 10), 0);
    assert_string_equal(b.data, ""); /* allocated, and a valid empty string */
    assert_int_equal(b.alloc, 256);  /* as an append grows: from 256 */
    assert_int_equal(buf_append(&b, "0123456789", 10), 0);
    assert_int_equal(buf_make_room(&b, 991), -E2BIG); /* 10 + 991 > 1000 */
    assert_int_equal(buf_error(&b), 0);
    assert_int_equal(buf_make_room(&b, 300), 0);
    assert_int_equal(b.alloc, 512); /* doubled, not fitted */
    char *at = b.data;
    for (int i = 0; i < 30; i++)
        assert_int_equal(buf_append(&b, "0123456789", 10), 0);
    assert_ptr_equal(b.data, at);
    buf_consume(&b, 300);
    assert_int_equal(buf_make_room(&b, 990), 0); /* consumed bytes are room again */
    assert_int_equal(b.alloc, 1001);             /* clamped to the cap */
    /* A sticky error stays in charge. */
    static const char big[1000];
    assert_int_equal(buf_append(&b, big, sizeof(big)), -E2BIG);
    assert_int_equal(buf_make_room(&b, 1), -E2BIG);
    buf_reset(&b);
    assert_int_equal(buf_make_room(&b, 1), 0);
    buf_fini(&b);
}

static void test_detach(void **state)
{
    (void)state;
    struct buf b = BUF_INIT(64);
    size_t len = 99;
    char *empty = buf_detach(&b, &len);
    assert_non_null(empty);
    assert_int_equal(len, 0);
    assert_string_equal(empty, "");
    free(empty);
    assert_int_equal(buf_append_str(&b, "payload"), 0);
    char *p = buf_detach(&b, &len);
    assert_string_equal(p, "payload");
    assert_int_equal(len, 7);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.max, 64);
    free(p);
    buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_refuses_past_max),
        cmocka_unit_test(test_one_big_append_refused),
        cmocka_unit_test(test_growth_keeps_bytes),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_consume),
        cmocka_unit_test(test_shrink),
        cmocka_unit_test(test_detach),
        cmocka_unit_test(test_reserve),
        cmocka_unit_test(test_make_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
