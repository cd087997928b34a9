/*
 * The driver of one thread's event loop (see loop_run.h): one epoll_wait
 * over the MHD daemon's epoll fd, curl's sockets, watched client fds, an
 * eventfd for the main thread's commands and other loops' wake-ups (a slot
 * left to a request queued here, adm_hub.h) and a DP_TICK_MS timerfd for
 * retries and timeouts. The epoll timeout is the earlier of curl's timer and MHD's.
 *
 * Shutdown: DRAIN quiesces the daemon (no new connections) and lets
 * in-flight requests finish until the drain deadline; STOP (or the
 * deadline) aborts every attempt (releasing every guard), resumes every
 * parked connection so MHD can fail it, and stops the daemon.
 */
#include "dataplane/admission/admission.h"
#include "dataplane/loop_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/evfd.h"
#include "common/log.h"
#include "common/proc.h"
#include "dataplane/forward/forwarder.h"
#include "dataplane/http/listener.h"
#include "dataplane/core/loop.h"
#include "dataplane/forward/pd.h"
#include "dataplane/forward/tokenize.h"
#include "dataplane/forward/upstream.h"
#include "dataplane/core/workers.h"
#include "common/list.h"

#define DP_EVENTS 128

/* Another loop's admission queue left a free slot to a request queued on
 * this one (adm_hub.h): the same eventfd as the main thread's commands,
 * with the command unchanged. Any thread. */
static void loop_wake(struct dp_loop *loop)
{
    uint64_t one = 1;
    if (write(loop->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("loop %u: eventfd write: %s", loop->index, strerror(errno));
}

static int loop_add_fd(struct dp_loop *loop, int fd, uint64_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

int dp_loop_init(struct dp_loop *loop, struct dp_shared *sh, unsigned index)
{
    memset(loop, 0, sizeof(*loop));
    loop->sh = sh;
    loop->index = index;
    loop->epfd = loop->evfd = loop->tickfd = loop->lst.listen_fd = -1;
    atomic_init(&loop->cmd, DP_CMD_NONE);
    /* Cleared state includes empty lists: every list head of the loop and
     * its modules is valid before anything (even dp_loop_fini) walks it. */
    list_init(&loop->requests);
    list_init(&loop->lst.conns);
    list_init(&loop->lst.watch_queue);
    list_init(&loop->fwd.attempts);
    list_init(&loop->fwd.retrying);
    int rc = dp_workers_init(&loop->workers, sh->seg);
    if (rc != 0)
        return rc;
    rc = pol_create(&sh->cfg->policy, sh->policies, &loop->policy);
    if (rc == 0)
        rc = dp_pd_loop_init(loop);
    if (rc == 0)
        rc = dp_adm_loop_init(loop, &dp_fwd_adm_ops);
    if (rc != 0)
        return rc;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    loop->tickfd = evfd_timer_open(DP_TICK_MS);
    if (loop->epfd < 0 || loop->evfd < 0 || loop->tickfd < 0)
        return -errno;
    rc = loop_add_fd(loop, loop->evfd, DP_TAG_EVFD);
    if (rc == 0)
        rc = loop_add_fd(loop, loop->tickfd, DP_TAG_TICK);
    loop->adm.wake = loop_wake;
    if (rc == 0)
        rc = dp_up_init(loop, &dp_fwd_up_handlers);
    if (rc == 0)
        rc = dp_listener_start(loop, &dp_fwd_lst_handlers);
    return rc;
}

static int loop_timeout_ms(struct dp_loop *loop, uint64_t now)
{
    int64_t t = -1;
    int64_t mt = dp_listener_timeout_ms(loop);
    if (mt == 0)
        return 0;
    int64_t curl = dp_up_deadline_ms(loop);
    if (curl >= 0)
        t = curl > (int64_t)now ? curl - (int64_t)now : 0;
    if (mt >= 0 && (t < 0 || mt < t))
        t = mt;
    if (t > 1000 || t < 0)
        t = 1000;
    return (int)t;
}

static void loop_stop_now(struct dp_loop *loop)
{
    /* Nothing new may get suspended in the passes below (MHD aborts the
     * process when stopped with a suspended connection): stop accepting,
     * and let requests whose upload completes now get a 503. */
    loop->cutting = true;
    dp_listener_quiesce(loop);
    dp_fwd_abort_all(loop);
    /* Let MHD fail every resumed connection before stopping the daemon
     * (MHD refuses to stop with connections still suspended). */
    for (int i = 0; i < 3; i++)
        dp_listener_run(loop, true);
}

/* The drain deadline passed: streams end with an SSE error event, requests
 * still waiting for a worker get a 503, every guard is released now; the
 * loop then runs on briefly so MHD can deliver those endings. */
static void loop_cut(struct dp_loop *loop, uint64_t now)
{
    unsigned n = 0;
    struct list_node *it;
    list_foreach(it, &loop->requests) n++;
    log_warn("loop %u: drain timeout (%llu ms): ending %u in-flight requests", loop->index,
             (unsigned long long)loop->sh->cfg->dataplane.drain_timeout_ms, n);
    loop->cutting = true;
    loop->drain_cut = n;
    loop->cut_deadline_ms = now + DP_CUT_GRACE_MS;
    dp_fwd_cut_all(loop, "the router restarted or shut down and drain_timeout ended this request");
}

static bool loop_handle_cmd(struct dp_loop *loop)
{
    uint64_t v;
    if (read(loop->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_warn("loop %u: eventfd read: %s", loop->index, strerror(errno));
    /* Woken by another loop, or by a command: either way the queue is
     * tried at the end of this pass (a no-op when nothing waits). */
    dp_adm_woken(loop);
    int cmd = atomic_load_explicit(&loop->cmd, memory_order_acquire);
    if (cmd == DP_CMD_STOP)
        return false;
    if (cmd == DP_CMD_DRAIN && !loop->draining) {
        loop->draining = true;
        loop->drain_deadline_ms = proc_monotonic_ms() + loop->sh->cfg->dataplane.drain_timeout_ms;
        dp_listener_quiesce(loop);
    }
    return true;
}

static void *loop_main(void *arg)
{
    struct dp_loop *loop = arg;
    struct epoll_event evs[DP_EVENTS];
    bool running = true;
    /* The clock is read twice a pass: after epoll_wait, and after MHD ran
     * (handlers may have started transfers whose curl timer is due at
     * once); the second reading also serves the next epoll_wait's
     * timeout. Each reading cost about 40 instructions, and a pass per
     * relayed token is common. */
    uint64_t now = proc_monotonic_ms();
    while (running) {
        int n = epoll_wait(loop->epfd, evs, DP_EVENTS, loop_timeout_ms(loop, now));
        if (n < 0 && errno != EINTR) {
            log_error("loop %u: epoll_wait: %s", loop->index, strerror(errno));
            break;
        }
        now = proc_monotonic_ms();
        loop->pass_ms = now;
        bool mhd_due = false;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == DP_TAG_MHD) {
                mhd_due = true;
            } else if (tag == DP_TAG_EVFD) {
                running = loop_handle_cmd(loop);
            } else if (tag == DP_TAG_TICK) {
                evfd_timer_read(loop->tickfd);
                dp_fwd_tick(loop, now);
                dp_adm_tick(loop, now);
                dp_listener_watch_queued(loop);
                dp_listener_enforce_deadlines(loop, now);
                if (loop->draining)
                    dp_listener_close_idle(loop);
            } else if ((tag & (0xffull << 56)) == DP_TAG_CURL) {
                dp_up_socket_event(loop, (int)(uint32_t)tag, evs[i].events);
            } else {
                dp_listener_client_event(evs[i].data.ptr, evs[i].events);
            }
        }
        dp_up_timer_due(loop, now);
        /* Transfers the socket events finished, once for all of them. */
        dp_up_collect(loop);
        dp_listener_run(loop, mhd_due);
        /* Transfers the handlers just added asked curl's timer for 0 ms:
         * start them in this pass instead of after one more epoll_wait. */
        now = proc_monotonic_ms();
        dp_up_timer_due(loop, now);
        /* An unpause from the content reader can finish a transfer. */
        dp_up_collect(loop);
        dp_adm_after_pass(loop);
        if (loop->draining && list_is_empty(&loop->requests) && !dp_fwd_has_attempts(loop))
            running = false;
        if (running && loop->draining && !loop->cutting && now >= loop->drain_deadline_ms)
            loop_cut(loop, now);
        if (loop->cutting && now >= loop->cut_deadline_ms)
            running = false;
        dp_loop_free_graveyard(loop);
    }
    loop_stop_now(loop);
    dp_listener_stop(loop);
    /* MHD_stop_daemon completed every connection: nothing references requests now. */
    while (dp_fwd_has_attempts(loop))
        dp_fwd_abort_all(loop);
    dp_loop_free_graveyard(loop);
    atomic_fetch_sub_explicit(&loop->sh->loops_running, 1, memory_order_release);
    return NULL;
}

int dp_loop_start(struct dp_loop *loop)
{
    int rc = pthread_create(&loop->thread, NULL, loop_main, loop);
    if (rc != 0)
        return -rc;
    loop->started = true;
    return 0;
}

void dp_loop_command(struct dp_loop *loop, enum dp_cmd cmd)
{
    atomic_store_explicit(&loop->cmd, cmd, memory_order_release);
    uint64_t one = 1;
    if (write(loop->evfd, &one, sizeof(one)) < 0)
        log_warn("loop %u: eventfd write: %s", loop->index, strerror(errno));
}

void dp_loop_join(struct dp_loop *loop)
{
    if (loop->started)
        pthread_join(loop->thread, NULL);
    loop->started = false;
}

void dp_loop_fini(struct dp_loop *loop)
{
    dp_listener_stop(loop);
    dp_tok_loop_fini(loop);
    dp_up_fini(loop);
    dp_pd_loop_fini(loop);
    dp_adm_loop_fini(loop);
    pol_destroy(&loop->policy);
    dp_workers_fini(&loop->workers);
    dp_fwd_fini(loop);
    if (loop->tickfd >= 0)
        close(loop->tickfd);
    if (loop->evfd >= 0)
        close(loop->evfd);
    if (loop->epfd >= 0)
        close(loop->epfd);
    loop->epfd = loop->evfd = loop->tickfd = -1;
}
