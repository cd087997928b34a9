/*
 * curl multi_socket glue; see curl_epoll.h for the contract. Socket
 * callback: mirror curl's IN/OUT wishes into the caller's epoll set (MOD,
 * then ADD when the descriptor is not there yet). Timer callback: record
 * an absolute deadline. Neither calls back into curl.
 *
 * Parking (park_idle): each descriptor number has a state word (registered
 * flag, parked flag, last events). A REMOVE on a registered socket only
 * marks it parked; wanting the same events again clears the mark at no
 * cost; any event on a parked socket unregisters it (the peer closed the
 * idle connection; curl notices by itself before reusing it). The
 * open/close socket callbacks clear the word, so a descriptor number reused
 * by a new connection is registered anew.
 */
#include "common/curl_epoll.h"

#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CEP_FD_REGISTERED 0x80000000u
#define CEP_FD_PARKED     0x40000000u
#define CEP_FD_EVENTS     0x0000ffffu
#define CEP_TAG_MASK      0xffffffff00000000ull

/* fd's state word, growing the table; NULL without parking or memory. */
static uint32_t *cep_fd_state(struct cep *c, int fd)
{
    if (!c->park_idle || fd < 0)
        return NULL;
    if ((size_t)fd >= c->n_fds) {
        size_t n = c->n_fds ? c->n_fds : 256;
        while (n <= (size_t)fd)
            n *= 2;
        uint32_t *grown = realloc(c->fds, n * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        memset(grown + c->n_fds, 0, (n - c->n_fds) * sizeof(*grown));
        c->fds = grown;
        c->n_fds = n;
    }
    return &c->fds[fd];
}

/* fd's state word if it has one (no growing), or NULL. */
static uint32_t *cep_fd_known(struct cep *c, int fd)
{
    return fd >= 0 && (size_t)fd < c->n_fds ? &c->fds[fd] : NULL;
}

static void cep_unregister(struct cep *c, int fd, uint32_t *st)
{
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (st != NULL)
        *st = 0;
}

static int cep_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    struct cep *c = userp;
    uint32_t *st = cep_fd_state(c, fd);
    if (what == CURL_POLL_REMOVE) {
        if (st != NULL && (*st & CEP_FD_REGISTERED))
            *st |= CEP_FD_PARKED;
        else
            cep_unregister(c, fd, st);
        return 0;
    }
    uint32_t want = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    if (st != NULL && (*st & CEP_FD_REGISTERED) && (*st & CEP_FD_EVENTS) == want) {
        *st &= ~CEP_FD_PARKED;
        return 0;
    }
    struct epoll_event ev = {.events = want, .data.u64 = c->tag | (uint64_t)(uint32_t)fd};
    /* Without a state word we do not know: try MOD first, as most calls change interest. */
    int op = st == NULL || (*st & CEP_FD_REGISTERED) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(c->epfd, op, fd, &ev) != 0) {
        op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        if (epoll_ctl(c->epfd, op, fd, &ev) != 0) {
            if (c->log_name != NULL)
                log_warn("epoll_ctl on %s socket %d: %s", c->log_name, (int)fd, strerror(errno));
            if (st != NULL)
                *st = 0;
            return 0; /* curl's own timeouts end the transfer */
        }
    }
    if (st != NULL)
        *st = CEP_FD_REGISTERED | want;
    return 0;
}

static int cep_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct cep *c = userp;
    c->deadline_ms = timeout_ms < 0 ? -1 : (int64_t)(proc_monotonic_ms() + (uint64_t)timeout_ms);
    return 0;
}

/* A new socket is in no epoll set yet, whatever its number held before. */
static curl_socket_t cep_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)purpose;
    curl_socket_t fd = socket(addr->family, addr->socktype, addr->protocol);
    uint32_t *st = cep_fd_known(clientp, fd);
    if (st != NULL)
        *st = 0;
    return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int cep_close_cb(void *clientp, curl_socket_t fd)
{
    uint32_t *st = cep_fd_known(clientp, fd);
    if (st != NULL)
        *st = 0;
    return close(fd);
}

int cep_init(struct cep *c, const struct cep_opts *opts)
{
    memset(c, 0, sizeof(*c));
    c->epfd = -1;
    c->deadline_ms = -1;
    if (opts->epfd < 0 || (opts->tag & ~CEP_TAG_MASK) != 0 || opts->on_done == NULL)
        return -EINVAL;
    c->epfd = opts->epfd;
    c->tag = opts->tag;
    c->park_idle = opts->park_idle;
    c->on_done = opts->on_done;
    c->user = opts->user;
    c->log_name = opts->log_name;
    c->multi = curl_multi_init();
    if (c->multi == NULL)
        return -ENOMEM;
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, cep_socket_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, cep_timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    return 0;
}

void cep_fini(struct cep *c)
{
    if (c->multi != NULL)
        curl_multi_cleanup(c->multi);
    c->multi = NULL;
    free(c->fds);
    c->fds = NULL;
    c->n_fds = 0;
}

CURLM *cep_multi(const struct cep *c)
{
    return c->multi;
}

void cep_easy_setup(struct cep *c, CURL *easy)
{
    if (!c->park_idle)
        return;
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, cep_open_cb);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, c);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, cep_close_cb);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, c);
}

int cep_add(struct cep *c, CURL *easy)
{
    return curl_multi_add_handle(c->multi, easy) == CURLM_OK ? 0 : -EIO;
}

int cep_remove(struct cep *c, CURL *easy)
{
    return curl_multi_remove_handle(c->multi, easy) == CURLM_OK ? 0 : -EIO;
}

bool cep_owns(const struct cep *c, uint64_t data)
{
    return (data & CEP_TAG_MASK) == c->tag;
}

void cep_on_fd_event(struct cep *c, int fd, uint32_t events)
{
    uint32_t *st = cep_fd_known(c, fd);
    if (st != NULL && (*st & CEP_FD_PARKED)) {
        cep_unregister(c, fd, st);
        return;
    }
    int mask = 0;
    /* A hang-up is read as such: curl sees the EOF or the error itself. */
    if (events & (EPOLLIN | EPOLLHUP))
        mask |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        mask |= CURL_CSELECT_OUT;
    if (events & EPOLLERR)
        mask |= CURL_CSELECT_ERR;
    int running;
    curl_multi_socket_action(c->multi, fd, mask, &running);
}

void cep_on_timer(struct cep *c, uint64_t now_ms)
{
    if (c->deadline_ms < 0 || (uint64_t)c->deadline_ms > now_ms)
        return;
    c->deadline_ms = -1;
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

int64_t cep_deadline_ms(const struct cep *c)
{
    return c->deadline_ms;
}

int cep_timeout_ms(const struct cep *c, uint64_t now_ms)
{
    if (c->deadline_ms < 0)
        return -1;
    if ((uint64_t)c->deadline_ms <= now_ms)
        return 0;
    uint64_t d = (uint64_t)c->deadline_ms - now_ms;
    return d > INT32_MAX ? INT32_MAX : (int)d;
}

void cep_collect(struct cep *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        c->on_done(c->user, msg->easy_handle, msg->data.result);
    }
}
