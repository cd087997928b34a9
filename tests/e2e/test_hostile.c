/*
 * Hostile clients against the data plane, each answered as it should be
 * while a legitimate client keeps being served (docs/reliability.md has
 * the table these tests prove): a flood of idle connections, heads of a
 * megabyte or ten thousand headers, bodies longer or shorter than they
 * announce, pipelined requests, and JSON built to hurt a parser (invalid
 * UTF-8, NUL bytes, 100,000 levels of nesting, 10,000-digit numbers,
 * duplicate keys, a model that is not a string).
 */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_raw.h"

#define CHAT_BODY                                                                                  \
    "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"                                           \
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"

/* The legitimate client: one ordinary request through the router, 200. */
static void assert_legit_client_served(const struct h_fleet *f)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, CHAT_BODY, &resp), 0);
    if (resp.status != 200)
        fprintf(stderr, "legit client got %ld: %s\n", (long)resp.status, resp.body);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
}

/* A raw request with a JSON body; the response's status (body in buf). */
static int raw_post(const struct h_fleet *f, const char *body, size_t body_len, char *buf,
                    size_t cap)
{
    int fd = h_raw_connect(f->cfg.dataplane_port);
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     body_len);
    h_raw_send(fd, head, (size_t)n);
    h_raw_send(fd, body, body_len);
    size_t len = 0;
    int status = h_raw_read_response(fd, buf, cap, &len, H_READY_TIMEOUT_MS);
    close(fd);
    return status;
}

/* The response in buf carries an OpenAI error object whose code is code. */
static void assert_openai_error(const char *buf, const char *code)
{
    json_error_t e;
    json_t *j = json_loads(h_raw_body(buf), 0, &e);
    if (j == NULL)
        fprintf(stderr, "not JSON: %s\n", buf);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(json_is_string(json_object_get(err, "type")));
    if (code != NULL)
        assert_string_equal(json_string_value(json_object_get(err, "code")), code);
    json_decref(j);
}

/* ---- JSON built to hurt ------------------------------------------------------- */

static char *nested(size_t depth)
{
    const char *pre = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[],\"x\":";
    size_t n = strlen(pre);
    char *s = malloc(n + 2 * depth + 2);
    assert_non_null(s);
    memcpy(s, pre, n);
    memset(s + n, '[', depth);
    memset(s + n + depth, ']', depth);
    s[n + 2 * depth] = '}';
    s[n + 2 * depth + 1] = '\0';
    return s;
}

static char *long_number(size_t digits)
{
    const char *pre = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[],\"max_tokens\":";
    size_t n = strlen(pre);
    char *s = malloc(n + digits + 2);
    assert_non_null(s);
    memcpy(s, pre, n);
    memset(s + n, '9', digits);
    s[n + digits] = '}';
    s[n + digits + 1] = '\0';
    return s;
}

static void test_hostile_json_is_refused_cleanly(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char *deep = nested(100000), *digits = long_number(10000);
    static const char bad_utf8[] = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":"
                                   "\"user\",\"content\":\"\xc3\x28 \xff\"}]}";
    static const char raw_nul[] = "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":"
                                  "\"user\",\"content\":\"a\0b\"}]}";
    const struct {
        const char *what;
        const char *body;
        size_t len; /* 0: strlen(body) */
        int status;
        const char *code;
    } cases[] = {
        {"invalid UTF-8", bad_utf8, sizeof(bad_utf8) - 1, 400, "invalid_json"},
        {"a raw NUL byte", raw_nul, sizeof(raw_nul) - 1, 400, "invalid_json"},
        {"100,000 levels of nesting", deep, strlen(deep), 400, "invalid_json"},
        {"a 10,000-digit integer", digits, strlen(digits), 400, "invalid_json"},
        {"model as a number", "{\"model\":7,\"messages\":[]}", 0, 400, NULL},
        {"model as an array", "{\"model\":[\"m\"],\"messages\":[]}", 0, 400, NULL},
        {"model as an object", "{\"model\":{\"a\":1},\"messages\":[]}", 0, 400, NULL},
        {"a NUL inside the model", "{\"model\":\"mock\\u0000model\",\"messages\":[]}", 0, 400,
         NULL},
    };
    static char buf[65536];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = cases[i].len != 0 ? cases[i].len : strlen(cases[i].body);
        int status = raw_post(&f, cases[i].body, len, buf, sizeof(buf));
        if (status != cases[i].status)
            fprintf(stderr, "%s: got %d: %s\n", cases[i].what, status, buf);
        assert_int_equal(status, cases[i].status);
        assert_openai_error(buf, cases[i].code);
        assert_legit_client_served(&f);
    }
    /* Refused before a worker saw any of them: only the legitimate client's
     * requests reached it. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"),
                     (long long)(sizeof(cases) / sizeof(cases[0])));
    free(deep);
    free(digits);
    h_fleet_stop(&f);
}

/* Valid JSON that looks odd is not refused: duplicate keys (the last wins,
 * as in vLLM's Python parser, so the router and the worker agree on the
 * model), an escaped NUL, a long number that is not an integer. */
static void test_odd_but_valid_json_is_served(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    const char *const bodies[] = {
        "{\"model\":\"nope\",\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
    };
    static char buf[65536];
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        int status = raw_post(&f, bodies[i], strlen(bodies[i]), buf, sizeof(buf));
        if (status != 200)
            fprintf(stderr, "case %zu: got %d: %s\n", i, status, buf);
        assert_int_equal(status, 200);
    }
    h_fleet_stop(&f);
}

/* ---- heads --------------------------------------------------------------------- */

/* A head of one 1 MB header, and one of 10,000 small headers: refused with
 * 431 before anything is forwarded, the connection closed. */
static void test_oversized_heads_are_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    static char buf[65536];
    for (int variant = 0; variant < 2; variant++) {
        int fd = h_raw_connect(f.cfg.dataplane_port);
        h_raw_send_text(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        size_t big = 1u << 20;
        char *head = malloc(big + 64);
        assert_non_null(head);
        size_t n = 0;
        if (variant == 0) {
            n += (size_t)sprintf(head, "X-Big: ");
            memset(head + n, 'a', big);
            n += big;
            n += (size_t)sprintf(head + n, "\r\n");
        } else {
            for (int i = 0; i < 10000 && n + 32 < big; i++)
                n += (size_t)sprintf(head + n, "X-H%d: v\r\n", i);
        }
        /* The router may close before all of it is sent: that is an answer. */
        signal(SIGPIPE, SIG_IGN);
        for (size_t off = 0; off < n;) {
            ssize_t w = write(fd, head + off, n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        free(head);
        size_t len = 0;
        int status = h_raw_read_response(fd, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS);
        if (status != 431)
            fprintf(stderr, "variant %d: got %d: %.300s\n", variant, status, buf);
        assert_int_equal(status, 431);
        close(fd);
        assert_legit_client_served(&f);
    }
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2);
    h_fleet_stop(&f);
}

/* ---- bodies and their lengths -------------------------------------------------- */

/* More bytes than Content-Length: the request is served as announced, and
 * the rest is read as the next request on the connection, which is not
 * HTTP: 400 and the connection closed. Fewer bytes, then the client closes
 * its side: nothing is forwarded. */
static void test_body_length_mismatch(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    static char buf[65536];
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
                     "GARBAGE NOT HTTP\r\n\r\n",
                     strlen(CHAT_BODY), CHAT_BODY);
    int fd = h_raw_connect(f.cfg.dataplane_port);
    h_raw_send(fd, req, (size_t)n);
    size_t len = 0;
    assert_int_equal(h_raw_read_response(fd, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS), 200);
    /* What follows the first response is the refusal of the garbage. */
    char rest[8192];
    size_t have = strlen(buf) - len;
    memmove(rest, buf + len, have + 1);
    int64_t closed = h_raw_ms_until_closed(fd, buf, sizeof(buf), H_READY_TIMEOUT_MS);
    assert_true(closed >= 0);
    strncat(rest, buf, sizeof(rest) - strlen(rest) - 1);
    assert_int_equal(strncmp(rest, "HTTP/1.1 400", 12), 0);
    close(fd);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 1);

    /* Fewer bytes than announced, then end of stream. */
    fd = h_raw_connect(f.cfg.dataplane_port);
    n = snprintf(req, sizeof(req),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%.20s",
                 strlen(CHAT_BODY) + 100, CHAT_BODY);
    h_raw_send(fd, req, (size_t)n);
    shutdown(fd, SHUT_WR);
    assert_true(h_raw_ms_until_closed(fd, buf, sizeof(buf), H_READY_TIMEOUT_MS) >= 0);
    close(fd);
    assert_legit_client_served(&f);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2);
    h_fleet_stop(&f);
}

/* Three requests in one write: three answers, in order. */
static void test_pipelined_requests_are_answered_in_order(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
                     "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                     strlen(CHAT_BODY), CHAT_BODY);
    int fd = h_raw_connect(f.cfg.dataplane_port);
    h_raw_send(fd, req, (size_t)n);
    static char all[65536];
    assert_true(h_raw_ms_until_closed(fd, all, sizeof(all), H_READY_TIMEOUT_MS) >= 0);
    close(fd);
    const char *first = strstr(all, "HTTP/1.1 200");
    assert_non_null(first);
    const char *second = strstr(first + 1, "HTTP/1.1 200");
    assert_non_null(second);
    const char *third = strstr(second + 1, "HTTP/1.1 200");
    assert_non_null(third);
    /* In order: the completion between the health answer and the model list. */
    const char *completion = strstr(all, "chat.completion");
    const char *models = strstr(all, "\"object\":\"list\"");
    assert_non_null(completion);
    assert_non_null(models);
    assert_true(completion > second && completion < third);
    assert_true(models > third);
    h_fleet_stop(&f);
}

/* ---- a flood of idle connections ----------------------------------------------- */

/* Opens up to want connections to port (1 s per connect at most) and
 * reports how many are open on out; holds them until in is closed. */
static void flood_child(uint16_t port, int want, int out, int in)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int opened = 0;
    int64_t give_up = h_now_ms() + 30000;
    while (opened < want && h_now_ms() < give_up) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        struct timeval tv = {.tv_sec = 1};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            close(fd);
            continue;
        }
        opened++;
    }
    (void)!write(out, &opened, sizeof(opened));
    char c;
    (void)!read(in, &c, 1); /* until the parent closes its end */
    _exit(0);
}

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2;
}

/* 20,000 connections that never send a byte (two processes of 10,000, as
 * one process may not hold them all), against a data plane capped at 2,000
 * (dataplane.max_connections) and a header_timeout longer than the test:
 * each new connection over the cap evicts the oldest idle one, so the
 * legitimate client is served at once while the flood goes on, the data
 * plane never holds more descriptors than its cap allows, and it gives them
 * all back when the flood goes. */
static void test_idle_connection_flood(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .dataplane_extra = "threads: 2\n"
                                                                "max_connections: 2000\n"
                                                                "header_timeout: 5m\n"});
    assert_legit_client_served(&f);
    int base_fds = count_fds(f.dp->pid);
    assert_true(base_fds > 0);
    int to_child[2], from_child[2][2];
    assert_int_equal(pipe(to_child), 0);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(pipe(from_child[k]), 0);
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
            close(to_child[1]);
            flood_child(f.cfg.dataplane_port, 10000, from_child[k][1], to_child[0]);
        }
        close(from_child[k][1]);
    }
    close(to_child[0]);
    int opened = 0;
    for (int k = 0; k < 2; k++) {
        int got = 0;
        assert_int_equal(read(from_child[k][0], &got, sizeof(got)), (ssize_t)sizeof(got));
        opened += got;
        close(from_child[k][0]);
    }
    print_message("idle connections opened: %d\n", opened);
    assert_true(opened >= 10000);
    int held = count_fds(f.dp->pid);
    print_message("data-plane descriptors while flooded: %d\n", held);
    assert_true(held <= base_fds + 2000 + 2 * 64);
    /* Served while the flood is held. */
    int64_t t0 = h_now_ms();
    assert_legit_client_served(&f);
    print_message("legitimate request served after %lld ms\n", (long long)(h_now_ms() - t0));
    long long evicted =
        h_fleet_dp_metric(&f, "switchyard_connections_shed_total{reason=\"idle_evicted\"}");
    print_message("idle connections evicted: %lld\n", evicted);
    assert_true(evicted >= opened - 2000);
    close(to_child[1]);
    for (int k = 0; k < 2; k++)
        waitpid(kids[k], NULL, 0);
    /* Every descriptor of the flood comes back. */
    int64_t deadline = h_now_ms() + 15000;
    int fds = count_fds(f.dp->pid);
    while (fds > base_fds + 8 && h_now_ms() < deadline) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        fds = count_fds(f.dp->pid);
    }
    print_message("data-plane descriptors: %d before, %d after\n", base_fds, fds);
    assert_true(fds <= base_fds + 8);
    assert_legit_client_served(&f);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_hostile_json_is_refused_cleanly),
        H_TEST(test_odd_but_valid_json_is_served),
        H_TEST(test_oversized_heads_are_refused),
        H_TEST(test_body_length_mismatch),
        H_TEST(test_pipelined_requests_are_answered_in_order),
        H_TEST(test_idle_connection_flood),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
