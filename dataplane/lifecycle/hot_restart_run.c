/*
 * Hot restart orchestration (see hot_restart_run.h). A successor's
 * connection is answered at once (sockets or a refusal) and then watched
 * until it says READY or goes away; a predecessor's connection is watched
 * until its EOF, which says it has exited.
 */
#include "dataplane/lifecycle/hot_restart_run.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"

int dp_hot_init(struct dp_hot *h, const struct cfg *cfg, const struct dp_hot_ops *ops,
                bool hot_restart)
{
    *h = (struct dp_hot){.cfg = cfg,
                         .ops = *ops,
                         .server = {.fd = -1},
                         .pending_fd = -1,
                         .succ_fd = -1,
                         .pred_fd = -1};
    if (hr_socket_path(cfg, h->path, sizeof(h->path)) != 0) {
        /* Only hot restart needs it: a plain start runs on without. */
        h->path[0] = '\0';
        if (hot_restart) {
            log_error("%s: cannot hot restart: the handover socket path derived from "
                      "controlplane.admin_socket (its directory + /dataplane-PORT.hot.sock) "
                      "is longer than 95 characters",
                      cfg->path);
            return -1;
        }
        log_warn("%s: hot restart disabled: the handover socket path derived from "
                 "controlplane.admin_socket is longer than 95 characters",
                 cfg->path);
    }
    if (!hot_restart && h->path[0] != '\0' && hr_is_listening(h->path)) {
        log_error("a dataplane already serves this config (it answers on %s); use --hot-restart "
                  "to take over from it",
                  h->path);
        return -1;
    }
    return 0;
}

static void hot_predecessor_event(struct dp_hot *h);

static void hot_drop_pending(struct dp_hot *h)
{
    h->ops.unwatch(h->ops.ctx, h->pending_fd);
    close(h->pending_fd);
    h->pending_fd = -1;
}

/* Someone connected to our handover socket: wait for its HELLO in the main
 * loop (never blocking it: the main thread beats the lease). */
static void hot_accept(struct dp_hot *h)
{
    struct ucred cred;
    int fd = hr_server_accept_peer(&h->server, &cred);
    if (fd < 0) {
        if (fd == -EPERM)
            log_warn("hot restart: refused a connection on %s from another user", h->server.path);
        else if (fd != -EAGAIN && fd != -ECONNRESET)
            log_warn("hot restart: a connection on %s failed: %s", h->server.path, strerror(-fd));
        return;
    }
    if (h->pending_fd >= 0 || h->ops.watch(h->ops.ctx, fd) != 0) {
        hr_send_refusal(fd, "another hot restart connection is being set up");
        close(fd);
        return;
    }
    h->pending_fd = fd;
    h->pending_cred = cred;
    h->pending_deadline_ms = proc_monotonic_ms() + HR_IO_TIMEOUT_MS;
}

void dp_hot_tick(struct dp_hot *h, uint64_t now_ms)
{
    if (h->pending_fd >= 0 && now_ms >= h->pending_deadline_ms) {
        log_warn("hot restart: pid %d connected but said nothing for %d ms; closed",
                 (int)h->pending_cred.pid, HR_IO_TIMEOUT_MS);
        hot_drop_pending(h);
    }
}

/*
 * Whether the peer is the process it claims: its pid in its own PID
 * namespace (from SO_PEERCRED's pid, numbered in ours) is the HELLO's, and
 * it holds the lease the HELLO names. A successor claims its lease before
 * it asks, so anything else is not a data plane of this segment.
 */
static bool hot_peer_is_successor(struct dp_hot *h, const struct hr_msg *hello, char *why,
                                  size_t why_len)
{
    uint64_t ns = 0;
    pid_t inner = 0;
    if (proc_pid_identity(h->pending_cred.pid, &ns, &inner) != 0 || inner != hello->pid ||
        !h->ops.holds_lease(h->ops.ctx, hello->lease, ns, inner)) {
        snprintf(why, why_len, "the peer (pid %d) does not hold lease %u", (int)h->pending_cred.pid,
                 hello->lease);
        return false;
    }
    return true;
}

/* The pending connection is readable: its HELLO, or its end. */
static void hot_pending_event(struct dp_hot *h)
{
    struct hr_msg hello;
    int fd = h->pending_fd;
    int rc = hr_server_read_hello(fd, &hello);
    if (rc == -EAGAIN)
        return;
    h->ops.unwatch(h->ops.ctx, fd);
    h->pending_fd = -1;
    if (rc != 1) {
        if (rc != -ECONNRESET)
            log_warn("hot restart: a connection on %s failed: %s", h->server.path, strerror(-rc));
        close(fd);
        return;
    }
    char who[HR_TEXT_MAX];
    if (!hot_peer_is_successor(h, &hello, who, sizeof(who))) {
        log_warn("hot restart refused: %s", who);
        hr_send_refusal(fd, who);
        close(fd);
        return;
    }
    /* A predecessor that just exited may not have been noticed yet. */
    if (h->pred_fd >= 0)
        hot_predecessor_event(h);
    char why[HR_TEXT_MAX] = "";
    if (h->handed_over)
        snprintf(why, sizeof(why), "a hot restart is in progress: pid %d took over, pid %d drains",
                 (int)h->succ_pid, (int)getpid());
    else if (h->ops.is_draining(h->ops.ctx))
        snprintf(why, sizeof(why), "pid %d is shutting down", (int)getpid());
    else if (h->succ_fd >= 0)
        snprintf(why, sizeof(why), "a hot restart is in progress: pid %d is taking over",
                 (int)h->succ_pid);
    else if (h->pred_fd >= 0)
        snprintf(why, sizeof(why),
                 "a hot restart is in progress: the previous dataplane (pid %d) is still "
                 "draining",
                 (int)h->pred_pid);
    int fds[HR_MAX_SOCKETS];
    unsigned n = h->ops.sockets(h->ops.ctx, fds, HR_MAX_SOCKETS);
    if (why[0] == '\0' && n == 0)
        snprintf(why, sizeof(why), "pid %d has no listening socket to hand over", (int)getpid());
    if (why[0] != '\0') {
        log_warn("hot restart by pid %d refused: %s", (int)hello.pid, why);
        hr_send_refusal(fd, why);
        close(fd);
        return;
    }
    rc = hr_send_sockets(fd, fds, n);
    if (rc == 0)
        rc = h->ops.watch(h->ops.ctx, fd);
    if (rc != 0) {
        log_warn("hot restart by pid %d: handing over the listening sockets failed: %s",
                 (int)hello.pid, strerror(-rc));
        close(fd);
        return;
    }
    h->succ_fd = fd;
    h->succ_pid = (pid_t)hello.pid;
    log_info("hot restart: handed %u listening socket%s to pid %d (lease %u); serving until it "
             "is ready",
             n, n == 1 ? "" : "s", (int)hello.pid, hello.lease);
}

/* The successor said READY (drain now) or went away before it did. */
static void hot_successor_event(struct dp_hot *h)
{
    struct hr_msg m;
    int rc = hr_recv(h->succ_fd, &m);
    if (rc == -EAGAIN)
        return;
    h->ops.unwatch(h->ops.ctx, h->succ_fd);
    if (rc == 1 && m.type == HR_MSG_READY) {
        /* Keep the connection open: its EOF tells the successor we are gone.
         * Keep listening too, until the successor has bound the path: a
         * hot restart attempted meanwhile is refused, not misled into
         * thinking nobody serves. */
        h->handed_over = true;
        log_info("hot restart: pid %d is serving; draining (up to %llu ms)", (int)h->succ_pid,
                 (unsigned long long)h->cfg->dataplane.drain_timeout_ms);
        h->ops.drain(h->ops.ctx);
        return;
    }
    log_warn("hot restart: pid %d went away before it served; still serving", (int)h->succ_pid);
    close(h->succ_fd);
    h->succ_fd = -1;
}

/* Our predecessor's connection ended: it has exited. */
static void hot_predecessor_event(struct dp_hot *h)
{
    struct hr_msg m;
    if (hr_recv(h->pred_fd, &m) != 0)
        return; /* nothing more is expected; only the end matters */
    h->ops.unwatch(h->ops.ctx, h->pred_fd);
    close(h->pred_fd);
    h->pred_fd = -1;
    log_info("hot restart complete: the previous dataplane (pid %d) has exited", (int)h->pred_pid);
}

bool dp_hot_event(struct dp_hot *h, int fd)
{
    if (h->server.fd >= 0 && fd == h->server.fd)
        hot_accept(h);
    else if (h->pending_fd >= 0 && fd == h->pending_fd)
        hot_pending_event(h);
    else if (h->succ_fd >= 0 && fd == h->succ_fd)
        hot_successor_event(h);
    else if (h->pred_fd >= 0 && fd == h->pred_fd)
        hot_predecessor_event(h);
    else
        return false;
    return true;
}

/* True when fd is a listening TCP socket bound to want. */
static bool hot_socket_matches(const struct sockaddr_storage *want, int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    if (ss.ss_family != want->ss_family)
        return false;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        const struct sockaddr_in *b = (const struct sockaddr_in *)want;
        return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)want;
        return a->sin6_port == b->sin6_port &&
               memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
    }
    return false;
}

int dp_hot_takeover(struct dp_hot *h, struct hr_takeover *t, uint32_t lease,
                    const struct sockaddr_storage *listen_addr)
{
    char err[512];
    int rc = hr_takeover_begin(t, h->path, lease, err, sizeof(err));
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        log_info("hot restart: no dataplane answers on %s (%s); starting normally", h->path,
                 strerror(-rc));
        return 0;
    }
    if (rc != 0) {
        log_error("hot restart refused: %s", err);
        return -1;
    }
    bool match = true;
    for (unsigned i = 0; i < t->n_sockets; i++)
        match = match && hot_socket_matches(listen_addr, t->sockets[i]);
    if (!match) {
        /* A changed dataplane.listen: bind the new address; the predecessor
         * still drains (clients of the old address lose it, as asked). */
        log_warn("hot restart: the running dataplane (pid %d) listens elsewhere than "
                 "dataplane.listen %s; binding that address instead of taking its sockets",
                 (int)t->peer, h->cfg->dataplane.listen);
        hr_takeover_fini(t, false);
        return 0;
    }
    log_info("hot restart: received %u listening socket%s from pid %d", t->n_sockets,
             t->n_sockets == 1 ? "" : "s", (int)t->peer);
    return 0;
}

void dp_hot_serve(struct dp_hot *h, struct hr_takeover *t)
{
    /* MHD owns the inherited sockets now (it closes them when it stops). */
    for (unsigned i = 0; i < t->n_sockets; i++)
        t->sockets[i] = -1;
    t->n_sockets = 0;
    if (t->fd >= 0) {
        int rc = hr_takeover_ready(t);
        if (rc == 0)
            rc = h->ops.watch(h->ops.ctx, t->fd);
        if (rc != 0) {
            log_warn("hot restart: telling pid %d to drain failed (%s); it keeps serving beside "
                     "us",
                     (int)t->peer, strerror(-rc));
            close(t->fd);
        } else {
            h->pred_fd = t->fd;
            h->pred_pid = t->peer;
            log_info("hot restart: serving; pid %d drains", (int)t->peer);
        }
        t->fd = -1;
    }
    char err[512] = "";
    if (h->path[0] == '\0')
        return;
    if (hr_server_open(&h->server, h->path, err, sizeof(err)) != 0 ||
        h->ops.watch(h->ops.ctx, h->server.fd) != 0) {
        log_warn("%s; hot restart of this dataplane is not possible", err);
        hr_server_close(&h->server, true);
    }
}

void dp_hot_close_server(struct dp_hot *h)
{
    hr_server_close(&h->server, !h->handed_over);
}

void dp_hot_fini(struct dp_hot *h)
{
    if (h->pending_fd >= 0)
        close(h->pending_fd);
    h->pending_fd = -1;
    if (h->succ_fd >= 0)
        close(h->succ_fd);
    if (h->pred_fd >= 0)
        close(h->pred_fd);
    h->succ_fd = h->pred_fd = -1;
}
