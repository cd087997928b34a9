/*
 * Control-plane lifecycle and main loop (see controlplane.h). The loop is a
 * single epoll set: the signalfd, the heartbeat timerfd, and one descriptor
 * per part (the health prober's curl sockets, the admin API's MHD epoll
 * set, the admin channel's sockets), each itself an epoll set. After every
 * wake-up each part runs its ready work; epoll_wait's timeout is the
 * nearest deadline any part reports. One thread: the registry has exactly
 * one writer and nothing needs a lock.
 */
#include "controlplane/controlplane.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/evfd.h"
#include "common/log.h"
#include "common/proc.h"
#include "controlplane/admin_channel.h"
#include "controlplane/admin_ctx.h"
#include "controlplane/admin_http.h"
#include "controlplane/health_prober.h"
#include "controlplane/lease_reaper.h"
#include "controlplane/reset_load.h"
#include "controlplane/source_static.h"
#include "shm/registry.h"
#include "shm/segment.h"

struct cp_daemon {
    const struct cfg *cfg; /* borrowed */
    struct shm_segment seg;
    struct cp_lease_reaper reaper;
    struct adm_ctx ctx;
    int epfd;
    int sigfd;
    int tickfd;
};

static const char *cp_outcome_name(enum shm_open_outcome o)
{
    switch (o) {
    case SHM_OPEN_CREATED:
        return "created";
    case SHM_OPEN_REATTACHED:
        return "re-attached";
    case SHM_OPEN_REPLACED:
        return "replaced a half-created";
    default:
        return "opened";
    }
}

static int cp_open_segment(struct cp_daemon *d)
{
    char err[512];
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    int rc = shm_segment_open_owner(&d->seg, d->cfg->shm.name, d->cfg->shm.max_workers,
                                    d->cfg->shm.max_dataplanes, &outcome, err, sizeof(err));
    if (rc != 0) {
        log_error("%s: %s", d->cfg->path, err);
        return rc;
    }
    uint64_t epoch = shm_segment_epoch(&d->seg);
    log_info("%s segment %s (layout version %u, %zu bytes, epoch %llu)", cp_outcome_name(outcome),
             d->seg.name, SHM_LAYOUT_VERSION, d->seg.size, (unsigned long long)epoch);
    if (outcome == SHM_OPEN_REATTACHED) {
        int repaired = shm_registry_repair(&d->seg);
        if (repaired > 0)
            log_warn("repaired %d worker slot(s) left half-written by the previous control plane",
                     repaired);
    }
    rc = cp_source_static_sync(&d->seg, d->cfg, err, sizeof(err));
    if (rc != 0)
        log_error("%s", err);
    else
        shm_registry_mark_synced(&d->seg);
    return rc;
}

static int cp_watch(struct cp_daemon *d, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

static void cp_tick(struct cp_daemon *d)
{
    evfd_timer_read(d->tickfd);
    shm_segment_heartbeat(&d->seg);
    cp_lease_reaper_tick(&d->reaper, proc_monotonic_ms());
}

static bool cp_channel_lost(void *arg, uint32_t lease, uint64_t nonce)
{
    struct cp_daemon *d = arg;
    return d->ctx.chan != NULL && adm_chan_is_lost(d->ctx.chan, lease, nonce, NULL);
}

static int cp_min_timeout(int a, int b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return a < b ? a : b;
}

/* Runs every part's ready work; returns the epoll_wait timeout. */
static int cp_run_parts(struct cp_daemon *d)
{
    uint64_t now = proc_monotonic_ms();
    adm_chan_run(d->ctx.chan, now);
    adm_http_run(d->ctx.http);
    hc_run(d->ctx.hc, now);
    cp_reset_run(d->ctx.reset, proc_monotonic_ms());
    now = proc_monotonic_ms();
    int t = hc_timeout_ms(d->ctx.hc, now);
    t = cp_min_timeout(t, adm_http_timeout_ms(d->ctx.http));
    t = cp_min_timeout(t, cp_reset_timeout_ms(d->ctx.reset, now));
    return t;
}

static int cp_start_parts(struct cp_daemon *d)
{
    d->ctx.cfg = d->cfg;
    d->ctx.seg = &d->seg;
    d->ctx.started_ms = proc_monotonic_ms();
    int rc = cp_reset_create(&d->ctx, &d->ctx.reset);
    if (rc == 0)
        rc = hc_create(&d->seg, &d->cfg->controlplane.health, &d->ctx.hc);
    if (rc == 0)
        hc_set_upstream_tls(d->ctx.hc, &d->cfg->dataplane.upstream_tls);
    if (rc == 0)
        rc = adm_chan_create(d->cfg->controlplane.admin_socket, &d->seg, cp_reset_on_reply,
                             d->ctx.reset, &d->ctx.chan);
    if (rc == 0)
        rc = adm_http_create(&d->ctx, &d->ctx.http);
    if (rc != 0)
        return rc;
    cp_lease_reaper_set_channel(&d->reaper, cp_channel_lost, d);
    if ((rc = cp_watch(d, hc_fd(d->ctx.hc))) != 0 ||
        (rc = cp_watch(d, adm_chan_fd(d->ctx.chan))) != 0 ||
        (rc = cp_watch(d, adm_http_fd(d->ctx.http))) != 0)
        log_error("setting up the event loop: %s", strerror(-rc));
    return rc;
}

static void cp_stop_parts(struct cp_daemon *d)
{
    /* The reset answers its suspended request before the HTTP server goes. */
    cp_reset_destroy(d->ctx.reset);
    d->ctx.reset = NULL;
    adm_http_destroy(d->ctx.http);
    adm_chan_destroy(d->ctx.chan);
    hc_destroy(d->ctx.hc);
    memset(&d->ctx, 0, sizeof(d->ctx));
}

static int cp_loop(struct cp_daemon *d)
{
    for (;;) {
        struct epoll_event evs[16];
        int timeout = cp_run_parts(d);
        int n = epoll_wait(d->epfd, evs, 16, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            log_error("epoll_wait: %s", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == d->tickfd) {
                cp_tick(d);
            } else if (fd == d->sigfd) {
                int sig = evfd_signals_read(d->sigfd);
                if (sig == SIGTERM || sig == SIGINT) {
                    log_info("received %s, shutting down (segment %s stays for the dataplanes)",
                             strsignal(sig), d->seg.name);
                    return 0;
                }
            }
        }
    }
}

int cp_run(const struct cfg *cfg)
{
    struct cp_daemon d = {.cfg = cfg, .epfd = -1, .sigfd = -1, .tickfd = -1};
    int code = 1;
    d.sigfd = evfd_signals_open();
    if (d.sigfd < 0) {
        log_error("signalfd: %s", strerror(-d.sigfd));
        return 1;
    }
    if (cp_open_segment(&d) != 0)
        goto out_close_signals;
    cp_lease_reaper_init(&d.reaper, &d.seg);
    d.tickfd = evfd_timer_open(shm_segment_heartbeat_interval_ms(&d.seg));
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || cp_watch(&d, d.tickfd) != 0 || cp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_close_loop;
    }
    if (cp_start_parts(&d) != 0)
        goto out_stop_parts;
    /* Reap what died while no control plane was watching before anything else. */
    cp_tick(&d);
    log_info("control plane ready (pid %d, segment %s, %zu configured workers)", (int)getpid(),
             d.seg.name, cfg->n_workers);
    code = cp_loop(&d);

out_stop_parts:
    cp_stop_parts(&d);
out_close_loop:
    if (d.epfd >= 0)
        close(d.epfd);
    if (d.tickfd >= 0)
        close(d.tickfd);
    shm_segment_close(&d.seg);
out_close_signals:
    close(d.sigfd);
    return code;
}
