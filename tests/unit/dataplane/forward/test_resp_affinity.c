/*
 * Unit tests of the id capture of dataplane/forward/resp_affinity.c (included, to
 * reach its static scanners): the top-level "id" of a JSON answer is found
 * whatever the chunking, nested ids and ids inside strings are not taken
 * for it, and a stream's id comes from its response.created event, also
 * with CRLF line ends and events split across chunks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/forward/resp_affinity.c"

static void feed_json(struct dp_resp_capture *c, const char *text, size_t chunk)
{
    memset(c, 0, sizeof(*c));
    c->st = DP_RJ_SCAN;
    for (size_t at = 0; at < strlen(text); at += chunk) {
        size_t n = strlen(text) - at < chunk ? strlen(text) - at : chunk;
        dp_resp_json_feed(c, text + at, n);
    }
}

static void test_json_top_level_id(void **state)
{
    (void)state;
    const char *text =
        "{\"output\":[{\"id\":\"msg_1\",\"content\":[{\"text\":\"\\\"id\\\": x\"}]}],"
        "\"meta\":{\"id\":\"no\"},\"note\":\"id\",\"id\" : \"resp_top\",\"z\":1}";
    for (size_t chunk = 1; chunk <= strlen(text); chunk++) {
        struct dp_resp_capture c;
        feed_json(&c, text, chunk);
        assert_true(c.found);
        assert_int_equal(c.id_len, 8);
        assert_memory_equal(c.id, "resp_top", 8);
    }
    struct dp_resp_capture c;
    feed_json(&c, "{\"object\":\"response\",\"output\":[]}", 3);
    assert_false(c.found);
    feed_json(&c, "[{\"id\":\"resp_in_array\"}]", 3);
    assert_false(c.found);
}

static void feed_sse(struct dp_resp_capture *c, const char *text, size_t chunk)
{
    memset(c, 0, sizeof(*c));
    c->sse = true;
    c->at_line_start = true;
    buf_init(&c->line, DP_RESP_LINE_MAX);
    for (size_t at = 0; at < strlen(text) && !c->found; at += chunk) {
        size_t n = strlen(text) - at < chunk ? strlen(text) - at : chunk;
        dp_resp_sse_feed(c, text + at, n);
    }
    buf_fini(&c->line);
}

static void test_sse_created_event(void **state)
{
    (void)state;
    const char *text =
        "event: response.created\r\n"
        "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":"
        "\"resp_s\",\"output\":[]}}\r\n\r\n"
        "event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{"
        "\"id\":\"resp_other\"}}\r\n\r\n";
    for (size_t chunk = 1; chunk <= strlen(text); chunk += 7) {
        struct dp_resp_capture c;
        feed_sse(&c, text, chunk);
        assert_true(c.found);
        assert_int_equal(c.id_len, 6);
        assert_memory_equal(c.id, "resp_s", 6);
    }
    /* Only a response.created event names the new response. */
    struct dp_resp_capture c;
    feed_sse(&c, "data: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"r\"}}\n\n", 5);
    assert_false(c.found);
}

/* A data line over the cap is skipped whole (the buffer never grows past
 * it), and the created event after it is still found; a created event
 * itself over the cap is not looked at. */
static void test_sse_line_over_cap(void **state)
{
    (void)state;
    static const char created[] =
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_after\"}}\n\n";
    size_t big = DP_RESP_LINE_MAX + 4096;
    char *text = malloc(big + sizeof(created) + 16);
    assert_non_null(text);
    memcpy(text, "data: ", 6);
    memset(text + 6, 'x', big - 6);
    text[big] = '\n';
    memcpy(text + big + 1, created, sizeof(created));
    struct dp_resp_capture c;
    feed_sse(&c, text, 65536);
    assert_true(c.found);
    assert_int_equal(c.id_len, 10);
    assert_memory_equal(c.id, "resp_after", 10);
    /* The created event padded past the cap: skipped. The padding comes
     * after the complete JSON, so the line's first DP_RESP_LINE_MAX bytes
     * parse: only the skip flag keeps the id from being taken. */
    size_t json_end = strlen(created) - 2; /* before "\n\n" */
    memcpy(text, created, json_end);
    memset(text + json_end, ' ', big - json_end);
    memcpy(text + big, "\n\n", 3);
    feed_sse(&c, text, 65536);
    assert_false(c.found);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_top_level_id),
        cmocka_unit_test(test_sse_created_event),
        cmocka_unit_test(test_sse_line_over_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
