/*
 * Admin channel server (see admin_channel.h). Connections are heap objects
 * in a fixed table; each owns a frame_reader and a frame_writer (bounded
 * buffers), so a peer that floods or stops reading costs at most those
 * buffers before it is disconnected. Unhelloed connections may only send
 * Hello; every protocol violation closes the connection and logs why.
 */
#include "controlplane/admin/admin_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "proto/frame.h"
#include "shm/lease.h"

#define ADM_CHAN_LISTENER      UINT64_MAX
#define ADM_CHAN_MAX_QUESTIONS 16
/* A data plane says hello as soon as it connects; a silent peer would hold a
 * slot of the fixed table for nothing. */
#define ADM_CHAN_HELLO_DEADLINE_MS 2000u

/* One accepted connection. Owned by the channel; dies in adm_chan_close. */
struct adm_chan_conn {
    int fd;
    struct ucred cred;    /* the peer process, from SO_PEERCRED at accept */
    uint64_t accepted_ms; /* a hello is due within ADM_CHAN_HELLO_DEADLINE_MS */
    bool helloed;
    bool want_out;
    bool leaving;         /* said Goodbye: its disconnect is planned */
    char leaving_why[96]; /* the Goodbye's reason, printable */
    struct adm_chan_peer peer;
    uint64_t questions[ADM_CHAN_MAX_QUESTIONS]; /* request ids awaiting an answer, 0 = free */
    struct frame_reader rd;
    struct frame_writer wr;
};

/* What the channel remembers of each lease's holding between connections. */
struct adm_chan_lease_mark {
    uint64_t nonce; /* the holding that connected; 0 = never */
    bool connected;
    uint64_t lost_ms; /* when its connection went away */
};

struct adm_channel {
    struct shm_segment *seg; /* borrowed */
    adm_chan_reply_fn on_reply;
    void *arg;
    int epfd;
    int listen_fd;
    char path[108];
    struct adm_chan_conn *conns[ADM_CHAN_MAX_CONNS];
    struct adm_chan_lease_mark marks[SHM_MAX_DATAPLANES_LIMIT];
    bool shutting_down; /* adm_chan_destroy: closing is expected, not worth a warning */
};

static void adm_chan_close(struct adm_channel *ch, size_t i, const char *why)
{
    struct adm_chan_conn *c = ch->conns[i];
    if (c == NULL)
        return;
    if (ch->shutting_down) {
        /* A clean shutdown: the data planes reconnect to the next control plane. */
    } else if (c->helloed) {
        if (c->leaving)
            log_info("admin channel: dataplane pid %d (lease %u) left: %s", (int)c->peer.pid,
                     c->peer.lease, c->leaving_why);
        else
            log_warn("admin channel: dataplane pid %d (lease %u) disconnected: %s",
                     (int)c->peer.pid, c->peer.lease, why);
        struct adm_chan_lease_mark *m = &ch->marks[c->peer.lease];
        if (m->nonce == c->peer.nonce && m->connected) {
            m->connected = false;
            m->lost_ms = proc_monotonic_ms();
        }
    } else {
        log_warn("admin channel: connection closed before hello: %s", why);
    }
    epoll_ctl(ch->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    ch->conns[i] = NULL;
    /* Answer outstanding questions after the table is consistent: the
     * callback may ask again. */
    for (size_t q = 0; q < ADM_CHAN_MAX_QUESTIONS; q++)
        if (c->questions[q] != 0 && ch->on_reply != NULL)
            ch->on_reply(ch->arg, c->peer.lease, c->questions[q], false, 0);
    free(c);
}

static int adm_chan_update_events(struct adm_channel *ch, size_t i)
{
    struct adm_chan_conn *c = ch->conns[i];
    bool want_out = !frame_writer_is_empty(&c->wr);
    if (want_out == c->want_out)
        return 0;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.u64 = i};
    c->want_out = want_out;
    return epoll_ctl(ch->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0 ? 0 : -errno;
}

/* Queues msg on connection i and writes what the socket takes. On failure
 * the connection is closed and a negative errno returned. */
static int adm_chan_send(struct adm_channel *ch, size_t i,
                         const Switchyard__Admin__AdminMessage *msg)
{
    struct adm_chan_conn *c = ch->conns[i];
    int rc = frame_writer_queue(&c->wr, msg);
    if (rc == 0) {
        rc = frame_writer_flush(&c->wr, c->fd);
        if (rc == -EAGAIN)
            rc = 0;
    }
    if (rc == 0)
        rc = adm_chan_update_events(ch, i);
    if (rc != 0) {
        char why[96];
        snprintf(why, sizeof(why), "sending failed: %s", strerror(-rc));
        adm_chan_close(ch, i, why);
    }
    return rc;
}

static void adm_chan_send_error(struct adm_channel *ch, size_t i, uint64_t request_id,
                                const char *text)
{
    Switchyard__Admin__Error err = SWITCHYARD__ADMIN__ERROR__INIT;
    err.message = (char *)text;
    Switchyard__Admin__AdminMessage msg = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    msg.request_id = request_id;
    msg.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_ERROR;
    msg.error = &err;
    if (adm_chan_send(ch, i, &msg) == 0)
        frame_writer_flush(&ch->conns[i]->wr, ch->conns[i]->fd);
}

/* Validates a Hello against the segment. Returns true when accepted. */
static bool adm_chan_hello(struct adm_channel *ch, size_t i, const Switchyard__Admin__Hello *h,
                           uint64_t now_ms, char *why, size_t why_len)
{
    struct adm_chan_conn *c = ch->conns[i];
    if (h == NULL) {
        snprintf(why, why_len, "empty hello");
        return false;
    }
    if (h->protocol_version != ADMIN_PROTOCOL_VERSION) {
        snprintf(why, why_len, "protocol version %u, this control plane speaks %u",
                 h->protocol_version, ADMIN_PROTOCOL_VERSION);
        return false;
    }
    if (h->lease_index >= ch->seg->max_dataplanes) {
        snprintf(why, why_len, "lease %u out of range (max_dataplanes %u)", h->lease_index,
                 ch->seg->max_dataplanes);
        return false;
    }
    struct shm_lease_info l;
    shm_lease_snapshot(ch->seg, h->lease_index, &l);
    if (!l.active || l.nonce != h->lease_nonce) {
        snprintf(why, why_len, "lease %u nonce %llu is not an active holding", h->lease_index,
                 (unsigned long long)h->lease_nonce);
        return false;
    }
    /* Index and nonce are public (GET /status): only the process holding
     * the lease may speak for it, or an impostor could evict the real data
     * plane's connection or answer reset_load's question for it. */
    uint64_t peer_ns = 0;
    pid_t peer_pid = 0;
    int prc = proc_pid_identity(c->cred.pid, &peer_ns, &peer_pid);
    if (prc != 0 || peer_ns != l.pid_namespace || peer_pid != l.pid || h->pid != l.pid) {
        snprintf(why, why_len,
                 "peer pid %d (pid %d in its namespace) does not hold lease %u (held by pid %d)",
                 (int)c->cred.pid, prc == 0 ? (int)peer_pid : -1, h->lease_index, (int)l.pid);
        return false;
    }
    /* A reconnect of the same holding replaces the older connection. */
    for (size_t k = 0; k < ADM_CHAN_MAX_CONNS; k++) {
        struct adm_chan_conn *o = ch->conns[k];
        if (k != i && o != NULL && o->helloed && o->peer.lease == h->lease_index)
            adm_chan_close(ch, k, "replaced by a new connection for the same lease");
    }
    c->helloed = true;
    c->peer.lease = h->lease_index;
    c->peer.nonce = h->lease_nonce;
    c->peer.pid = h->pid;
    c->peer.connected_ms = now_ms;
    struct adm_chan_lease_mark *m = &ch->marks[h->lease_index];
    m->nonce = h->lease_nonce;
    m->connected = true;
    m->lost_ms = 0;
    log_info("admin channel: dataplane pid %d connected with lease %u", (int)h->pid,
             h->lease_index);
    return true;
}

static void adm_chan_answer(struct adm_channel *ch, size_t i, uint64_t request_id, bool ok,
                            uint64_t count)
{
    struct adm_chan_conn *c = ch->conns[i];
    for (size_t q = 0; q < ADM_CHAN_MAX_QUESTIONS; q++) {
        if (c->questions[q] == request_id && request_id != 0) {
            c->questions[q] = 0;
            if (ch->on_reply != NULL)
                ch->on_reply(ch->arg, c->peer.lease, request_id, ok, count);
            return;
        }
    }
    log_debug("admin channel: lease %u answered unknown request %llu", c->peer.lease,
              (unsigned long long)request_id);
}

/* Handles one decoded message. Returns 0, or -EPROTO after closing. */
static int adm_chan_dispatch(struct adm_channel *ch, size_t i, Switchyard__Admin__AdminMessage *m,
                             uint64_t now_ms)
{
    struct adm_chan_conn *c = ch->conns[i];
    char why[160];
    if (!c->helloed) {
        if (m->body_case != SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_HELLO) {
            adm_chan_close(ch, i, "first frame is not a hello");
            return -EPROTO;
        }
        if (!adm_chan_hello(ch, i, m->hello, now_ms, why, sizeof(why))) {
            log_warn("admin channel: hello refused: %s", why);
            adm_chan_send_error(ch, i, m->request_id, why);
            adm_chan_close(ch, i, "hello refused");
            return -EPROTO;
        }
        Switchyard__Admin__Welcome w = SWITCHYARD__ADMIN__WELCOME__INIT;
        w.protocol_version = ADMIN_PROTOCOL_VERSION;
        w.epoch = shm_segment_epoch(ch->seg);
        Switchyard__Admin__AdminMessage out = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
        out.request_id = m->request_id;
        out.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_WELCOME;
        out.welcome = &w;
        return adm_chan_send(ch, i, &out);
    }
    switch (m->body_case) {
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PING: {
        Switchyard__Admin__Pong pong = SWITCHYARD__ADMIN__PONG__INIT;
        pong.token = m->ping != NULL ? m->ping->token : 0;
        Switchyard__Admin__AdminMessage out = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
        out.request_id = m->request_id;
        out.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PONG;
        out.pong = &pong;
        return adm_chan_send(ch, i, &out);
    }
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_PONG:
        return 0;
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_GOODBYE: {
        /* Its disconnect, next, is planned: logged at info, not as a loss. */
        const char *r = m->goodbye != NULL && m->goodbye->reason != NULL ? m->goodbye->reason : "";
        c->leaving = true;
        size_t k = 0;
        for (; r[k] != '\0' && k + 1 < sizeof(c->leaving_why); k++)
            c->leaving_why[k] = (r[k] >= 0x20 && r[k] < 0x7f) ? r[k] : '?'; /* for the log */
        c->leaving_why[k] = '\0';
        return 0;
    }
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_INFLIGHT_REPLY:
        adm_chan_answer(ch, i, m->request_id, true,
                        m->inflight_reply != NULL ? m->inflight_reply->count : 0);
        return 0;
    case SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_ERROR:
        log_warn("admin channel: lease %u answered request %llu with an error: %s", c->peer.lease,
                 (unsigned long long)m->request_id,
                 m->error != NULL && m->error->message != NULL ? m->error->message : "");
        adm_chan_answer(ch, i, m->request_id, false, 0);
        return 0;
    default:
        snprintf(why, sizeof(why), "unexpected message (body %d)", (int)m->body_case);
        adm_chan_close(ch, i, why);
        return -EPROTO;
    }
}

static void adm_chan_readable(struct adm_channel *ch, size_t i, uint64_t now_ms)
{
    for (;;) {
        struct adm_chan_conn *c = ch->conns[i];
        if (c == NULL)
            return;
        const uint8_t *payload;
        size_t len;
        int st = frame_reader_next(&c->rd, &payload, &len);
        if (st < 0) {
            adm_chan_close(ch, i, "oversized frame (length prefix above the 64 KiB maximum)");
            return;
        }
        if (st == 1) {
            Switchyard__Admin__AdminMessage *m = frame_decode(payload, len);
            if (m == NULL) {
                adm_chan_close(ch, i, "malformed or unknown frame");
                return;
            }
            frame_reader_consume(&c->rd);
            int rc = adm_chan_dispatch(ch, i, m, now_ms);
            frame_msg_free(m);
            if (rc != 0)
                return;
            continue;
        }
        long got = frame_reader_fill(&c->rd, c->fd);
        if (got == -EAGAIN)
            return;
        if (got < 0) {
            adm_chan_close(ch, i, got == -ECONNRESET ? "end of stream" : strerror((int)-got));
            return;
        }
    }
}

static void adm_chan_writable(struct adm_channel *ch, size_t i)
{
    struct adm_chan_conn *c = ch->conns[i];
    int rc = frame_writer_flush(&c->wr, c->fd);
    if (rc != 0 && rc != -EAGAIN) {
        adm_chan_close(ch, i, strerror(-rc));
        return;
    }
    if (adm_chan_update_events(ch, i) != 0)
        adm_chan_close(ch, i, "epoll_ctl failed");
}

static void adm_chan_accept(struct adm_channel *ch)
{
    for (;;) {
        int fd = accept4(ch->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                log_warn("admin channel: accept: %s", strerror(errno));
            return;
        }
        size_t i = 0;
        while (i < ADM_CHAN_MAX_CONNS && ch->conns[i] != NULL)
            i++;
        struct adm_chan_conn *c = i < ADM_CHAN_MAX_CONNS ? calloc(1, sizeof(*c)) : NULL;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
        if (c == NULL || epoll_ctl(ch->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            log_warn("admin channel: refusing a connection: %s",
                     c == NULL ? "too many connections or out of memory" : strerror(errno));
            free(c);
            close(fd);
            continue;
        }
        socklen_t len = sizeof(c->cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) != 0 ||
            c->cred.uid != geteuid()) {
            log_warn("admin channel: refusing a peer of uid %d (this control plane runs as %u)",
                     len == sizeof(c->cred) ? (int)c->cred.uid : -1, (unsigned)geteuid());
            epoll_ctl(ch->epfd, EPOLL_CTL_DEL, fd, NULL);
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->accepted_ms = proc_monotonic_ms();
        frame_reader_init(&c->rd);
        frame_writer_init(&c->wr);
        ch->conns[i] = c;
    }
}

int adm_chan_create(const char *socket_path, struct shm_segment *seg, adm_chan_reply_fn on_reply,
                    void *arg, struct adm_channel **out)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof(sa.sun_path)) {
        log_error("admin channel: socket path too long: %s", socket_path);
        return -ENAMETOOLONG;
    }
    struct adm_channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return -ENOMEM;
    ch->seg = seg;
    ch->on_reply = on_reply;
    ch->arg = arg;
    ch->listen_fd = -1;
    snprintf(ch->path, sizeof(ch->path), "%s", socket_path);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket_path);
    int rc = 0;
    ch->epfd = epoll_create1(EPOLL_CLOEXEC);
    ch->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ch->epfd < 0 || ch->listen_fd < 0) {
        rc = -errno;
        goto out_fail;
    }
    /* A socket file left by a dead control plane would make bind fail. We
     * hold the segment's owner lock, so no live control plane uses it. */
    struct stat st;
    if (lstat(socket_path, &st) == 0) {
        /* Only our own leftover: a file another user put there is not ours
         * to remove, and it would mean that user controls the directory. */
        if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
            log_error("admin channel: %s exists and is not a socket of this user (uid %u, mode "
                      "%04o); remove it after checking who made it, or set another "
                      "controlplane.admin_socket",
                      socket_path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
            rc = -EPERM;
            goto out_fail;
        }
        unlink(socket_path);
    }
    mode_t old = umask(0077);
    int b = bind(ch->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (b != 0 || chmod(socket_path, 0600) != 0 || listen(ch->listen_fd, 64) != 0) {
        rc = -errno;
        log_error("admin channel: cannot listen on %s: %s", socket_path, strerror(errno));
        goto out_fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = ADM_CHAN_LISTENER};
    if (epoll_ctl(ch->epfd, EPOLL_CTL_ADD, ch->listen_fd, &ev) != 0) {
        rc = -errno;
        goto out_fail;
    }
    log_info("admin channel listening on %s", socket_path);
    *out = ch;
    return 0;

out_fail:
    adm_chan_destroy(ch);
    return rc;
}

void adm_chan_destroy(struct adm_channel *ch)
{
    if (ch == NULL)
        return;
    ch->on_reply = NULL; /* nobody left to tell */
    ch->shutting_down = true;
    size_t open = 0;
    for (size_t i = 0; i < ADM_CHAN_MAX_CONNS; i++) {
        if (ch->conns[i] != NULL) {
            open++;
            adm_chan_close(ch, i, "control plane shutting down");
        }
    }
    if (open > 0)
        log_info("admin channel: closed %zu connection%s on shutdown", open, open == 1 ? "" : "s");
    if (ch->listen_fd >= 0) {
        close(ch->listen_fd);
        unlink(ch->path);
    }
    if (ch->epfd >= 0)
        close(ch->epfd);
    free(ch);
}

int adm_chan_fd(const struct adm_channel *ch)
{
    return ch->epfd;
}

void adm_chan_run(struct adm_channel *ch, uint64_t now_ms)
{
    for (size_t i = 0; i < ADM_CHAN_MAX_CONNS; i++) {
        struct adm_chan_conn *c = ch->conns[i];
        if (c != NULL && !c->helloed && now_ms - c->accepted_ms > ADM_CHAN_HELLO_DEADLINE_MS)
            adm_chan_close(ch, i, "no hello within 2 s");
    }
    struct epoll_event evs[32];
    int n = epoll_wait(ch->epfd, evs, 32, 0);
    for (int k = 0; k < n; k++) {
        uint64_t i = evs[k].data.u64;
        if (i == ADM_CHAN_LISTENER) {
            adm_chan_accept(ch);
            continue;
        }
        if (i >= ADM_CHAN_MAX_CONNS || ch->conns[i] == NULL)
            continue;
        if (evs[k].events & EPOLLOUT)
            adm_chan_writable(ch, i);
        if (ch->conns[i] != NULL && (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
            adm_chan_readable(ch, i, now_ms);
    }
}

static ssize_t adm_chan_find(const struct adm_channel *ch, uint32_t lease, uint64_t nonce)
{
    for (size_t i = 0; i < ADM_CHAN_MAX_CONNS; i++) {
        const struct adm_chan_conn *c = ch->conns[i];
        if (c != NULL && c->helloed && c->peer.lease == lease && c->peer.nonce == nonce)
            return (ssize_t)i;
    }
    return -1;
}

bool adm_chan_is_connected(const struct adm_channel *ch, uint32_t lease, uint64_t nonce)
{
    return adm_chan_find(ch, lease, nonce) >= 0;
}

bool adm_chan_is_lost(const struct adm_channel *ch, uint32_t lease, uint64_t nonce,
                      uint64_t *since_ms)
{
    if (lease >= SHM_MAX_DATAPLANES_LIMIT)
        return false;
    const struct adm_chan_lease_mark *m = &ch->marks[lease];
    if (m->nonce != nonce || m->nonce == 0 || m->connected)
        return false;
    if (since_ms != NULL)
        *since_ms = m->lost_ms;
    return true;
}

int adm_chan_ask_inflight(struct adm_channel *ch, uint32_t lease, uint64_t nonce,
                          uint64_t request_id, uint32_t slot, uint32_t generation)
{
    ssize_t i = adm_chan_find(ch, lease, nonce);
    if (i < 0)
        return -ENOTCONN;
    struct adm_chan_conn *c = ch->conns[i];
    size_t q = 0;
    while (q < ADM_CHAN_MAX_QUESTIONS && c->questions[q] != 0)
        q++;
    if (q == ADM_CHAN_MAX_QUESTIONS)
        return -EBUSY;
    Switchyard__Admin__InflightRequest req = SWITCHYARD__ADMIN__INFLIGHT_REQUEST__INIT;
    req.slot = slot;
    req.generation = generation;
    Switchyard__Admin__AdminMessage msg = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    msg.request_id = request_id;
    msg.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_INFLIGHT_REQUEST;
    msg.inflight_request = &req;
    int rc = adm_chan_send(ch, (size_t)i, &msg);
    if (rc == 0)
        c->questions[q] = request_id;
    return rc;
}

size_t adm_chan_peers(const struct adm_channel *ch, struct adm_chan_peer *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < ADM_CHAN_MAX_CONNS && n < cap; i++)
        if (ch->conns[i] != NULL && ch->conns[i]->helloed)
            out[n++] = ch->conns[i]->peer;
    return n;
}
