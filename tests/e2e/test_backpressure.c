/*
 * End-to-end tests of what a stream costs the dataplane in memory.
 *
 * Backpressure: a client that stops reading a stream must not make the
 * dataplane buffer the worker's output. The relay buffer is bounded (64 KiB
 * per request) and the worker's transfer is paused when it is full, so the
 * worker itself is held back; once the client reads again, every byte
 * arrives and the load is released at the end. The client is a raw socket
 * with a small receive buffer, so the kernel's buffers between it and the
 * dataplane stay small too.
 *
 * Held prompts: once a stream is being relayed, its request body (sent,
 * and never needed again) is not kept, so a held stream costs the same
 * whatever its prompt's size.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define STREAM_TOKENS "100000" /* about 21 MB of SSE from the mock, in under a second */
#define STALL_MS      1500     /* how long the client does not read */
#define RSS_BOUND_KB  (8 * 1024)
#define READ_ALL_MS   60000

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static bool load_is_zero(void *arg)
{
    return h_fleet_load(arg, 0) == 0;
}

/* Reads what is there within timeout_ms; returns the byte count, 0 on EOF, -1 on error/timeout. */
static ssize_t read_some(int fd, char *buf, size_t len, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0)
        return -1;
    return read(fd, buf, len);
}

/* AddressSanitizer keeps freed memory in its quarantine, resident: a freed
 * body, or the relay buffer a stream frees and takes again per event, still
 * counts in RSS there, so the bounds are only checked without it. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_REFLECTS_FREE false
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_REFLECTS_FREE false
#endif
#endif
#ifndef RSS_REFLECTS_FREE
#define RSS_REFLECTS_FREE true
#endif

static void test_slow_client_holds_back_the_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    const char *const mock_args[] = {"--tpot-ms", "0", "--max-model-len", "1000000", NULL};
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .mock_args = mock_args});

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int small = 4096;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f.cfg.dataplane_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    static const char body[] =
        "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":" STREAM_TOKENS
        ",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     sizeof(body) - 1, body);
    assert_int_equal(write(fd, req, (size_t)n), n);

    /* The stream has started: headers and the first events. */
    char buf[16384];
    size_t got = 0;
    while (got < 4096) {
        ssize_t r = read_some(fd, buf, sizeof(buf) - 1, 10000);
        assert_true(r > 0);
        if (got == 0) {
            buf[r] = '\0';
            assert_non_null(strstr(buf, "HTTP/1.1 200 OK"));
        }
        got += (size_t)r;
    }

    /* The client stops reading. Unthrottled, the worker would be done in
     * well under a second and the router would hold its ~21 MB. */
    long before = rss_kb(f.dp->pid);
    assert_true(before > 0);
    long peak = before;
    uint64_t end = proc_monotonic_ms() + STALL_MS;
    while (proc_monotonic_ms() < end) {
        long kb = rss_kb(f.dp->pid);
        if (kb > peak)
            peak = kb;
        struct pollfd none = {.fd = -1};
        poll(&none, 1, 20); /* the sampling period, not a wait for a condition */
    }
    print_message("dataplane RSS %ld kB before, peak %ld kB while the client did not read%s\n",
                  before, peak, RSS_REFLECTS_FREE ? "" : " (not checked under AddressSanitizer)");
    if (RSS_REFLECTS_FREE)
        assert_true(peak - before < RSS_BOUND_KB);
    /* The worker is held back, not finished. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "inflight"), 1);
    assert_int_equal(h_fleet_load(&f, 0), 1);

    /* Reading again: everything arrives, the stream ends properly. */
    char tail[256] = "";
    size_t tail_len = 0, total = got;
    uint64_t deadline = proc_monotonic_ms() + READ_ALL_MS;
    for (;;) {
        assert_true(proc_monotonic_ms() < deadline);
        ssize_t r = read_some(fd, buf, sizeof(buf), 10000);
        assert_true(r >= 0);
        if (r == 0)
            break;
        total += (size_t)r;
        size_t keep = (size_t)r < sizeof(tail) - 1 ? (size_t)r : sizeof(tail) - 1;
        if (tail_len + keep > sizeof(tail) - 1) {
            size_t drop = tail_len + keep - (sizeof(tail) - 1);
            memmove(tail, tail + drop, tail_len - drop);
            tail_len -= drop;
        }
        memcpy(tail + tail_len, buf + (size_t)r - keep, keep);
        tail_len += keep;
        tail[tail_len] = '\0';
    }
    close(fd);
    print_message("client read %zu bytes\n", total);
    assert_true(total > 20u * 1000u * 1000u);
    assert_non_null(strstr(tail, "data: [DONE]"));
    assert_non_null(strstr(tail, "0\r\n\r\n"));
    assert_int_equal(h_wait_until(load_is_zero, &f, 1000), 0);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "client_aborts"), 0);
    h_fleet_stop(&f);
}

struct rss_watch {
    pid_t pid;
    long limit_kb;
    long last_kb;
};

static bool rss_below(void *arg)
{
    struct rss_watch *w = arg;
    w->last_kb = rss_kb(w->pid);
    return w->last_kb > 0 && w->last_kb < w->limit_kb;
}

#define BIG_STREAMS      16
#define BIG_PROMPT_BYTES (1000 * 1000)

static void test_held_streams_do_not_keep_their_prompts(void **state)
{
    (void)state;
    struct h_fleet f;
    /* First token at once, the next one a minute later. round_robin: cache_aware
     * would fill its prefix index (a fixed 16 MiB at most) with the prompts. */
    const char *const mock_args[] = {"--tpot-ms", "60000", "--max-model-len", "1000000", NULL};
    h_fleet_start(&f,
                  &(struct h_fleet_opts){.n = 1, .mock_args = mock_args, .policy = "round_robin"});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    long before = rss_kb(f.dp->pid);
    assert_true(before > 0);

    static const char head[] = "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":4,"
                               "\"messages\":[{\"role\":\"user\",\"content\":\"";
    static const char foot[] = "\"}]}";
    struct h_async *a[BIG_STREAMS];
    for (int i = 0; i < BIG_STREAMS; i++) {
        /* A different prompt each, so nothing is shared. */
        size_t len = sizeof(head) - 1 + BIG_PROMPT_BYTES + sizeof(foot);
        char *body = malloc(len);
        assert_non_null(body);
        memcpy(body, head, sizeof(head) - 1);
        for (size_t j = 0; j < BIG_PROMPT_BYTES; j++)
            body[sizeof(head) - 1 + j] = (char)('a' + (j * 7 + (size_t)i) % 26);
        memcpy(body + sizeof(head) - 1 + BIG_PROMPT_BYTES, foot, sizeof(foot));
        assert_int_equal(h_async_start(url, body, &(struct h_async_opts){0}, &a[i]), 0);
        free(body);
    }
    /* Every stream has its first token and now waits a minute for the next. */
    for (int i = 0; i < BIG_STREAMS; i++)
        assert_int_equal(h_async_wait_body(a[i], 64, 20000), 0);
    assert_int_equal(h_fleet_load(&f, 0), BIG_STREAMS);
    /* 16 prompts of 1 MB are 16 MB: the dataplane holds far less (2-4 MB
     * here, most of it curl's upload buffer of each transfer). */
    struct rss_watch w = {.pid = f.dp->pid, .limit_kb = before + 8 * 1024};
    int rc = h_wait_until(rss_below, &w, 5000);
    print_message("dataplane RSS %ld kB before, %ld kB holding %d streams of %d-byte prompts%s\n",
                  before, w.last_kb, BIG_STREAMS, BIG_PROMPT_BYTES,
                  RSS_REFLECTS_FREE ? "" : " (not checked under AddressSanitizer)");
    if (RSS_REFLECTS_FREE)
        assert_int_equal(rc, 0);
    for (int i = 0; i < BIG_STREAMS; i++)
        assert_int_equal(h_async_abort(a[i]), 0);
    assert_int_equal(h_wait_until(load_is_zero, &f, 1000), 0);
    for (int i = 0; i < BIG_STREAMS; i++)
        h_async_destroy(a[i]);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_slow_client_holds_back_the_worker),
        H_TEST(test_held_streams_do_not_keep_their_prompts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
