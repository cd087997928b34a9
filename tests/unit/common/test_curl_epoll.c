/*
 * Unit tests of the curl-multi <-> epoll glue (common/curl_epoll.c),
 * driving real transfers against a tiny HTTP server on loopback: a GET
 * completes through fd events and reports 200 to on_done; with park_idle a
 * second transfer reuses the kept-alive connection and both complete;
 * curl's sockets carry the tag (and cep_owns tells them from the caller's
 * own descriptors); a server that never answers ends in
 * CURLE_OPERATION_TIMEDOUT through the timer path; a socket the epoll set
 * refuses (logged with log_name) still ends, by curl's timeout; bad options
 * are refused.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/curl_epoll.h"
#include "common/proc.h"

#define TAG (0x5ull << 56)

/* Answers every request on each accepted connection with 200 "ok" (keep-alive). */
struct server {
    int fd;
    int port;
    bool answer;
    pthread_t thread;
};

static void *server_main(void *arg)
{
    struct server *s = arg;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[4096];
        ssize_t n;
        while ((n = read(c, buf, sizeof(buf))) > 0) {
            if (!s->answer)
                continue;
            static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            if (write(c, resp, sizeof(resp) - 1) < 0)
                break;
        }
        close(c);
    }
}

static void server_start(struct server *s, bool answer)
{
    s->answer = answer;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s->fd, 16), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
}

static void server_stop(struct server *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

struct result {
    int done;
    CURLcode code;
    long status;
    bool tagged; /* every event seen for curl carried TAG */
};

static void on_done(void *user, CURL *easy, CURLcode code)
{
    struct result *r = user;
    r->done++;
    r->code = code;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->status);
}

static size_t discard(char *d, size_t size, size_t n, void *arg)
{
    (void)d;
    (void)arg;
    return size * n;
}

/* Runs the loop until want transfers finished or 5 s passed. */
static void drive(struct cep *c, int epfd, struct result *r, int want)
{
    uint64_t give_up = proc_monotonic_ms() + 5000;
    while (r->done < want && proc_monotonic_ms() < give_up) {
        struct epoll_event evs[16];
        int t = cep_timeout_ms(c, proc_monotonic_ms());
        int n = epoll_wait(epfd, evs, 16, t < 0 || t > 100 ? 100 : t);
        for (int i = 0; i < n; i++) {
            if (!cep_owns(c, evs[i].data.u64)) {
                r->tagged = false;
                continue;
            }
            cep_on_fd_event(c, cep_fd_of(evs[i].data.u64), evs[i].events);
        }
        cep_on_timer(c, proc_monotonic_ms());
        cep_collect(c);
    }
}

static CURL *easy_for(struct cep *c, const struct server *s, long timeout_ms)
{
    CURL *e = curl_easy_init();
    assert_non_null(e);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", s->port);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    cep_easy_setup(c, e);
    return e;
}

static void run_transfers(bool park)
{
    struct server s;
    server_start(&s, true);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    assert_true(epfd >= 0);
    struct result r = {.tagged = true};
    struct cep c;
    struct cep_opts o = {
        .epfd = epfd, .tag = TAG, .park_idle = park, .on_done = on_done, .user = &r};
    assert_int_equal(cep_init(&c, &o), 0);
    CURL *e = easy_for(&c, &s, 3000);
    for (int round = 1; round <= 2; round++) {
        assert_int_equal(cep_add(&c, e), 0);
        drive(&c, epfd, &r, round);
        assert_int_equal(r.done, round);
        assert_int_equal(r.code, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(cep_remove(&c, e), 0);
    }
    long reused = 0;
    curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &reused);
    assert_int_equal(reused, 0); /* the second transfer opened no new connection */
    assert_true(r.tagged);
    curl_easy_cleanup(e);
    cep_fini(&c);
    close(epfd);
    server_stop(&s);
}

static void test_transfer_plain(void **state)
{
    (void)state;
    run_transfers(false);
}

static void test_transfer_parked_reuse(void **state)
{
    (void)state;
    run_transfers(true);
}

static void test_timeout_through_timer(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, false);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct result r = {.tagged = true};
    struct cep c;
    struct cep_opts o = {.epfd = epfd, .tag = TAG, .on_done = on_done, .user = &r};
    assert_int_equal(cep_init(&c, &o), 0);
    CURL *e = easy_for(&c, &s, 200);
    uint64_t t0 = proc_monotonic_ms();
    assert_int_equal(cep_add(&c, e), 0);
    assert_true(cep_deadline_ms(&c) >= 0); /* curl asked for a timer at once */
    drive(&c, epfd, &r, 1);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.code, CURLE_OPERATION_TIMEDOUT);
    assert_true(proc_monotonic_ms() - t0 >= 150);
    cep_remove(&c, e);
    curl_easy_cleanup(e);
    cep_fini(&c);
    close(epfd);
    server_stop(&s);
}

/* The "epoll set" is an eventfd: every epoll_ctl fails, the failure is
 * logged (log_name) and the transfer still ends through curl's timer. */
static void test_refused_socket_ends_by_timeout(void **state)
{
    (void)state;
    struct server s;
    server_start(&s, true);
    int notepoll = eventfd(0, EFD_CLOEXEC);
    assert_true(notepoll >= 0);
    struct result r = {.tagged = true};
    struct cep c;
    struct cep_opts o = {.epfd = notepoll,
                         .tag = TAG,
                         .park_idle = true,
                         .on_done = on_done,
                         .user = &r,
                         .log_name = "test"};
    assert_int_equal(cep_init(&c, &o), 0);
    CURL *e = easy_for(&c, &s, 200);
    assert_int_equal(cep_add(&c, e), 0);
    uint64_t give_up = proc_monotonic_ms() + 5000;
    while (r.done < 1 && proc_monotonic_ms() < give_up) {
        int t = cep_timeout_ms(&c, proc_monotonic_ms());
        usleep((useconds_t)(t < 0 || t > 20 ? 20 : t) * 1000);
        cep_on_timer(&c, proc_monotonic_ms());
        cep_collect(&c);
    }
    assert_int_equal(r.done, 1);
    assert_int_not_equal(r.code, CURLE_OK);
    cep_remove(&c, e);
    curl_easy_cleanup(e);
    cep_fini(&c);
    close(notepoll);
    server_stop(&s);
}

static void test_bad_options(void **state)
{
    (void)state;
    struct cep c;
    struct result r;
    struct cep_opts o = {.epfd = -1, .on_done = on_done, .user = &r};
    assert_int_equal(cep_init(&c, &o), -EINVAL);
    cep_fini(&c);
    o.epfd = 0;
    o.tag = 7; /* low bits are the descriptor's */
    assert_int_equal(cep_init(&c, &o), -EINVAL);
    o.tag = 0;
    o.on_done = NULL;
    assert_int_equal(cep_init(&c, &o), -EINVAL);
    assert_true(cep_owns(&(struct cep){.tag = TAG}, TAG | 42));
    assert_false(cep_owns(&(struct cep){.tag = TAG}, 42));
    assert_int_equal(cep_fd_of(TAG | 42), 42);
}

static int setup(void **state)
{
    (void)state;
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transfer_plain),
        cmocka_unit_test(test_transfer_parked_reuse),
        cmocka_unit_test(test_timeout_through_timer),
        cmocka_unit_test(test_refused_socket_ends_by_timeout),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
