/*
 * End-to-end tests of security review II's findings on the data plane's
 * client port (docs/security.md, rows 14, 16, 18, 19, 24, 25): framing that
 * smuggles a second request, bodies read before the key is checked, client
 * credentials reaching workers, tenant names on /metrics, worker names in
 * errors, and a token estimate that ignores what a Responses request asks.
 * Each test sends what the review sent and asserts the fix; each failed on
 * the code before it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_raw.h"

/* ---- row 16: request framing desync ----------------------------------------- */

/*
 * Sends head (request line and headers, without the blank line) and then
 * body on one connection, and reads until the router closes it. Returns
 * the number of HTTP responses that came back; the first is in out.
 */
static int responses_until_close(const struct h_fleet *f, const char *head, const char *body,
                                 char *out, size_t cap)
{
    int fd = h_raw_connect(f->cfg.dataplane_port);
    h_raw_send_text(fd, head);
    h_raw_send_text(fd, "\r\n");
    h_raw_send_text(fd, body);
    int64_t closed = h_raw_ms_until_closed(fd, out, cap, H_READY_TIMEOUT_MS);
    close(fd);
    assert_true(closed >= 0); /* the router closed: it did not wait for more */
    int n = 0;
    for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        n++;
    return n;
}

/* The smuggled request: a GET the worker would answer (and count). */
static const char smuggled[] = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

static void test_two_content_lengths_are_refused_and_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char body[256], head[512], out[8192];
    snprintf(body, sizeof(body), "{\"a\":1}%s", smuggled);
    /* One reader takes the first length (7: the JSON), another the second
     * (the whole): the tail then runs as a request of its own. */
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: 7\r\nContent-Length: %zu\r\n",
             strlen(body));
    int n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_non_null(strstr(out, "invalid_framing"));
    /* Same values twice: refused as well (no reader has to guess). */
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: 7\r\nContent-Length: 7\r\n");
    n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

static void test_transfer_encoding_with_content_length_is_refused_and_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char body[256], head[512], out[8192];
    /* Chunked says the body ends at the 0 chunk; Content-Length says it
     * runs on over the smuggled request. */
    snprintf(body, sizeof(body), "7\r\n{\"a\":1}\r\n0\r\n\r\n%s", smuggled);
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
             "Content-Length: %zu\r\n",
             strlen(body));
    int n = responses_until_close(&f, head, body, out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_non_null(strstr(out, "invalid_framing"));
    /* A coding other than a lone chunked: its end is unknown to us. */
    n = responses_until_close(&f,
                              "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Content-Type: application/json\r\n"
                              "Transfer-Encoding: gzip, chunked\r\n",
                              "7\r\n{\"a\":1}\r\n0\r\n\r\n", out, sizeof(out));
    if (n != 1 || strncmp(out, "HTTP/1.1 400", 12) != 0)
        fail_msg("expected one 400 and a close, got %d responses: %.300s", n, out);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);

    /* Plain chunked alone is fine and keeps the connection usable. */
    int fd = h_raw_connect(f.cfg.dataplane_port);
    static const char chunked[] =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "24\r\n{\"model\":\"mock-model\",\"prompt\":\"hi\"}\r\n0\r\n\r\n";
    h_raw_send_text(fd, chunked);
    size_t len = 0;
    assert_int_equal(h_raw_read_response(fd, out, sizeof(out), &len, H_READY_TIMEOUT_MS), 200);
    h_raw_send_text(fd, chunked);
    assert_int_equal(h_raw_read_response(fd, out, sizeof(out), &len, H_READY_TIMEOUT_MS), 200);
    close(fd);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_two_content_lengths_are_refused_and_closed),
        H_TEST(test_transfer_encoding_with_content_length_is_refused_and_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
