/*
 * Admin channel client (see admin_client.h). The socket lives inside a
 * private epoll set so the caller watches one descriptor for the client's
 * whole life. Buffers are the fixed-size frame_reader/frame_writer; a
 * control plane that sends garbage gets disconnected and reconnected to
 * later, never crashes us.
 */
#include "dataplane/lifecycle/admin_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "proto/frame.h"

#define ADM_CLIENT_BACKOFF_MIN_MS 100u
#define ADM_CLIENT_BACKOFF_MAX_MS 2000u

/* Owned by the caller's loop thread; dies in adm_client_destroy. */
struct adm_client {
    struct sockaddr_un addr;
    const struct shm_lease_handle *lease; /* borrowed */
    adm_client_inflight_fn inflight;
    void *arg;
    int epfd;
    int fd; /* -1 while disconnected */
    bool welcomed;
    bool want_out;
    uint64_t next_connect_ms;
    bool warned_peer; /* logged once that a foreign process serves the path */
    uint64_t backoff_ms;
    struct frame_reader rd;
    struct frame_writer wr;
};

static void adm_client_disconnect(struct adm_client *c, const char *why)
{
    if (c->fd < 0)
        return;
    if (c->welcomed)
        log_warn("admin channel: disconnected from the control plane: %s", why);
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->welcomed = false;
    c->want_out = false;
    c->next_connect_ms = proc_monotonic_ms() + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 > ADM_CLIENT_BACKOFF_MAX_MS ? ADM_CLIENT_BACKOFF_MAX_MS
                                                                  : c->backoff_ms * 2;
}

static int adm_client_send(struct adm_client *c, const Switchyard__Admin__AdminMessage *m)
{
    int rc = frame_writer_queue(&c->wr, m);
    if (rc == 0) {
        rc = frame_writer_flush(&c->wr, c->fd);
        if (rc == -EAGAIN)
            rc = 0;
    }
    bool want_out = !frame_writer_is_empty(&c->wr);
    if (rc == 0 && want_out != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0)};
        c->want_out = want_out;
        if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
            rc = -errno;
    }
    if (rc != 0)
        adm_client_disconnect(c, strerror(-rc));
    return rc;
}

static void adm_client_connect(struct adm_client *c, uint64_t now_ms)
{
    if (c->fd >= 0 || now_ms < c->next_connect_ms || !c->lease->held)
        return;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLIN};
    if (connect(fd, (struct sockaddr *)&c->addr, sizeof(c->addr)) != 0 ||
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        c->next_connect_ms = now_ms + c->backoff_ms;
        c->backoff_ms = c->backoff_ms * 2 > ADM_CLIENT_BACKOFF_MAX_MS ? ADM_CLIENT_BACKOFF_MAX_MS
                                                                      : c->backoff_ms * 2;
        return;
    }
    /* Whoever listens on the path gets our load answers (reset_load trusts
     * them): only a control plane of our own user may. */
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
        if (!c->warned_peer)
            log_warn("admin channel: %s is served by uid %d, not by this user (%u); not talking "
                     "to it",
                     c->addr.sun_path, len == sizeof(cred) ? (int)cred.uid : -1,
                     (unsigned)geteuid());
        c->warned_peer = true;
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        c->next_connect_ms = now_ms + ADM_CLIENT_BACKOFF_MAX_MS;
        return;
    }
    c->warned_peer = false;
    c->fd = fd;
    frame_reader_init(&c->rd);
    frame_writer_init(&c->wr);
    Switchyard__Admin__Hello hello = SWITCHYARD__ADMIN__HELLO__INIT;
    hello.protocol_version = ADMIN_PROTOCOL_VERSION;
    hello.lease_index = c->lease->index;
    hello.lease_nonce = c->lease->nonce;
    hello.pid = (int32_t)getpid();
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_HELLO;
    m.hello = &hello;
    adm_client_send(c, &m);
}

/* Returns 0, or -EPROTO after disconnecting. */
static int adm_client_dispatch(struct adm_client *c, const Switchyard__Admin__AdminMessage *m)
{
    Switchyard__Admin__AdminMessage out = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    out.request_id = m->request_id;
    switch (m->body_case) {
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_WELCOME:
        c->welcomed = true;
        c->backoff_ms = ADM_CLIENT_BACKOFF_MIN_MS;
        log_info("admin channel: connected to the control plane (lease %u)", c->lease->index);
        return 0;
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_ERROR:
        log_warn("admin channel: the control plane says: %s",
                 m->error != NULL && m->error->message != NULL ? m->error->message : "");
        adm_client_disconnect(c, "refused");
        return -EPROTO;
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PING: {
        Switchyard__Admin__Pong pong = SWITCHYARD__ADMIN__PONG__INIT;
        pong.token = m->ping != NULL ? m->ping->token : 0;
        out.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PONG;
        out.pong = &pong;
        return adm_client_send(c, &out);
    }
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PONG:
        return 0;
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_INFLIGHT_REQUEST: {
        Switchyard__Admin__InflightReply rep = SWITCHYARD__ADMIN__INFLIGHT_REPLY__INIT;
        if (m->inflight_request != NULL) {
            rep.slot = m->inflight_request->slot;
            rep.generation = m->inflight_request->generation;
        }
        rep.count = c->inflight(c->arg, rep.slot, rep.generation);
        out.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_INFLIGHT_REPLY;
        out.inflight_reply = &rep;
        return adm_client_send(c, &out);
    }
    default:
        adm_client_disconnect(c, "unexpected message from the control plane");
        return -EPROTO;
    }
}

static void adm_client_read(struct adm_client *c)
{
    while (c->fd >= 0) {
        const uint8_t *payload;
        size_t len;
        int st = frame_reader_next(&c->rd, &payload, &len);
        if (st < 0) {
            adm_client_disconnect(c, "oversized frame");
            return;
        }
        if (st == 1) {
            Switchyard__Admin__AdminMessage *m = frame_decode(payload, len);
            if (m == NULL) {
                adm_client_disconnect(c, "malformed or unknown frame");
                return;
            }
            frame_reader_consume(&c->rd);
            int rc = adm_client_dispatch(c, m);
            frame_msg_free(m);
            if (rc != 0)
                return;
            continue;
        }
        long got = frame_reader_fill(&c->rd, c->fd);
        if (got == -EAGAIN)
            return;
        if (got < 0) {
            adm_client_disconnect(c, got == -ECONNRESET ? "end of stream" : strerror((int)-got));
            return;
        }
    }
}

int adm_client_create(const char *socket_path, const struct shm_lease_handle *lease,
                      adm_client_inflight_fn inflight, void *arg, struct adm_client **out)
{
    struct adm_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->addr.sun_family = AF_UNIX;
    if (strlen(socket_path) >= sizeof(c->addr.sun_path)) {
        free(c);
        return -ENAMETOOLONG;
    }
    snprintf(c->addr.sun_path, sizeof(c->addr.sun_path), "%s", socket_path);
    c->lease = lease;
    c->inflight = inflight;
    c->arg = arg;
    c->fd = -1;
    c->backoff_ms = ADM_CLIENT_BACKOFF_MIN_MS;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        int e = errno;
        free(c);
        return -e;
    }
    adm_client_connect(c, proc_monotonic_ms());
    *out = c;
    return 0;
}

void adm_client_destroy(struct adm_client *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    close(c->epfd);
    free(c);
}

void adm_client_goodbye(struct adm_client *c, const char *reason)
{
    if (c == NULL || c->fd < 0)
        return;
    Switchyard__Admin__Goodbye bye = SWITCHYARD__ADMIN__GOODBYE__INIT;
    bye.reason = (char *)reason;
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_GOODBYE;
    m.goodbye = &bye;
    if (frame_writer_queue(&c->wr, &m) == 0)
        (void)frame_writer_flush(&c->wr, c->fd);
}

int adm_client_fd(const struct adm_client *c)
{
    return c->epfd;
}

void adm_client_run(struct adm_client *c, uint64_t now_ms)
{
    struct epoll_event ev[4];
    int n = c->fd >= 0 ? epoll_wait(c->epfd, ev, 4, 0) : 0;
    for (int i = 0; i < n && c->fd >= 0; i++) {
        if (ev[i].events & EPOLLOUT) {
            int rc = frame_writer_flush(&c->wr, c->fd);
            if (rc != 0 && rc != -EAGAIN) {
                adm_client_disconnect(c, strerror(-rc));
                break;
            }
            if (rc == 0 && c->want_out) {
                struct epoll_event in = {.events = EPOLLIN};
                c->want_out = false;
                epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &in);
            }
        }
        if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            adm_client_read(c);
    }
    adm_client_connect(c, now_ms);
}

bool adm_client_is_connected(const struct adm_client *c)
{
    return c->fd >= 0 && c->welcomed;
}
