/*
 * Control-plane lifecycle and main loop (see controlplane.h). The loop is a
 * single epoll set so that later parts (admin API, health prober, admin
 * channel) join it as more descriptors instead of more threads.
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
#include "controlplane/lease_reaper.h"
#include "controlplane/registry_sync.h"
#include "shm/registry.h"
#include "shm/segment.h"

struct cp_daemon {
    const struct cfg *cfg; /* borrowed */
    struct shm_segment seg;
    struct cp_lease_reaper reaper;
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
    uint64_t epoch = atomic_load_explicit(&d->seg.hdr->epoch, memory_order_relaxed);
    log_info("%s segment %s (layout version %u, %zu bytes, epoch %llu)", cp_outcome_name(outcome),
             d->seg.name, SHM_LAYOUT_VERSION, d->seg.size, (unsigned long long)epoch);
    if (outcome == SHM_OPEN_REATTACHED) {
        int repaired = shm_registry_repair(&d->seg);
        if (repaired > 0)
            log_warn("repaired %d worker slot(s) left half-written by the previous control plane",
                     repaired);
    }
    rc = cp_registry_sync(&d->seg, d->cfg, err, sizeof(err));
    if (rc != 0)
        log_error("%s", err);
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

static int cp_loop(struct cp_daemon *d)
{
    for (;;) {
        struct epoll_event evs[16];
        int n = epoll_wait(d->epfd, evs, 16, -1);
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
    d.tickfd = evfd_timer_open(d.seg.hdr->heartbeat_interval_ms);
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || cp_watch(&d, d.tickfd) != 0 || cp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_close_loop;
    }
    /* Reap what died while no control plane was watching before anything else. */
    cp_tick(&d);
    log_info("control plane ready (pid %d, segment %s, %zu configured workers)", (int)getpid(),
             d.seg.name, cfg->n_workers);
    code = cp_loop(&d);

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
