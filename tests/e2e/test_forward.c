/*
 * End-to-end tests of the dataplane's forwarding path against mock workers:
 * responses identical to asking the worker directly (streaming or not),
 * exact load accounting when the client disconnects in every phase
 * (invariants 1 and 2), retries on another worker with the failed attempt
 * counted until its held-open body ends, timeouts, a worker reset
 * mid-stream, and every bad input answered with an OpenAI error body.
 *
 * Load is read straight from the segment (shm_load_of), the worker's truth
 * from its /mock/stats. Every wait has a deadline; nothing sleeps blindly.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_raw.h"

#define ABORT_MS 1000 /* the contract: a disconnect releases within 1 s */

static const char *const CHAT_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":8,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char *const CHAT_PLAIN = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":8,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static void route_url(struct h_fleet *f, const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", f->base, path);
}

/* ---- conditions ------------------------------------------------------------- */

struct settle {
    struct h_fleet *f;
    size_t i;
    long long aborts;
};

/* The worker saw the abort, holds nothing, and the router's load is 0. */
static bool settled_after_abort(void *arg)
{
    struct settle *s = arg;
    return h_fleet_mock_stat(s->f, s->i, "client_aborts") == s->aborts &&
           h_fleet_mock_stat(s->f, s->i, "inflight") == 0 && h_fleet_load(s->f, s->i) == 0;
}

static bool load_is_one(void *arg)
{
    struct settle *s = arg;
    return h_fleet_load(s->f, s->i) == 1 && h_fleet_mock_stat(s->f, s->i, "inflight") == 1;
}

static bool load_is_zero(void *arg)
{
    struct settle *s = arg;
    return h_fleet_load(s->f, s->i) == 0;
}

/* ---- helpers for bodies ------------------------------------------------------- */

/* Removes the per-request fields ("id":"...", "created":N) the mock randomizes. */
static void normalize(char *s)
{
    static const char *const keys[] = {"\"id\":\"", "\"created\":"};
    for (size_t k = 0; k < 2; k++) {
        char *p = s;
        while ((p = strstr(p, keys[k])) != NULL) {
            char *v = p + strlen(keys[k]);
            char *end = v;
            if (k == 0)
                while (*end != '\0' && *end != '"')
                    end++;
            else
                while (*end >= '0' && *end <= '9')
                    end++;
            memmove(v, end, strlen(end) + 1);
            p = v;
        }
    }
}

static void assert_error_body(const struct h_resp *r, long status, const char *code)
{
    assert_int_equal(r->status, status);
    json_t *j = h_resp_json(r);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_true(json_is_string(json_object_get(e, "type")));
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
}

static const char *header_ci(json_t *obj, const char *name)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (strcasecmp(k, name) == 0)
            return json_string_value(v);
    }
    return NULL;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_responses_match_direct(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char url[128], direct[128];
    const char *paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings"};
    const char *bodies[] = {
        CHAT_PLAIN,
        "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"once upon\",\"max_tokens\":6}",
        "{\"model\":\"" H_FLEET_MODEL "\",\"input\":\"embed me\"}",
    };
    for (size_t i = 0; i < 3; i++) {
        route_url(&f, paths[i], url, sizeof(url));
        assert_int_equal(h_url(direct, sizeof(direct), f.mock[0].port, paths[i]), 0);
        struct h_resp a, b;
        assert_int_equal(h_http_post_json(direct, bodies[i], &a), 0);
        const char *hdrs[] = {"Authorization: Bearer sk-test", "Connection: keep-alive", NULL};
        struct h_req req = {.url = url, .body = bodies[i], .headers = hdrs};
        assert_int_equal(h_http(&req, &b), 0);
        assert_int_equal(a.status, 200);
        assert_int_equal(b.status, 200);
        normalize(a.body);
        normalize(b.body);
        assert_string_equal(a.body, b.body);
        char rid[128];
        assert_int_equal(h_resp_header(&b, "X-Request-Id", rid, sizeof(rid)), 0);
        assert_true(strlen(rid) >= 16);
        /* The worker got the end-to-end headers and our request id, not hop-by-hop ones. */
        json_t *st = h_mock_stats(f.mock[0].url);
        assert_non_null(st);
        json_t *hs = json_object_get(st, "last_request_headers");
        assert_string_equal(header_ci(hs, "Authorization"), "Bearer sk-test");
        assert_string_equal(header_ci(hs, "X-Request-Id"), rid);
        json_decref(st);
        h_resp_fini(&a);
        h_resp_fini(&b);
    }
    /* A client's X-Request-Id is kept and returned. */
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    const char *hdrs[] = {"X-Request-Id: my-id-42", NULL};
    struct h_req req = {.url = url, .body = CHAT_PLAIN, .headers = hdrs};
    struct h_resp r;
    assert_int_equal(h_http(&req, &r), 0);
    char rid[64];
    assert_int_equal(h_resp_header(&r, "X-Request-Id", rid, sizeof(rid)), 0);
    assert_string_equal(rid, "my-id-42");
    h_resp_fini(&r);

    /* Streaming: the same events, chunk by chunk. */
    assert_int_equal(h_url(direct, sizeof(direct), f.mock[0].port, "/v1/chat/completions"), 0);
    struct h_sse sa, sb;
    assert_int_equal(h_http_stream(direct, CHAT_STREAM, &sa), 0);
    assert_int_equal(h_http_stream(url, CHAT_STREAM, &sb), 0);
    assert_int_equal(sb.resp.status, 200);
    assert_true(sb.saw_done);
    assert_false(sb.malformed);
    assert_int_equal(sa.n_events, sb.n_events);
    normalize(sa.resp.body);
    normalize(sb.resp.body);
    assert_string_equal(sa.resp.body, sb.resp.body);
    /* An HTTP/1.0 client gets the same stream unchunked, read through
     * MHD's small per-response block, and the connection closed at its end. */
    static char raw[65536];
    int fd = h_raw_connect(f.cfg.dataplane_port);
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.0\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(CHAT_STREAM), CHAT_STREAM);
    h_raw_send_text(fd, raw);
    assert_true(h_raw_ms_until_closed(fd, raw, sizeof(raw), H_READY_TIMEOUT_MS) >= 0);
    close(fd);
    /* (MHD's status line says 1.1 to a 1.0 client.) */
    assert_int_equal(strncmp(raw, "HTTP/1.1 200", 12), 0);
    assert_null(strcasestr(raw, "chunked"));
    char *body10 = (char *)h_raw_body(raw);
    normalize(body10);
    assert_string_equal(sa.resp.body, body10);
    h_sse_fini(&sa);
    h_sse_fini(&sb);
    assert_int_equal(h_fleet_load(&f, 0), 0);
    h_fleet_stop(&f);
}

/* Starts a background request, waits until the worker holds it, aborts, checks the release. */
static void disconnect_case(const char *faults, const char *const *mock_args, bool wait_body)
{
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .mock_args = mock_args});
    if (faults != NULL)
        assert_int_equal(h_mock_faults(f.mock[0].url, faults), 0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct settle s = {.f = &f, .i = 0, .aborts = 1};
    assert_int_equal(h_wait_until(load_is_one, &s, H_READY_TIMEOUT_MS), 0);
    if (wait_body) {
        assert_int_equal(h_async_wait_body(a, 1, H_READY_TIMEOUT_MS), 0);
        struct h_async_state st;
        h_async_get_state(a, &st);
        assert_false(st.done);
        assert_int_equal(st.status, 200);
    } else {
        struct h_async_state st;
        h_async_get_state(a, &st);
        assert_false(st.got_headers);
    }
    assert_int_equal(h_fleet_load(&f, 0), 1);
    assert_int_equal(h_async_abort(a), 0);
    int64_t t0 = h_now_ms();
    assert_int_equal(h_wait_until(settled_after_abort, &s, ABORT_MS), 0);
    print_message("released %lld ms after the client left\n", (long long)(h_now_ms() - t0));
    h_async_destroy(a);
    h_fleet_stop(&f);
}

static void test_disconnect_before_headers(void **state)
{
    (void)state;
    disconnect_case("{\"stall_before_headers_ms\":10000}", NULL, false);
}

static void test_disconnect_while_worker_silent(void **state)
{
    (void)state;
    disconnect_case("{\"stall_after_chunks\":2,\"stall_ms\":10000}", NULL, true);
}

static void test_disconnect_while_streaming(void **state)
{
    (void)state;
    const char *args[] = {"--tpot-ms", "100", "--output-tokens", "400", NULL};
    static const char *const body_note = NULL;
    (void)body_note;
    disconnect_case(NULL, args, true);
}

/* Every one of the clients' requests reached the worker, was aborted there and
 * released here. */
struct reset_settle {
    struct h_fleet *f;
    long long clients, aborts, inflight, load;
};

static bool resets_settled(void *arg)
{
    struct reset_settle *s = arg;
    s->aborts = h_fleet_mock_stat(s->f, 0, "client_aborts");
    s->inflight = h_fleet_mock_stat(s->f, 0, "inflight");
    s->load = h_fleet_load(s->f, 0);
    return s->aborts == s->clients && s->inflight == 0 && s->load == 0;
}

/* Reads from fd until the response headers are in (or fails the test). */
static void read_response_headers(int fd)
{
    char buf[4096] = "";
    size_t len = 0;
    while (strstr(buf, "\r\n\r\n") == NULL)
        assert_true(h_fd_read_more(fd, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS) > 0);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
}

/*
 * Clients that reset their connection as soon as the stream's headers
 * arrive. The router watches a parked client's socket only from its next
 * tick on, so for most of these the reset comes first and libmicrohttpd is
 * the one that finds the connection dead, when it writes the next token:
 * it ends the request with an error after the response was queued. That
 * too must abort the worker's stream and release its load; otherwise the
 * load stays counted until the worker ends its 40 s stream. Many clients,
 * because each one races the router's tick.
 */
static void test_client_reset_as_the_stream_starts(void **state)
{
    (void)state;
    enum { CLIENTS = 32 };
    struct h_fleet f;
    const char *const args[] = {"--tpot-ms", "20", "--output-tokens", "2000", NULL};
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .mock_args = args});
    static const char body[] = "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":"
                               "2000,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof(body) - 1, body);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f.cfg.dataplane_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int64_t last_reset = 0;
    for (int i = 0; i < CLIENTS; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(write(fd, req, (size_t)n), n);
        read_response_headers(fd);
        /* Linger 0: close sends a reset, so the router's next write fails. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
        close(fd);
        last_reset = h_now_ms();
    }
    struct reset_settle s = {.f = &f, .clients = CLIENTS};
    int rc = h_wait_until(resets_settled, &s, ABORT_MS);
    print_message("%d clients reset; %lld ms after the last: worker aborts %lld, inflight %lld, "
                  "router load %lld\n",
                  CLIENTS, (long long)(h_now_ms() - last_reset), s.aborts, s.inflight, s.load);
    assert_int_equal(rc, 0);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), CLIENTS);
    assert_int_equal(shm_load_underflows(&f.seg), 0);
    h_fleet_stop(&f);
}

/*
 * For watches comparing the router's load with a mock's inflight: a body's
 * end reaches the two books at slightly different moments (further apart on
 * a loaded machine), so a check that disagrees counts only once the
 * disagreement has lasted 100 ms. *since: 0, or when it began.
 */
static bool difference_lasted(int64_t *since, bool agree)
{
    int64_t now = h_now_ms();
    if (agree)
        *since = 0;
    else if (*since == 0)
        *since = now;
    else if (now - *since >= 100)
        return true;
    return false;
}

struct stall_watch {
    struct h_fleet *f;
    struct h_async *a;
    int bad;
    int checks;
    int64_t differs_since_ms; /* 0 = the last check agreed */
};

static bool stall_over(void *arg)
{
    struct stall_watch *w = arg;
    long long m1 = h_fleet_mock_stat(w->f, 0, "inflight");
    long long load = h_fleet_load(w->f, 0);
    long long m2 = h_fleet_mock_stat(w->f, 0, "inflight");
    if (m1 == 1 && m2 == 1) {
        /* The stall it guards lasts 1,500 ms. */
        w->checks++;
        if (difference_lasted(&w->differs_since_ms, load == 1))
            w->bad++;
    }
    struct h_async_state st;
    h_async_get_state(w->a, &st);
    return st.done && load == 0;
}

static void test_connected_client_keeps_load_until_eof(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_after_chunks\":2,\"stall_ms\":1500}"),
                     0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct stall_watch w = {.f = &f, .a = a};
    assert_int_equal(h_wait_until(stall_over, &w, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(w.bad, 0);
    assert_true(w.checks > 10); /* we really watched during the stall */
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "client_aborts"), 0);
    h_async_destroy(a);
    h_fleet_stop(&f);
}

static void test_retry_on_503_goes_to_another_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "round_robin",
                                             .dataplane_extra = "retry:\n  backoff: 10ms\n"});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":503}"), 0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    for (int i = 0; i < 6; i++) {
        struct h_resp r;
        assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    assert_true(h_fleet_mock_stat(&f, 0, "requests_total") >= 1);
    assert_int_equal(h_fleet_mock_stat(&f, 1, "requests_total"), 6);
    struct settle s0 = {.f = &f, .i = 0}, s1 = {.f = &f, .i = 1};
    assert_int_equal(h_wait_until(load_is_zero, &s0, ABORT_MS), 0);
    assert_int_equal(h_wait_until(load_is_zero, &s1, ABORT_MS), 0);
    struct h_resp m;
    route_url(&f, "/metrics", url, sizeof(url));
    assert_int_equal(h_http_get(url, &m), 0);
    assert_non_null(
        strstr(m.body, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"status\"}"));
    assert_null(strstr(m.body, "switchyard_retries_total 0\n"));
    h_resp_fini(&m);
    h_fleet_stop(&f);
}

/* A retry goes to a worker the request has not tried yet, even when the
 * policy would pick the failed one again: consistent_hash sends one session
 * to one worker, so without the "untried first" rule every attempt would
 * land on the failing worker and the client would see its 503. */
static void test_retry_leaves_the_policys_choice_when_it_failed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "consistent_hash",
                                             .dataplane_extra = "retry:\n  backoff: 10ms\n"});
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    const char *const hdrs[] = {"X-Session-Id: retry-session", NULL};
    struct h_req req = {.url = url, .body = CHAT_PLAIN, .headers = hdrs};
    struct h_resp r;
    assert_int_equal(h_http(&req, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    int home = h_fleet_mock_stat(&f, 0, "requests_total") == 1 ? 0 : 1;
    assert_int_equal(h_fleet_mock_stat(&f, home, "requests_total"), 1);
    assert_int_equal(h_fleet_mock_stat(&f, 1 - home, "requests_total"), 0);

    assert_int_equal(h_mock_faults(f.mock[home].url, "{\"fail_status\":503}"), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(h_http(&req, &r), 0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    /* Each request tried its home worker once, then the other one. */
    assert_int_equal(h_fleet_mock_stat(&f, home, "requests_total"), 1 + 3);
    assert_int_equal(h_fleet_mock_stat(&f, 1 - home, "requests_total"), 3);
    struct settle s0 = {.f = &f, .i = 0}, s1 = {.f = &f, .i = 1};
    assert_int_equal(h_wait_until(load_is_zero, &s0, ABORT_MS), 0);
    assert_int_equal(h_wait_until(load_is_zero, &s1, ABORT_MS), 0);
    h_fleet_stop(&f);
}

struct held_watch {
    struct h_fleet *f;
    int bad, checks;
    int64_t differs_since_ms; /* 0 = the last check agreed */
};

/* load == the mock's inflight at every check (see difference_lasted); the
 * hold it guards is 5,000 ms long. */
static bool held_over(void *arg)
{
    struct held_watch *w = arg;
    long long m1 = h_fleet_mock_stat(w->f, 0, "inflight");
    long long load = h_fleet_load(w->f, 0);
    long long m2 = h_fleet_mock_stat(w->f, 0, "inflight");
    if (m1 == m2 && m1 >= 0) {
        w->checks++;
        if (difference_lasted(&w->differs_since_ms, load == m1))
            w->bad++;
    }
    return m1 == 0 && m2 == 0 && load == 0;
}

static bool w1_holds_or_done(void *arg)
{
    void **p = arg;
    struct h_fleet *f = p[0];
    struct h_async_state st;
    h_async_get_state(p[1], &st);
    return st.done || h_fleet_mock_stat(f, 0, "inflight") == 1;
}

static void test_retried_attempt_counted_until_its_body_ends(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "round_robin",
                                             .dataplane_extra = "retry:\n  backoff: 10ms\n"});
    assert_int_equal(
        h_mock_faults(f.mock[0].url, "{\"fail_status\":503,\"fail_body_hold_ms\":5000}"), 0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    /* Round robin alternates per loop: within a few requests one tries w1 first. */
    struct h_async *a = NULL;
    for (int tries = 0; tries < 8; tries++) {
        assert_int_equal(h_async_start(url, CHAT_PLAIN, &(struct h_async_opts){0}, &a), 0);
        void *p[2] = {&f, a};
        assert_int_equal(h_wait_until(w1_holds_or_done, p, H_READY_TIMEOUT_MS), 0);
        if (h_fleet_mock_stat(&f, 0, "inflight") == 1)
            break;
        h_async_destroy(a);
        a = NULL;
    }
    assert_non_null(a);
    /* The retried request finishes on w2 while w1 still holds its error body
     * open (5 s: long enough for the retry on a loaded machine). */
    assert_int_equal(h_async_wait(a, H_READY_TIMEOUT_MS), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_int_equal(st.status, 200);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "inflight"), 1);
    assert_int_equal(h_fleet_load(&f, 0), 1);
    /* The client closes as soon as it has the answer (the harness forbids
     * reuse), sometimes while the router still watches its socket: that must
     * not cancel the request and abort w1's held body (about 1 run in 12 of
     * this test under ASan with 6 in parallel, before listener.c's
     * lst_delivered check in the watch's handler). */
    struct held_watch w = {.f = &f};
    assert_int_equal(h_wait_until(held_over, &w, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(w.bad, 0);
    assert_true(w.checks > 10);
    assert_int_equal(h_fleet_load(&f, 1), 0);
    h_async_destroy(a);
    h_fleet_stop(&f);
}

static void test_worker_reset_mid_stream(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"reset_after_chunks\":2}"), 0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_sse s;
    h_http_stream(url, CHAT_STREAM, &s);
    assert_int_equal(s.resp.status, 200);
    assert_false(s.saw_done);
    /* Terminated: the transfer failed or ended with our SSE error event. */
    assert_true(s.resp.curl_code != 0 ||
                (s.n_events > 0 && strstr(s.events[s.n_events - 1].data, "\"error\"") != NULL));
    h_sse_fini(&s);
    struct settle z = {.f = &f, .i = 0};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
    h_fleet_stop(&f);
}

/* A plain chat request answered 504 upstream_timeout well before the
 * worker's own end, and worker 0's load back to 0 within ABORT_MS. */
static void expect_timeout_answer(struct h_fleet *f, const char *url)
{
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 504, "upstream_timeout");
    assert_true(r.elapsed_ms < 2000);
    h_resp_fini(&r);
    struct settle z = {.f = f, .i = 0};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
}

static void test_timeouts(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){
                .n = 1, .dataplane_extra = "first_byte_timeout: 400ms\nidle_timeout: 400ms\n"});
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_before_headers_ms\":3000}"), 0);
    expect_timeout_answer(&f, url);
    struct settle z = {.f = &f, .i = 0};

    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_before_headers_ms\":0,"
                                                  "\"stall_after_chunks\":2,\"stall_ms\":3000}"),
                     0);
    struct h_sse s;
    h_http_stream(url, CHAT_STREAM, &s);
    assert_int_equal(s.resp.status, 200);
    assert_false(s.saw_done);
    assert_true(s.n_events >= 3);
    assert_non_null(strstr(s.events[s.n_events - 1].data, "upstream_timeout"));
    /* The cut stream ends at once, not when the stall does (nor at the
     * connection's header deadline). */
    assert_true(s.resp.elapsed_ms < 2500);
    h_sse_fini(&s);
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
    h_fleet_stop(&f);
}

/* A direct stream to mock i that occupies its only running slot (30 s stall). */
static struct h_async *occupy_only_slot(struct h_fleet *f, size_t i)
{
    assert_int_equal(h_mock_faults(f->mock[i].url, "{\"stall_after_chunks\":1,\"stall_ms\":30000}"),
                     0);
    char url[H_URL_MAX];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->mock[i].url);
    struct h_async *a = NULL;
    assert_int_equal(
        h_async_start(url, CHAT_STREAM, &(struct h_async_opts){.abort_at = H_ABORT_NEVER}, &a), 0);
    assert_int_equal(h_async_wait_body(a, 1, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_fleet_mock_stat(f, i, "running"), 1);
    return a;
}

/*
 * vLLM sends a stream's 200 headers before its engine queues it, so a
 * stream waiting on a busy worker has answered: first_byte_timeout no
 * longer bounds it, idle_timeout does, and it is not retried. A
 * non-streaming request queued the same way still has no headers and gets
 * 504 after first_byte_timeout.
 */
static void test_queued_stream_is_bounded_by_idle_timeout(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--max-num-seqs", "1", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1,
                          .mock_args = mock_args,
                          .dataplane_extra = "first_byte_timeout: 300ms\nidle_timeout: 1500ms\n"});
    struct h_async *hold = occupy_only_slot(&f, 0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));

    struct h_sse s;
    h_http_stream(url, CHAT_STREAM, &s);
    assert_int_equal(s.resp.status, 200);
    assert_false(s.saw_done);
    assert_int_equal(s.n_events, 1);
    assert_non_null(strstr(s.events[0].data, "upstream_timeout"));
    assert_true(s.resp.elapsed_ms >= 1500 && s.resp.elapsed_ms < 5000);
    h_sse_fini(&s);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2); /* not retried */

    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 504, "upstream_timeout");
    assert_true(r.elapsed_ms < 1500);
    h_resp_fini(&r);

    h_async_destroy(hold);
    struct settle z = {.f = &f, .i = 0};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
    h_fleet_stop(&f);
}

/* A 200 stream with an in-band error event reaches the client as the
 * worker sent it and counts as an upstream error of kind in_band. */
static void test_in_band_stream_error(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stream_error\":\"KV load failed\","
                                                  "\"stream_error_after_chunks\":2}"),
                     0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_sse s;
    h_http_stream(url, CHAT_STREAM, &s);
    assert_int_equal(s.resp.status, 200);
    assert_false(s.malformed);
    assert_true(s.saw_done);
    assert_int_equal(s.n_events, 4); /* role, one token, the error, [DONE] */
    json_t *e = json_loads(s.events[2].data, 0, NULL);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                        "KV load failed");
    json_decref(e);
    h_sse_fini(&s);

    struct h_resp m;
    route_url(&f, "/metrics", url, sizeof(url));
    assert_int_equal(h_http_get(url, &m), 0);
    assert_non_null(
        strstr(m.body, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"in_band\"} 1\n"));
    assert_non_null(
        strstr(m.body, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"transfer\"} 0\n"));
    h_resp_fini(&m);
    struct settle z = {.f = &f, .i = 0};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
    h_fleet_stop(&f);
}

/* A worker's error answer (a status not retried, or a retried one once no
 * attempt is left) reaches the client as the worker sent it, in vLLM's
 * current shape and in the old top-level one. */
static void test_worker_error_bodies_relayed_verbatim(void **state)
{
    (void)state;
    static const char *const current[] = {"--max-model-len", "8", NULL};
    static const char *const legacy[] = {"--max-model-len", "8", "--legacy-errors", NULL};
    const char *const *args[] = {current, legacy};
    static const char body[] =
        "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"hi\",\"max_tokens\":64}";
    for (size_t k = 0; k < 2; k++) {
        struct h_fleet f;
        h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .mock_args = args[k]});
        char url[H_URL_MAX];
        snprintf(url, sizeof(url), "%s/v1/completions", f.mock[0].url);
        struct h_resp direct, routed;
        assert_int_equal(h_http_post_json(url, body, &direct), 0);
        route_url(&f, "/v1/completions", url, sizeof(url));
        assert_int_equal(h_http_post_json(url, body, &routed), 0);
        assert_int_equal(direct.status, 400);
        assert_int_equal(routed.status, 400);
        assert_string_equal(routed.body, direct.body);
        json_t *j = h_resp_json(&routed);
        json_t *msg = json_object_get(k == 0 ? json_object_get(j, "error") : j, "message");
        assert_non_null(strstr(json_string_value(msg), "maximum context length"));
        if (k == 1)
            assert_string_equal(json_string_value(json_object_get(j, "object")), "error");
        json_decref(j);
        h_resp_fini(&direct);
        h_resp_fini(&routed);

        /* A status the router retries: once no attempt is left, the last
         * answer is relayed as the worker sent it, message included (429
         * and 503 on every attempt get the router's overload answer
         * instead: test_admission.c). */
        assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":500}"), 0);
        assert_int_equal(h_http_post_json(url,
                                          "{\"model\":\"" H_FLEET_MODEL
                                          "\",\"prompt\":\"hi\",\"max_tokens\":1}",
                                          &routed),
                         0);
        assert_int_equal(routed.status, 500);
        j = h_resp_json(&routed);
        msg = json_object_get(k == 0 ? json_object_get(j, "error") : j, "message");
        assert_string_equal(json_string_value(msg), "mock worker fault: injected status 500");
        json_decref(j);
        h_resp_fini(&routed);
        assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2 + 3); /* 3 attempts */
        h_fleet_stop(&f);
    }
}

struct models_cond {
    const char *url;
    const char *want; /* substring of the body */
};

static bool models_list_has(void *arg)
{
    struct models_cond *c = arg;
    struct h_resp r;
    if (h_http_get(c->url, &r) != 0)
        return false;
    bool ok = r.status == 200 && strstr(r.body, c->want) != NULL;
    h_resp_fini(&r);
    return ok;
}

/* A worker serving several names (vLLM --served-model-name a b): the
 * control plane learns them all from /v1/models, a request for any of
 * them routes, and the router's /v1/models lists them. */
static void test_worker_aliases_route(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--served-model-name", "alias-a", "alias-b", NULL};
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){
                .n = 1, .mock_args = mock_args, .learn_model = true, .health_interval = "50ms"});
    char url[128];
    route_url(&f, "/v1/models", url, sizeof(url));
    struct models_cond c = {.url = url, .want = "\"alias-b\""};
    assert_int_equal(h_wait_until(models_list_has, &c, H_READY_TIMEOUT_MS), 0);
    struct h_resp r;
    assert_int_equal(h_http_get(url, &r), 0);
    json_t *j = h_resp_json(&r);
    h_resp_fini(&r);
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(data, 0), "id")),
                        "alias-a");
    assert_string_equal(json_string_value(json_object_get(json_array_get(data, 1), "id")),
                        "alias-b");
    json_decref(j);

    route_url(&f, "/v1/completions", url, sizeof(url));
    static const char *const names[] = {"alias-a", "alias-b"};
    for (size_t i = 0; i < 2; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"model\":\"%s\",\"prompt\":\"hi\",\"max_tokens\":1}",
                 names[i]);
        assert_int_equal(h_http_post_json(url, body, &r), 0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 2);
    assert_int_equal(
        h_http_post_json(url, "{\"model\":\"alias-c\",\"prompt\":\"hi\",\"max_tokens\":1}", &r), 0);
    assert_int_equal(r.status, 404);
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

static void post_expect(struct h_fleet *f, const char *method, const char *path, const char *body,
                        long status, const char *code)
{
    char url[128];
    route_url(f, path, url, sizeof(url));
    struct h_req req = {.method = method, .url = url, .body = body};
    struct h_resp r;
    assert_int_equal(h_http(&req, &r), 0);
    assert_error_body(&r, status, code);
    h_resp_fini(&r);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    struct h_fleet f;
    memset(&f, 0, sizeof(f));
    /* Two models (one only on a prefill worker, never eligible), a dead worker, small max_body. */
    assert_int_equal(h_mock_start(&f.mock[0], "--model", H_FLEET_MODEL, NULL), 0);
    uint16_t dead;
    assert_int_equal(h_free_port(&dead), 0);
    char dead_url[64];
    assert_int_equal(h_url(dead_url, sizeof(dead_url), dead, NULL), 0);
    assert_int_equal(h_config_add_worker(&f.cfg, f.mock[0].url, "w1", H_FLEET_MODEL, NULL), 0);
    assert_int_equal(h_config_add_worker(&f.cfg, dead_url, "w2", "dead-model", NULL), 0);
    assert_int_equal(h_config_add_worker(&f.cfg, "http://127.0.0.1:9", "w3", "pd-model", "prefill"),
                     0);
    f.cfg.dataplane_extra = "max_body: 1KiB\nmax_header_size: 2KiB\nretry:\n  backoff: 10ms\n";
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f.cfg.path, &f.cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, &f, H_READY_TIMEOUT_MS), 0);
    f.attached = true;
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    assert_int_equal(h_url(f.base, sizeof(f.base), f.cfg.dataplane_port, NULL), 0);
    char url[128];
    route_url(&f, "/health", url, sizeof(url));
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);

    const char *chat = "/v1/chat/completions";
    post_expect(&f, NULL, chat, "{not json", 400, "invalid_json");
    post_expect(&f, NULL, chat, "[1,2]", 400, "invalid_json");
    /* A truncated body says where parsing stopped, not "not an object"; a
     * long string (set aside before parsing) never shows in the message. */
    char url2[128];
    route_url(&f, chat, url2, sizeof(url2));
    static const char *const cut[][2] = {
        {"{\"model\":\"m\",\n\"messages\":[", "(line 2)"},
        {"[1,2]", "JSON but not an object"},
    };
    for (size_t i = 0; i < 2; i++) {
        struct h_resp cr;
        assert_int_equal(h_http_post_json(url2, cut[i][0], &cr), 0);
        assert_error_body(&cr, 400, "invalid_json");
        if (strstr(cr.body, cut[i][1]) == NULL)
            fail_msg("case %zu: %s", i, cr.body);
        h_resp_fini(&cr);
    }
    post_expect(&f, NULL, chat, "{\"model\":7}", 400, "invalid_field");
    post_expect(&f, NULL, chat, "{\"messages\":[]}", 400, "model_required");
    post_expect(&f, NULL, chat, "{\"model\":\"nope\"}", 404, "model_not_found");
    char big[4096];
    memset(big, 'x', sizeof(big));
    memcpy(big, "{\"model\":\"", 10);
    strcpy(big + sizeof(big) - 3, "\"}");
    post_expect(&f, NULL, chat, big, 413, "request_too_large");
    /* max_body is inclusive: a body of exactly 1 KiB is served, one byte
     * more is refused. */
    char exact[1024 + 2];
    const char *head = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":4,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"";
    size_t at = strlen(head);
    memcpy(exact, head, at);
    memset(exact + at, 'y', 1024 - at - 4);
    memcpy(exact + 1024 - 4, "\"}]}", 5);
    assert_int_equal(strlen(exact), 1024);
    route_url(&f, chat, url, sizeof(url));
    struct h_resp er;
    assert_int_equal(h_http_post_json(url, exact, &er), 0);
    assert_int_equal(er.status, 200);
    h_resp_fini(&er);
    memmove(exact + at + 1, exact + at, 1024 - at + 1);
    assert_int_equal(strlen(exact), 1025);
    post_expect(&f, NULL, chat, exact, 413, "request_too_large");
    /* Headers over max_header_size (2 KiB here): 431, and just under it the
     * request goes through. */
    static char big_header[2600];
    memcpy(big_header, "X-Big: ", 7);
    memset(big_header + 7, 'h', sizeof(big_header) - 8);
    const char *const too_big[] = {big_header, NULL};
    route_url(&f, chat, url, sizeof(url));
    struct h_req hreq = {.url = url, .body = CHAT_PLAIN, .headers = too_big};
    struct h_resp hr;
    assert_int_equal(h_http(&hreq, &hr), 0);
    assert_error_body(&hr, 431, "request_header_fields_too_large");
    h_resp_fini(&hr);
    big_header[1700] = '\0';
    assert_int_equal(h_http(&hreq, &hr), 0);
    assert_int_equal(hr.status, 200);
    h_resp_fini(&hr);
    post_expect(&f, "GET", chat, NULL, 405, "method_not_allowed");
    post_expect(&f, "POST", "/v1/models", "{}", 405, "method_not_allowed");
    post_expect(&f, NULL, "/v2/nothing", "{}", 404, "not_found");
    post_expect(&f, "GET", "/", NULL, 404, "not_found");

    /* No eligible worker: 503 with Retry-After. */
    route_url(&f, chat, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, "{\"model\":\"pd-model\"}", &r), 0);
    assert_error_body(&r, 503, "no_healthy_worker");
    char ra[16];
    assert_int_equal(h_resp_header(&r, "Retry-After", ra, sizeof(ra)), 0);
    h_resp_fini(&r);

    /* A worker that refuses connections: 502 without naming it (the log
     * does), no load left. */
    assert_int_equal(h_http_post_json(url, "{\"model\":\"dead-model\"}", &r), 0);
    assert_error_body(&r, 502, "upstream_error");
    assert_non_null(strstr(r.body, "no worker available"));
    assert_null(strstr(r.body, "w2"));
    h_resp_fini(&r);
    struct settle z = {.f = &f, .i = 1};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);

    /* The fleet's models, and the router still serves. */
    route_url(&f, "/v1/models", url, sizeof(url));
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    assert_true(json_array_size(json_object_get(j, "data")) >= 2);
    json_decref(j);
    h_resp_fini(&r);
    route_url(&f, chat, url, sizeof(url));
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
}

static void test_single_model_is_default(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url,
                                      "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\","
                                      "\"content\":\"hi\"}]}",
                                      &r),
                     0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 1);
    h_fleet_stop(&f);
}

static void test_sigterm_releases_everything(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = "drain_timeout: 300ms\n"});
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_after_chunks\":1,\"stall_ms\":10000}"),
                     0);
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct settle s = {.f = &f, .i = 0, .aborts = 1};
    assert_int_equal(h_wait_until(load_is_one, &s, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_proc_signal(f.dp, SIGTERM), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(f.dp, 5000, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(h_fleet_load(&f, 0), 0);
    assert_int_equal(h_wait_mock_stat(f.mock[0].url, "inflight", 0, H_READY_TIMEOUT_MS), 0);
    h_async_destroy(a);
    h_fleet_stop(&f);
}

/*
 * A whole answer (not SSE) leaves in one piece with a Content-Length; one
 * larger than the relay buffer (64 KiB) is relayed as it comes, still byte
 * for byte; one cut before its end is an error answer, not a short body.
 */
static void test_whole_answers(void **state)
{
    (void)state;
    struct h_fleet f;
    const char *const mock_args[] = {"--embedding-dim", "20000", NULL};
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args,
                                             .dataplane_extra = "idle_timeout: 400ms\n"});
    char url[128], direct[128], len[32];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(h_resp_header(&r, "Content-Length", len, sizeof(len)), 0);
    assert_int_equal(strtoul(len, NULL, 10), r.body_len);
    h_resp_fini(&r);

    const char *emb = "{\"model\":\"" H_FLEET_MODEL "\",\"input\":\"embed me\"}";
    route_url(&f, "/v1/embeddings", url, sizeof(url));
    assert_int_equal(h_url(direct, sizeof(direct), f.mock[0].port, "/v1/embeddings"), 0);
    struct h_resp a, b;
    assert_int_equal(h_http_post_json(direct, emb, &a), 0);
    assert_int_equal(h_http_post_json(url, emb, &b), 0);
    assert_int_equal(b.status, 200);
    assert_true(a.body_len > 64 * 1024);
    assert_int_equal(h_resp_header(&b, "Content-Length", len, sizeof(len)), -ENOENT);
    normalize(a.body);
    normalize(b.body);
    assert_string_equal(a.body, b.body);
    h_resp_fini(&a);
    h_resp_fini(&b);

    /* Headers and half the body, then silence past idle_timeout. */
    assert_int_equal(
        h_mock_faults(f.mock[0].url, "{\"fail_status\":400,\"fail_body_hold_ms\":3000}"), 0);
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    expect_timeout_answer(&f, url);
    h_fleet_stop(&f);
}

static double proc_cpu_s(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    unsigned long ut = 0, st = 0;
    /* Fields 14 and 15; the command name (field 2) has no spaces here. */
    int n = fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    fclose(f);
    return n == 2 ? (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) : -1;
}

static bool chat_ok(void *arg)
{
    struct h_resp r;
    bool ok = h_http_post_json(arg, CHAT_PLAIN, &r) == 0 && r.status == 200;
    h_resp_fini(&r);
    return ok;
}

/*
 * Kept-alive upstream connections stay in the dataplane's epoll set between
 * requests. When the worker goes away, each idle one reports its end: the
 * dataplane must drop it (not spin on it), and once the worker is back,
 * requests go through on new connections (whose fd numbers may be the old
 * ones).
 */
static void test_idle_upstream_connections_closed_by_the_worker(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .health_interval = "100ms"});
    char url[128];
    route_url(&f, "/v1/chat/completions", url, sizeof(url));
    /* Several connections at once, so several sit idle afterwards. */
    struct h_async *a[8];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++)
            assert_int_equal(h_async_start(url, CHAT_PLAIN, &(struct h_async_opts){0}, &a[i]), 0);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(h_async_wait(a[i], H_READY_TIMEOUT_MS), 0);
            struct h_resp r;
            assert_int_equal(h_async_take_resp(a[i], &r), 0);
            assert_int_equal(r.status, 200);
            h_resp_fini(&r);
            h_async_destroy(a[i]);
        }
    }
    f.mock[0].proc->expected = true;
    assert_int_equal(h_proc_stop(f.mock[0].proc, 5000), 0);
    /* Every idle connection now reads as ended: a loop that kept polling
     * them would burn a core. */
    double cpu0 = proc_cpu_s(f.dp->pid);
    poll(NULL, 0, 1000); /* a measurement window, not a wait for a condition */
    double cpu = proc_cpu_s(f.dp->pid) - cpu0;
    struct h_resp r;
    print_message("dataplane CPU while the worker was away: %.2f s in 1 s\n", cpu);
    assert_true(cpu >= 0 && cpu < 0.5);
    const char *const args[] = {"--model", H_FLEET_MODEL, NULL};
    assert_int_equal(h_start_mockworker(f.mock[0].port, args, &f.mock[0].proc), 0);
    assert_int_equal(h_wait_until(chat_ok, url, 15000), 0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    struct settle z = {.f = &f, .i = 0};
    assert_int_equal(h_wait_until(load_is_zero, &z, ABORT_MS), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_responses_match_direct),
        H_TEST(test_disconnect_before_headers),
        H_TEST(test_disconnect_while_worker_silent),
        H_TEST(test_disconnect_while_streaming),
        H_TEST(test_client_reset_as_the_stream_starts),
        H_TEST(test_connected_client_keeps_load_until_eof),
        H_TEST(test_retry_on_503_goes_to_another_worker),
        H_TEST(test_retry_leaves_the_policys_choice_when_it_failed),
        H_TEST(test_retried_attempt_counted_until_its_body_ends),
        H_TEST(test_worker_reset_mid_stream),
        H_TEST(test_timeouts),
        H_TEST(test_queued_stream_is_bounded_by_idle_timeout),
        H_TEST(test_in_band_stream_error),
        H_TEST(test_worker_error_bodies_relayed_verbatim),
        H_TEST(test_worker_aliases_route),
        H_TEST(test_whole_answers),
        H_TEST(test_idle_upstream_connections_closed_by_the_worker),
        H_TEST(test_bad_inputs),
        H_TEST(test_single_model_is_default),
        H_TEST(test_sigterm_releases_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
