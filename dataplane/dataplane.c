/*
 * Dataplane lifecycle (see dataplane.h): wait for the segment, claim a
 * lease, start dataplane.threads event loops (loop_run.h), then beat the lease
 * from the main thread until a signal. SIGTERM/SIGINT asks every loop to
 * drain (stop accepting, let in-flight finish up to drain_timeout, then
 * abort them, releasing every guard); the main thread keeps beating while
 * they do, then gives the lease back. A second signal stops at once.
 * SIGHUP re-reads dataplane.tls's certificate files (tls_server.h).
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
#include "dataplane/obs/access_log.h"
#include "dataplane/lifecycle/admin_client.h"
#include "dataplane/admission/admission.h"
#include "dataplane/admission/cache_salt.h"
#include "dataplane/lifecycle/hot_restart_run.h"
#include "dataplane/http/listener.h"
#include "dataplane/loop_run.h"
#include "dataplane/obs/metrics_listener.h"
#include "dataplane/core/policy.h"
#include "dataplane/obs/trace_export.h"
#include "dataplane/forward/resp_affinity.h"
#include "dataplane/http/tls_server.h"
#include "shm/kv_holders.h"
#include "shm/lease.h"
#include "shm/prefix_index.h"
#include "shm/segment.h"

#define DP_SEGMENT_POLL_MS          50
#define DP_SEGMENT_LOG_EVERY_MS     2000
#define DP_MAX_THREADS              256u
#define DP_MIN_CONNECTIONS_PER_LOOP 16u

struct dp_daemon {
    const struct cfg *cfg; /* borrowed */
    struct shm_segment seg;
    struct pix_index *prefix;     /* the node's shared prefix index, or NULL */
    struct kvh_index *kv_holders; /* the node's KV holder index, or NULL */
    struct shm_lease_handle lease;
    int epfd;
    int sigfd;
    int tickfd;
    struct dp_shared sh;
    struct dp_salt_key salt_key; /* dataplane.cache_salt_key_file's secret */
    struct dp_loop *loops;
    unsigned n_loops;
    struct adm_client *admin; /* the admin channel to the control plane */
    struct dp_hot hot;        /* hot restart (hot_restart_run.h) */
    /* /metrics on dataplane.metrics_listen when set (else on listen). */
    struct dp_metrics_listener *metrics_listener;
    bool draining;
    const char *drain_reason;    /* why it drains (for the exit's log line) */
    uint64_t drain_started_ms;   /* monotonic */
    uint64_t in_flight_at_drain; /* load guards held when the drain began */
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

/*
 * Attaches the node's prefix index, which the control plane created before
 * it published the registry we just waited for. Routing does not depend on
 * it: without it cache_aware keeps a private index (as a lone data plane
 * did before the index was shared) and says so once.
 */
static void dp_attach_prefix_index(struct dp_daemon *d)
{
    char name[CFG_PATH_MAX + sizeof(PIX_NAME_SUFFIX)];
    char err[512];
    int rc = pix_segment_name(d->cfg->shm.name, name, sizeof(name));
    if (rc == 0)
        rc = pix_attach(name, &d->prefix, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "shm.name %s is too long to derive its name", d->cfg->shm.name);
    if (rc != 0) {
        log_warn("prefix index: %s; cache_aware uses a private index (not shared with other "
                 "data planes, lost on restart)",
                 err);
        d->prefix = NULL;
        return;
    }
    log_info("prefix index: attached %s (%zu blocks, %zu bytes)", name, pix_capacity(d->prefix),
             pix_memory_bytes(d->prefix));
}

/*
 * Attaches the node's KV holder index (the control plane's, filled from the
 * workers' KV-cache events) when a policy in force is precise_cache_aware.
 * Without it that policy routes by cache_aware's approximate match.
 */
static void dp_attach_kv_holders(struct dp_daemon *d)
{
    const struct cfg_policy *p = &d->cfg->policy;
    if (p->name != CFG_POLICY_PRECISE_CACHE_AWARE &&
        p->prefill.name != CFG_POLICY_PRECISE_CACHE_AWARE &&
        p->decode.name != CFG_POLICY_PRECISE_CACHE_AWARE)
        return;
    char name[CFG_PATH_MAX + sizeof(KVH_NAME_SUFFIX)];
    char err[512];
    int rc = kvh_segment_name(d->cfg->shm.name, name, sizeof(name));
    if (rc == 0)
        rc = kvh_attach(name, &d->kv_holders, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "shm.name %s is too long to derive its name", d->cfg->shm.name);
    if (rc != 0) {
        log_warn("KV holder index: %s; precise_cache_aware routes by approximate match", err);
        d->kv_holders = NULL;
        return;
    }
    log_info("KV holder index: attached %s (%zu facts, %zu bytes)", name,
             kvh_capacity(d->kv_holders), kvh_memory_bytes(d->kv_holders));
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
    dp_hot_tick(&d->hot, proc_monotonic_ms());
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

/* SIGHUP: new connections get the certificate now in the files, or, when
 * they do not load, the old one keeps serving and the log says why. */
static void dp_reload_tls(struct dp_daemon *d)
{
    char err[512];
    if (d->sh.tls == NULL) {
        log_info("received SIGHUP: no dataplane.tls, nothing to reload");
        return;
    }
    if (dp_tls_reload(d->sh.tls, err, sizeof(err)) != 0)
        log_error("received SIGHUP: new TLS certificate refused, the old one keeps serving: %s",
                  err);
    else
        log_info("received SIGHUP: TLS certificate reloaded from %s",
                 d->cfg->dataplane.tls.cert_file);
}

static void dp_start_drain(struct dp_daemon *d, const char *reason)
{
    d->draining = true;
    d->drain_reason = reason;
    d->drain_started_ms = proc_monotonic_ms();
    d->in_flight_at_drain = dp_guards_live_total(&d->sh.guards);
    dp_command_all(d, DP_CMD_DRAIN);
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
            } else if (dp_hot_event(&d->hot, fd)) {
                continue;
            } else if (fd == d->sigfd) {
                int sig = evfd_signals_read(d->sigfd);
                if (sig == SIGHUP) {
                    log_info("received SIGHUP: re-reading the API key files and the TLS "
                             "certificate");
                    dp_adm_request_reload(&d->sh.adm);
                    dp_reload_tls(d);
                    continue;
                }
                if (sig == SIGUSR1)
                    dp_alog_reopen(d->sh.alog); /* log rotation */
                if (sig != SIGTERM && sig != SIGINT)
                    continue;
                if (!d->draining) {
                    log_info("received %s, draining (up to %llu ms)", strsignal(sig),
                             (unsigned long long)d->cfg->dataplane.drain_timeout_ms);
                    dp_start_drain(d, sig == SIGTERM ? "SIGTERM" : "SIGINT");
                } else {
                    log_info("received %s again, aborting in-flight requests", strsignal(sig));
                    dp_command_all(d, DP_CMD_STOP);
                }
            }
        }
    }
}

static int dp_resolve_addr(const struct dp_daemon *d, const char *key, const char *text,
                           struct sockaddr_storage *addr, socklen_t *addr_len)
{
    char host[CFG_ADDR_MAX];
    uint16_t port;
    if (cfg_parse_host_port(text, host, sizeof(host), &port) != 0) {
        log_error("%s: dataplane.%s: expected HOST:PORT, got '%s'", d->cfg->path, key, text);
        return -EINVAL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        log_error("dataplane.%s: cannot resolve '%s': %s", key, host, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (addr->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)addr)->sin_port = htons(port);
    return 0;
}

static int dp_resolve_listen(struct dp_daemon *d)
{
    int rc = dp_resolve_addr(d, "listen", d->cfg->dataplane.listen, &d->sh.listen_addr,
                             &d->sh.listen_addr_len);
    if (rc == 0 && d->cfg->dataplane.plain_listen[0] != '\0')
        rc = dp_resolve_addr(d, "plain_listen", d->cfg->dataplane.plain_listen, &d->sh.plain_addr,
                             &d->sh.plain_addr_len);
    return rc;
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

/*
 * dataplane.max_connections shared out over n loops (each accepts on its own
 * socket). 0 means half the descriptor limit: every proxied request needs a
 * second descriptor toward its worker, and a flood of idle connections must
 * never take the descriptors that requests in flight and new clients need.
 */
static void dp_share_connection_cap(struct dp_daemon *d, unsigned n)
{
    uint64_t total = d->cfg->dataplane.max_connections;
    if (total == 0) {
        uint64_t limit = proc_fd_limit();
        total = limit >= 2000000u ? 1000000u : limit / 2;
    }
    uint64_t per = total / n;
    d->sh.conn_cap_per_loop =
        per < DP_MIN_CONNECTIONS_PER_LOOP ? DP_MIN_CONNECTIONS_PER_LOOP : (unsigned)per;
    log_info("at most %llu client connections (%u per event loop); at the cap a new one closes "
             "the oldest idle one",
             (unsigned long long)d->sh.conn_cap_per_loop * n, d->sh.conn_cap_per_loop);
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
    dp_share_connection_cap(d, n);
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

/* ---- what hot restart asks of the daemon (hot_restart_run.h) ------------------ */

static int dp_hot_watch(void *ctx, int fd)
{
    return dp_watch(ctx, fd);
}

static void dp_hot_unwatch(void *ctx, int fd)
{
    dp_unwatch(ctx, fd);
}

static unsigned dp_hot_sockets(void *ctx, int *fds, unsigned max)
{
    const struct dp_daemon *d = ctx;
    unsigned n = 0;
    for (unsigned i = 0; i < d->n_loops && n < max; i++)
        if (dp_listener_socket(&d->loops[i]) >= 0)
            fds[n++] = dp_listener_socket(&d->loops[i]);
    return n;
}

static bool dp_hot_is_draining(void *ctx)
{
    const struct dp_daemon *d = ctx;
    return d->draining;
}

static bool dp_hot_holds_lease(void *ctx, uint32_t lease, uint64_t ns_inode, pid_t pid)
{
    struct dp_daemon *d = ctx;
    if (lease >= d->seg.max_dataplanes)
        return false;
    struct shm_lease_info l;
    shm_lease_snapshot(&d->seg, lease, &l);
    return l.active && l.pid == pid && l.pid_namespace == ns_inode;
}

static void dp_hot_drain(void *ctx)
{
    dp_start_drain(ctx, "a hot restart handed over");
}

/* A drain that ended: what it did, once, at info (an operator checking a
 * restart wants to see it finished, not silence). */
static void dp_log_drained(const struct dp_daemon *d)
{
    unsigned long long cut = 0;
    for (unsigned i = 0; i < d->n_loops; i++)
        cut += d->loops[i].drain_cut;
    char ended[64] = "all finished";
    if (cut > 0)
        snprintf(ended, sizeof(ended), "drain_timeout ended %llu", cut);
    uint64_t answered = 0;
    for (int r = 0; r < DP_ROUTE_COUNT; r++)
        for (int s = 0; s < DP_STATUS_MAX; s++)
            answered += atomic_load_explicit(&d->sh.metrics.requests[r][s], memory_order_relaxed);
    log_info("drained after %s in %llu ms: %llu requests to workers were in flight, %s; %llu "
             "requests answered since start; exiting",
             d->drain_reason, (unsigned long long)(proc_monotonic_ms() - d->drain_started_ms),
             (unsigned long long)d->in_flight_at_drain, ended, (unsigned long long)answered);
}

int dp_run(const struct cfg *cfg, const struct dp_options *opts)
{
    struct dp_daemon d = {.cfg = cfg, .epfd = -1, .sigfd = -1, .tickfd = -1};
    const struct dp_hot_ops hot_ops = {.ctx = &d,
                                       .watch = dp_hot_watch,
                                       .unwatch = dp_hot_unwatch,
                                       .sockets = dp_hot_sockets,
                                       .is_draining = dp_hot_is_draining,
                                       .drain = dp_hot_drain,
                                       .holds_lease = dp_hot_holds_lease};
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
    if (dp_tls_create(&cfg->dataplane.tls, &d.sh.tls, err, sizeof(err)) != 0) {
        log_error("%s: %s", cfg->path, err);
        goto out_close_signals;
    }
    if (dp_salt_key_load(&d.salt_key, cfg->dataplane.cache_salt_key_file, err, sizeof(err)) != 0) {
        log_error("%s: %s", cfg->path, err);
        goto out_close_signals;
    }
    d.sh.salt_key = d.salt_key.on ? &d.salt_key : NULL;
    if (dp_hot_init(&d.hot, cfg, &hot_ops, opts->hot_restart) != 0)
        goto out_close_signals;
    if (dp_wait_segment(&d, opts->segment_wait_ms) != 0)
        goto out_close_signals;
    dp_attach_prefix_index(&d);
    dp_attach_kv_holders(&d);
    if (pol_shared_create(d.prefix, d.kv_holders, &d.sh.policies) != 0) {
        log_error("out of memory setting up the dataplane");
        goto out_close_segment;
    }
    /* Logs why when it fails: stickiness is then off. */
    (void)dp_resp_create(cfg, shm_segment_created_ms(&d.seg), &d.sh.resp);
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
    d.sh.metrics.policies = d.sh.policies;
    shm_el_params_from_cfg(cfg, &d.sh.metrics.load);
    if (dp_adm_shared_init(&d.sh.adm, cfg, d.lease.index) != 0)
        goto out_free_shared;
    d.sh.metrics.adm = d.sh.adm.metrics;
    d.tickfd = evfd_timer_open(shm_segment_heartbeat_interval_ms(&d.seg));
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || dp_watch(&d, d.tickfd) != 0 || dp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_close_fds;
    }
    if (dp_alog_open(cfg, &d.sh.metrics.access_log_dropped, &d.sh.alog) != 0 ||
        dp_tracer_open(cfg, &d.sh.metrics, &d.sh.tracer) != 0)
        goto out_close_fds;
    if (opts->hot_restart) {
        if (dp_hot_takeover(&d.hot, &take, d.lease.index, &d.sh.listen_addr) != 0)
            goto out_close_fds;
        if (take.n_sockets > 0) {
            d.sh.inherited = take.sockets;
            d.sh.n_inherited = take.n_sockets;
        }
    }
    if (dp_start_loops(&d) != 0)
        goto out_stop_loops;
    if (cfg->dataplane.metrics_listen[0] != '\0' &&
        dp_metrics_listener_start(cfg->dataplane.metrics_listen, &d.sh.metrics, &d.sh.guards,
                                  &d.seg, &d.metrics_listener) != 0)
        goto out_stop_loops;
    dp_hot_serve(&d.hot, &take);
    /* The channel connects (and reconnects) in the background: routing does
     * not wait for the control plane, which may be restarting. */
    int rc = adm_client_create(cfg->controlplane.admin_socket, &d.lease, dp_inflight_for_admin,
                               &d.sh.guards, &d.admin);
    if (rc != 0 || dp_watch(&d, adm_client_fd(d.admin)) != 0) {
        log_error("admin channel client: %s", strerror(rc != 0 ? -rc : errno));
        goto out_stop_loops;
    }
    adm_client_run(d.admin, proc_monotonic_ms());
    log_info("dataplane ready (pid %d, segment %s, lease %u, listening on %s%s%s%s, %u event "
             "loops)",
             (int)getpid(), d.seg.name, d.lease.index, cfg->dataplane.listen,
             d.sh.tls != NULL ? " (HTTPS)" : "",
             d.sh.plain_addr_len > 0 ? " and plain HTTP on " : "",
             d.sh.plain_addr_len > 0 ? cfg->dataplane.plain_listen : "", d.n_loops);
    code = dp_loop_main(&d);

out_stop_loops:
    /* Inherited sockets a daemon took are closed when it stops. */
    for (unsigned i = 0; i < d.n_loops && i < take.n_sockets; i++)
        if (dp_listener_is_running(&d.loops[i]))
            take.sockets[i] = -1;
    if (code == 0 && d.draining) {
        dp_log_drained(&d);
        adm_client_goodbye(d.admin, d.drain_reason);
    }
    adm_client_destroy(d.admin);
    dp_metrics_listener_stop(d.metrics_listener);
    dp_stop_loops(&d);
    dp_hot_close_server(&d.hot);
    if (dp_guards_live_total(&d.sh.guards) != 0)
        log_warn("%llu load guards still held at exit",
                 (unsigned long long)dp_guards_live_total(&d.sh.guards));
out_close_fds:
    dp_alog_close(d.sh.alog); /* after the loops: their last lines are written */
    d.sh.alog = NULL;
    dp_tracer_close(d.sh.tracer);
    d.sh.tracer = NULL;
    hr_takeover_fini(&take, true);
    if (d.epfd >= 0)
        close(d.epfd);
    if (d.tickfd >= 0)
        close(d.tickfd);
out_free_shared:
    dp_adm_shared_fini(&d.sh.adm);
    dp_metrics_fini(&d.sh.metrics);
    dp_guards_fini(&d.sh.guards);
    shm_lease_release(&d.lease);
    /* Only now: the successor takes this connection's end for "the
     * previous dataplane is gone, lease included". */
    dp_hot_fini(&d.hot);
out_close_segment:
    /* After every policy (the loops'), before the indexes it borrows. */
    pol_shared_destroy(d.sh.policies);
    d.sh.policies = NULL;
    pix_destroy(d.prefix);
    kvh_destroy(d.kv_holders);
    dp_resp_destroy(d.sh.resp);
    d.sh.resp = NULL;
    shm_segment_close(&d.seg);
out_close_signals:
    dp_salt_key_fini(&d.salt_key);
    dp_tls_destroy(d.sh.tls);
    close(d.sigfd);
    return code;
}
