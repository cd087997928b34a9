/*
 * Unit tests of the data plane's record primitives: the JSON writer
 * (dataplane/core/json_writer.c) gives text jansson parses back to the same
 * string for every hostile input (quotes, backslashes, every control
 * character, U+2028), replaces each byte of invalid UTF-8 (stray
 * continuations, overlongs, surrogates, past U+10FFFF, truncated
 * sequences) by U+FFFD and refuses to overflow; the SPSC ring
 * (dataplane/core/spsc_ring.c) takes whole records or none, wraps, and hands
 * back exactly what was pushed.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/core/json_writer.h"
#include "dataplane/core/spsc_ring.h"

/* Writes s as a JSON string and parses it back. */
static json_t *roundtrip(const char *s, size_t n)
{
    char buf[1024];
    struct dp_jw w;
    dp_jw_init(&w, buf, sizeof(buf));
    dp_jw_strn(&w, s, n);
    assert_true(dp_jw_ok(&w));
    json_error_t err;
    json_t *v = json_loadb(buf, w.len, JSON_DECODE_ANY, &err);
    if (v == NULL)
        fail_msg("invalid JSON %.*s: %s", (int)w.len, buf, err.text);
    return v;
}

static void test_escapes_roundtrip(void **state)
{
    (void)state;
    char all[64];
    for (int i = 1; i < 32; i++)
        all[i - 1] = (char)i;
    memcpy(all + 31, "\"\\/ok\xe2\x80\xa8\xc3\xa9\x7f", 11);
    json_t *v = roundtrip(all, 42);
    assert_int_equal(json_string_length(v), 42);
    assert_memory_equal(json_string_value(v), all, 42);
    json_decref(v);
}

static void test_invalid_utf8_replaced(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } cases[] = {
        {"a\x80z", 3, "a\xef\xbf\xbdz"},                             /* stray continuation */
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong '/' */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
        {"\xf4\x90\x80\x80", 4,
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"x\xe2\x82", 3, "x\xef\xbf\xbd\xef\xbf\xbd"},        /* truncated */
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},          /* a valid emoji stays */
        {"\xff", 1, "\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = roundtrip(cases[i].in, cases[i].len);
        assert_string_equal(json_string_value(v), cases[i].want);
        json_decref(v);
    }
}

static void test_overflow_is_refused(void **state)
{
    (void)state;
    char buf[8];
    struct dp_jw w;
    dp_jw_init(&w, buf, sizeof(buf));
    dp_jw_lit(&w, "{\"a\":");
    assert_true(dp_jw_ok(&w));
    dp_jw_str(&w, "too long");
    assert_false(dp_jw_ok(&w));
    assert_true(w.len <= sizeof(buf));
    dp_jw_lit(&w, "}");
    assert_false(dp_jw_ok(&w));
}

static void test_numbers(void **state)
{
    (void)state;
    char buf[64];
    struct dp_jw w;
    dp_jw_init(&w, buf, sizeof(buf));
    dp_jw_u64(&w, UINT64_MAX);
    dp_jw_lit(&w, ",");
    dp_jw_u64_str(&w, 42);
    dp_jw_lit(&w, ",");
    dp_jw_str(&w, NULL);
    assert_true(dp_jw_ok(&w));
    assert_int_equal(w.len, strlen("18446744073709551615,\"42\",null"));
    assert_memory_equal(buf, "18446744073709551615,\"42\",null", w.len);
}

static size_t ring_take(struct dp_ring *r, char *out)
{
    struct iovec iov[2];
    size_t n = dp_ring_peek(r, iov);
    memcpy(out, iov[0].iov_base, iov[0].iov_len);
    memcpy(out + iov[0].iov_len, iov[1].iov_base, iov[1].iov_len);
    dp_ring_consume(r, n);
    return n;
}

static void test_ring_whole_records_and_wrap(void **state)
{
    (void)state;
    struct dp_ring r;
    assert_int_equal(dp_ring_init(&r, 100), 0);
    assert_int_equal(r.cap, 4096);
    char rec[1000], out[8192];
    for (int round = 0; round < 50; round++) {
        memset(rec, 'a' + round % 26, sizeof(rec));
        size_t pushed = 0;
        while (dp_ring_push(&r, rec, sizeof(rec)))
            pushed++;
        assert_int_equal(pushed, 4); /* 4 x 1000 fit in 4096, a fifth does not */
        size_t n = ring_take(&r, out);
        assert_int_equal(n, 4 * sizeof(rec));
        for (size_t i = 0; i < n; i++)
            assert_int_equal(out[i], 'a' + round % 26);
        /* Misalign the next round so records wrap. */
        assert_true(dp_ring_push(&r, "xyz", 3));
        assert_int_equal(ring_take(&r, out), 3);
    }
    dp_ring_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes_roundtrip),
        cmocka_unit_test(test_invalid_utf8_replaced),
        cmocka_unit_test(test_overflow_is_refused),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_ring_whole_records_and_wrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
