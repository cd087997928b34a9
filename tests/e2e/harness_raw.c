/*
 * Raw-socket HTTP for hostile-input tests (see harness_raw.h).
 */
#include "tests/e2e/harness_raw.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"

int h_raw_try_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int h_raw_connect(uint16_t port)
{
    int fd = h_raw_try_connect(port);
    assert_true(fd >= 0);
    return fd;
}

void h_raw_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

void h_raw_send_text(int fd, const char *text)
{
    h_raw_send(fd, text, strlen(text));
}

const char *h_raw_body(const char *buf)
{
    const char *b = strstr(buf, "\r\n\r\n");
    return b != NULL ? b + 4 : "";
}

/* Content-Length of the head in buf[0..head_len), or -1 when absent. */
static long long raw_content_length(const char *buf, size_t head_len)
{
    for (const char *p = buf; p != NULL && p < buf + head_len;) {
        if (strncasecmp(p, "Content-Length:", 15) == 0)
            return strtoll(p + 15, NULL, 10);
        p = strstr(p, "\r\n");
        p = p != NULL ? p + 2 : NULL;
    }
    return -1;
}

int h_raw_read_response(int fd, char *buf, size_t cap, size_t *resp_len, int timeout_ms)
{
    size_t len = 0;
    buf[0] = '\0';
    int64_t deadline = h_now_ms() + timeout_ms;
    for (;;) {
        const char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            size_t head = (size_t)(end - buf) + 4;
            long long cl = raw_content_length(buf, head);
            if (cl >= 0 && len >= head + (size_t)cl) {
                *resp_len = head + (size_t)cl;
                return atoi(buf + 9);
            }
        }
        int64_t left = deadline - h_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        ssize_t n = h_fd_read_more(fd, buf, cap, &len, (int)left);
        if (n == 0 || (n < 0 && n != -ETIMEDOUT)) {
            *resp_len = len;
            return strncmp(buf, "HTTP/1.", 7) == 0 ? atoi(buf + 9) : 0;
        }
    }
}

int64_t h_raw_ms_until_closed(int fd, char *buf, size_t cap, int timeout_ms)
{
    int64_t start = h_now_ms();
    size_t len = 0;
    buf[0] = '\0';
    for (;;) {
        int64_t left = timeout_ms - (h_now_ms() - start);
        if (left <= 0)
            return -1;
        ssize_t n = h_fd_read_more(fd, buf, cap, &len, (int)left);
        if (n == 0 || (n < 0 && n != -ETIMEDOUT && n != -ENOBUFS))
            return h_now_ms() - start;
        if (n == -ENOBUFS)
            len = 0;
    }
}
