/*
 * Dataplane lifecycle (see dataplane.h). The segment wait polls with a short
 * sleep on purpose: it runs once, before anything is served, and reports
 * progress so an operator sees why the dataplane is not up yet.
 */
#include "dataplane/dataplane.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common/evfd.h"
#include "common/log.h"
#include "common/proc.h"
#include "shm/lease.h"
#include "shm/segment.h"

#define DP_SEGMENT_POLL_MS      50
#define DP_SEGMENT_LOG_EVERY_MS 2000

struct dp_daemon {
    const struct cfg *cfg; /* borrowed */
    struct shm_segment seg;
    struct shm_lease_handle lease;
    int epfd;
    int sigfd;
    int tickfd;
};

static int dp_wait_segment(struct dp_daemon *d, uint64_t wait_ms)
{
    uint64_t start = proc_monotonic_ms();
    uint64_t last_log = start;
    char err[512];
    for (;;) {
        int rc = shm_segment_attach(&d->seg, d->cfg->shm.name, err, sizeof(err));
        if (rc == 0)
            return 0;
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

/* Returns false when the lease was taken from us. */
static bool dp_tick(struct dp_daemon *d)
{
    evfd_timer_read(d->tickfd);
    if (!shm_lease_is_mine(&d->lease)) {
        log_error("lease %u was reaped by the control plane (it judged this process hung); "
                  "exiting so a fresh dataplane can take over",
                  d->lease.index);
        return false;
    }
    shm_lease_heartbeat(&d->lease);
    return true;
}

static int dp_loop(struct dp_daemon *d)
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
                if (!dp_tick(d))
                    return 1;
            } else if (fd == d->sigfd) {
                int sig = evfd_signals_read(d->sigfd);
                if (sig == SIGTERM || sig == SIGINT) {
                    log_info("received %s, shutting down", strsignal(sig));
                    return 0;
                }
            }
        }
    }
}

int dp_run(const struct cfg *cfg, const struct dp_options *opts)
{
    struct dp_daemon d = {.cfg = cfg, .epfd = -1, .sigfd = -1, .tickfd = -1};
    int code = 1;
    char err[512];
    d.sigfd = evfd_signals_open();
    if (d.sigfd < 0) {
        log_error("signalfd: %s", strerror(-d.sigfd));
        return 1;
    }
    if (dp_wait_segment(&d, opts->segment_wait_ms) != 0)
        goto out_close_signals;
    if (shm_lease_claim(&d.seg, &d.lease, err, sizeof(err)) != 0) {
        log_error("%s", err);
        goto out_close_segment;
    }
    d.tickfd = evfd_timer_open(d.seg.hdr->heartbeat_interval_ms);
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || dp_watch(&d, d.tickfd) != 0 || dp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_release_lease;
    }
    log_info("dataplane ready (pid %d, segment %s, lease %u)", (int)getpid(), d.seg.name,
             d.lease.index);
    code = dp_loop(&d);

out_release_lease:
    if (d.epfd >= 0)
        close(d.epfd);
    if (d.tickfd >= 0)
        close(d.tickfd);
    shm_lease_release(&d.lease);
out_close_segment:
    shm_segment_close(&d.seg);
out_close_signals:
    close(d.sigfd);
    return code;
}
