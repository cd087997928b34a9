/*
 * The access log's rings and writer thread (see access_log.h).
 *
 * Waking the writer without a system call per line: the writer sets
 * `sleeping` before it checks the rings a last time and blocks on its
 * eventfd; a loop that appended a line reads `sleeping` afterwards and only
 * when it is set (and it wins the exchange) writes the eventfd. Both sides
 * order their store before their load with a seq_cst fence, so at least
 * one sees the other: the line is never left in a ring while the writer
 * sleeps.
 */
#include "dataplane/obs/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "dataplane/core/spsc_ring.h"

#define DP_ALOG_CHUNK      (64u * 1024u) /* bytes per write(2) to a file */
#define DP_ALOG_PIPE_CHUNK 4096u         /* ... to stderr: PIPE_BUF, so lines stay whole */
#define DP_ALOG_IDLE_MS    1000

struct dp_alog {
    char path[CFG_PATH_MAX]; /* "" = stderr */
    int fd;
    size_t ring_cap;
    struct dp_ring *_Atomic rings[DP_ALOG_MAX_LOOPS]; /* allocated by each loop at its first line */
    _Atomic uint64_t *dropped;
    pthread_t thread;
    int evfd;
    _Atomic bool sleeping;
    _Atomic bool reopen;
    _Atomic bool stop;
    bool write_failed; /* warned once */
    char chunk[DP_ALOG_CHUNK];
};

bool dp_alog_is_off(const char *setting)
{
    return setting[0] == '\0' || strcmp(setting, "off") == 0;
}

static int alog_open_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    return fd >= 0 ? fd : -errno;
}

static void alog_reopen_now(struct dp_alog *log)
{
    if (log->path[0] == '\0')
        return;
    int fd = alog_open_file(log->path);
    if (fd < 0) {
        log_warn("access log: reopening %s: %s; writing on to the file already open", log->path,
                 strerror(-fd));
        return;
    }
    close(log->fd);
    log->fd = fd;
    log->write_failed = false;
    log_info("access log: reopened %s", log->path);
}

static size_t alog_count_lines(const char *s, size_t n)
{
    size_t lines = 0;
    for (const char *p = s; (p = memchr(p, '\n', (size_t)(s + n - p))) != NULL; p++)
        lines++;
    return lines;
}

/* Writes n bytes whole; a failure drops them (counted) and warns once. */
static void alog_write_all(struct dp_alog *log, const char *s, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(log->fd, s + done, n - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = log->fd, .events = POLLOUT};
            (void)poll(&p, 1, 100);
            continue;
        }
        if (!log->write_failed)
            log_warn("access log: write to %s: %s; lines are dropped until it works again",
                     log->path[0] != '\0' ? log->path : "stderr",
                     w < 0 ? strerror(errno) : "nothing written");
        log->write_failed = true;
        atomic_fetch_add_explicit(log->dropped, alog_count_lines(s + done, n - done),
                                  memory_order_relaxed);
        return;
    }
}

/* Moves one ring's whole lines to the file; returns the bytes taken. */
static size_t alog_drain_ring(struct dp_alog *log, struct dp_ring *r)
{
    size_t limit = log->path[0] != '\0' ? DP_ALOG_CHUNK : DP_ALOG_PIPE_CHUNK;
    size_t total = 0;
    for (;;) {
        struct iovec iov[2];
        size_t have = dp_ring_peek(r, iov);
        if (have == 0)
            return total;
        size_t n = have < limit ? have : limit;
        size_t first = iov[0].iov_len < n ? iov[0].iov_len : n;
        memcpy(log->chunk, iov[0].iov_base, first);
        memcpy(log->chunk + first, iov[1].iov_base, n - first);
        /* Whole lines only: cut after the last newline (every line ends
         * with one and is shorter than the chunk). */
        size_t cut = n;
        while (cut > 0 && log->chunk[cut - 1] != '\n')
            cut--;
        if (cut == 0)
            cut = n;
        alog_write_all(log, log->chunk, cut);
        dp_ring_consume(r, cut);
        total += cut;
    }
}

static size_t alog_drain(struct dp_alog *log)
{
    size_t total = 0;
    for (unsigned i = 0; i < DP_ALOG_MAX_LOOPS; i++) {
        struct dp_ring *r = atomic_load_explicit(&log->rings[i], memory_order_acquire);
        if (r != NULL)
            total += alog_drain_ring(log, r);
    }
    return total;
}

static bool alog_pending(struct dp_alog *log)
{
    for (unsigned i = 0; i < DP_ALOG_MAX_LOOPS; i++) {
        struct dp_ring *r = atomic_load_explicit(&log->rings[i], memory_order_acquire);
        struct iovec iov[2];
        if (r != NULL && dp_ring_peek(r, iov) > 0)
            return true;
    }
    return false;
}

static void *alog_main(void *arg)
{
    struct dp_alog *log = arg;
    for (;;) {
        bool stop = atomic_load_explicit(&log->stop, memory_order_acquire);
        if (atomic_exchange_explicit(&log->reopen, false, memory_order_acq_rel))
            alog_reopen_now(log);
        size_t n = alog_drain(log);
        if (stop && n == 0)
            return NULL;
        if (n > 0) {
            if (!stop) {
                struct timespec ts = {.tv_nsec = DP_ALOG_BATCH_MS * 1000000L};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        atomic_store_explicit(&log->sleeping, true, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        if (!alog_pending(log) && !atomic_load_explicit(&log->stop, memory_order_seq_cst) &&
            !atomic_load_explicit(&log->reopen, memory_order_seq_cst)) {
            struct pollfd p = {.fd = log->evfd, .events = POLLIN};
            if (poll(&p, 1, DP_ALOG_IDLE_MS) > 0) {
                uint64_t v;
                (void)read(log->evfd, &v, sizeof(v));
            }
        }
        atomic_store_explicit(&log->sleeping, false, memory_order_relaxed);
    }
}

static void alog_wake(struct dp_alog *log)
{
    uint64_t one = 1;
    if (write(log->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("access log: waking the writer: %s", strerror(errno));
}

int dp_alog_open(const struct cfg *cfg, _Atomic uint64_t *dropped, struct dp_alog **out)
{
    *out = NULL;
    const char *setting = cfg->dataplane.access_log;
    if (dp_alog_is_off(setting))
        return 0;
    struct dp_alog *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    log->dropped = dropped;
    log->ring_cap = (size_t)cfg->dataplane.access_log_buffer;
    if (strcmp(setting, "stderr") == 0) {
        log->fd = STDERR_FILENO;
    } else {
        snprintf(log->path, sizeof(log->path), "%s", setting);
        log->fd = alog_open_file(log->path);
        if (log->fd < 0) {
            int rc = log->fd;
            log_error("%s: dataplane.access_log: cannot open %s: %s", cfg->path, log->path,
                      strerror(-rc));
            free(log);
            return rc;
        }
    }
    log->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = log->evfd < 0 ? -errno : -pthread_create(&log->thread, NULL, alog_main, log);
    if (rc != 0) {
        if (log->evfd >= 0)
            close(log->evfd);
        if (log->path[0] != '\0')
            close(log->fd);
        free(log);
        return rc;
    }
    *out = log;
    return 0;
}

void dp_alog_close(struct dp_alog *log)
{
    if (log == NULL)
        return;
    atomic_store_explicit(&log->stop, true, memory_order_seq_cst);
    alog_wake(log);
    pthread_join(log->thread, NULL);
    for (unsigned i = 0; i < DP_ALOG_MAX_LOOPS; i++) {
        struct dp_ring *r = atomic_load_explicit(&log->rings[i], memory_order_acquire);
        if (r != NULL) {
            dp_ring_fini(r);
            free(r);
        }
    }
    close(log->evfd);
    if (log->path[0] != '\0')
        close(log->fd);
    free(log);
}

/* Loop `index`'s ring, made at its first line (the writer sees it published). */
static struct dp_ring *alog_ring(struct dp_alog *log, unsigned index)
{
    struct dp_ring *r = atomic_load_explicit(&log->rings[index], memory_order_relaxed);
    if (r != NULL)
        return r;
    r = malloc(sizeof(*r));
    if (r == NULL)
        return NULL;
    if (dp_ring_init(r, log->ring_cap) != 0) {
        free(r);
        return NULL;
    }
    atomic_store_explicit(&log->rings[index], r, memory_order_release);
    return r;
}

void dp_alog_write(struct dp_alog *log, unsigned index, const char *line, size_t len)
{
    struct dp_ring *r = index < DP_ALOG_MAX_LOOPS ? alog_ring(log, index) : NULL;
    if (r == NULL || !dp_ring_push(r, line, len)) {
        atomic_fetch_add_explicit(log->dropped, 1, memory_order_relaxed);
        return;
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&log->sleeping, memory_order_seq_cst) &&
        atomic_exchange_explicit(&log->sleeping, false, memory_order_seq_cst))
        alog_wake(log);
}

void dp_alog_reopen(struct dp_alog *log)
{
    if (log == NULL)
        return;
    atomic_store_explicit(&log->reopen, true, memory_order_seq_cst);
    alog_wake(log);
}
