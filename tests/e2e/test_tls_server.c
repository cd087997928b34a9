/*
 * End-to-end tests of HTTPS on the data plane's listener (dataplane.tls):
 * clients over TLS (whole answers and streams), mTLS refusing a client
 * without a certificate or with another CA's, certificate rotation by
 * SIGHUP while streams flow (none lost; a bad new certificate refused, the
 * old one serving on), hostile input on the TLS port (garbage, a stalled
 * handshake, plain HTTP) closed without disturbing another client, and a
 * hot restart that hands the TLS listener over.
 *
 * Certificates are made per test in its temporary directory
 * (harness_tls.h). Every wait has a deadline.
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

static const char *const CHAT_PLAIN = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":8,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char *const CHAT_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":8,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
/* About 1 s of tokens with --tpot-ms 25. */
static const char *const CHAT_LONG_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":40,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static void tls_yaml(char *buf, size_t len, const struct h_tls_certs *c, const char *client_ca,
                     const char *more)
{
    int n = snprintf(buf, len, "tls:\n  cert_file: %s\n  key_file: %s\n", c->server, c->server_key);
    if (client_ca != NULL)
        n += snprintf(buf + n, len - (size_t)n, "  client_ca_file: %s\n", client_ca);
    if (more != NULL)
        snprintf(buf + n, len - (size_t)n, "%s", more);
}

static long post_status(struct h_fleet *f, const char *body)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp r;
    (void)h_http(&(struct h_req){.url = url, .body = body, .timeout_ms = 10000}, &r);
    long status = r.status;
    h_resp_fini(&r);
    return status;
}

static int raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Reads until EOF (or an error such as a reset): 0, or -ETIMEDOUT. What
 * arrived goes to out (a TLS alert, never an HTTP answer). */
static int read_until_closed(int fd, char *out, size_t cap, int timeout_ms)
{
    size_t len = 0;
    int64_t deadline = h_now_ms() + timeout_ms;
    out[0] = '\0';
    for (;;) {
        int left = (int)(deadline - h_now_ms());
        if (left <= 0)
            return -ETIMEDOUT;
        ssize_t n = h_fd_read_more(fd, out, cap, &len, left);
        if (n == 0 || (n < 0 && n != -ETIMEDOUT && n != -ENOBUFS))
            return 0;
        if (n == -ETIMEDOUT)
            return -ETIMEDOUT;
        if (n == -ENOBUFS)
            len = 0;
    }
}

static void test_https_clients(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    uint16_t plain_port;
    assert_int_equal(h_free_port(&plain_port), 0);
    char plain[64], extra[1024];
    snprintf(plain, sizeof(plain), "plain_listen: 127.0.0.1:%u\n", (unsigned)plain_port);
    tls_yaml(extra, sizeof(extra), &c, NULL, plain);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    assert_non_null(strstr(f.base, "https://"));

    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_sse sse;
    assert_int_equal(h_http_stream(url, CHAT_STREAM, &sse), 0);
    assert_int_equal(sse.resp.status, 200);
    assert_true(sse.saw_done);
    assert_false(sse.malformed);
    assert_true(sse.n_events >= 3);
    h_sse_fini(&sse);

    /* A client that does not trust the CA gets no answer. */
    h_tls_client_use(c.wrong_ca, NULL, NULL);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 0);
    h_tls_client_use(c.ca, NULL, NULL);

    /* dataplane.plain_listen: plain HTTP beside it, for local clients. */
    char plain_url[128];
    snprintf(plain_url, sizeof(plain_url), "http://127.0.0.1:%u/v1/chat/completions",
             (unsigned)plain_port);
    struct h_resp r;
    assert_int_equal(h_http_post_json(plain_url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 3);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static void test_mtls_clients(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), &c, c.ca, NULL);
    /* The harness's readiness check needs a certificate too. */
    h_tls_client_use(c.ca, c.client, c.client_key);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);

    h_tls_client_use(c.ca, NULL, NULL);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 0);
    h_tls_client_use(c.ca, c.wrong_client, c.wrong_client_key);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 0);
    h_tls_client_use(c.ca, c.client, c.client_key);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    /* The refused ones never reached a worker. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static bool refused_logged(void *arg)
{
    return h_proc_log_contains(arg, "new TLS certificate refused");
}

static int replace_file(const char *from, const char *to)
{
    return rename(from, to) == 0 ? 0 : -errno;
}

#define N_FLOWING 6

static void test_rotation_under_load(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    /* The next certificate, from another CA, so a client can tell which
     * one a connection got; a bundle trusts both. */
    char next[H_PATH_MAX], next_key[H_PATH_MAX], both[H_PATH_MAX];
    assert_int_equal(
        h_tls_make_leaf("next", c.wrong_ca, c.wrong_ca_key, false, next, next_key, sizeof(next)),
        0);
    assert_int_equal(h_tmp_path("both.pem", both, sizeof(both)), 0);
    char cmd[4 * H_PATH_MAX];
    snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", c.ca, c.wrong_ca, both);
    assert_int_equal(system(cmd), 0);
    h_tls_client_use(both, NULL, NULL);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), &c, NULL, NULL);
    const char *mock_args[] = {"--tpot-ms", "25", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .mock_args = mock_args, .dataplane_extra = extra, .https = true});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);

    /* Streams in flight across the reload. */
    struct h_async *a[2 * N_FLOWING];
    for (int i = 0; i < N_FLOWING; i++)
        assert_int_equal(h_async_start(url, CHAT_LONG_STREAM, NULL, &a[i]), 0);
    for (int i = 0; i < N_FLOWING; i++)
        assert_int_equal(h_async_wait_body(a[i], 1, 10000), 0);
    assert_int_equal(replace_file(next, c.server), 0);
    assert_int_equal(replace_file(next_key, c.server_key), 0);
    assert_int_equal(h_proc_signal(f.dp, SIGHUP), 0);
    for (int i = N_FLOWING; i < 2 * N_FLOWING; i++)
        assert_int_equal(h_async_start(url, CHAT_LONG_STREAM, NULL, &a[i]), 0);
    for (int i = 0; i < 2 * N_FLOWING; i++) {
        assert_int_equal(h_async_wait(a[i], 20000), 0);
        struct h_resp r;
        assert_int_equal(h_async_take_resp(a[i], &r), 0);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "data: [DONE]"));
        h_resp_fini(&r);
        h_async_destroy(a[i]);
    }
    /* New connections get the new certificate: the old CA alone fails. */
    h_tls_client_use(c.wrong_ca, NULL, NULL);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    h_tls_client_use(c.ca, NULL, NULL);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 0);

    /* A bad certificate is refused; the current one keeps serving. */
    char bad[H_PATH_MAX];
    assert_int_equal(
        h_write_file("bad.pem", "-----BEGIN CERTIFICATE-----\nnot one\n", bad, sizeof(bad)), 0);
    assert_int_equal(replace_file(bad, c.server), 0);
    assert_int_equal(h_proc_signal(f.dp, SIGHUP), 0);
    assert_int_equal(h_wait_until(refused_logged, f.dp, 5000), 0);
    h_tls_client_use(c.wrong_ca, NULL, NULL);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static void test_hostile_tls_input(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), &c, NULL, "header_timeout: 1s\n");
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    uint16_t port = f.cfg.dataplane_port;
    char buf[4096];

    /* A client that stalls mid-handshake: half a ClientHello, then nothing. */
    int stalled = raw_connect(port);
    static const unsigned char hello_start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01};
    assert_int_equal(write(stalled, hello_start, sizeof(hello_start)),
                     (ssize_t)sizeof(hello_start));
    int silent = raw_connect(port); /* and one that sends nothing at all */

    /* Garbage on the TLS port. */
    int fd = raw_connect(port);
    static const char garbage[] = "\x01\x02garbage\xff\xfe\r\n\r\nmore garbage";
    assert_int_equal(write(fd, garbage, sizeof(garbage) - 1), (ssize_t)sizeof(garbage) - 1);
    assert_int_equal(read_until_closed(fd, buf, sizeof(buf), 5000), 0);
    assert_null(strstr(buf, "HTTP/1."));
    close(fd);

    /* Plain HTTP to the TLS port. */
    fd = raw_connect(port);
    static const char plain[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    assert_int_equal(write(fd, plain, sizeof(plain) - 1), (ssize_t)sizeof(plain) - 1);
    assert_int_equal(read_until_closed(fd, buf, sizeof(buf), 5000), 0);
    assert_null(strstr(buf, "HTTP/1."));
    close(fd);

    /* Meanwhile another client is served as usual. */
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);

    /* header_timeout (1 s) closes the stalled handshakes. */
    int64_t t0 = h_now_ms();
    assert_int_equal(read_until_closed(stalled, buf, sizeof(buf), 5000), 0);
    assert_int_equal(read_until_closed(silent, buf, sizeof(buf), 5000), 0);
    assert_true(h_now_ms() - t0 < 4000);
    close(stalled);
    close(silent);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

/* Runs openssl s_client against the data plane with a session file: the
 * first run stores the session, the second offers it. 0 when the second
 * handshake resumed ("Reused"). */
static int resumed_with_openssl(const struct h_tls_certs *c, uint16_t port)
{
    char sess[H_PATH_MAX], out[H_PATH_MAX], cmd[8 * H_PATH_MAX];
    if (h_tmp_path("client.sess", sess, sizeof(sess)) != 0 ||
        h_tmp_path("s_client.out", out, sizeof(out)) != 0)
        return -ENOSPC;
    /* The request makes s_client wait for the answer, by which time the
     * server's session ticket (TLS 1.3: after the handshake) has arrived. */
    static const char req[] =
        "GET /health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n";
    snprintf(cmd, sizeof(cmd),
             "printf '%s' | openssl s_client -connect 127.0.0.1:%u -CAfile '%s' -sess_out '%s' "
             "-ign_eof >/dev/null 2>&1; printf '%s' | openssl s_client -connect 127.0.0.1:%u "
             "-CAfile '%s' -sess_in '%s' -ign_eof > '%s' 2>&1",
             req, (unsigned)port, c->ca, sess, req, (unsigned)port, c->ca, sess, out);
    /* s_client exits 1 when the server closes without close_notify:
     * only its report counts. */
    (void)system(cmd);
    FILE *f = fopen(out, "r");
    if (f == NULL)
        return -errno;
    char line[512];
    bool reused = false;
    while (fgets(line, sizeof(line), f) != NULL)
        reused = reused || strncmp(line, "Reused, ", 8) == 0;
    fclose(f);
    return reused ? 0 : -ENOENT;
}

static void test_sessions_resume(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), &c, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    assert_int_equal(resumed_with_openssl(&c, f.cfg.dataplane_port), 0);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

struct served_cond {
    struct h_fleet *f;
};

static bool new_certificate_served(void *arg)
{
    struct served_cond *c = arg;
    return post_status(c->f, CHAT_PLAIN) == 200;
}

static void test_hot_restart_hands_over_tls(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char next[H_PATH_MAX], next_key[H_PATH_MAX], both[H_PATH_MAX];
    assert_int_equal(
        h_tls_make_leaf("next", c.wrong_ca, c.wrong_ca_key, false, next, next_key, sizeof(next)),
        0);
    assert_int_equal(h_tmp_path("both.pem", both, sizeof(both)), 0);
    char cmd[4 * H_PATH_MAX];
    snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", c.ca, c.wrong_ca, both);
    assert_int_equal(system(cmd), 0);
    h_tls_client_use(both, NULL, NULL);
    uint16_t plain_port;
    assert_int_equal(h_free_port(&plain_port), 0);
    char plain[64], plain_url[128], extra[1024];
    snprintf(plain, sizeof(plain), "plain_listen: 127.0.0.1:%u\n", (unsigned)plain_port);
    snprintf(plain_url, sizeof(plain_url), "http://127.0.0.1:%u/v1/chat/completions",
             (unsigned)plain_port);
    tls_yaml(extra, sizeof(extra), &c, NULL, plain);
    const char *mock_args[] = {"--tpot-ms", "25", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .mock_args = mock_args, .dataplane_extra = extra, .https = true});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_async *a[N_FLOWING];
    for (int i = 0; i < N_FLOWING; i++)
        assert_int_equal(h_async_start(url, CHAT_LONG_STREAM, NULL, &a[i]), 0);
    for (int i = 0; i < N_FLOWING; i++)
        assert_int_equal(h_async_wait_body(a[i], 1, 10000), 0);

    /* The successor reads the (new) files and takes the TLS listener. */
    assert_int_equal(replace_file(next, c.server), 0);
    assert_int_equal(replace_file(next_key, c.server_key), 0);
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-dataplane", bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", f.cfg.path, "--hot-restart", NULL};
    struct h_proc *succ = NULL;
    assert_int_equal(h_spawn("dataplane", argv, &succ), 0);
    h_tls_client_use(c.wrong_ca, NULL, NULL);
    struct served_cond sc = {&f};
    assert_int_equal(h_wait_until(new_certificate_served, &sc, H_READY_TIMEOUT_MS), 0);

    /* The predecessor's streams end whole, then it exits. */
    for (int i = 0; i < N_FLOWING; i++) {
        assert_int_equal(h_async_wait(a[i], 20000), 0);
        struct h_resp r;
        assert_int_equal(h_async_take_resp(a[i], &r), 0);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "data: [DONE]"));
        h_resp_fini(&r);
        h_async_destroy(a[i]);
    }
    f.dp->expected = true;
    int st = -1;
    assert_int_equal(h_proc_wait(f.dp, 15000, &st), 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(post_status(&f, CHAT_PLAIN), 200);
    /* The successor bound the plain listener beside it too. */
    struct h_resp r;
    assert_int_equal(h_http_post_json(plain_url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_true(h_proc_is_running(succ));
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_https_clients),
        H_TEST(test_mtls_clients),
        H_TEST(test_rotation_under_load),
        H_TEST(test_hostile_tls_input),
        H_TEST(test_hot_restart_hands_over_tls),
        H_TEST(test_sessions_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
