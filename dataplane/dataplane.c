/*
 * Dataplane lifecycle (see dataplane.h): wait for the segment, claim a
 * lease, start dataplane.threads event loops (loop.h), then beat the lease
 * from the main thread until a signal. SIGTERM/SIGINT asks every loop to
 * drain (stop accepting, let in-flight finish up to drain_timeout, then
 * abort them, releasing every guard); the main thread keeps beating while
 * they do, then gives the lease back. A second signal stops at once.
 *
 * The segment wait polls with a short sleep on purpose: it runs once,
 * before anything is served, and reports progress so an operator sees why
 * the dataplane is not up yet.
 */
#include "dataplane/dataplane.h"

#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/evfd.h"
#include "common/log.h"
#include "common/proc.h"
#include "dataplane/admin_client.h"
#include "dataplane/hot_restart.h"
#include "dataplane/loop.h"
#include "shm/lease.h"
#include "shm/segment.h"

#define DP_SEGMENT_POLL_MS      50
#define DP_SEGMENT_LOG_EVERY_MS 2000
#define DP_MAX_THREADS          256u

struct dp_daemon {
    const struct cfg *cfg; /* borrowed */
    struct shm_segment seg;
    struct shm_lease_handle lease;
    int epfd;
    int sigfd;
    int tickfd;
    struct dp_shared sh;
    struct dp_loop *loops;
    unsigned n_loops;
    struct adm_client *admin; /* the admin channel to the control plane */
    /* hot restart (hot_restart.h) */
    char hot_path[HR_PATH_MAX];
    struct hr_server hot; /* where a successor finds us; fd -1 when not listening */
    int succ_fd;          /* a successor being handed our sockets, -1 when none */
    pid_t succ_pid;
    bool handed_over; /* a successor serves on our sockets: the path is its own */
    int pred_fd;      /* our predecessor, still draining; -1 when gone */
    pid_t pred_pid;
    bool draining;
    unsigned ticks;
};

/* The segment exists; its control plane may still be writing the
 * configured workers: serving now would answer 503 for lack of workers. */
static int dp_wait_registry(struct dp_daemon *d, uint64_t start, uint64_t wait_ms)
{
    while (!shm_registry_is_synced(&d->seg)) {
        if (proc_monotonic_ms() - start >= wait_ms) {
            log_warn("segment %s: the control plane has not published its registry after %llu "
                     "ms; serving with what it holds",
                     d->cfg->shm.name, (unsigned long long)wait_ms);
            return 0;
        }
        struct timespec ts = {.tv_nsec = DP_SEGMENT_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int dp_wait_segment(struct dp_daemon *d, uint64_t wait_ms)
{
    uint64_t start = proc_monotonic_ms();
    uint64_t last_log = start;
    char err[512];
    for (;;) {
        int rc = shm_segment_attach(&d->seg, d->cfg->shm.name, err, sizeof(err));
        if (rc == 0)
            return dp_wait_registry(d, start, wait_ms);
        /* A layout mismatch will not fix itself by waiting. */
        if (rc != -ENOENT && rc != -EAGAIN) {
            log_error("%s: %s", d->cfg->path, err);
            return rc;
        }
        uint64_t now = proc_monotonic_ms();
        if (now - start >= wait_ms) {
            log_error("gave up after %llu ms waiting for segment %s (is the control plane "
                      "running with the same shm.name?): %s",
                      (unsigned long long)wait_ms, d->cfg->shm.name, err);
            return -ETIMEDOUT;
        }
        if (now - last_log >= DP_SEGMENT_LOG_EVERY_MS) {
            log_info("waiting for the control plane to create segment %s: %s", d->cfg->shm.name,
                     err);
            last_log = now;
        }
        struct timespec ts = {.tv_nsec = DP_SEGMENT_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int dp_watch(struct dp_daemon *d, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

/* The admin channel's question "how many requests do you really have in
 * flight on (slot, generation)": our own live guards, not the shared count. */
static uint64_t dp_inflight_for_admin(void *arg, uint32_t slot, uint32_t generation)
{
    return dp_guards_live(arg, slot, generation);
}

/* Returns false when the lease was taken from us. */
#define DP_TRIM_EVERY_TICKS 10u

static bool dp_tick(struct dp_daemon *d)
{
    evfd_timer_read(d->tickfd);
    if (d->admin != NULL)
        adm_client_run(d->admin, proc_monotonic_ms());
    if (!shm_lease_is_mine(&d->lease)) {
        log_error("lease %u was reaped by the control plane (it judged this process hung); "
                  "exiting so a fresh dataplane can take over",
                  d->lease.index);
        return false;
    }
    shm_lease_heartbeat(&d->lease);
    /* Hand free memory in the middle of malloc's arenas back to the kernel
     * about once a second: a burst of requests leaves freed buffers between
     * the long-lived ones of held streams, resident for nothing (measured:
     * 1,000 held streams cost 43 KB each without, see docs/benchmarks.md). */
    if (++d->ticks % DP_TRIM_EVERY_TICKS == 0)
        malloc_trim(0);
    return true;
}

static void dp_command_all(struct dp_daemon *d, enum dp_cmd cmd)
{
    for (unsigned i = 0; i < d->n_loops; i++)
        dp_loop_command(&d->loops[i], cmd);
}

static void dp_unwatch(struct dp_daemon *d, int fd)
{
    epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void dp_start_drain(struct dp_daemon *d)
{
    d->draining = true;
    dp_command_all(d, DP_CMD_DRAIN);
}

static void dp_hot_predecessor_event(struct dp_daemon *d);

/* A process started with --hot-restart connected to our handover socket. */
static void dp_hot_accept(struct dp_daemon *d)
{
    struct hr_msg hello;
    int fd = hr_server_accept(&d->hot, &hello);
    if (fd < 0) {
        if (fd != -EAGAIN && fd != -ECONNRESET)
            log_warn("hot restart: a connection on %s failed: %s", d->hot.path, strerror(-fd));
        return;
    }
    /* A predecessor that just exited may not have been noticed yet. */
    if (d->pred_fd >= 0)
        dp_hot_predecessor_event(d);
    char why[HR_TEXT_MAX] = "";
    if (d->handed_over)
        snprintf(why, sizeof(why), "a hot restart is in progress: pid %d took over, pid %d drains",
                 (int)d->succ_pid, (int)getpid());
    else if (d->draining)
        snprintf(why, sizeof(why), "pid %d is shutting down", (int)getpid());
    else if (d->succ_fd >= 0)
        snprintf(why, sizeof(why), "a hot restart is in progress: pid %d is taking over",
                 (int)d->succ_pid);
    else if (d->pred_fd >= 0)
        snprintf(why, sizeof(why),
                 "a hot restart is in progress: the previous dataplane (pid %d) is still "
                 "draining",
                 (int)d->pred_pid);
    int fds[HR_MAX_SOCKETS];
    unsigned n = 0;
    for (unsigned i = 0; i < d->n_loops && n < HR_MAX_SOCKETS; i++)
        if (dp_listener_socket(&d->loops[i]) >= 0)
            fds[n++] = dp_listener_socket(&d->loops[i]);
    if (why[0] == '\0' && n == 0)
        snprintf(why, sizeof(why), "pid %d has no listening socket to hand over", (int)getpid());
    if (why[0] != '\0') {
        log_warn("hot restart by pid %d refused: %s", (int)hello.pid, why);
        hr_send_refusal(fd, why);
        close(fd);
        return;
    }
    int rc = hr_send_sockets(fd, fds, n);
    if (rc != 0 || dp_watch(d, fd) != 0) {
        log_warn("hot restart by pid %d: handing over the listening sockets failed: %s",
                 (int)hello.pid, strerror(rc != 0 ? -rc : errno));
        close(fd);
        return;
    }
    d->succ_fd = fd;
    d->succ_pid = (pid_t)hello.pid;
    log_info("hot restart: handed %u listening socket%s to pid %d (lease %u); serving until it "
             "is ready",
             n, n == 1 ? "" : "s", (int)hello.pid, hello.lease);
}

/* The successor said READY (drain now) or went away before it did. */
static void dp_hot_successor_event(struct dp_daemon *d)
{
    struct hr_msg m;
    int rc = hr_recv(d->succ_fd, &m);
    if (rc == -EAGAIN)
        return;
    dp_unwatch(d, d->succ_fd);
    if (rc == 1 && m.type == HR_MSG_READY) {
        /* Keep the connection open: its EOF tells the successor we are gone.
         * Keep listening too, until the successor has bound the path: a
         * hot restart attempted meanwhile is refused, not misled into
         * thinking nobody serves. */
        d->handed_over = true;
        log_info("hot restart: pid %d is serving; draining (up to %llu ms)", (int)d->succ_pid,
                 (unsigned long long)d->cfg->dataplane.drain_timeout_ms);
        dp_start_drain(d);
        return;
    }
    log_warn("hot restart: pid %d went away before it served; still serving", (int)d->succ_pid);
    close(d->succ_fd);
    d->succ_fd = -1;
}

/* Our predecessor's connection ended: it has exited. */
static void dp_hot_predecessor_event(struct dp_daemon *d)
{
    struct hr_msg m;
    if (hr_recv(d->pred_fd, &m) != 0)
        return; /* nothing more is expected; only the end matters */
    dp_unwatch(d, d->pred_fd);
    close(d->pred_fd);
    d->pred_fd = -1;
    log_info("hot restart complete: the previous dataplane (pid %d) has exited", (int)d->pred_pid);
}

static int dp_loop_main(struct dp_daemon *d)
{
    for (;;) {
        struct epoll_event evs[16];
        int n = epoll_wait(d->epfd, evs, 16, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            log_error("epoll_wait: %s", strerror(errno));
            dp_command_all(d, DP_CMD_STOP);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == d->tickfd) {
                if (!dp_tick(d)) {
                    dp_command_all(d, DP_CMD_STOP);
                    return 1;
                }
                if (d->draining &&
                    atomic_load_explicit(&d->sh.loops_running, memory_order_acquire) == 0)
                    return 0;
            } else if (d->admin != NULL && fd == adm_client_fd(d->admin)) {
                adm_client_run(d->admin, proc_monotonic_ms());
            } else if (d->hot.fd >= 0 && fd == d->hot.fd) {
                dp_hot_accept(d);
            } else if (d->succ_fd >= 0 && fd == d->succ_fd) {
                dp_hot_successor_event(d);
            } else if (d->pred_fd >= 0 && fd == d->pred_fd) {
                dp_hot_predecessor_event(d);
            } else if (fd == d->sigfd) {
                int sig = evfd_signals_read(d->sigfd);
                if (sig != SIGTERM && sig != SIGINT)
                    continue;
                if (!d->draining) {
                    log_info("received %s, draining (up to %llu ms)", strsignal(sig),
                             (unsigned long long)d->cfg->dataplane.drain_timeout_ms);
                    dp_start_drain(d);
                } else {
                    log_info("received %s again, aborting in-flight requests", strsignal(sig));
                    dp_command_all(d, DP_CMD_STOP);
                }
            }
        }
    }
}

static int dp_resolve_listen(struct dp_daemon *d)
{
    char host[CFG_ADDR_MAX];
    uint16_t port;
    if (cfg_parse_host_port(d->cfg->dataplane.listen, host, sizeof(host), &port) != 0) {
        log_error("%s: dataplane.listen: expected HOST:PORT, got '%s'", d->cfg->path,
                  d->cfg->dataplane.listen);
        return -EINVAL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        log_error("dataplane.listen: cannot resolve '%s': %s", host, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(&d->sh.listen_addr, res->ai_addr, res->ai_addrlen);
    d->sh.listen_addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (d->sh.listen_addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&d->sh.listen_addr)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)&d->sh.listen_addr)->sin_port = htons(port);
    return 0;
}

/* Thousands of streams need thousands of fds (client + worker each). */
static void dp_raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int dp_start_loops(struct dp_daemon *d)
{
    unsigned n = d->cfg->dataplane.threads;
    if (n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (unsigned)cores : 1u;
    }
    if (n < d->sh.n_inherited) {
        /* A loop per inherited socket: a socket nobody accepts on would
         * strand the connections the kernel queues on it. */
        log_info("running %u event loops, one per listening socket handed over (dataplane.threads "
                 "asks for %u; it applies at the next cold start)",
                 d->sh.n_inherited, n);
        n = d->sh.n_inherited;
    }
    if (n > DP_MAX_THREADS)
        n = DP_MAX_THREADS;
    d->loops = calloc(n, sizeof(*d->loops));
    if (d->loops == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        d->n_loops = i + 1;
        int rc = dp_loop_init(&d->loops[i], &d->sh, i);
        if (rc != 0) {
            log_error("event loop %u: cannot listen on %s: %s", i, d->cfg->dataplane.listen,
                      strerror(-rc));
            return rc;
        }
    }
    atomic_store_explicit(&d->sh.loops_running, n, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++) {
        int rc = dp_loop_start(&d->loops[i]);
        if (rc != 0) {
            atomic_fetch_sub_explicit(&d->sh.loops_running, n - i, memory_order_relaxed);
            log_error("starting event loop %u: %s", i, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static void dp_stop_loops(struct dp_daemon *d)
{
    if (d->loops == NULL)
        return;
    dp_command_all(d, DP_CMD_STOP);
    for (unsigned i = 0; i < d->n_loops; i++)
        dp_loop_join(&d->loops[i]);
    for (unsigned i = 0; i < d->n_loops; i++)
        dp_loop_fini(&d->loops[i]);
    free(d->loops);
    d->loops = NULL;
    d->n_loops = 0;
}

/* True when fd is a listening TCP socket bound to our dataplane.listen. */
static bool dp_socket_matches(const struct dp_daemon *d, int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    const struct sockaddr_storage *want = &d->sh.listen_addr;
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

/*
 * --hot-restart: ask the dataplane running on this config for its listening
 * sockets. 0 with t->sockets taken (or none when nobody runs there: we bind
 * ourselves), -1 when refused or failed: the caller exits, the running one
 * is untouched.
 */
static int dp_hot_takeover(struct dp_daemon *d, struct hr_takeover *t)
{
    char err[512];
    int rc = hr_takeover_begin(t, d->hot_path, d->lease.index, err, sizeof(err));
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        log_info("hot restart: no dataplane answers on %s (%s); starting normally", d->hot_path,
                 strerror(-rc));
        return 0;
    }
    if (rc != 0) {
        log_error("hot restart refused: %s", err);
        return -1;
    }
    bool match = true;
    for (unsigned i = 0; i < t->n_sockets; i++)
        match = match && dp_socket_matches(d, t->sockets[i]);
    if (!match) {
        /* A changed dataplane.listen: bind the new address; the predecessor
         * still drains (clients of the old address lose it, as asked). */
        log_warn("hot restart: the running dataplane (pid %d) listens elsewhere than "
                 "dataplane.listen %s; binding that address instead of taking its sockets",
                 (int)t->peer, d->cfg->dataplane.listen);
        hr_takeover_fini(t, false);
        return 0;
    }
    log_info("hot restart: received %u listening socket%s from pid %d", t->n_sockets,
             t->n_sockets == 1 ? "" : "s", (int)t->peer);
    d->sh.inherited = t->sockets;
    d->sh.n_inherited = t->n_sockets;
    return 0;
}

/* After the loops started: tell the predecessor to drain, then take over
 * the handover path so the next hot restart finds us. */
static void dp_hot_serve(struct dp_daemon *d, struct hr_takeover *t)
{
    /* MHD owns the inherited sockets now (it closes them when it stops). */
    for (unsigned i = 0; i < t->n_sockets; i++)
        t->sockets[i] = -1;
    t->n_sockets = 0;
    if (t->fd >= 0) {
        int rc = hr_takeover_ready(t);
        if (rc != 0 || dp_watch(d, t->fd) != 0) {
            log_warn("hot restart: telling pid %d to drain failed (%s); it keeps serving beside "
                     "us",
                     (int)t->peer, strerror(rc != 0 ? -rc : errno));
            close(t->fd);
        } else {
            d->pred_fd = t->fd;
            d->pred_pid = t->peer;
            log_info("hot restart: serving; pid %d drains", (int)t->peer);
        }
        t->fd = -1;
    }
    char err[512];
    if (d->hot_path[0] == '\0')
        return;
    if (hr_server_open(&d->hot, d->hot_path, err, sizeof(err)) != 0 ||
        dp_watch(d, d->hot.fd) != 0) {
        log_warn("%s; hot restart of this dataplane is not possible", err);
        hr_server_close(&d->hot, true);
    }
}

int dp_run(const struct cfg *cfg, const struct dp_options *opts)
{
    struct dp_daemon d = {.cfg = cfg,
                          .epfd = -1,
                          .sigfd = -1,
                          .tickfd = -1,
                          .succ_fd = -1,
                          .pred_fd = -1,
                          .hot = {.fd = -1}};
    struct hr_takeover take = {.fd = -1};
    int code = 1;
    char err[512];
    d.sigfd = evfd_signals_open();
    if (d.sigfd < 0) {
        log_error("signalfd: %s", strerror(-d.sigfd));
        return 1;
    }
    dp_raise_fd_limit();
    if (dp_resolve_listen(&d) != 0)
        goto out_close_signals;
    if (hr_socket_path(cfg, d.hot_path, sizeof(d.hot_path)) != 0) {
        /* Only hot restart needs it: a plain start runs on without. */
        d.hot_path[0] = '\0';
        if (opts->hot_restart) {
            log_error("%s: cannot hot restart: the handover socket path derived from "
                      "controlplane.admin_socket (its directory + /dataplane-PORT.hot.sock) "
                      "is longer than 95 characters",
                      cfg->path);
            goto out_close_signals;
        }
        log_warn("%s: hot restart disabled: the handover socket path derived from "
                 "controlplane.admin_socket is longer than 95 characters",
                 cfg->path);
    }
    if (!opts->hot_restart && d.hot_path[0] != '\0' && hr_is_listening(d.hot_path)) {
        log_error("a dataplane already serves this config (it answers on %s); use --hot-restart "
                  "to take over from it",
                  d.hot_path);
        goto out_close_signals;
    }
    if (dp_wait_segment(&d, opts->segment_wait_ms) != 0)
        goto out_close_signals;
    if (shm_lease_claim(&d.seg, &d.lease, err, sizeof(err)) != 0) {
        log_error("%s", err);
        goto out_close_segment;
    }
    d.sh.cfg = cfg;
    d.sh.seg = &d.seg;
    d.sh.lease = d.lease.index;
    atomic_init(&d.sh.loops_running, 0);
    if (dp_guards_init(&d.sh.guards, &d.seg, d.lease.index) != 0 ||
        dp_metrics_init(&d.sh.metrics, d.seg.max_workers) != 0) {
        log_error("out of memory setting up the dataplane");
        goto out_free_shared;
    }
    d.sh.metrics.policy = cfg_policy_name_str(cfg->policy.name);
    d.tickfd = evfd_timer_open(d.seg.hdr->heartbeat_interval_ms);
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || dp_watch(&d, d.tickfd) != 0 || dp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_close_fds;
    }
    if (opts->hot_restart && dp_hot_takeover(&d, &take) != 0)
        goto out_close_fds;
    if (dp_start_loops(&d) != 0)
        goto out_stop_loops;
    dp_hot_serve(&d, &take);
    /* The channel connects (and reconnects) in the background: routing does
     * not wait for the control plane, which may be restarting. */
    int rc = adm_client_create(cfg->controlplane.admin_socket, &d.lease, dp_inflight_for_admin,
                               &d.sh.guards, &d.admin);
    if (rc != 0 || dp_watch(&d, adm_client_fd(d.admin)) != 0) {
        log_error("admin channel client: %s", strerror(rc != 0 ? -rc : errno));
        goto out_stop_loops;
    }
    adm_client_run(d.admin, proc_monotonic_ms());
    log_info("dataplane ready (pid %d, segment %s, lease %u, listening on %s, %u event loops)",
             (int)getpid(), d.seg.name, d.lease.index, cfg->dataplane.listen, d.n_loops);
    code = dp_loop_main(&d);

out_stop_loops:
    /* Inherited sockets a daemon took are closed when it stops. */
    for (unsigned i = 0; i < d.n_loops && i < take.n_sockets; i++)
        if (dp_listener_is_running(&d.loops[i]))
            take.sockets[i] = -1;
    adm_client_destroy(d.admin);
    dp_stop_loops(&d);
    hr_server_close(&d.hot, !d.handed_over);
    if (dp_guards_live_total(&d.sh.guards) != 0)
        log_warn("%llu load guards still held at exit",
                 (unsigned long long)dp_guards_live_total(&d.sh.guards));
out_close_fds:
    hr_takeover_fini(&take, true);
    if (d.epfd >= 0)
        close(d.epfd);
    if (d.tickfd >= 0)
        close(d.tickfd);
out_free_shared:
    dp_metrics_fini(&d.sh.metrics);
    dp_guards_fini(&d.sh.guards);
    shm_lease_release(&d.lease);
    /* Only now: the successor takes this connection's end for "the
     * previous dataplane is gone, lease included". */
    if (d.succ_fd >= 0)
        close(d.succ_fd);
    if (d.pred_fd >= 0)
        close(d.pred_fd);
out_close_segment:
    shm_segment_close(&d.seg);
out_close_signals:
    close(d.sigfd);
    return code;
}
