/*
 * Unit tests of the in-band SSE error scanner (dataplane/core/sse_scan.c): an
 * error event is found at the start of the body or of any later event,
 * split across chunks at every byte, with LF or CRLF framing; the same
 * text inside an event, or a non-error data event, is not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/core/sse_scan.h"

static bool scan_whole(const char *text)
{
    struct dp_sse_scan s;
    dp_sse_scan_init(&s);
    return dp_sse_scan_feed(&s, text, strlen(text));
}

/* Feeds text split at every position; each split must give want. */
static void assert_every_split(const char *text, bool want)
{
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        struct dp_sse_scan s;
        dp_sse_scan_init(&s);
        bool hit = dp_sse_scan_feed(&s, text, cut);
        hit |= dp_sse_scan_feed(&s, text + cut, n - cut);
        if (hit != want)
            fail_msg("split at %zu of \"%s\": got %d", cut, text, hit);
    }
}

static void test_error_first_event(void **state)
{
    (void)state;
    assert_true(scan_whole("data: {\"error\": {\"message\": \"KV load failed\", \"code\": 500}}\n\n"
                           "data: [DONE]\n\n"));
}

static void test_error_after_tokens(void **state)
{
    (void)state;
    const char *text = "data: {\"id\":\"c1\",\"choices\":[{\"text\":\"a\"}]}\n\n"
                       "data: {\"id\":\"c1\",\"choices\":[{\"text\":\"b\"}]}\n\n"
                       "data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n";
    assert_true(scan_whole(text));
    assert_every_split(text, true);
}

static void test_crlf_framing(void **state)
{
    (void)state;
    assert_every_split("data: {\"id\":1}\r\n\r\ndata: {\"error\":{}}\r\n\r\n", true);
}

static void test_not_an_error(void **state)
{
    (void)state;
    /* A token whose text is the prefix, and a second data line of one event. */
    assert_every_split("data: {\"choices\":[{\"text\":\"data: {\\\"error\\\"\"}]}\n\n"
                       "data: [DONE]\n\n",
                       false);
    assert_false(scan_whole("data: {\"id\":1}\ndata: {\"error\":1}\n\n"));
    assert_false(scan_whole(": keep-alive\n\ndata: [DONE]\n\n"));
    assert_false(scan_whole(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_first_event),
        cmocka_unit_test(test_error_after_tokens),
        cmocka_unit_test(test_crlf_framing),
        cmocka_unit_test(test_not_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
