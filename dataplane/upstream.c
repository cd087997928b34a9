/*
 * curl multi_socket glue (see upstream.h). The socket callback mirrors
 * curl's wishes into the loop's epoll set, tagging each socket with
 * DP_TAG_CURL | fd; the timer callback sets loop->up.deadline_ms, which
 * the loop turns into its epoll_wait timeout. What a transfer delivers goes
 * to the handlers registered at dp_up_init: this module never names the
 * forwarder. Easy handles are pooled with
 * their fixed options set: building or resetting one is a measurable part
 * of a request's cost.
 */
#include "dataplane/upstream.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/proc.h"
#include "dataplane/loop.h"
#include "dataplane/upstream_url.h"

#define DP_MAXCONNECTS 1024L

/*
 * A kept-alive upstream connection stays in the epoll set between
 * transfers. curl removes a transfer's socket when the transfer ends and
 * asks for it again when the next one starts on the same connection, which
 * cost an epoll_ctl pair per request: a socket curl lets go is parked
 * instead (still registered, with its last events), and wanting the same
 * events again costs nothing. An event on a parked socket (the worker
 * closed the idle connection) unregisters it; curl itself notices the dead
 * connection before reusing it. The opensocket and closesocket callbacks
 * forget the fd, so a number reused for a new connection is always
 * registered anew (a closed fd leaves the epoll set by itself).
 */
#define UP_FD_REGISTERED 0x80000000u
#define UP_FD_PARKED     0x40000000u
#define UP_FD_EVENTS     0x0000ffffu

/* The state word of fd, or NULL (bad fd or out of memory: no parking then). */
static uint32_t *up_fd_state(struct dp_loop *loop, int fd)
{
    if (fd < 0)
        return NULL;
    if ((size_t)fd >= loop->up.n_fds) {
        size_t n = loop->up.n_fds ? loop->up.n_fds : 256;
        while (n <= (size_t)fd)
            n *= 2;
        uint32_t *grown = realloc(loop->up.fds, n * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        memset(grown + loop->up.n_fds, 0, (n - loop->up.n_fds) * sizeof(*grown));
        loop->up.fds = grown;
        loop->up.n_fds = n;
    }
    return &loop->up.fds[fd];
}

/* fd's state word if it has one (no growing), or NULL. */
static uint32_t *up_fd_known(struct dp_loop *loop, int fd)
{
    return fd >= 0 && (size_t)fd < loop->up.n_fds ? &loop->up.fds[fd] : NULL;
}

static void up_fd_forget(struct dp_loop *loop, int fd)
{
    uint32_t *st = up_fd_known(loop, fd);
    if (st != NULL)
        *st = 0;
}

static void up_unregister(struct dp_loop *loop, int fd, uint32_t *st)
{
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (st != NULL)
        *st = 0;
}

static int up_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    struct dp_loop *loop = userp;
    uint32_t *st = up_fd_state(loop, fd);
    if (what == CURL_POLL_REMOVE) {
        curl_multi_assign(loop->up.multi, fd, NULL);
        if (st != NULL && (*st & UP_FD_REGISTERED))
            *st |= UP_FD_PARKED;
        else
            up_unregister(loop, fd, st);
        return 0;
    }
    uint32_t want = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    curl_multi_assign(loop->up.multi, fd, loop);
    if (st != NULL && (*st & UP_FD_REGISTERED) && (*st & UP_FD_EVENTS) == want) {
        *st &= ~UP_FD_PARKED;
        return 0;
    }
    struct epoll_event ev = {.events = want, .data.u64 = DP_TAG_CURL | (uint64_t)(uint32_t)fd};
    int op = st != NULL && (*st & UP_FD_REGISTERED) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(loop->epfd, op, fd, &ev) != 0) {
        /* A state word out of step with the set (it could not be kept). */
        op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        if (epoll_ctl(loop->epfd, op, fd, &ev) != 0) {
            log_warn("epoll_ctl on upstream socket %d: %s", (int)fd, strerror(errno));
            if (st != NULL)
                *st = 0;
            return 0;
        }
    }
    if (st != NULL)
        *st = UP_FD_REGISTERED | want;
    return 0;
}

/* A new socket is in no epoll set yet, whatever its number held before
 * (curl may have closed that one some other way). */
static curl_socket_t up_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)purpose;
    curl_socket_t fd = socket(addr->family, addr->socktype, addr->protocol);
    up_fd_forget(clientp, fd);
    return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int up_close_cb(void *clientp, curl_socket_t fd)
{
    up_fd_forget(clientp, fd);
    return close(fd);
}

static int up_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct dp_loop *loop = userp;
    loop->up.deadline_ms =
        timeout_ms < 0 ? -1 : (int64_t)(proc_monotonic_ms() + (uint64_t)timeout_ms);
    return 0;
}

int dp_up_init(struct dp_loop *loop, const struct dp_up_handlers *handlers)
{
    loop->up.handlers = handlers;
    loop->up.deadline_ms = -1;
    loop->up.multi = curl_multi_init();
    if (loop->up.multi == NULL)
        return -ENOMEM;
    curl_multi_setopt(loop->up.multi, CURLMOPT_SOCKETFUNCTION, up_socket_cb);
    curl_multi_setopt(loop->up.multi, CURLMOPT_SOCKETDATA, loop);
    curl_multi_setopt(loop->up.multi, CURLMOPT_TIMERFUNCTION, up_timer_cb);
    curl_multi_setopt(loop->up.multi, CURLMOPT_TIMERDATA, loop);
    curl_multi_setopt(loop->up.multi, CURLMOPT_MAXCONNECTS, DP_MAXCONNECTS);
    return 0;
}

void dp_up_fini(struct dp_loop *loop)
{
    for (size_t i = 0; i < loop->up.n_pool; i++)
        curl_easy_cleanup(loop->up.pool[i]);
    loop->up.n_pool = 0;
    if (loop->up.multi != NULL)
        curl_multi_cleanup(loop->up.multi);
    loop->up.multi = NULL;
    free(loop->up.fds);
    loop->up.fds = NULL;
    loop->up.n_fds = 0;
    dp_up_urls_fini(&loop->up.urls);
}

static size_t up_header_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct dp_attempt *a = userp;
    return a->loop->up.handlers->on_header(a, data, size * nmemb);
}

static size_t up_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct dp_attempt *a = userp;
    return a->loop->up.handlers->on_body(a, data, size * nmemb);
}

/* The options every transfer shares, set once per handle: a pooled handle
 * keeps them (no curl_easy_reset between transfers, which was a measurable
 * part of a small request's cost), and dp_up_start sets everything that
 * varies on every transfer. */
static CURL *up_easy_new(struct dp_loop *loop)
{
    const struct cfg_dataplane *dc = &loop->sh->cfg->dataplane;
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* Workers are reached directly, never through an http_proxy from the
     * environment; with both strings empty curl reads none of the proxy
     * variables (no_proxy included) on each transfer. */
    rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)dc->connect_timeout_ms);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, up_header_cb);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, up_write_cb);
    rc |= curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, up_open_cb);
    rc |= curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, loop);
    rc |= curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, up_close_cb);
    rc |= curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, loop);
    if (rc != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    return e;
}

static CURL *up_easy_get(struct dp_loop *loop)
{
    if (loop->up.n_pool > 0)
        return loop->up.pool[--loop->up.n_pool];
    return up_easy_new(loop);
}

static void up_easy_put(struct dp_loop *loop, CURL *e)
{
    if (loop->up.n_pool < DP_EASY_POOL)
        loop->up.pool[loop->up.n_pool++] = e;
    else
        curl_easy_cleanup(e);
}

int dp_up_start(struct dp_attempt *a, const char *url)
{
    struct dp_loop *loop = a->loop;
    const struct dp_request *req = a->req;
    CURL *e = up_easy_get(loop);
    if (e == NULL)
        return -ENOMEM;
    CURLcode rc = CURLE_OK;
    CURLU *parsed = dp_up_url_parsed(&loop->up.urls, url);
    /* A pooled handle keeps its options: the one not used is cleared. */
    if (parsed != NULL)
        rc |= curl_easy_setopt(e, CURLOPT_CURLU, parsed);
    else
        rc |= curl_easy_setopt(e, CURLOPT_CURLU, NULL) | curl_easy_setopt(e, CURLOPT_URL, url);
    /* curl's receive buffer lives as long as the transfer: for a stream,
     * whose SSE events are a few hundred bytes, 1 KiB (curl's least) keeps
     * a held stream small; a whole answer is read in 4 KiB pieces. */
    rc |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, req->stream ? 1024L : 4096L);
    rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->body != NULL ? a->body : "");
    rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->body_len);
    rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->up_headers);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, a);
    if (rc != CURLE_OK) {
        up_easy_put(loop, e);
        return -EINVAL;
    }
    if (curl_multi_add_handle(loop->up.multi, e) != CURLM_OK) {
        up_easy_put(loop, e);
        return -ENOMEM;
    }
    a->easy = e;
    return 0;
}

void dp_up_detach(struct dp_attempt *a)
{
    if (a->easy == NULL)
        return;
    curl_multi_remove_handle(a->loop->up.multi, a->easy);
    /* A handle removed while paused may keep its pause with its options:
     * not worth pooling (rare: a slow client that left). */
    if (a->paused)
        curl_easy_cleanup(a->easy);
    else
        up_easy_put(a->loop, a->easy);
    a->easy = NULL;
    a->paused = false;
}

void dp_up_unpause(struct dp_attempt *a)
{
    if (a->easy == NULL || !a->paused)
        return;
    a->paused = false;
    curl_easy_pause(a->easy, CURLPAUSE_CONT);
}

void dp_up_socket_event(struct dp_loop *loop, int fd, uint32_t events)
{
    uint32_t *st = up_fd_known(loop, fd);
    if (st != NULL && (*st & UP_FD_PARKED)) {
        up_unregister(loop, fd, st);
        return;
    }
    int mask = 0;
    if (events & (EPOLLIN | EPOLLHUP))
        mask |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        mask |= CURL_CSELECT_OUT;
    if (events & EPOLLERR)
        mask |= CURL_CSELECT_ERR;
    int running;
    curl_multi_socket_action(loop->up.multi, fd, mask, &running);
    dp_up_collect(loop);
}

int64_t dp_up_deadline_ms(const struct dp_loop *loop)
{
    return loop->up.deadline_ms;
}

void dp_up_timer_due(struct dp_loop *loop, uint64_t now_ms)
{
    if (loop->up.deadline_ms < 0 || (uint64_t)loop->up.deadline_ms > now_ms)
        return;
    loop->up.deadline_ms = -1;
    int running;
    curl_multi_socket_action(loop->up.multi, CURL_SOCKET_TIMEOUT, 0, &running);
    dp_up_collect(loop);
}

void dp_up_collect(struct dp_loop *loop)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(loop->up.multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct dp_attempt *a = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&a);
        CURLcode result = msg->data.result;
        if (a != NULL)
            loop->up.handlers->on_done(a, result);
    }
}
