/*
 * Event loops, parking and process lifecycle of the mock worker (see
 * server.h). Each loop is shared-nothing except for the engine, stats and
 * faults (each under its own mutex) and its eventfd: a request never moves
 * between threads, so there is no cross-thread resume and no lock per
 * request in the loop itself.
 *
 * The listening socket is bound once and handed (dup'ed) to every daemon
 * rather than using SO_REUSEPORT: a second process started on the same port
 * by mistake then fails with EADDRINUSE instead of silently taking half of
 * the traffic, and port 0 works (the log line names the port).
 */
#include "tests/mockworker/server.h"
#include "tests/mockworker/lora.h"

#include "common/log.h"
#include "common/rng.h"
#include "tests/mockworker/handlers.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* epoll data of the loop's own fds; anything else is a struct mw_req *. */
#define TAG_MHD   1u
#define TAG_TIMER 2u
#define TAG_WAKE  3u

#define LOOP_EVENTS          128
#define MHD_CONNECTION_LIMIT 16384

/* One event-loop thread. Owned by the server; lives from run to its end. */
struct mw_loop {
    struct mw_server *server;
    unsigned index;
    pthread_t thread;
    bool thread_started;
    int epfd;
    int timerfd;
    int wakefd;
    struct MHD_Daemon *daemon;
    struct th_heap heap;     /* parked requests' deadlines, in ns */
    uint64_t armed_ns;       /* deadline the timerfd is set to, 0 = disarmed */
    struct list_node parked; /* all parked requests (mw_req.park_link), for shutdown */
    bool kick;               /* MHD needs another pass (see mw_loop_kick) */
    _Atomic bool stop;
};

uint64_t mw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mw_loop_kick(struct mw_loop *loop)
{
    loop->kick = true;
}

unsigned mw_loop_index(const struct mw_loop *loop)
{
    return loop->index;
}

/* ---- parking ----------------------------------------------------------------- */

int mw_park(struct mw_req *req, uint64_t deadline_ns)
{
    struct mw_loop *loop = req->loop;
    assert(!req->parked);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return -EBADF;
    int fd = ci->connect_fd;
    /* EPOLLRDHUP only: EPOLLIN would fire for a pipelined next request. */
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = req};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return -errno;
    if (deadline_ns != 0) {
        req->timer.deadline = deadline_ns;
        int rc = th_heap_push(&loop->heap, &req->timer);
        if (rc != 0) {
            epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
            return rc;
        }
    }
    req->watch_fd = fd;
    req->parked = true;
    list_push_front(&loop->parked, &req->park_link);
    MHD_suspend_connection(req->conn);
    return 0;
}

/* Undoes the bookkeeping of mw_park without resuming the connection. */
static void park_detach(struct mw_req *req)
{
    struct mw_loop *loop = req->loop;
    if (!req->parked)
        return;
    if (req->watch_fd >= 0)
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, req->watch_fd, NULL);
    req->watch_fd = -1;
    th_heap_remove(&loop->heap, &req->timer);
    list_remove(&req->park_link);
    req->parked = false;
}

static void unpark(struct mw_req *req)
{
    if (!req->parked)
        return;
    park_detach(req);
    MHD_resume_connection(req->conn);
}

/* ---- loop events ------------------------------------------------------------- */

static void fire_timers(struct mw_loop *loop)
{
    uint64_t now = mw_now_ns();
    for (;;) {
        struct th_timer *t = th_heap_top(&loop->heap);
        if (t == NULL || t->deadline > now)
            break;
        struct mw_req *req = (struct mw_req *)((char *)t - offsetof(struct mw_req, timer));
        unpark(req);
    }
}

static void rearm_timer(struct mw_loop *loop)
{
    struct th_timer *t = th_heap_top(&loop->heap);
    uint64_t want = t != NULL ? t->deadline : 0;
    if (want == loop->armed_ns)
        return;
    struct itimerspec its = {0};
    if (want != 0) {
        its.it_value.tv_sec = (time_t)(want / 1000000000ull);
        its.it_value.tv_nsec = (long)(want % 1000000000ull);
    }
    if (timerfd_settime(loop->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        loop->armed_ns = want;
}

static void take_admitted(struct mw_loop *loop)
{
    struct mw_sched_entry *x = mw_engine_take_ready(&loop->server->engine, loop->index);
    while (x != NULL) {
        struct mw_sched_entry *next = x->next;
        x->next = NULL;
        struct mw_req *req = (struct mw_req *)((char *)x - offsetof(struct mw_req, sched));
        req->admitted = true;
        unpark(req);
        x = next;
    }
}

void mw_server_wake(struct mw_server *s, uint64_t mask)
{
    for (unsigned i = 0; i < s->n_loops && mask != 0; i++) {
        if ((mask & (1ull << i)) == 0)
            continue;
        mask &= ~(1ull << i);
        uint64_t one = 1;
        ssize_t n = write(s->loops[i].wakefd, &one, sizeof(one));
        (void)n; /* EAGAIN means the counter is already non-zero: it is awake */
    }
}

static void drain_fd(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

/* Unparks everything with a failure and lets MHD close it. */
static void loop_shutdown(struct mw_loop *loop)
{
    for (int round = 0; round < 100; round++) {
        if (list_is_empty(&loop->parked) && round > 0)
            break;
        while (!list_is_empty(&loop->parked)) {
            struct mw_req *req = list_entry(list_first(&loop->parked), struct mw_req, park_link);
            mw_handle_gone(req, true);
            unpark(req);
        }
        MHD_run(loop->daemon);
    }
    /* MHD must not be stopped with suspended connections (API contract). */
    while (!list_is_empty(&loop->parked)) {
        struct mw_req *req = list_entry(list_first(&loop->parked), struct mw_req, park_link);
        mw_handle_gone(req, true);
        unpark(req);
    }
    MHD_stop_daemon(loop->daemon);
    loop->daemon = NULL;
}

static void *loop_main(void *arg)
{
    struct mw_loop *loop = arg;
    struct epoll_event evs[LOOP_EVENTS];
    while (!atomic_load_explicit(&loop->stop, memory_order_acquire)) {
        rearm_timer(loop);
        int timeout = -1;
        MHD_UNSIGNED_LONG_LONG mhd_timeout = 0;
        if (MHD_get_timeout(loop->daemon, &mhd_timeout) == MHD_YES)
            timeout = mhd_timeout > 1000 ? 1000 : (int)mhd_timeout;
        int n = epoll_wait(loop->epfd, evs, LOOP_EVENTS, timeout);
        if (n < 0 && errno != EINTR) {
            log_error("loop %u: epoll_wait: %s", loop->index, strerror(errno));
            break;
        }
        bool timers = false;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_MHD)
                continue;
            if (tag == TAG_TIMER) {
                drain_fd(loop->timerfd);
                loop->armed_ns = 0;
                timers = true;
            } else if (tag == TAG_WAKE) {
                drain_fd(loop->wakefd);
                take_admitted(loop);
            } else {
                /* Frees happen only inside MHD_run, after this batch: req is alive. */
                struct mw_req *req = evs[i].data.ptr;
                if (req->parked && req->watch_fd >= 0) {
                    mw_handle_gone(req, false);
                    unpark(req);
                }
            }
        }
        if (timers)
            fire_timers(loop);
        MHD_run(loop->daemon);
        for (int pass = 0; pass < 4 && loop->kick; pass++) {
            loop->kick = false;
            MHD_run(loop->daemon);
        }
    }
    loop_shutdown(loop);
    return NULL;
}

/* ---- MHD glue ------------------------------------------------------------------ */

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct mw_loop *loop = cls;
    if (*con_cls == NULL)
        mw_tls_on_request(&loop->server->tls, conn);
    return mw_handle_access(loop, loop->server, conn, url, method, upload_data, upload_data_size,
                            con_cls);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    struct mw_req *req = *con_cls;
    *con_cls = NULL;
    if (req == NULL)
        return;
    park_detach(req);
    mw_handle_completed(req, toe);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (!log_is_enabled(LOG_LEVEL_DEBUG))
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        msg[--len] = '\0';
    log_debug("libmicrohttpd: %s", msg);
}

static int epoll_add_tag(int epfd, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

static int loop_init(struct mw_loop *loop, struct mw_server *s, unsigned index)
{
    memset(loop, 0, sizeof(*loop));
    loop->server = s;
    loop->index = index;
    loop->epfd = -1;
    loop->timerfd = -1;
    loop->wakefd = -1;
    list_init(&loop->parked);
    atomic_init(&loop->stop, false);
    th_heap_init(&loop->heap);
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->epfd < 0 || loop->timerfd < 0 || loop->wakefd < 0)
        return -errno;
    int listen_fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
    if (listen_fd < 0)
        return -errno;
    /* The dup shares the socket; each daemon closes its own descriptor. */
    struct MHD_OptionItem tls_opts[MW_TLS_OPTIONS_MAX];
    mw_tls_mhd_options(&s->tls, tls_opts);
    loop->daemon = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG |
            mw_tls_daemon_flag(&s->tls),
        0, NULL, NULL, access_cb, loop, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_LISTEN_SOCKET,
        (MHD_socket)listen_fd, MHD_OPTION_NOTIFY_COMPLETED, completed_cb, loop,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)MHD_CONNECTION_LIMIT,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)0, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger,
        NULL, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
    if (loop->daemon == NULL) {
        close(listen_fd);
        return -EIO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(loop->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (di == NULL)
        return -EIO;
    int rc = epoll_add_tag(loop->epfd, di->epoll_fd, EPOLLIN, TAG_MHD);
    if (rc == 0)
        rc = epoll_add_tag(loop->epfd, loop->timerfd, EPOLLIN, TAG_TIMER);
    if (rc == 0)
        rc = epoll_add_tag(loop->epfd, loop->wakefd, EPOLLIN, TAG_WAKE);
    return rc;
}

static void loop_fini(struct mw_loop *loop)
{
    if (loop->daemon != NULL)
        MHD_stop_daemon(loop->daemon);
    loop->daemon = NULL;
    th_heap_fini(&loop->heap);
    if (loop->epfd >= 0)
        close(loop->epfd);
    if (loop->timerfd >= 0)
        close(loop->timerfd);
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    loop->epfd = loop->timerfd = loop->wakefd = -1;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static int open_listener(struct mw_server *s, char *err, size_t err_len)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)s->opts.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(s->opts.host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, err_len, "--listen %s: %s", s->opts.host, gai_strerror(gai));
        return -EINVAL;
    }
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
            rc = -errno;
            close(fd);
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
        s->listen_fd = fd;
        rc = 0;
        break;
    }
    freeaddrinfo(res);
    if (rc != 0)
        snprintf(err, err_len, "--listen %s:%u: %s", s->opts.host, (unsigned)s->opts.port,
                 strerror(-rc));
    return rc;
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void random_engine_id(char *out, size_t len)
{
    uint64_t r[2] = {0, 0};
    if (rng_fill_random(r, sizeof(r)) != 0) {
        r[0] = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
        r[1] = mw_now_ns();
    }
    /* UUID-shaped like vLLM's engine ids. */
    snprintf(out, len, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(r[0] >> 32),
             (unsigned)(r[0] >> 16) & 0xffffu, (unsigned)r[0] & 0xffffu,
             (unsigned)(r[1] >> 48) & 0xffffu, (unsigned long long)(r[1] & 0xffffffffffffull));
}

int mw_server_init(struct mw_server *s, const struct mw_options *opts, char *err, size_t err_len)
{
    memset(s, 0, sizeof(*s));
    s->opts = *opts;
    s->listen_fd = -1;
    s->ocfg.model = s->opts.model;
    for (uint32_t i = 0; i < s->opts.n_names; i++)
        s->model_names[s->ocfg.n_names++] = s->opts.names[i];
    /* Adapters live in the run-time set (lora.h): they can be unloaded. */
    mw_lora_init((const char(*)[128])s->opts.lora_names, (const char(*)[256])s->opts.lora_paths,
                 s->opts.n_lora);
    s->ocfg.model_extra = mw_lora_has;
    s->ocfg.names = s->model_names;
    s->ocfg.max_model_len = opts->max_model_len;
    s->ocfg.output_tokens = opts->output_tokens;
    s->ocfg.kv_ids_flat = opts->kv_ids_flat;
    s->started = (int64_t)time(NULL);
    atomic_init(&s->unique, 0);
    atomic_init(&s->tail_ids, 0);
    atomic_init(&s->stopping, false);
    if (opts->engine_id[0] != '\0')
        snprintf(s->engine_id, sizeof(s->engine_id), "%s", opts->engine_id);
    else
        random_engine_id(s->engine_id, sizeof(s->engine_id));
    uint64_t seed = 0;
    if (rng_fill_random(&seed, sizeof(seed)) == 0)
        atomic_store_explicit(&s->unique, seed, memory_order_relaxed);
    /* As vLLM's NONE_HASH: block hashes nobody outside can recompute. */
    if (rng_fill_random(&s->none_hash, sizeof(s->none_hash)) != 0)
        s->none_hash = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();

    int rc = mw_engine_init(&s->engine, opts->kv_blocks, opts->block_tokens, opts->max_num_seqs);
    if (rc != 0) {
        snprintf(err, err_len, "engine: %s", strerror(-rc));
        return rc;
    }
    rc = mw_stats_init(&s->stats);
    if (rc == 0)
        rc = mw_fault_state_init(&s->faults);
    if (rc == 0)
        rc = mw_pd_pins_init(&s->pins, opts->kv_lease_ms);
    if (rc != 0) {
        snprintf(err, err_len, "init: %s", strerror(-rc));
        goto out_engine;
    }
    raise_fd_limit();
    rc = mw_tls_load(&s->tls, opts, err, err_len);
    if (rc != 0)
        goto out_state;
    rc = open_listener(s, err, err_len);
    if (rc != 0)
        goto out_tls;
    if (opts->kv_events_endpoint[0] != '\0') {
        const struct mw_kv_events_config kc = {
            .endpoint = opts->kv_events_endpoint,
            .replay_endpoint = opts->kv_events_replay_endpoint,
            .array_format = opts->kv_events_array,
            .hash_bytes = opts->kv_events_hash_bytes,
            .hybrid = opts->kv_groups_hybrid,
            .buffer_steps = opts->kv_events_buffer_steps,
            .block_tokens = opts->block_tokens,
            .dp_rank = 0,
        };
        rc = mw_kv_events_create(&kc, &s->kv_events, err, err_len);
        if (rc != 0)
            goto out_listener;
        mw_engine_set_observer(&s->engine, mw_kv_events_observer(s->kv_events));
        log_info(
            "kv events on %s (replay %s, format %s, hashes %s, groups %s)",
            opts->kv_events_endpoint,
            opts->kv_events_replay_endpoint[0] != '\0' ? opts->kv_events_replay_endpoint : "off",
            opts->kv_events_array ? "array" : "map", opts->kv_events_hash_bytes ? "bytes" : "int",
            opts->kv_groups_hybrid ? "hybrid" : "single");
    }
    return 0;

out_listener:
    close(s->listen_fd);
    s->listen_fd = -1;
out_tls:
    mw_tls_fini(&s->tls);
out_state:
    mw_fault_state_fini(&s->faults);
    mw_stats_fini(&s->stats);
out_engine:
    mw_engine_fini(&s->engine);
    return rc;
}

static void stop_loops(struct mw_server *s)
{
    atomic_store_explicit(&s->stopping, true, memory_order_release);
    for (unsigned i = 0; i < s->n_loops; i++) {
        atomic_store_explicit(&s->loops[i].stop, true, memory_order_release);
        mw_server_wake(s, 1ull << i);
    }
    for (unsigned i = 0; i < s->n_loops; i++) {
        if (s->loops[i].thread_started)
            pthread_join(s->loops[i].thread, NULL);
        s->loops[i].thread_started = false;
    }
}

int mw_server_start(struct mw_server *s)
{
    s->loops = calloc(s->opts.threads, sizeof(*s->loops));
    if (s->loops == NULL)
        return -ENOMEM;
    s->n_loops = s->opts.threads;
    int rc = 0;
    for (unsigned i = 0; i < s->n_loops && rc == 0; i++) {
        rc = loop_init(&s->loops[i], s, i);
        if (rc != 0)
            log_error("loop %u: setup failed: %s", i, strerror(-rc));
    }
    for (unsigned i = 0; i < s->n_loops && rc == 0; i++) {
        rc = -pthread_create(&s->loops[i].thread, NULL, loop_main, &s->loops[i]);
        s->loops[i].thread_started = rc == 0;
    }
    if (rc == 0) {
        if (strchr(s->opts.host, ':') != NULL)
            log_info("listening on [%s]:%u", s->opts.host, (unsigned)s->port);
        else
            log_info("listening on %s:%u", s->opts.host, (unsigned)s->port);
        log_info("model=%s role=%s engine_id=%s threads=%u", s->opts.model,
                 mw_role_name(s->opts.role), s->engine_id, s->n_loops);
    }
    return rc;
}

void mw_server_stop(struct mw_server *s)
{
    stop_loops(s);
    for (unsigned i = 0; i < s->n_loops; i++)
        loop_fini(&s->loops[i]);
}

int mw_server_run(struct mw_server *s)
{
    int rc = mw_server_start(s);
    if (rc == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        int sig = 0;
        while (sigwait(&set, &sig) != 0)
            ;
        log_info("signal %d: stopping", sig);
    }
    mw_server_stop(s);
    return rc;
}

void mw_server_fini(struct mw_server *s)
{
    free(s->loops);
    s->loops = NULL;
    s->n_loops = 0;
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    s->listen_fd = -1;
    mw_engine_set_observer(&s->engine, NULL);
    mw_kv_events_destroy(s->kv_events);
    s->kv_events = NULL;
    mw_pd_pins_fini(&s->pins);
    mw_tls_fini(&s->tls);
    mw_fault_state_fini(&s->faults);
    mw_stats_fini(&s->stats);
    mw_engine_fini(&s->engine);
}
