/*
 * The mock worker's KV-event publisher (see kv_events.h). Batches are
 * packed with msgpack-c under the engine lock (so their sequence numbers
 * follow the cache's order), queued, and sent by the publisher thread,
 * which owns the PUB and ROUTER sockets: ZeroMQ sockets are not
 * thread-safe, and vLLM too publishes from one thread fed by a queue. The
 * thread sleeps in zmq_poll on the ROUTER socket and an eventfd that the
 * queue's producers write.
 */
#include "tests/mockworker/kv_events.h"

#include "common/log.h"

#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define KV_DIGEST_BYTES 32
#define KV_SW_CAP       4 /* blocks the hybrid sliding-window group holds */

/* One packed batch: on the queue, then in the replay ring. */
struct kv_batch {
    uint64_t seq;
    char *data;
    size_t len;
    struct kv_batch *next; /* queue link */
};

struct mw_kv_events {
    struct mw_kv_events_config cfg;
    struct mw_kv_observer observer;
    void *zctx;
    void *pub;
    void *router; /* NULL without replay */
    int efd;
    pthread_t thread;
    bool thread_started;
    _Atomic bool stopping;

    /* Built under the engine lock (observer callbacks only). */
    msgpack_sbuffer pending;
    msgpack_packer pending_pk;
    size_t pending_events;
    uint64_t sw[KV_SW_CAP]; /* hybrid: the sliding group's blocks, oldest at sw_start */
    size_t sw_start, sw_n;

    /* Queue from the observer to the thread, and the fault knobs. */
    pthread_mutex_t lock;
    struct kv_batch *q_head, *q_tail;
    uint64_t next_seq;
    uint64_t drop_left;
    bool reorder_armed;
    bool replay_off;

    /* Publisher thread only. */
    struct kv_batch **ring; /* buffer_steps slots, oldest at ring_start */
    size_t ring_start, ring_n;
    struct kv_batch *held; /* reorder: sent after the next batch */
};

/* ---- packing (engine lock held) -------------------------------------------- */

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_hash(struct mw_kv_events *ev, uint64_t h)
{
    msgpack_packer *pk = &ev->pending_pk;
    if (!ev->cfg.hash_bytes) {
        msgpack_pack_uint64(pk, h);
        return;
    }
    /* A digest whose int form (its last 8 bytes, big-endian) is h; the
     * leading bytes are filler derived from h, as a real digest has some. */
    unsigned char d[KV_DIGEST_BYTES];
    uint64_t x = h ^ 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < KV_DIGEST_BYTES - 8; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (unsigned char)(x >> 56);
    }
    for (int i = 0; i < 8; i++)
        d[KV_DIGEST_BYTES - 1 - i] = (unsigned char)(h >> (8 * i));
    msgpack_pack_bin(pk, sizeof(d));
    msgpack_pack_bin_body(pk, d, sizeof(d));
}

static void pack_hashes(struct mw_kv_events *ev, const uint64_t *hashes, size_t n)
{
    msgpack_pack_array(&ev->pending_pk, n);
    for (size_t i = 0; i < n; i++)
        pack_hash(ev, hashes[i]);
}

/* The event's start: the map header and tag, or the array header and tag. */
static void pack_event_head(struct mw_kv_events *ev, const char *tag, size_t n_fields)
{
    msgpack_packer *pk = &ev->pending_pk;
    if (ev->cfg.array_format) {
        msgpack_pack_array(pk, 1 + n_fields);
    } else {
        msgpack_pack_map(pk, 1 + n_fields);
        pack_cstr(pk, "type");
    }
    pack_cstr(pk, tag);
}

/* A field's name in map form; nothing in array form (position says it). */
static void pack_key(struct mw_kv_events *ev, const char *key)
{
    if (!ev->cfg.array_format)
        pack_cstr(&ev->pending_pk, key);
}

/* The sliding-window group's window: this many blocks of a run are kept
 * (the run's tail); the blocks before them are masked, as vLLM's sliding
 * window manager masks blocks wholly outside the window with its null
 * block, which cache_full_blocks leaves out of block_hashes. */
#define KV_WINDOW_BLOCKS 2u

/*
 * One BlockStored of group `group` (map form: every field vLLM's current
 * struct sends; array form: the older 7 positional fields). hashes[0..n)
 * are the group's blocks, which in the sliding-window group are the tail
 * of the run of n_run blocks whose tokens token_ids still covers whole.
 */
static void pack_stored(struct mw_kv_events *ev, int group, const uint64_t *hashes, size_t n,
                        size_t n_run, const uint64_t *parent, const char *text, const char *salt,
                        size_t salt_len)
{
    msgpack_packer *pk = &ev->pending_pk;
    bool sliding = group == 1;
    size_t n_tokens = n_run * ev->cfg.block_tokens;
    pack_event_head(ev, "BlockStored", ev->cfg.array_format ? 7 : 10 + (sliding ? 1 : 0));
    ev->pending_events++;
    pack_key(ev, "block_hashes");
    pack_hashes(ev, hashes, n);
    pack_key(ev, "parent_block_hash");
    if (parent != NULL)
        pack_hash(ev, *parent);
    else
        msgpack_pack_nil(pk);
    /* The token rule of /tokenize: 4 bytes of text, little-endian. */
    pack_key(ev, "token_ids");
    msgpack_pack_array(pk, n_tokens);
    const unsigned char *t = (const unsigned char *)text;
    for (size_t i = 0; i < n_tokens; i++, t += MW_BYTES_PER_TOKEN)
        msgpack_pack_uint32(pk, (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                                    (uint32_t)t[3] << 24);
    pack_key(ev, "block_size");
    msgpack_pack_uint32(pk, ev->cfg.block_tokens);
    pack_key(ev, "lora_id");
    msgpack_pack_nil(pk);
    pack_key(ev, "medium");
    pack_cstr(pk, "GPU");
    pack_key(ev, "lora_name");
    msgpack_pack_nil(pk);
    if (ev->cfg.array_format)
        return;
    /* One entry per hash: the cache_salt is the first block's only extra
     * key (generate_block_hash_extra_keys: start_token_idx == 0), which a
     * group that masked that block does not send. */
    pack_key(ev, "extra_keys");
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
        if (salt != NULL && parent == NULL && i == 0 && n == n_run) {
            msgpack_pack_array(pk, 1);
            msgpack_pack_str(pk, salt_len);
            msgpack_pack_str_body(pk, salt, salt_len);
        } else {
            msgpack_pack_nil(pk);
        }
    }
    pack_key(ev, "group_idx");
    msgpack_pack_uint32(pk, (uint32_t)group);
    pack_key(ev, "kv_cache_spec_kind");
    pack_cstr(pk, sliding ? "sliding_window" : "full_attention");
    if (sliding) {
        pack_key(ev, "kv_cache_spec_sliding_window");
        msgpack_pack_uint32(pk, KV_WINDOW_BLOCKS * ev->cfg.block_tokens);
    }
}

static void pack_removed(struct mw_kv_events *ev, int group, const uint64_t *hashes, size_t n)
{
    pack_event_head(ev, "BlockRemoved", ev->cfg.array_format ? 2 : 3);
    pack_key(ev, "block_hashes");
    pack_hashes(ev, hashes, n);
    pack_key(ev, "medium");
    pack_cstr(&ev->pending_pk, "GPU");
    if (!ev->cfg.array_format) {
        pack_key(ev, "group_idx");
        msgpack_pack_uint32(&ev->pending_pk, (uint32_t)group);
    }
    ev->pending_events++;
}

/* Index of h among the sliding group's blocks, or sw_n. */
static size_t sw_find(const struct mw_kv_events *ev, uint64_t h)
{
    size_t i = 0;
    while (i < ev->sw_n && ev->sw[(ev->sw_start + i) % KV_SW_CAP] != h)
        i++;
    return i;
}

/* The sliding group's pool is small (its blocks are freed as the window
 * moves on, so vLLM reuses them first): storing past its capacity evicts
 * its oldest block, reported as a BlockRemoved of group 1 alone while the
 * full-attention group still holds that block. */
static void sw_store(struct mw_kv_events *ev, uint64_t h)
{
    if (sw_find(ev, h) < ev->sw_n)
        return;
    if (ev->sw_n == KV_SW_CAP) {
        uint64_t old = ev->sw[ev->sw_start];
        ev->sw_start = (ev->sw_start + 1) % KV_SW_CAP;
        ev->sw_n--;
        pack_removed(ev, 1, &old, 1);
    }
    ev->sw[(ev->sw_start + ev->sw_n) % KV_SW_CAP] = h;
    ev->sw_n++;
}

/* Drops h from the sliding group (the full group evicted it): true when it
 * was there. */
static bool sw_drop(struct mw_kv_events *ev, uint64_t h)
{
    size_t i = sw_find(ev, h);
    if (i == ev->sw_n)
        return false;
    for (; i + 1 < ev->sw_n; i++)
        ev->sw[(ev->sw_start + i) % KV_SW_CAP] = ev->sw[(ev->sw_start + i + 1) % KV_SW_CAP];
    ev->sw_n--;
    return true;
}

static void obs_stored(void *ctx, const uint64_t *hashes, size_t n, const uint64_t *parent,
                       const char *text, const char *salt, size_t salt_len)
{
    struct mw_kv_events *ev = ctx;
    pack_stored(ev, 0, hashes, n, n, parent, text, salt, salt_len);
    if (!ev->cfg.hybrid)
        return;
    size_t keep = n < KV_WINDOW_BLOCKS ? n : KV_WINDOW_BLOCKS;
    pack_stored(ev, 1, hashes + (n - keep), keep, n, parent, text, salt, salt_len);
    for (size_t i = n - keep; i < n; i++)
        sw_store(ev, hashes[i]);
}

static void obs_removed(void *ctx, const uint64_t *hashes, size_t n)
{
    struct mw_kv_events *ev = ctx;
    pack_removed(ev, 0, hashes, n);
    for (size_t i = 0; ev->cfg.hybrid && i < n; i++)
        if (sw_drop(ev, hashes[i]))
            pack_removed(ev, 1, &hashes[i], 1);
}

static void obs_cleared(void *ctx)
{
    struct mw_kv_events *ev = ctx;
    pack_event_head(ev, "AllBlocksCleared", 0);
    ev->sw_n = 0;
    ev->pending_events++;
}

static void wake_thread(struct mw_kv_events *ev)
{
    uint64_t one = 1;
    if (write(ev->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("kv events: eventfd write: %s", strerror(errno));
}

/* Wraps the pending events into a batch, numbers it and queues it. */
static void obs_flush(void *ctx)
{
    struct mw_kv_events *ev = ctx;
    if (ev->pending_events == 0)
        return;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double ts = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    /* KVEventBatch is an array_like struct in every vLLM: positional. */
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, ts);
    msgpack_pack_array(&pk, ev->pending_events);
    msgpack_sbuffer_write(&sb, ev->pending.data, ev->pending.size);
    msgpack_pack_int(&pk, ev->cfg.dp_rank);
    msgpack_sbuffer_clear(&ev->pending);
    ev->pending_events = 0;

    struct kv_batch *b = calloc(1, sizeof(*b));
    if (b == NULL || sb.data == NULL) {
        /* The batch is lost as a dropped message would be: the next one
         * shows the gap, and replay cannot fill it (a real hazard too). */
        free(b);
        msgpack_sbuffer_destroy(&sb);
        pthread_mutex_lock(&ev->lock);
        ev->next_seq++;
        pthread_mutex_unlock(&ev->lock);
        return;
    }
    b->len = sb.size;
    b->data = msgpack_sbuffer_release(&sb);
    msgpack_sbuffer_destroy(&sb);
    pthread_mutex_lock(&ev->lock);
    b->seq = ev->next_seq++;
    if (ev->q_tail != NULL)
        ev->q_tail->next = b;
    else
        ev->q_head = b;
    ev->q_tail = b;
    pthread_mutex_unlock(&ev->lock);
    wake_thread(ev);
}

/* ---- the publisher thread ---------------------------------------------------- */

static void put_seq(unsigned char out[8], int64_t seq)
{
    uint64_t u = (uint64_t)seq;
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(u >> (56 - 8 * i));
}

static void send_pub(struct mw_kv_events *ev, const struct kv_batch *b)
{
    unsigned char seq[8];
    put_seq(seq, (int64_t)b->seq);
    if (zmq_send(ev->pub, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(ev->pub, seq, 8, ZMQ_SNDMORE) < 0 ||
        zmq_send(ev->pub, b->data, b->len, 0) < 0)
        log_warn("kv events: send seq %llu: %s", (unsigned long long)b->seq,
                 zmq_strerror(zmq_errno()));
}

static void ring_push(struct mw_kv_events *ev, struct kv_batch *b)
{
    size_t cap = ev->cfg.buffer_steps;
    if (ev->ring_n == cap) {
        struct kv_batch *old = ev->ring[ev->ring_start];
        free(old->data);
        free(old);
        ev->ring_start = (ev->ring_start + 1) % cap;
        ev->ring_n--;
    }
    ev->ring[(ev->ring_start + ev->ring_n) % cap] = b;
    ev->ring_n++;
}

/* Sends (or, under a fault, withholds) one batch, then keeps it for replay. */
static void publish(struct mw_kv_events *ev, struct kv_batch *b)
{
    pthread_mutex_lock(&ev->lock);
    bool drop = ev->drop_left > 0;
    if (drop)
        ev->drop_left--;
    bool hold = !drop && ev->reorder_armed && ev->held == NULL;
    if (hold)
        ev->reorder_armed = false;
    pthread_mutex_unlock(&ev->lock);
    if (drop) {
        log_info("kv events: fault: seq %llu not sent", (unsigned long long)b->seq);
    } else if (hold) {
        ev->held = b;
    } else {
        send_pub(ev, b);
        if (ev->held != NULL) {
            log_info("kv events: fault: seq %llu sent after %llu",
                     (unsigned long long)ev->held->seq, (unsigned long long)b->seq);
            send_pub(ev, ev->held);
            ev->held = NULL;
        }
    }
    ring_push(ev, b);
}

/* Sends one reply message: [identity, (delimiter,)] then frames. */
static int send_reply(void *sock, zmq_msg_t *id, bool delim, const void *const *frames,
                      const size_t *lens, size_t n)
{
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    zmq_msg_copy(&copy, id);
    int rc = zmq_msg_send(&copy, sock, ZMQ_SNDMORE) < 0 ? -1 : 0;
    zmq_msg_close(&copy);
    if (rc == 0 && delim)
        rc = zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = zmq_send(sock, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
    return rc;
}

/* Reads one replay request and answers it (see kv_events.h). */
static void serve_replay(struct mw_kv_events *ev)
{
    zmq_msg_t parts[4], extra;
    size_t n = 0, got = 0;
    int more = 1;
    while (more) {
        zmq_msg_t *m = got < 4 ? &parts[got] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, ev->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (m == &extra)
            zmq_msg_close(m);
        else
            n++;
        got++;
    }
    size_t kept = n;
    if (got > 4)
        n = 0; /* not a request: too many frames */
    pthread_mutex_lock(&ev->lock);
    bool off = ev->replay_off;
    pthread_mutex_unlock(&ev->lock);
    /* [id, "", start8] from REQ or a DEALER that sends the delimiter (as
     * vLLM expects), [id, start8] from a bare DEALER. */
    bool delim = n == 3 && zmq_msg_size(&parts[1]) == 0;
    zmq_msg_t *start = n == 3 && delim ? &parts[2] : n == 2 ? &parts[1] : NULL;
    if (start == NULL || zmq_msg_size(start) != 8) {
        log_warn("kv events: invalid replay request (%zu frames)", n);
    } else if (off) {
        log_info("kv events: fault: replay request left unanswered");
    } else {
        const unsigned char *p = zmq_msg_data(start);
        uint64_t from = 0;
        for (int i = 0; i < 8; i++)
            from = from << 8 | p[i];
        size_t sent = 0;
        for (size_t i = 0; i < ev->ring_n; i++) {
            const struct kv_batch *b = ev->ring[(ev->ring_start + i) % ev->cfg.buffer_steps];
            if (b->seq < from)
                continue;
            unsigned char seq[8];
            put_seq(seq, (int64_t)b->seq);
            const void *fr[3] = {"", seq, b->data};
            size_t ln[3] = {0, 8, b->len};
            /* Old vLLM (array format): (seq8, payload), no topic. */
            size_t skip = ev->cfg.array_format ? 1 : 0;
            if (send_reply(ev->router, &parts[0], delim, fr + skip, ln + skip, 3 - skip) != 0)
                break;
            sent++;
        }
        unsigned char end[8];
        put_seq(end, -1);
        const void *fr[3] = {"", end, ""};
        size_t ln[3] = {0, 8, 0};
        size_t skip = ev->cfg.array_format ? 1 : 0;
        (void)send_reply(ev->router, &parts[0], delim, fr + skip, ln + skip, 3 - skip);
        log_info("kv events: replayed %zu batches from seq %llu", sent, (unsigned long long)from);
    }
    for (size_t i = 0; i < kept; i++)
        zmq_msg_close(&parts[i]);
}

static void *publisher_main(void *arg)
{
    struct mw_kv_events *ev = arg;
    while (!atomic_load_explicit(&ev->stopping, memory_order_acquire)) {
        zmq_pollitem_t items[2] = {{.fd = ev->efd, .events = ZMQ_POLLIN},
                                   {.socket = ev->router, .events = ZMQ_POLLIN}};
        int rc = zmq_poll(items, ev->router != NULL ? 2 : 1, -1);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            log_error("kv events: poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            (void)!read(ev->efd, &v, sizeof(v));
            pthread_mutex_lock(&ev->lock);
            struct kv_batch *b = ev->q_head;
            ev->q_head = ev->q_tail = NULL;
            pthread_mutex_unlock(&ev->lock);
            while (b != NULL) {
                struct kv_batch *next = b->next;
                b->next = NULL;
                publish(ev, b);
                b = next;
            }
        }
        if (ev->router != NULL && (items[1].revents & ZMQ_POLLIN))
            serve_replay(ev);
    }
    return NULL;
}

/* ---- lifecycle --------------------------------------------------------------- */

static int bind_socket(void *zctx, int type, const char *endpoint, void **out, char *err,
                       size_t err_len)
{
    void *s = zmq_socket(zctx, type);
    if (s == NULL) {
        snprintf(err, err_len, "kv events: socket: %s", zmq_strerror(zmq_errno()));
        return -EIO;
    }
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (type == ZMQ_PUB) {
        int hwm = 100000; /* vLLM's default */
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    }
    if (zmq_bind(s, endpoint) != 0) {
        snprintf(err, err_len, "kv events: bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return -EADDRINUSE;
    }
    *out = s;
    return 0;
}

int mw_kv_events_create(const struct mw_kv_events_config *cfg, struct mw_kv_events **out, char *err,
                        size_t err_len)
{
    *out = NULL;
    if (cfg->endpoint == NULL || cfg->endpoint[0] == '\0' || cfg->buffer_steps == 0 ||
        cfg->block_tokens == 0 || (cfg->hybrid && cfg->array_format)) {
        snprintf(err, err_len, "kv events: bad configuration%s",
                 cfg->hybrid && cfg->array_format
                     ? " (KV-cache groups came with the map format: --kv-groups hybrid needs it)"
                     : "");
        return -EINVAL;
    }
    struct mw_kv_events *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return -ENOMEM;
    ev->cfg = *cfg;
    ev->efd = -1;
    int rc = -ENOMEM;
    ev->ring = calloc(cfg->buffer_steps, sizeof(*ev->ring));
    if (ev->ring == NULL)
        goto out_free;
    rc = -pthread_mutex_init(&ev->lock, NULL);
    if (rc != 0)
        goto out_free;
    msgpack_sbuffer_init(&ev->pending);
    msgpack_packer_init(&ev->pending_pk, &ev->pending, msgpack_sbuffer_write);
    ev->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ev->zctx = zmq_ctx_new();
    if (ev->efd < 0 || ev->zctx == NULL) {
        snprintf(err, err_len, "kv events: eventfd or zmq context failed");
        rc = -EIO;
        goto out_ctx;
    }
    rc = bind_socket(ev->zctx, ZMQ_PUB, cfg->endpoint, &ev->pub, err, err_len);
    if (rc == 0 && cfg->replay_endpoint != NULL && cfg->replay_endpoint[0] != '\0')
        rc = bind_socket(ev->zctx, ZMQ_ROUTER, cfg->replay_endpoint, &ev->router, err, err_len);
    if (rc != 0)
        goto out_sockets;
    ev->observer = (struct mw_kv_observer){.ctx = ev,
                                           .stored = obs_stored,
                                           .removed = obs_removed,
                                           .cleared = obs_cleared,
                                           .flush = obs_flush};
    atomic_init(&ev->stopping, false);
    rc = -pthread_create(&ev->thread, NULL, publisher_main, ev);
    if (rc != 0) {
        snprintf(err, err_len, "kv events: thread: %s", strerror(-rc));
        goto out_sockets;
    }
    ev->thread_started = true;
    *out = ev;
    return 0;

out_sockets:
    if (ev->router != NULL)
        zmq_close(ev->router);
    if (ev->pub != NULL)
        zmq_close(ev->pub);
out_ctx:
    if (ev->zctx != NULL)
        zmq_ctx_term(ev->zctx);
    if (ev->efd >= 0)
        close(ev->efd);
    msgpack_sbuffer_destroy(&ev->pending);
    pthread_mutex_destroy(&ev->lock);
out_free:
    free(ev->ring);
    free(ev);
    return rc;
}

static void free_chain(struct kv_batch *b)
{
    while (b != NULL) {
        struct kv_batch *next = b->next;
        free(b->data);
        free(b);
        b = next;
    }
}

void mw_kv_events_destroy(struct mw_kv_events *ev)
{
    if (ev == NULL)
        return;
    if (ev->thread_started) {
        atomic_store_explicit(&ev->stopping, true, memory_order_release);
        wake_thread(ev);
        pthread_join(ev->thread, NULL);
    }
    if (ev->router != NULL)
        zmq_close(ev->router);
    zmq_close(ev->pub);
    zmq_ctx_term(ev->zctx);
    close(ev->efd);
    free_chain(ev->q_head);
    /* A held batch (reorder fault) is in the ring too: freed there. */
    for (size_t i = 0; i < ev->ring_n; i++)
        free_chain(ev->ring[(ev->ring_start + i) % ev->cfg.buffer_steps]);
    free(ev->ring);
    msgpack_sbuffer_destroy(&ev->pending);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}

const struct mw_kv_observer *mw_kv_events_observer(struct mw_kv_events *ev)
{
    return &ev->observer;
}

void mw_kv_events_set_faults(struct mw_kv_events *ev, int64_t drop_batches, int reorder,
                             int replay_off)
{
    pthread_mutex_lock(&ev->lock);
    if (drop_batches >= 0)
        ev->drop_left = (uint64_t)drop_batches;
    if (reorder >= 0)
        ev->reorder_armed = reorder != 0;
    if (replay_off >= 0)
        ev->replay_off = replay_off != 0;
    pthread_mutex_unlock(&ev->lock);
}

uint64_t mw_kv_events_batches(struct mw_kv_events *ev)
{
    pthread_mutex_lock(&ev->lock);
    uint64_t n = ev->next_seq;
    pthread_mutex_unlock(&ev->lock);
    return n;
}
