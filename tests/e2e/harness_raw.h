/*
 * HTTP over a raw socket, for the tests that must send what no HTTP
 * library would: malformed or oversized heads, bodies that disagree with
 * their Content-Length, pipelined requests, bytes trickled one at a time.
 * Functions assert (cmocka) where a failure means the test cannot go on.
 */
#ifndef SY_TESTS_E2E_HARNESS_RAW_H
#define SY_TESTS_E2E_HARNESS_RAW_H

#include <stddef.h>
#include <stdint.h>

/* A blocking TCP connection to 127.0.0.1:port (asserts). */
int h_raw_connect(uint16_t port);

/* Like h_raw_connect, but returns -errno instead of asserting (floods). */
int h_raw_try_connect(uint16_t port);

/* Writes all of data (asserts it all went). */
void h_raw_send(int fd, const void *data, size_t len);
void h_raw_send_text(int fd, const char *text);

/*
 * Reads one whole HTTP response (head, then the Content-Length body or
 * until close) into buf, NUL-terminated. Returns its status, 0 when the
 * peer closed before a status line, or -ETIMEDOUT past timeout_ms. Bytes
 * of a following pipelined response may remain in buf after *resp_len.
 */
int h_raw_read_response(int fd, char *buf, size_t cap, size_t *resp_len, int timeout_ms);

/* Reads until the peer closes; returns the milliseconds it took, or -1
 * past timeout_ms. What arrived is in buf (the tail when it overflowed). */
int64_t h_raw_ms_until_closed(int fd, char *buf, size_t cap, int timeout_ms);

/* The body of the response in buf (after the blank line), or "" . */
const char *h_raw_body(const char *buf);

#endif
