/*
 * The control plane's KV-event subscriber (controlplane/kv/kv_subscriber.h)
 * against real mock workers publishing as vLLM does: in-order delivery with
 * the events' contents, dropped batches found by the sequence gap and
 * filled by replay, reordered batches delivered once, replay unavailable
 * and a restarted worker both ending in on_forget, a worker leaving the set
 * forgotten, both wire forms (maps with int hashes and current replies;
 * arrays with digest hashes and the older two-frame replies), and the
 * smallest gap, one batch, replayed into a holder index (kv_apply) so that
 * its blocks are known. One test runs the real control plane with a
 * worker's kv_events in its config and reads the subscriber's counters
 * from its /metrics.
 *
 * The subscriber is linked in (libcontrolplane.a) and fed a recording sink;
 * the mocks are real processes. A SUB socket misses what is published
 * before it joins, so each test sends probe requests until a first batch
 * is recorded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/token_chain.h"
#include "controlplane/kv/kv_apply.h"
#include "controlplane/kv/kv_subscriber.h"
#include "shm/kv_holders.h"
#include "tests/e2e/harness.h"

#define MODEL   "mock-model"
#define WAIT_MS 8000
#define MAX_REC 512

/* ---- a recording sink ------------------------------------------------------- */

struct rec {
    bool forget;
    uint32_t slot;
    uint64_t seq;
    size_t n_events;
    enum kv_event_kind first_kind;
    size_t first_blocks;
    uint32_t first_token;
};

struct recorder {
    pthread_mutex_t lock;
    struct rec r[MAX_REC];
    size_t n;
    bool wrong_thread_order;         /* a batch of a publisher out of sequence */
    const struct kv_event_sink *tee; /* also fed, before recording; NULL = none */
};

static void on_batch(void *ctx, uint32_t slot, const char *worker_id,
                     const struct kv_event_batch *b)
{
    struct recorder *rc = ctx;
    if (rc->tee != NULL)
        rc->tee->on_batch(rc->tee->ctx, slot, worker_id, b);
    pthread_mutex_lock(&rc->lock);
    if (rc->n < MAX_REC) {
        struct rec *r = &rc->r[rc->n++];
        memset(r, 0, sizeof(*r));
        r->slot = slot;
        r->seq = b->seq;
        r->n_events = b->n_events;
        if (b->n_events > 0) {
            r->first_kind = b->events[0].kind;
            r->first_blocks = b->events[0].n_block_hashes;
            r->first_token = b->events[0].n_token_ids > 0 ? b->events[0].token_ids[0] : 0;
        }
    }
    pthread_mutex_unlock(&rc->lock);
}

static void on_forget(void *ctx, uint32_t slot, const char *worker_id)
{
    struct recorder *rc = ctx;
    if (rc->tee != NULL)
        rc->tee->on_forget(rc->tee->ctx, slot, worker_id);
    pthread_mutex_lock(&rc->lock);
    if (rc->n < MAX_REC) {
        struct rec *r = &rc->r[rc->n++];
        memset(r, 0, sizeof(*r));
        r->forget = true;
        r->slot = slot;
    }
    pthread_mutex_unlock(&rc->lock);
}

static size_t rec_count(struct recorder *rc)
{
    pthread_mutex_lock(&rc->lock);
    size_t n = rc->n;
    pthread_mutex_unlock(&rc->lock);
    return n;
}

static struct rec rec_at(struct recorder *rc, size_t i)
{
    pthread_mutex_lock(&rc->lock);
    struct rec r = rc->r[i];
    pthread_mutex_unlock(&rc->lock);
    return r;
}

struct wait_n {
    struct recorder *rc;
    size_t n;
};

static bool has_n(void *arg)
{
    struct wait_n *w = arg;
    return rec_count(w->rc) >= w->n;
}

static void wait_records(struct recorder *rc, size_t n)
{
    struct wait_n w = {rc, n};
    if (h_wait_until(has_n, &w, WAIT_MS) != 0)
        fail_msg("%zu records after %d ms, want %zu", rec_count(rc), WAIT_MS, n);
}

/* ---- fixtures ---------------------------------------------------------------- */

struct fx {
    struct recorder rc;
    struct kv_subscriber *kvs;
    struct h_mock m;
    char pub[64], replay[64];
    const char *format, *hash; /* mock flags */
    unsigned probes;
};

static void start_mock(struct fx *f)
{
    const char *argv[] = {"--model",
                          MODEL,
                          "--block-tokens",
                          "4",
                          "--kv-blocks",
                          "64",
                          "--kv-events-endpoint",
                          f->pub,
                          "--kv-events-replay-endpoint",
                          f->replay,
                          "--kv-events-format",
                          f->format,
                          "--kv-events-hash",
                          f->hash,
                          NULL};
    assert_int_equal(h_mock_startv(&f->m, argv), 0);
}

static void complete(const struct h_mock *m, const char *prompt)
{
    char url[H_URL_MAX], body[512];
    snprintf(url, sizeof(url), "%s/v1/completions", m->url);
    snprintf(body, sizeof(body), "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":1}", MODEL,
             prompt);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
}

/* A prompt of one new block (16 bytes) per call: one batch each. */
static void one_batch(struct fx *f)
{
    char p[17];
    snprintf(p, sizeof(p), "block-%09u-", f->probes++);
    complete(&f->m, p);
}

/* Probes until the subscriber has delivered a batch; returns the count. */
static size_t join(struct fx *f)
{
    int64_t deadline = h_now_ms() + WAIT_MS;
    while (rec_count(&f->rc) == 0) {
        if (h_now_ms() > deadline)
            fail_msg("the subscriber delivered nothing within %d ms", WAIT_MS);
        one_batch(f);
        struct wait_n w = {&f->rc, 1};
        (void)h_wait_until(has_n, &w, 100);
    }
    /* Probes still in flight settle; then nothing more arrives. */
    size_t n;
    do {
        n = rec_count(&f->rc);
        struct wait_n w = {&f->rc, n + 1};
        (void)h_wait_until(has_n, &w, 300);
    } while (rec_count(&f->rc) != n);
    return n;
}

/* tee: a sink fed each batch and forget too (borrowed; NULL = none). */
static void fx_start_tee(struct fx *f, const char *format, const char *hash, bool with_replay,
                         const struct kv_event_sink *tee)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->rc.lock, NULL);
    f->rc.tee = tee;
    f->format = format;
    f->hash = hash;
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(f->pub, sizeof(f->pub), "tcp://127.0.0.1:%u", p);
    snprintf(f->replay, sizeof(f->replay), "tcp://127.0.0.1:%u", q);
    start_mock(f);
    struct kv_event_sink sink = {.ctx = &f->rc, .on_batch = on_batch, .on_forget = on_forget};
    struct kvs_options o = {.replay_timeout_ms = 3000}; /* slack for sanitizer builds */
    assert_int_equal(kvs_create(&sink, &o, &f->kvs), 0);
    struct kvs_worker_spec w = {.slot = 7, .generation = 3, .data_parallel_size = 1};
    snprintf(w.id, sizeof(w.id), "w1");
    snprintf(w.endpoint, sizeof(w.endpoint), "%s", f->pub);
    if (with_replay)
        snprintf(w.replay_endpoint, sizeof(w.replay_endpoint), "%s", f->replay);
    assert_int_equal(kvs_set_workers(f->kvs, &w, 1), 0);
}

static void fx_start(struct fx *f, const char *format, const char *hash, bool with_replay)
{
    fx_start_tee(f, format, hash, with_replay, NULL);
}

static void fx_stop(struct fx *f)
{
    kvs_destroy(f->kvs);
    pthread_mutex_destroy(&f->rc.lock);
}

/* Records [from, n) are batches with consecutive sequence numbers. */
static void assert_in_order(struct fx *f, size_t from)
{
    size_t n = rec_count(&f->rc);
    for (size_t i = from; i < n; i++) {
        struct rec r = rec_at(&f->rc, i);
        if (r.forget)
            fail_msg("record %zu is an on_forget", i);
        assert_int_equal(r.slot, 7);
        if (i > 0 && !rec_at(&f->rc, i - 1).forget)
            assert_int_equal(r.seq, rec_at(&f->rc, i - 1).seq + 1);
    }
}

static size_t count_forgets(struct fx *f)
{
    size_t k = 0;
    for (size_t i = 0; i < rec_count(&f->rc); i++)
        k += rec_at(&f->rc, i).forget;
    return k;
}

/* ---- the tests ------------------------------------------------------------------ */

static void check_in_order(const char *format, const char *hash)
{
    struct fx f;
    fx_start(&f, format, hash, true);
    size_t base = join(&f);
    complete(&f.m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"); /* two blocks */
    for (int i = 0; i < 5; i++)
        one_batch(&f);
    wait_records(&f.rc, base + 6);
    assert_in_order(&f, 0);
    struct rec r = rec_at(&f.rc, base);
    assert_int_equal(r.n_events, 1);
    assert_int_equal(r.first_kind, KV_EVENT_BLOCK_STORED);
    assert_int_equal(r.first_blocks, 2);
    assert_int_equal(r.first_token, 'A' | 'B' << 8 | 'C' << 16 | (uint32_t)'D' << 24);
    struct kvs_stats st;
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.resyncs, 0);
    assert_int_equal(st.decode_errors, 0);
    assert_true(st.stored >= 6);
    fx_stop(&f);
}

static void test_in_order_map_int(void **state)
{
    (void)state;
    check_in_order("map", "int");
}

static void test_in_order_array_bytes(void **state)
{
    (void)state;
    check_in_order("array", "bytes");
}

/* Two batches dropped on PUB: the gap is seen and replay fills it. */
static void check_gap_replayed(const char *format, const char *hash)
{
    struct fx f;
    fx_start(&f, format, hash, true);
    size_t base = join(&f);
    assert_int_equal(h_mock_faults(f.m.url, "{\"kv_events_drop_batches\": 2}"), 0);
    for (int i = 0; i < 3; i++)
        one_batch(&f);
    wait_records(&f.rc, base + 3);
    assert_in_order(&f, 0);
    assert_int_equal(count_forgets(&f), 0);
    struct kvs_stats st;
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.replays, 1);
    assert_int_equal(st.replayed, 2);
    assert_int_equal(st.resyncs, 0);
    fx_stop(&f);
}

static void test_gap_replayed_map_int(void **state)
{
    (void)state;
    check_gap_replayed("map", "int");
}

static void test_gap_replayed_array_bytes(void **state)
{
    (void)state;
    check_gap_replayed("array", "bytes");
}

/* Two batches swapped on PUB: the early one shows a gap, replay delivers
 * the late one first, and its own late arrival is dropped as seen. */
static void test_reordered_delivered_once(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "map", "int", true);
    size_t base = join(&f);
    assert_int_equal(h_mock_faults(f.m.url, "{\"kv_events_reorder\": true}"), 0);
    one_batch(&f);
    one_batch(&f);
    one_batch(&f);
    wait_records(&f.rc, base + 3);
    struct kvs_stats st;
    struct wait_n w = {&f.rc, base + 4};
    assert_int_not_equal(h_wait_until(has_n, &w, 500), 0); /* nothing more */
    assert_in_order(&f, 0);
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(st.resyncs, 0);
    fx_stop(&f);
}

static int model_is_mock(void *arg, uint32_t slot, const char *worker_id, char *out, size_t len)
{
    (void)arg;
    (void)slot;
    (void)worker_id;
    snprintf(out, len, "%s", MODEL);
    return 0;
}

/* The index key of a one-block prompt (16 bytes: the mock's 4 tokens of 4
 * little-endian bytes, --block-tokens 4), as a data plane hashes it. */
static uint64_t key_of_block(const char *text)
{
    assert_int_equal(strlen(text), 16);
    uint32_t tok[4];
    for (int i = 0; i < 4; i++) {
        const unsigned char *c = (const unsigned char *)text + 4 * i;
        tok[i] = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
    }
    return tkc_next(tkc_seed(MODEL), tok, 4);
}

struct wait_seq {
    struct recorder *rc;
    uint64_t seq;
};

static bool has_seq(void *arg)
{
    struct wait_seq *w = arg;
    for (size_t i = 0; i < rec_count(w->rc); i++) {
        struct rec r = rec_at(w->rc, i);
        if (!r.forget && r.seq == w->seq)
            return true;
    }
    return false;
}

/* The smallest gap: exactly one batch dropped on PUB (the sequence skips
 * by one). The next batch must show it; replay fills it, in order, before
 * that batch; the lost batch's block ends up in the holder index; gaps,
 * replays and replayed batches each go up by one, with no resync. */
static void test_gap_of_one_replayed(void **state)
{
    (void)state;
    static const char lost[] = "LOSTBATCHONE0001";
    struct kvh_index *ix = kvh_create(1024);
    assert_non_null(ix);
    struct kv_apply *kva = kva_create(ix, 4, 16, 1000, model_is_mock, NULL);
    assert_non_null(kva);
    struct kv_event_sink tee = kva_sink(kva);
    struct fx f;
    fx_start_tee(&f, "map", "int", true, &tee);
    size_t base = join(&f);
    uint64_t last = rec_at(&f.rc, base - 1).seq;
    struct kvs_stats before, st;
    kvs_stats(f.kvs, &before);

    assert_int_equal(h_mock_faults(f.m.url, "{\"kv_events_drop_batches\": 1}"), 0);
    complete(&f.m, lost); /* its batch, last + 1, is not sent */
    one_batch(&f);        /* last + 2 shows the gap */
    /* Wait for the batch that shows the gap, not for a count: a gap not
     * noticed delivers that batch alone, and the checks below say so. */
    struct wait_seq shown = {&f.rc, last + 2};
    assert_int_equal(h_wait_until(has_seq, &shown, WAIT_MS), 0);
    struct wait_n more = {&f.rc, base + 3};
    assert_int_not_equal(h_wait_until(has_n, &more, 300), 0); /* nothing more */
    struct rec r = rec_at(&f.rc, base);
    assert_false(r.forget);
    if (r.seq != last + 1)
        fail_msg("after batch %llu came %llu: the gap of one was not replayed",
                 (unsigned long long)last, (unsigned long long)r.seq);
    assert_in_order(&f, 0);
    assert_int_equal(count_forgets(&f), 0);
    assert_int_equal(r.n_events, 1);
    assert_int_equal(r.first_kind, KV_EVENT_BLOCK_STORED);
    assert_int_equal(r.first_blocks, 1);
    assert_int_equal(r.first_token, 'L' | 'O' << 8 | 'S' << 16 | (uint32_t)'T' << 24);
    assert_int_equal(rec_at(&f.rc, base + 1).seq, last + 2);

    kvs_stats(f.kvs, &st);
    assert_int_equal(st.gaps - before.gaps, 1);
    assert_int_equal(st.replays - before.replays, 1);
    assert_int_equal(st.replayed - before.replayed, 1);
    assert_int_equal(st.resyncs, 0);
    assert_int_equal(st.restarts, 0);
    assert_int_equal(st.duplicates, 0);
    struct kvs_worker_stats ws[2];
    assert_int_equal(kvs_worker_stats(f.kvs, ws, 2), 1);
    assert_int_equal(ws[0].gaps, 1);
    assert_int_equal(ws[0].resyncs, 0);
    fx_stop(&f); /* the subscriber's thread is done with kva */

    /* The replayed batch's block is known, for the worker's slot. */
    assert_true(kvh_has(ix, key_of_block(lost), 7));
    struct kva_stats as;
    kva_stats(kva, &as);
    assert_int_equal(as.forgets, 0);
    kva_destroy(kva);
    kvh_destroy(ix);
}

/* A gap with replay unavailable (no answer), then one with no replay
 * endpoint at all: on_forget each time, delivery goes on. */
static void test_replay_unavailable_forgets(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "map", "int", true);
    size_t base = join(&f);
    assert_int_equal(
        h_mock_faults(f.m.url, "{\"kv_events_drop_batches\": 1, \"kv_events_replay_off\": true}"),
        0);
    one_batch(&f); /* dropped */
    one_batch(&f); /* shows the gap */
    wait_records(&f.rc, base + 2);
    struct rec r = rec_at(&f.rc, base);
    assert_true(r.forget);
    assert_int_equal(r.slot, 7);
    r = rec_at(&f.rc, base + 1);
    assert_false(r.forget);
    assert_int_equal(r.seq, rec_at(&f.rc, base - 1).seq + 2);
    struct kvs_stats st;
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.resyncs, 1);
    one_batch(&f); /* in order again */
    wait_records(&f.rc, base + 3);
    assert_false(rec_at(&f.rc, base + 2).forget);
    fx_stop(&f);

    fx_start(&f, "map", "int", false); /* no replay endpoint */
    base = join(&f);
    assert_int_equal(h_mock_faults(f.m.url, "{\"kv_events_drop_batches\": 1}"), 0);
    one_batch(&f);
    one_batch(&f);
    wait_records(&f.rc, base + 2);
    assert_true(rec_at(&f.rc, base).forget);
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.replays, 0);
    assert_int_equal(st.resyncs, 1);
    fx_stop(&f);
}

struct forget_wait {
    struct fx *f;
};

static bool has_forget(void *arg)
{
    return count_forgets(((struct forget_wait *)arg)->f) > 0;
}

/* The worker restarts (same endpoints, sequence from 0 again): on_forget,
 * then its new batches are delivered. */
static void test_restart_forgets(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "map", "int", true);
    join(&f);
    for (int i = 0; i < 20; i++)
        one_batch(&f);
    size_t before = rec_count(&f.rc);
    wait_records(&f.rc, before);
    assert_int_equal(h_proc_stop(f.m.proc, 5000), 0);
    start_mock(&f);
    struct forget_wait fw = {&f};
    int64_t deadline = h_now_ms() + WAIT_MS;
    while (!has_forget(&fw)) {
        if (h_now_ms() > deadline)
            fail_msg("no on_forget after the worker restarted");
        one_batch(&f);
        (void)h_wait_until(has_forget, &fw, 200);
    }
    struct kvs_stats st;
    kvs_stats(f.kvs, &st);
    assert_int_equal(st.restarts, 1);
    assert_int_equal(count_forgets(&f), 1);
    fx_stop(&f);
}

/* A worker leaving the set is forgotten. */
static void test_leaving_worker_forgotten(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "map", "int", true);
    size_t base = join(&f);
    assert_int_equal(kvs_set_workers(f.kvs, NULL, 0), 0);
    wait_records(&f.rc, base + 1);
    assert_true(rec_at(&f.rc, base).forget);
    struct kvs_worker_stats ws[2];
    assert_int_equal(kvs_worker_stats(f.kvs, ws, 2), 0);
    fx_stop(&f);
}

/* Whether 127.0.0.1:port can be bound now. */
static bool port_free(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = fd >= 0 && port <= 65535 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A free port whose successor is free too (a data-parallel pair). */
static uint16_t free_pair(void)
{
    for (int tries = 0; tries < 50; tries++) {
        uint16_t p;
        assert_int_equal(h_free_port(&p), 0);
        if (port_free(p + 1u))
            return p;
    }
    fail_msg("no two consecutive free ports");
    return 0;
}

/* data_parallel_size 2: rank r publishes on port + r and replays on the
 * replay port + r (two mocks stand for the two ranks); both feed the one
 * worker, and a gap on rank 1 is filled from rank 1's replay socket. */
static void test_data_parallel_ranks(void **state)
{
    (void)state;
    struct fx r0, r1;
    memset(&r0, 0, sizeof(r0));
    memset(&r1, 0, sizeof(r1));
    pthread_mutex_init(&r0.rc.lock, NULL);
    r0.format = r1.format = "map";
    r0.hash = r1.hash = "int";
    uint16_t p = free_pair(), q = free_pair();
    snprintf(r0.pub, sizeof(r0.pub), "tcp://127.0.0.1:%u", p);
    snprintf(r0.replay, sizeof(r0.replay), "tcp://127.0.0.1:%u", q);
    snprintf(r1.pub, sizeof(r1.pub), "tcp://127.0.0.1:%u", p + 1u);
    snprintf(r1.replay, sizeof(r1.replay), "tcp://127.0.0.1:%u", q + 1u);
    start_mock(&r0);
    start_mock(&r1);
    struct kv_event_sink sink = {.ctx = &r0.rc, .on_batch = on_batch, .on_forget = on_forget};
    struct kvs_options o = {.replay_timeout_ms = 3000};
    assert_int_equal(kvs_create(&sink, &o, &r0.kvs), 0);
    struct kvs_worker_spec w = {.slot = 7, .generation = 3, .data_parallel_size = 2};
    snprintf(w.id, sizeof(w.id), "dp");
    snprintf(w.endpoint, sizeof(w.endpoint), "%s", r0.pub);
    snprintf(w.replay_endpoint, sizeof(w.replay_endpoint), "%s", r0.replay);
    assert_int_equal(kvs_set_workers(r0.kvs, &w, 1), 0);
    /* Both ranks joined: probe each until it has delivered a batch. */
    size_t before = join(&r0);
    r1.probes = 1000;
    int64_t deadline = h_now_ms() + WAIT_MS;
    for (;;) {
        one_batch(&r1);
        struct wait_n wn = {&r0.rc, rec_count(&r0.rc) + 1};
        if (h_wait_until(has_n, &wn, 200) == 0)
            break;
        if (h_now_ms() > deadline)
            fail_msg("rank 1 delivered nothing within %d ms", WAIT_MS);
    }
    size_t n = join(&r0);
    assert_true(n > before);
    assert_int_equal(h_mock_faults(r1.m.url, "{\"kv_events_drop_batches\": 1}"), 0);
    one_batch(&r1);
    one_batch(&r1);
    wait_records(&r0.rc, n + 2);
    assert_int_equal(count_forgets(&r0), 0);
    struct kvs_stats st;
    kvs_stats(r0.kvs, &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.replayed, 1);
    struct kvs_worker_stats ws[2];
    assert_int_equal(kvs_worker_stats(r0.kvs, ws, 2), 1);
    assert_string_equal(ws[0].id, "dp");
    kvs_destroy(r0.kvs);
    pthread_mutex_destroy(&r0.rc.lock);
}

/* The control plane subscribes to a configured worker's kv_events ('*' =
 * the worker's host) and counts what arrives in its /metrics. */
struct metric_wait {
    const char *url;
    const char *needle;
};

static bool metrics_have(void *arg)
{
    struct metric_wait *m = arg;
    struct h_resp r;
    bool ok = h_http_get(m->url, &r) == 0 && r.status == 200 && strstr(r.body, m->needle) != NULL;
    h_resp_fini(&r);
    return ok;
}

static void test_controlplane_follows_config(void **state)
{
    (void)state;
    struct fx f;
    memset(&f, 0, sizeof(f));
    f.format = "map";
    f.hash = "int";
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(f.pub, sizeof(f.pub), "tcp://127.0.0.1:%u", p);
    snprintf(f.replay, sizeof(f.replay), "tcp://127.0.0.1:%u", q);
    start_mock(&f);
    struct h_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.health_interval = "100ms";
    assert_int_equal(h_config_add_worker(&cfg, f.m.url, "kvw", MODEL, NULL), 0);
    char kv_events[160];
    snprintf(kv_events, sizeof(kv_events),
             "kv_events:\n  endpoint: \"tcp://*:%u\"\n  replay_endpoint: \"tcp://*:%u\"\n", p, q);
    cfg.workers[0].extra = kv_events;
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    struct h_proc *cp;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    char url[H_URL_MAX];
    assert_int_equal(h_url(url, sizeof(url), cfg.admin_port, "/metrics"), 0);
    struct metric_wait mw = {url, "switchyard_kv_events_subscriptions 1"};
    assert_int_equal(h_wait_until(metrics_have, &mw, WAIT_MS), 0);
    /* Batches flow once the subscription has joined: probe until counted. */
    mw.needle = "switchyard_kv_events_batches_total{worker=\"kvw\"} ";
    int64_t deadline = h_now_ms() + WAIT_MS;
    struct metric_wait none = {url, "switchyard_kv_events_batches_total{worker=\"kvw\"} 0"};
    while (!metrics_have(&mw) || metrics_have(&none)) {
        if (h_now_ms() > deadline)
            fail_msg("the control plane counted no KV event batch of worker kvw");
        one_batch(&f);
        (void)h_wait_until(metrics_have, &mw, 200);
    }
    assert_int_equal(h_proc_stop(cp, 5000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_in_order_map_int),         H_TEST(test_in_order_array_bytes),
        H_TEST(test_gap_replayed_map_int),     H_TEST(test_gap_replayed_array_bytes),
        H_TEST(test_reordered_delivered_once), H_TEST(test_replay_unavailable_forgets),
        H_TEST(test_restart_forgets),          H_TEST(test_leaving_worker_forgotten),
        H_TEST(test_data_parallel_ranks),      H_TEST(test_controlplane_follows_config),
        H_TEST(test_gap_of_one_replayed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
