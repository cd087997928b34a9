/*
 * Unit tests of W3C trace context (dataplane/obs/trace.c): valid traceparents
 * are read (a later version by its first fields), invalid ones refused
 * (upper case, zero ids, version ff, bad length or separators), a refused
 * one starts a new sampled trace, the formatted header round-trips, and
 * the per-attempt rewrite changes only the span id of the header line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/obs/trace.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define SPAN  "00f067aa0ba902b7"

static void test_parse_valid(void **state)
{
    (void)state;
    struct dp_trace_ctx c = {0};
    assert_int_equal(dp_trace_parse("00-" TRACE "-" SPAN "-01", &c), 0);
    assert_true(c.trace_hi == 0x4bf92f3577b34da6ull && c.trace_lo == 0xa3ce929d0e0e4736ull);
    assert_true(c.parent_id == 0x00f067aa0ba902b7ull);
    assert_int_equal(c.flags, 1);
    assert_int_equal(dp_trace_parse("00-" TRACE "-" SPAN "-00", &c), 0);
    assert_int_equal(c.flags, 0);
    /* A later version: its first four fields, more may follow after '-'. */
    assert_int_equal(dp_trace_parse("01-" TRACE "-" SPAN "-03-whatever", &c), 0);
    assert_int_equal(c.flags, 1); /* only the sampled bit is passed on */
    assert_int_equal(dp_trace_parse("01-" TRACE "-" SPAN "-01", &c), 0);
}

static void test_parse_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "00-" TRACE "-" SPAN "-0",
        "00-" TRACE "-" SPAN "-01-",
        "00-" TRACE "-" SPAN "-01x",
        "01-" TRACE "-" SPAN "-01x",
        "ff-" TRACE "-" SPAN "-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-" SPAN "-01",
        "00-00000000000000000000000000000000-" SPAN "-01",
        "00-" TRACE "-0000000000000000-01",
        "00_" TRACE "-" SPAN "-01",
        "00-" TRACE "_" SPAN "-01",
        "00-" TRACE "-" SPAN "_01",
        "0g-" TRACE "-" SPAN "-01",
        "00-" TRACE "-" SPAN "-zz",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dp_trace_ctx c = {.trace_hi = 7};
        if (dp_trace_parse(bad[i], &c) == 0)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(c.trace_hi == 7); /* untouched */
    }
    struct dp_trace_ctx c;
    assert_int_not_equal(dp_trace_parse(NULL, &c), 0);
}

static void test_start_and_format(void **state)
{
    (void)state;
    struct dp_trace_ctx c;
    assert_true(dp_trace_start(&c, "00-" TRACE "-" SPAN "-01"));
    char out[DP_TRACEPARENT_LEN + 1];
    dp_trace_format(&c, 0x1122334455667788ull, out);
    assert_string_equal(out, "00-" TRACE "-1122334455667788-01");
    assert_true(c.span_id != 0);

    assert_false(dp_trace_start(&c, "garbage"));
    assert_int_equal(c.parent_id, 0);
    assert_int_equal(c.flags, 1); /* a new trace is sampled */
    assert_true(c.trace_hi != 0 || c.trace_lo != 0);
    struct dp_trace_ctx d;
    assert_false(dp_trace_start(&d, NULL));
    assert_false(d.trace_hi == c.trace_hi && d.trace_lo == c.trace_lo);
    dp_trace_format(&d, d.span_id, out);
    struct dp_trace_ctx back;
    assert_int_equal(dp_trace_parse(out, &back), 0);
    assert_true(back.trace_hi == d.trace_hi && back.trace_lo == d.trace_lo &&
                back.parent_id == d.span_id);
}

static void test_header_rewrite(void **state)
{
    (void)state;
    struct dp_trace_ctx c;
    assert_true(dp_trace_start(&c, "00-" TRACE "-" SPAN "-01"));
    struct curl_slist *list = curl_slist_append(NULL, "Accept: */*");
    assert_int_equal(dp_trace_add_header(&c, &list), 0);
    assert_non_null(c.header);
    assert_ptr_equal(list->next, c.header);
    dp_trace_set_span(&c, 0xabcdef0123456789ull);
    assert_string_equal(c.header->data, "traceparent: 00-" TRACE "-abcdef0123456789-01");
    dp_trace_set_span(&c, 1);
    assert_string_equal(c.header->data, "traceparent: 00-" TRACE "-0000000000000001-01");
    curl_slist_free_all(list);
    assert_true(dp_trace_header_is_replaced("TraceParent", 11, true));
    assert_true(dp_trace_header_is_replaced("tracestate", 10, false));
    assert_false(dp_trace_header_is_replaced("tracestate", 10, true));
    assert_false(dp_trace_header_is_replaced("traceparents", 12, false));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_start_and_format),
        cmocka_unit_test(test_header_rewrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
