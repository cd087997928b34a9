/*
 * The KV-event subscriber (see kv_subscriber.h). One thread sleeps in
 * zmq_poll over an eventfd (the "workers changed" doorbell that
 * kvs_set_workers rings) and every publisher's SUB socket. A replay is
 * done inline on that thread with a fresh DEALER socket per request (so a
 * late answer to an abandoned request can never be mistaken for the next
 * one's) and a deadline for the whole exchange; meanwhile the other
 * publishers' messages wait in their sockets' queues.
 *
 * A replayed batch is delivered as it arrives, in order, so nothing is
 * buffered beyond ZeroMQ's own queues; a replay that stops short has then
 * delivered part of the gap, which the on_forget that follows voids.
 *
 * Locking: s->lock guards the desired set, the counters and the workers
 * array's membership (the thread changes membership under it; stats
 * readers copy under it). Sockets, sequence state and the decoder are the
 * thread's alone.
 */
#include "controlplane/kv/kv_subscriber.h"

#include "common/histogram.h"
#include "common/log.h"
#include "common/prom.h"
#include "controlplane/kv/kv_event_decode.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#define KVS_RECENT             64 /* delivered (seq, payload hash) kept per publisher */
#define KVS_DRAIN_PER_WAKE     256
#define KVS_DEFAULT_TIMEOUT_MS 2000
#define KVS_DEFAULT_MAX_GAP    10000
#define KVS_DEFAULT_MAX_MSG    (64 * 1024 * 1024)
#define KVS_END_SEQ            UINT64_MAX /* -1 as 8 signed bytes */

struct kvs_worker;

/* One publisher (a worker's data-parallel rank). Subscriber thread only. */
struct kvs_pub {
    struct kvs_worker *w;
    uint32_t rank;
    void *sub; /* NULL when the endpoint could not be connected */
    char endpoint[KVS_ENDPOINT_MAX];
    char replay[KVS_ENDPOINT_MAX]; /* "" = none */
    bool started;                  /* a first batch was seen */
    uint64_t next;                 /* the sequence number expected */
    struct {
        uint64_t seq;
        uint64_t hash;
    } recent[KVS_RECENT];
    size_t n_recent, recent_pos;
};

/* One followed worker; heap, owned by the subscriber's workers array. */
struct kvs_worker {
    struct kvs_worker_spec spec;
    struct kvs_pub *pubs;       /* spec.data_parallel_size entries */
    struct kvs_worker_stats st; /* s->lock */
};

struct kv_subscriber {
    struct kv_event_sink sink;
    struct kvs_options opt;
    void *zctx;
    int efd;
    pthread_t thread;
    bool thread_started;
    _Atomic bool stopping;
    struct kvd_decoder *dec; /* thread */

    pthread_mutex_t lock;
    struct kvs_worker_spec *desired; /* owned; what kvs_set_workers last gave */
    size_t n_desired;
    bool dirty;
    struct kvs_stats st;
    struct kvs_worker **workers; /* membership under lock; written by the thread only */
    size_t n_workers;
    struct histogram lag; /* a batch's ts to its events applied (lock-free) */
};

/* Event lag: from a fraction of a millisecond (same host, idle) to seconds
 * (a replay, a busy control plane, clocks apart). */
static const double kvs_lag_bounds_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,    0.25,  0.5,    1,     2.5,  5,     10};

/* ---- endpoints --------------------------------------------------------------- */

/* Splits tcp://HOST:PORT; host may be empty, '*' or [v6]. */
static int split_tcp(const char *ep, const char **host, size_t *host_len, unsigned *port)
{
    if (strncmp(ep, "tcp://", 6) != 0)
        return -EINVAL;
    const char *h = ep + 6;
    const char *colon = strrchr(h, ':');
    if (colon == NULL)
        return -EINVAL;
    if (h[0] == '[' && (colon == h || colon[-1] != ']'))
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || p == 0 || p > 65535 || colon[1] < '0' ||
        colon[1] > '9')
        return -EINVAL;
    *host = h;
    *host_len = (size_t)(colon - h);
    *port = (unsigned)p;
    return 0;
}

/* The host of an http(s)://HOST:PORT/... url, brackets kept for IPv6. */
static int url_host(const char *url, const char **host, size_t *len)
{
    const char *h = strstr(url, "://");
    if (h == NULL)
        return -EINVAL;
    h += 3;
    const char *end = h[0] == '[' ? strchr(h, ']') : h + strcspn(h, ":/");
    if (end == NULL)
        return -EINVAL;
    if (h[0] == '[')
        end++;
    if (end == h)
        return -EINVAL;
    *host = h;
    *len = (size_t)(end - h);
    return 0;
}

int kvs_resolve_endpoint(const char *configured, const char *worker_url, char *out, size_t out_len)
{
    const char *host;
    size_t host_len;
    unsigned port;
    if (split_tcp(configured, &host, &host_len, &port) != 0)
        return -EINVAL;
    if (host_len == 0 || (host_len == 1 && host[0] == '*')) {
        if (worker_url == NULL || url_host(worker_url, &host, &host_len) != 0)
            return -EINVAL;
    }
    int n = snprintf(out, out_len, "tcp://%.*s:%u", (int)host_len, host, port);
    return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

/* The endpoint of rank r: port + r, as vLLM's offset_endpoint_port. */
static int rank_endpoint(const char *ep, uint32_t r, char *out, size_t out_len)
{
    const char *host;
    size_t host_len;
    unsigned port;
    if (split_tcp(ep, &host, &host_len, &port) != 0 || port + r > 65535)
        return -EINVAL;
    int n = snprintf(out, out_len, "tcp://%.*s:%u", (int)host_len, host, port + r);
    return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

static bool spec_valid(const struct kvs_worker_spec *w)
{
    char tmp[KVS_ENDPOINT_MAX];
    if (w->data_parallel_size < 1 || w->data_parallel_size > KVS_DP_MAX)
        return false;
    if (rank_endpoint(w->endpoint, w->data_parallel_size - 1, tmp, sizeof(tmp)) != 0)
        return false;
    return w->replay_endpoint[0] == '\0' ||
           rank_endpoint(w->replay_endpoint, w->data_parallel_size - 1, tmp, sizeof(tmp)) == 0;
}

static bool spec_equal(const struct kvs_worker_spec *a, const struct kvs_worker_spec *b)
{
    return a->slot == b->slot && a->generation == b->generation && strcmp(a->id, b->id) == 0 &&
           strcmp(a->endpoint, b->endpoint) == 0 &&
           strcmp(a->replay_endpoint, b->replay_endpoint) == 0 &&
           a->data_parallel_size == b->data_parallel_size;
}

/* ---- time, sockets ------------------------------------------------------------ */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *open_socket(struct kv_subscriber *s, int type, const char *endpoint)
{
    void *z = zmq_socket(s->zctx, type);
    if (z == NULL)
        return NULL;
    int linger = 0, hwm = 100000; /* as vLLM's publisher's high-water mark */
    int64_t max = (int64_t)s->opt.max_message_bytes;
    zmq_setsockopt(z, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(z, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(z, ZMQ_MAXMSGSIZE, &max, sizeof(max));
    if (type == ZMQ_SUB)
        zmq_setsockopt(z, ZMQ_SUBSCRIBE, "", 0); /* every topic (vLLM's default is "") */
    if (zmq_connect(z, endpoint) != 0) {
        log_warn("kv events: connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zmq_close(z);
        return NULL;
    }
    return z;
}

/* Receives one multipart message into parts (the rest of a longer one is
 * read and dropped); returns its frame count, or -1 when none is waiting. */
static int recv_parts(void *z, zmq_msg_t *parts, int cap)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t extra;
        zmq_msg_t *m = n < cap ? &parts[n] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, z, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            return n > 0 ? n : -1;
        }
        more = zmq_msg_more(m);
        if (m == &extra)
            zmq_msg_close(m);
        n++;
    }
    return n;
}

static void close_parts(zmq_msg_t *parts, int n, int cap)
{
    for (int i = 0; i < n && i < cap; i++)
        zmq_msg_close(&parts[i]);
}

static bool seq_of(zmq_msg_t *m, uint64_t *out)
{
    if (zmq_msg_size(m) != 8)
        return false;
    const unsigned char *p = zmq_msg_data(m);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    *out = v;
    return true;
}

/* ---- delivery ------------------------------------------------------------------ */

static void forget(struct kv_subscriber *s, struct kvs_worker *w, const char *why)
{
    log_info("kv events: worker %s: forgetting its blocks (%s)", w->spec.id, why);
    s->sink.on_forget(s->sink.ctx, w->spec.slot, w->spec.id);
}

/* A sync that the index's view of w is void (a resync); counted. */
static void resync(struct kv_subscriber *s, struct kvs_worker *w, const char *why)
{
    pthread_mutex_lock(&s->lock);
    s->st.resyncs++;
    w->st.resyncs++;
    pthread_mutex_unlock(&s->lock);
    forget(s, w, why);
}

static void remember(struct kvs_pub *p, uint64_t seq, uint64_t hash)
{
    p->recent[p->recent_pos].seq = seq;
    p->recent[p->recent_pos].hash = hash;
    p->recent_pos = (p->recent_pos + 1) % KVS_RECENT;
    if (p->n_recent < KVS_RECENT)
        p->n_recent++;
}

static bool seen_before(const struct kvs_pub *p, uint64_t seq, uint64_t hash)
{
    for (size_t i = 0; i < p->n_recent; i++)
        if (p->recent[i].seq == seq && p->recent[i].hash == hash)
            return true;
    return false;
}

/* Decodes and hands one batch to the sink; the publisher then expects seq + 1. */
static void deliver(struct kv_subscriber *s, struct kvs_pub *p, uint64_t seq, const void *data,
                    size_t len, bool replayed)
{
    struct kvs_worker *w = p->w;
    struct kv_event_batch b;
    struct kvd_counts counts = {0};
    char err[160];
    int rc = kvd_decode(s->dec, data, len, &b, &counts, err, sizeof(err));
    p->next = seq + 1;
    remember(p, seq, XXH3_64bits(data, len));
    pthread_mutex_lock(&s->lock);
    s->st.unknown_fields += counts.unknown_fields;
    s->st.unknown_events += counts.unknown_events;
    if (rc != 0) {
        s->st.decode_errors++;
        w->st.decode_errors++;
    } else {
        s->st.batches++;
        w->st.batches++;
        s->st.replayed += replayed;
        for (size_t i = 0; i < b.n_events; i++) {
            enum kv_event_kind k = b.events[i].kind;
            s->st.stored += k == KV_EVENT_BLOCK_STORED;
            s->st.removed += k == KV_EVENT_BLOCK_REMOVED;
            s->st.cleared += k == KV_EVENT_ALL_BLOCKS_CLEARED;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        log_warn("kv events: worker %s rank %u: batch %llu does not decode: %s", w->spec.id,
                 p->rank, (unsigned long long)seq, err);
        resync(s, w, "a batch it sent could not be read");
        return;
    }
    b.seq = seq;
    s->sink.on_batch(s->sink.ctx, w->spec.slot, w->spec.id, &b);
    /* The lag: the batch's ts (the worker's wall clock when it made the
     * batch, time.time() in vLLM) to now, its events applied. Across hosts
     * it includes their clock offset; a negative one counts as 0. */
    if (b.ts > 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        histogram_observe(&s->lag, (double)now.tv_sec + (double)now.tv_nsec / 1e9 - b.ts);
    }
}

/*
 * Asks p's replay endpoint for [from, until) and delivers those batches in
 * order as they come. Returns true when all of them were delivered.
 */
static bool replay(struct kv_subscriber *s, struct kvs_pub *p, uint64_t from, uint64_t until)
{
    void *d = open_socket(s, ZMQ_DEALER, p->replay);
    if (d == NULL)
        return false;
    pthread_mutex_lock(&s->lock);
    s->st.replays++;
    pthread_mutex_unlock(&s->lock);
    unsigned char start[8];
    for (int i = 0; i < 8; i++)
        start[i] = (unsigned char)(from >> (56 - 8 * i));
    /* The empty delimiter first: vLLM's ROUTER reads (identity, "", start). */
    bool ok = false;
    uint64_t expected = from;
    if (zmq_send(d, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(d, start, 8, ZMQ_DONTWAIT) < 0)
        goto out_close;
    uint64_t deadline = now_ms() + s->opt.replay_timeout_ms;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            break;
        zmq_pollitem_t it = {.socket = d, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)(deadline - now)) <= 0)
            break;
        zmq_msg_t parts[4];
        int n = recv_parts(d, parts, 4);
        if (n < 0)
            continue;
        /* After the delimiter: (topic, seq, payload) now, (seq, payload) before. */
        uint64_t seq = 0;
        int seq_i = n == 4 ? 2 : n == 3 ? 1 : -1;
        bool good = seq_i > 0 && zmq_msg_size(&parts[0]) == 0 && seq_of(&parts[seq_i], &seq);
        bool done = false;
        if (!good) {
            log_warn("kv events: worker %s rank %u: malformed replay reply (%d frames)",
                     p->w->spec.id, p->rank, n);
            done = true;
        } else if (seq == KVS_END_SEQ) {
            done = true; /* the end: it did not reach until (else we stopped before) */
        } else if (seq > expected) {
            done = true; /* the buffer no longer holds `expected` */
        } else if (seq == expected) {
            deliver(s, p, seq, zmq_msg_data(&parts[seq_i + 1]), zmq_msg_size(&parts[seq_i + 1]),
                    true);
            expected++;
            ok = expected == until;
            done = ok;
        }
        close_parts(parts, n, 4);
        if (done)
            break;
    }
out_close:
    zmq_close(d);
    if (!ok)
        log_warn("kv events: worker %s rank %u: replay of %llu..%llu from %s %s at %llu",
                 p->w->spec.id, p->rank, (unsigned long long)from, (unsigned long long)until - 1,
                 p->replay, expected == from ? "gave nothing" : "stopped",
                 (unsigned long long)expected);
    return ok;
}

/* One batch from p's SUB socket, in whatever order it came. */
static void on_message(struct kv_subscriber *s, struct kvs_pub *p, uint64_t seq, const void *data,
                       size_t len)
{
    struct kvs_worker *w = p->w;
    if (!p->started) {
        p->started = true;
        p->next = seq;
    }
    if (seq > p->next) {
        pthread_mutex_lock(&s->lock);
        s->st.gaps++;
        w->st.gaps++;
        pthread_mutex_unlock(&s->lock);
        uint64_t from = p->next;
        bool covered =
            p->replay[0] != '\0' && seq - from <= s->opt.max_gap && replay(s, p, from, seq);
        if (!covered)
            resync(s, w,
                   p->replay[0] == '\0' ? "a sequence gap and no replay endpoint"
                                        : "a sequence gap that replay did not fill");
    } else if (seq < p->next) {
        if (seen_before(p, seq, XXH3_64bits(data, len))) {
            pthread_mutex_lock(&s->lock);
            s->st.duplicates++;
            pthread_mutex_unlock(&s->lock);
            return;
        }
        pthread_mutex_lock(&s->lock);
        s->st.restarts++;
        pthread_mutex_unlock(&s->lock);
        resync(s, w, "its publisher restarted: the sequence went back");
        p->n_recent = 0;
    }
    deliver(s, p, seq, data, len, false);
}

/* Drains up to KVS_DRAIN_PER_WAKE messages of p's SUB socket. */
static void drain(struct kv_subscriber *s, struct kvs_pub *p)
{
    for (int k = 0; k < KVS_DRAIN_PER_WAKE && p->sub != NULL; k++) {
        zmq_msg_t parts[3];
        int n = recv_parts(p->sub, parts, 3);
        if (n < 0)
            return;
        uint64_t seq;
        if (n == 3 && seq_of(&parts[1], &seq)) {
            on_message(s, p, seq, zmq_msg_data(&parts[2]), zmq_msg_size(&parts[2]));
        } else {
            pthread_mutex_lock(&s->lock);
            s->st.decode_errors++;
            p->w->st.decode_errors++;
            pthread_mutex_unlock(&s->lock);
            log_warn("kv events: worker %s rank %u: a message of %d frames, not (topic, seq, "
                     "batch): dropped",
                     p->w->spec.id, p->rank, n);
        }
        close_parts(parts, n, 3);
    }
}

/* ---- following the registry ---------------------------------------------------- */

static void worker_close(struct kvs_worker *w)
{
    for (uint32_t r = 0; w->pubs != NULL && r < w->spec.data_parallel_size; r++)
        if (w->pubs[r].sub != NULL)
            zmq_close(w->pubs[r].sub);
    free(w->pubs);
    free(w);
}

static struct kvs_worker *worker_open(struct kv_subscriber *s, const struct kvs_worker_spec *spec)
{
    struct kvs_worker *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->spec = *spec;
    w->pubs = calloc(spec->data_parallel_size, sizeof(*w->pubs));
    if (w->pubs == NULL) {
        free(w);
        return NULL;
    }
    snprintf(w->st.id, sizeof(w->st.id), "%s", spec->id);
    w->st.slot = spec->slot;
    for (uint32_t r = 0; r < spec->data_parallel_size; r++) {
        struct kvs_pub *p = &w->pubs[r];
        p->w = w;
        p->rank = r;
        /* spec_valid checked that every rank's port exists. */
        (void)rank_endpoint(spec->endpoint, r, p->endpoint, sizeof(p->endpoint));
        if (spec->replay_endpoint[0] != '\0')
            (void)rank_endpoint(spec->replay_endpoint, r, p->replay, sizeof(p->replay));
        p->sub = open_socket(s, ZMQ_SUB, p->endpoint);
    }
    log_info("kv events: worker %s (slot %u): subscribed to %s%s%s (%u rank%s)", spec->id,
             spec->slot, spec->endpoint, spec->replay_endpoint[0] != '\0' ? ", replay " : "",
             spec->replay_endpoint, spec->data_parallel_size,
             spec->data_parallel_size == 1 ? "" : "s");
    return w;
}

/* Makes the followed workers what kvs_set_workers last said. */
static void apply_desired(struct kv_subscriber *s)
{
    pthread_mutex_lock(&s->lock);
    if (!s->dirty) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    s->dirty = false;
    size_t n = s->n_desired;
    struct kvs_worker_spec *want = malloc((n + 1) * sizeof(*want));
    if (want != NULL && n > 0)
        memcpy(want, s->desired, n * sizeof(*want));
    pthread_mutex_unlock(&s->lock);
    if (want == NULL) {
        log_error("kv events: out of memory following the registry");
        return;
    }
    /* Leavers first: a worker whose spec changed is forgotten, then added anew. */
    for (size_t i = 0; i < s->n_workers;) {
        struct kvs_worker *w = s->workers[i];
        bool kept = false;
        for (size_t j = 0; j < n && !kept; j++)
            kept = spec_equal(&w->spec, &want[j]);
        if (kept) {
            i++;
            continue;
        }
        pthread_mutex_lock(&s->lock);
        s->workers[i] = s->workers[--s->n_workers];
        pthread_mutex_unlock(&s->lock);
        forget(s, w, "it left the registry or its kv_events changed");
        log_info("kv events: worker %s: unsubscribed", w->spec.id);
        worker_close(w);
    }
    for (size_t j = 0; j < n; j++) {
        bool have = false;
        for (size_t i = 0; i < s->n_workers && !have; i++)
            have = spec_equal(&s->workers[i]->spec, &want[j]);
        if (have)
            continue;
        struct kvs_worker *w = worker_open(s, &want[j]);
        struct kvs_worker **grown =
            w != NULL ? realloc(s->workers, (s->n_workers + 1) * sizeof(*grown)) : NULL;
        if (grown == NULL) {
            log_error("kv events: out of memory subscribing to worker %s", want[j].id);
            if (w != NULL)
                worker_close(w);
            continue;
        }
        pthread_mutex_lock(&s->lock);
        s->workers = grown;
        s->workers[s->n_workers++] = w;
        pthread_mutex_unlock(&s->lock);
    }
    free(want);
}

/* ---- the thread ------------------------------------------------------------------- */

static void *kvs_main(void *arg)
{
    struct kv_subscriber *s = arg;
    zmq_pollitem_t *items = NULL;
    struct kvs_pub **owners = NULL;
    size_t cap = 0;
    while (!atomic_load_explicit(&s->stopping, memory_order_acquire)) {
        size_t n = 1;
        for (size_t i = 0; i < s->n_workers; i++)
            n += s->workers[i]->spec.data_parallel_size;
        if (n > cap) {
            zmq_pollitem_t *ni = realloc(items, n * sizeof(*ni));
            if (ni != NULL)
                items = ni;
            struct kvs_pub **no = realloc(owners, n * sizeof(*no));
            if (no != NULL)
                owners = no;
            if (ni == NULL || no == NULL) {
                log_error("kv events: out of memory; retrying");
                usleep(100000);
                continue;
            }
            cap = n;
        }
        size_t k = 0;
        items[k++] = (zmq_pollitem_t){.fd = s->efd, .events = ZMQ_POLLIN};
        for (size_t i = 0; i < s->n_workers; i++) {
            struct kvs_worker *w = s->workers[i];
            for (uint32_t r = 0; r < w->spec.data_parallel_size; r++) {
                if (w->pubs[r].sub == NULL)
                    continue;
                owners[k] = &w->pubs[r];
                items[k++] = (zmq_pollitem_t){.socket = w->pubs[r].sub, .events = ZMQ_POLLIN};
            }
        }
        int rc = zmq_poll(items, (int)k, 1000);
        if (rc < 0) {
            if (zmq_errno() != EINTR)
                log_warn("kv events: poll: %s", zmq_strerror(zmq_errno()));
            continue;
        }
        for (size_t i = 1; i < k; i++)
            if (items[i].revents & ZMQ_POLLIN)
                drain(s, owners[i]);
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            (void)!read(s->efd, &v, sizeof(v));
            apply_desired(s);
        }
    }
    free(items);
    free(owners);
    return NULL;
}

/* ---- lifecycle and the public calls ------------------------------------------------ */

int kvs_create(const struct kv_event_sink *sink, const struct kvs_options *opts,
               struct kv_subscriber **out)
{
    *out = NULL;
    struct kv_subscriber *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->sink = *sink;
    if (opts != NULL)
        s->opt = *opts;
    if (s->opt.replay_timeout_ms == 0)
        s->opt.replay_timeout_ms = KVS_DEFAULT_TIMEOUT_MS;
    if (s->opt.max_gap == 0)
        s->opt.max_gap = KVS_DEFAULT_MAX_GAP;
    if (s->opt.max_message_bytes == 0)
        s->opt.max_message_bytes = KVS_DEFAULT_MAX_MSG;
    s->efd = -1;
    int rc = -pthread_mutex_init(&s->lock, NULL);
    if (rc != 0) {
        free(s);
        return rc;
    }
    atomic_init(&s->stopping, false);
    histogram_init(&s->lag, kvs_lag_bounds_s,
                   sizeof(kvs_lag_bounds_s) / sizeof(kvs_lag_bounds_s[0]));
    s->dec = kvd_create(NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->zctx = zmq_ctx_new();
    /* A SUB socket per publisher: ZeroMQ's default of 1,023 sockets a
     * context would leave the rest of a larger fleet unread. As many as
     * the descriptor limit could hold (each socket takes at least one). */
    if (s->zctx != NULL) {
        struct rlimit rl;
        int cap = zmq_ctx_get(s->zctx, ZMQ_SOCKET_LIMIT);
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur < (rlim_t)cap)
            cap = (int)rl.rlim_cur;
        if (cap > zmq_ctx_get(s->zctx, ZMQ_MAX_SOCKETS))
            zmq_ctx_set(s->zctx, ZMQ_MAX_SOCKETS, cap);
    }
    rc = s->dec == NULL ? -ENOMEM : s->efd < 0 || s->zctx == NULL ? -EIO : 0;
    if (rc == 0) {
        rc = -pthread_create(&s->thread, NULL, kvs_main, s);
        s->thread_started = rc == 0;
    }
    if (rc != 0) {
        kvs_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

void kvs_destroy(struct kv_subscriber *s)
{
    if (s == NULL)
        return;
    if (s->thread_started) {
        atomic_store_explicit(&s->stopping, true, memory_order_release);
        uint64_t one = 1;
        (void)!write(s->efd, &one, sizeof(one));
        pthread_join(s->thread, NULL);
    }
    for (size_t i = 0; i < s->n_workers; i++)
        worker_close(s->workers[i]);
    free(s->workers);
    if (s->zctx != NULL)
        zmq_ctx_term(s->zctx);
    if (s->efd >= 0)
        close(s->efd);
    kvd_destroy(s->dec);
    free(s->desired);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int kvs_set_workers(struct kv_subscriber *s, const struct kvs_worker_spec *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!spec_valid(&w[i]))
            return -EINVAL;
    struct kvs_worker_spec *copy = malloc((n + 1) * sizeof(*copy));
    if (copy == NULL)
        return -ENOMEM;
    if (n > 0)
        memcpy(copy, w, n * sizeof(*copy));
    pthread_mutex_lock(&s->lock);
    free(s->desired);
    s->desired = copy;
    s->n_desired = n;
    s->dirty = true;
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    (void)!write(s->efd, &one, sizeof(one));
    return 0;
}

void kvs_stats(struct kv_subscriber *s, struct kvs_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->st;
    pthread_mutex_unlock(&s->lock);
}

size_t kvs_worker_stats(struct kv_subscriber *s, struct kvs_worker_stats *out, size_t cap)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->n_workers;
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = s->workers[i]->st;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static void per_worker(struct prom_writer *w, const char *name, const char *help,
                       const struct kvs_worker_stats *ws, size_t n, size_t field)
{
    prom_family(w, name, PROM_COUNTER, help);
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&ws[i] + field, sizeof(v));
        const struct prom_label l[] = {{"worker", ws[i].id}};
        prom_sample_u64(w, NULL, l, 1, v);
    }
}

void kvs_metrics(struct kv_subscriber *s, struct prom_writer *w)
{
    if (s == NULL)
        return;
    struct kvs_stats st;
    kvs_stats(s, &st);
    size_t cap = kvs_worker_stats(s, NULL, 0);
    struct kvs_worker_stats *ws = calloc(cap + 1, sizeof(*ws));
    size_t n = 0;
    if (ws != NULL) {
        n = kvs_worker_stats(s, ws, cap); /* the set may have changed in between */
        n = n < cap ? n : cap;
    }
    prom_family(w, "switchyard_kv_events_subscriptions", PROM_GAUGE,
                "Workers whose KV-cache events the control plane follows.");
    prom_sample_u64(w, NULL, NULL, 0, n);
    per_worker(w, "switchyard_kv_events_batches_total",
               "KV-event batches delivered to the index, replayed ones included.", ws, n,
               offsetof(struct kvs_worker_stats, batches));
    prom_family(w, "switchyard_kv_events_total", PROM_COUNTER,
                "KV-cache events in delivered batches, by kind.");
    const struct prom_label ks[] = {{"kind", "stored"}}, kr[] = {{"kind", "removed"}},
                            kc[] = {{"kind", "cleared"}};
    prom_sample_u64(w, NULL, ks, 1, st.stored);
    prom_sample_u64(w, NULL, kr, 1, st.removed);
    prom_sample_u64(w, NULL, kc, 1, st.cleared);
    per_worker(w, "switchyard_kv_events_gaps_total", "Sequence gaps seen in a worker's batches.",
               ws, n, offsetof(struct kvs_worker_stats, gaps));
    prom_family(w, "switchyard_kv_events_replays_total", PROM_COUNTER,
                "Replay requests sent to workers' replay endpoints.");
    prom_sample_u64(w, NULL, NULL, 0, st.replays);
    prom_family(w, "switchyard_kv_events_replayed_batches_total", PROM_COUNTER,
                "Batches delivered from replay.");
    prom_sample_u64(w, NULL, NULL, 0, st.replayed);
    per_worker(w, "switchyard_kv_events_resyncs_total",
               "Times a worker's blocks were forgotten: a gap replay did not fill, a restarted "
               "publisher or an unreadable batch.",
               ws, n, offsetof(struct kvs_worker_stats, resyncs));
    prom_family(w, "switchyard_kv_events_restarts_total", PROM_COUNTER,
                "Publishers whose sequence went back (the worker restarted).");
    prom_sample_u64(w, NULL, NULL, 0, st.restarts);
    prom_family(w, "switchyard_kv_events_duplicates_total", PROM_COUNTER,
                "Batches received again after replay had delivered them, dropped.");
    prom_sample_u64(w, NULL, NULL, 0, st.duplicates);
    per_worker(w, "switchyard_kv_events_decode_errors_total",
               "Messages or batches that could not be read.", ws, n,
               offsetof(struct kvs_worker_stats, decode_errors));
    prom_family(w, "switchyard_kv_events_unknown_total", PROM_COUNTER,
                "Unknown fields and events the decoder skipped (a newer vLLM).");
    const struct prom_label sf[] = {{"what", "field"}}, se[] = {{"what", "event"}};
    prom_sample_u64(w, NULL, sf, 1, st.unknown_fields);
    prom_sample_u64(w, NULL, se, 1, st.unknown_events);
    prom_family(w, "switchyard_kv_events_lag_seconds", PROM_HISTOGRAM,
                "From a KV-event batch's timestamp (the worker's clock) to its events applied "
                "to the index, in seconds.");
    histogram_write(&s->lag, w, NULL, 0);
    free(ws);
}
