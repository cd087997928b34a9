/*
 * End-to-end tests of the mock worker's KV-cache event publisher
 * (tests/mockworker/kv_events.h) against vLLM's wire format, read with
 * libzmq and msgpack-c's own unpacker (not the control plane's decoder, so
 * the two are checked against each other only through the wire):
 * BlockStored with the token ids /tokenize gives for the same prompt or
 * messages and a parent chain across requests, BlockRemoved under LRU
 * pressure, AllBlocksCleared on /mock/reset, sequence numbers from 0, the
 * replay ROUTER with its end marker in both the current and the older
 * reply form, both event forms and both hash forms, the three KV-event
 * faults, and vllm:cache_config_info in /metrics.
 *
 * A SUB socket only receives what is published after it has joined, so
 * each test first sends small "probe" requests until one batch arrives,
 * then resets the mock; from there on every batch is accounted for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zmq.h>

#include "tests/e2e/harness.h"

#define MODEL        "mock-model"
#define BLOCK_TOKENS 4
#define BLOCK_BYTES  (4 * BLOCK_TOKENS)
#define WAIT_MS      5000

/* ---- a subscriber of our own --------------------------------------------- */

struct sub {
    void *ctx;
    void *sock;
    char pub[64];
    char replay[64];
    struct h_mock m;
};

/* One received message. */
struct msg {
    char topic[32];
    size_t topic_len;
    int64_t seq;
    char *payload; /* owned */
    size_t len;
    msgpack_unpacked up; /* the payload decoded */
    msgpack_object batch;
};

static void msg_fini(struct msg *m)
{
    msgpack_unpacked_destroy(&m->up);
    free(m->payload);
    memset(m, 0, sizeof(*m));
}

static int64_t be64(const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return (int64_t)v;
}

/* Reads one multipart message into frames[] (at most cap); 0 when none came. */
static int recv_frames(void *sock, zmq_msg_t *frames, int cap, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return 0;
    int n = 0, more = 1;
    while (more) {
        assert_true(n < cap);
        zmq_msg_init(&frames[n]);
        assert_true(zmq_msg_recv(&frames[n], sock, 0) >= 0);
        more = zmq_msg_more(&frames[n]);
        n++;
    }
    return n;
}

static void decode_payload(struct msg *out, const void *data, size_t len)
{
    out->payload = malloc(len + 1);
    assert_non_null(out->payload);
    memcpy(out->payload, data, len);
    out->len = len;
    msgpack_unpacked_init(&out->up);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&out->up, out->payload, len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, len);
    out->batch = out->up.data;
}

/* The next PUB message within timeout_ms: 1, or 0 when none came. */
static int sub_next(struct sub *s, struct msg *out, int timeout_ms)
{
    zmq_msg_t f[4];
    memset(out, 0, sizeof(*out));
    int n = recv_frames(s->sock, f, 4, timeout_ms);
    if (n == 0)
        return 0;
    assert_int_equal(n, 3);
    assert_true(zmq_msg_size(&f[0]) < sizeof(out->topic));
    memcpy(out->topic, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]));
    out->topic_len = zmq_msg_size(&f[0]);
    assert_int_equal(zmq_msg_size(&f[1]), 8);
    out->seq = be64(zmq_msg_data(&f[1]));
    decode_payload(out, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

static void post(const struct h_mock *m, const char *path, json_t *body, json_t **answer)
{
    char url[H_URL_MAX], *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    snprintf(url, sizeof(url), "%s%s", m->url, path);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, text, &r), 0);
    free(text);
    if (r.status != 200)
        fail_msg("POST %s: %ld %s", path, r.status, r.body);
    if (answer != NULL)
        *answer = h_resp_json(&r);
    h_resp_fini(&r);
}

static void complete(const struct h_mock *m, const char *prompt)
{
    post(m, "/v1/completions",
         json_pack("{s:s, s:s, s:i}", "model", MODEL, "prompt", prompt, "max_tokens", 1), NULL);
}

/* Starts a mock publishing events (extra flags appended), joins it. */
static void sub_start(struct sub *s, const char *const *extra)
{
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(s->pub, sizeof(s->pub), "tcp://127.0.0.1:%u", p);
    snprintf(s->replay, sizeof(s->replay), "tcp://127.0.0.1:%u", q);
    const char *argv[32] = {"--model",
                            MODEL,
                            "--block-tokens",
                            "4",
                            "--kv-blocks",
                            "8",
                            "--kv-events-endpoint",
                            s->pub,
                            "--kv-events-replay-endpoint",
                            s->replay};
    size_t n = 10;
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    assert_int_equal(h_mock_startv(&s->m, argv), 0);
    s->ctx = zmq_ctx_new();
    s->sock = zmq_socket(s->ctx, ZMQ_SUB);
    int linger = 0;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, "", 0);
    assert_int_equal(zmq_connect(s->sock, s->pub), 0);
    /* Probes until one batch arrives: the subscription is then in place. */
    struct msg m;
    int64_t deadline = h_now_ms() + WAIT_MS;
    for (unsigned i = 0;; i++) {
        char probe[BLOCK_BYTES + 1];
        snprintf(probe, sizeof(probe), "probe-%09u-", i);
        complete(&s->m, probe);
        if (sub_next(s, &m, 100) == 1)
            break;
        if (h_now_ms() > deadline)
            fail_msg("no KV event batch within %d ms", WAIT_MS);
    }
    msg_fini(&m);
    /* Drain whatever other probes produced, then start from a clean cache. */
    while (sub_next(s, &m, 200) == 1)
        msg_fini(&m);
    assert_int_equal(h_mock_reset(s->m.url), 0);
}

static void sub_stop(struct sub *s)
{
    zmq_close(s->sock);
    zmq_ctx_term(s->ctx);
}

/* ---- reading batches with msgpack-c ---------------------------------------- */

static bool str_is(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (str_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

/* The batch's events array, after checking the batch: positional in both
 * forms ([ts, events, data_parallel_rank]: vLLM's EventBatch is an
 * array_like msgspec struct). */
static const msgpack_object *batch_events(const msgpack_object *b, bool array_form)
{
    (void)array_form;
    assert_int_equal(b->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(b->via.array.size, 3);
    assert_true(b->via.array.ptr[0].type == MSGPACK_OBJECT_FLOAT64);
    assert_int_equal(b->via.array.ptr[2].via.u64, 0); /* data_parallel_rank */
    return &b->via.array.ptr[1];
}

/* One event, whichever form: its tag and named fields. */
struct ev {
    const char *tag;
    const msgpack_object *hashes, *parent, *tokens, *block_size, *medium;
};

static struct ev event_at(const msgpack_object *events, uint32_t i, bool array_form)
{
    assert_true(i < events->via.array.size);
    const msgpack_object *e = &events->via.array.ptr[i];
    struct ev out = {0};
    const char *tags[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};
    const msgpack_object *tag = array_form ? &e->via.array.ptr[0] : map_get(e, "type");
    assert_non_null(tag);
    for (int t = 0; t < 3; t++)
        if (str_is(tag, tags[t]))
            out.tag = tags[t];
    assert_non_null(out.tag);
    if (array_form) {
        assert_int_equal(e->type, MSGPACK_OBJECT_ARRAY);
        uint32_t n = e->via.array.size;
        if (strcmp(out.tag, "BlockStored") == 0) {
            assert_int_equal(n, 8); /* tag + 7 fields, in vLLM's order */
            out.hashes = &e->via.array.ptr[1];
            out.parent = &e->via.array.ptr[2];
            out.tokens = &e->via.array.ptr[3];
            out.block_size = &e->via.array.ptr[4];
            out.medium = &e->via.array.ptr[6];
        } else if (strcmp(out.tag, "BlockRemoved") == 0) {
            assert_int_equal(n, 3);
            out.hashes = &e->via.array.ptr[1];
            out.medium = &e->via.array.ptr[2];
        } else {
            assert_int_equal(n, 1);
        }
        return out;
    }
    out.hashes = map_get(e, "block_hashes");
    out.parent = map_get(e, "parent_block_hash");
    out.tokens = map_get(e, "token_ids");
    out.block_size = map_get(e, "block_size");
    out.medium = map_get(e, "medium");
    /* vLLM's current fields: one group (0, full attention), no salt, so
     * every extra_keys entry is nil; a nil sliding window is a default,
     * omitted as msgspec's omit_defaults does. */
    if (strcmp(out.tag, "AllBlocksCleared") != 0) {
        const msgpack_object *g = map_get(e, "group_idx");
        assert_non_null(g);
        assert_int_equal(g->via.u64, 0);
    }
    if (strcmp(out.tag, "BlockStored") == 0) {
        const msgpack_object *x = map_get(e, "extra_keys");
        assert_non_null(x);
        assert_int_equal(x->type, MSGPACK_OBJECT_ARRAY);
        assert_int_equal(x->via.array.size, out.hashes->via.array.size);
        for (uint32_t k = 0; k < x->via.array.size; k++)
            assert_int_equal(x->via.array.ptr[k].type, MSGPACK_OBJECT_NIL);
        const msgpack_object *kind = map_get(e, "kv_cache_spec_kind");
        assert_non_null(kind);
        assert_true(str_is(kind, "full_attention"));
        assert_null(map_get(e, "kv_cache_spec_sliding_window"));
    }
    return out;
}

static uint64_t hash_of(const msgpack_object *o, bool bytes)
{
    if (!bytes) {
        assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        return o->via.u64;
    }
    assert_int_equal(o->type, MSGPACK_OBJECT_BIN);
    assert_int_equal(o->via.bin.size, 32);
    return (uint64_t)be64(o->via.bin.ptr + 24);
}

/* The token ids /tokenize gives for a body. */
static json_t *tokenize(const struct h_mock *m, json_t *body)
{
    json_t *a = NULL;
    post(m, "/tokenize", body, &a);
    json_t *t = json_incref(json_object_get(a, "tokens"));
    json_decref(a);
    assert_true(json_is_array(t));
    return t;
}

static void assert_tokens(const msgpack_object *ids, json_t *want, size_t from, size_t n)
{
    assert_int_equal(ids->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(ids->via.array.size, n);
    assert_true(json_array_size(want) >= from + n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids->via.array.ptr[i].via.u64,
                         json_integer_value(json_array_get(want, from + i)));
}

/* Expects the next batch to be exactly one event of tag; returns it in *m. */
static struct ev expect_one(struct sub *s, struct msg *m, int64_t seq, const char *tag,
                            bool array_form)
{
    if (sub_next(s, m, WAIT_MS) != 1)
        fail_msg("no batch %lld within %d ms", (long long)seq, WAIT_MS);
    assert_int_equal(m->seq, seq);
    assert_int_equal(m->topic_len, 0);
    const msgpack_object *events = batch_events(&m->batch, array_form);
    assert_int_equal(events->via.array.size, 1);
    struct ev e = event_at(events, 0, array_form);
    assert_string_equal(e.tag, tag);
    return e;
}

/* ---- the tests -------------------------------------------------------------- */

static void start_with(struct sub *s, bool array_form, bool bytes, struct msg *cleared)
{
    const char *extra[5] = {NULL};
    size_t k = 0;
    if (array_form) {
        extra[k++] = "--kv-events-format";
        extra[k++] = "array";
    }
    if (bytes) {
        extra[k++] = "--kv-events-hash";
        extra[k++] = "bytes";
    }
    sub_start(s, extra);
    /* The reset of sub_start: one batch, AllBlocksCleared. */
    if (sub_next(s, cleared, WAIT_MS) != 1)
        fail_msg("no AllBlocksCleared batch after /mock/reset");
    const msgpack_object *ev = batch_events(&cleared->batch, array_form);
    assert_int_equal(ev->via.array.size, 1);
    assert_string_equal(event_at(ev, 0, array_form).tag, "AllBlocksCleared");
}

/*
 * A completion, a longer one (its parent is the first one's last block) and
 * a chat request: Stored events carrying /tokenize's token ids for the same
 * prompt or messages, block_size, medium GPU, the parent chain, and hashes
 * the router cannot compute (seeded at random per process, as vLLM's).
 */
static void check_stored_chain(bool array_form, bool bytes)
{
    struct sub s;
    struct msg m;
    start_with(&s, array_form, bytes, &m);
    int64_t seq = m.seq + 1;
    msg_fini(&m);

    /* 44 bytes: two full blocks of 16 bytes; the partial one is never cached. */
    const char *p1 = "The quick brown fox jumps over the lazy dog!";
    complete(&s.m, p1);
    struct ev e = expect_one(&s, &m, seq++, "BlockStored", array_form);
    assert_int_equal(e.hashes->via.array.size, 2);
    assert_int_equal(e.parent->type, MSGPACK_OBJECT_NIL);
    assert_int_equal(e.block_size->via.u64, BLOCK_TOKENS);
    assert_true(str_is(e.medium, "GPU"));
    json_t *t1 = tokenize(&s.m, json_pack("{s:s}", "prompt", p1));
    assert_tokens(e.tokens, t1, 0, 2 * BLOCK_TOKENS);
    uint64_t h1 = hash_of(&e.hashes->via.array.ptr[1], bytes);
    uint64_t h0 = hash_of(&e.hashes->via.array.ptr[0], bytes);
    assert_true(h0 != XXH3_64bits_withSeed(p1, BLOCK_BYTES, 0));
    json_decref(t1);
    msg_fini(&m);

    /* The same two blocks and two more: only the new ones, parent = h1. */
    char p2[128];
    snprintf(p2, sizeof(p2), "%s0123456789abcdefghij", p1); /* 64 bytes */
    complete(&s.m, p2);
    e = expect_one(&s, &m, seq++, "BlockStored", array_form);
    assert_int_equal(e.hashes->via.array.size, 2);
    assert_true(e.parent->type != MSGPACK_OBJECT_NIL);
    assert_true(hash_of(e.parent, bytes) == h1);
    json_t *t2 = tokenize(&s.m, json_pack("{s:s}", "prompt", p2));
    assert_tokens(e.tokens, t2, 2 * BLOCK_TOKENS, 2 * BLOCK_TOKENS);
    json_decref(t2);
    msg_fini(&m);

    /* A cache hit changes nothing: no batch. */
    complete(&s.m, p1);
    assert_int_equal(sub_next(&s, &m, 300), 0);

    /* Chat: the text the cache hashes is the text /tokenize renders. */
    const char *content = "What is the capital of France, please?!"; /* 39 + "user" = 43 */
    post(&s.m, "/v1/chat/completions",
         json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", MODEL, "messages", "role", "user",
                   "content", content, "max_tokens", 1),
         NULL);
    e = expect_one(&s, &m, seq++, "BlockStored", array_form);
    assert_int_equal(e.hashes->via.array.size, 2);
    assert_int_equal(e.parent->type, MSGPACK_OBJECT_NIL);
    json_t *t3 = tokenize(
        &s.m, json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", content));
    assert_tokens(e.tokens, t3, 0, 2 * BLOCK_TOKENS);
    json_decref(t3);
    msg_fini(&m);
    sub_stop(&s);
}

static void test_stored_map_int(void **state)
{
    (void)state;
    check_stored_chain(false, false);
}

static void test_stored_array_bytes(void **state)
{
    (void)state;
    check_stored_chain(true, true);
}

/* 4 + 4 blocks fill the 8-block cache; 2 more evict the first prompt's
 * two least recently used blocks (its tail): Removed, then Stored. */
static void test_removed_under_lru_pressure(void **state)
{
    (void)state;
    struct sub s;
    struct msg m;
    start_with(&s, false, false, &m);
    int64_t seq = m.seq + 1;
    msg_fini(&m);
    const char *a = "AAAAAAAAAAAAAAA1AAAAAAAAAAAAAAA2AAAAAAAAAAAAAAA3AAAAAAAAAAAAAAA4";
    const char *b = "BBBBBBBBBBBBBBB1BBBBBBBBBBBBBBB2BBBBBBBBBBBBBBB3BBBBBBBBBBBBBBB4";
    const char *c = "CCCCCCCCCCCCCCC1CCCCCCCCCCCCCCC2";
    complete(&s.m, a);
    struct ev e = expect_one(&s, &m, seq++, "BlockStored", false);
    uint64_t ha[4];
    for (int i = 0; i < 4; i++)
        ha[i] = hash_of(&e.hashes->via.array.ptr[i], false);
    msg_fini(&m);
    complete(&s.m, b);
    expect_one(&s, &m, seq++, "BlockStored", false);
    msg_fini(&m);
    complete(&s.m, c);
    assert_int_equal(sub_next(&s, &m, WAIT_MS), 1);
    assert_int_equal(m.seq, seq++);
    const msgpack_object *events = batch_events(&m.batch, false);
    assert_int_equal(events->via.array.size, 3);
    e = event_at(events, 0, false);
    assert_string_equal(e.tag, "BlockRemoved");
    assert_true(str_is(e.medium, "GPU"));
    assert_int_equal(e.hashes->via.array.size, 1);
    assert_true(hash_of(&e.hashes->via.array.ptr[0], false) == ha[3]);
    e = event_at(events, 1, false);
    assert_string_equal(e.tag, "BlockRemoved");
    assert_true(hash_of(&e.hashes->via.array.ptr[0], false) == ha[2]);
    e = event_at(events, 2, false);
    assert_string_equal(e.tag, "BlockStored");
    assert_int_equal(e.hashes->via.array.size, 2);
    msg_fini(&m);
    sub_stop(&s);
}

/* Asks the replay socket for everything from start; checks each reply
 * against want[] (payload bytes, seq) and the end marker. n_want < 0:
 * expects no answer at all within 500 ms. */
static void check_replay(const struct sub *s, int64_t start, struct msg *want, int n_want,
                         bool old_form)
{
    void *d = zmq_socket(s->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof(linger));
    assert_int_equal(zmq_connect(d, s->replay), 0);
    unsigned char st[8];
    for (int i = 0; i < 8; i++)
        st[i] = (unsigned char)((uint64_t)start >> (56 - 8 * i));
    assert_int_equal(zmq_send(d, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(d, st, 8, 0), 8);
    zmq_msg_t f[5];
    if (n_want < 0) {
        assert_int_equal(recv_frames(d, f, 5, 500), 0);
        zmq_close(d);
        return;
    }
    int per = old_form ? 3 : 4; /* delimiter, (topic,) seq, payload */
    for (int k = 0; k <= n_want; k++) {
        int n = recv_frames(d, f, 5, WAIT_MS);
        assert_int_equal(n, per);
        assert_int_equal(zmq_msg_size(&f[0]), 0);
        if (!old_form)
            assert_int_equal(zmq_msg_size(&f[1]), 0); /* topic "" */
        zmq_msg_t *seq = &f[per - 2], *payload = &f[per - 1];
        assert_int_equal(zmq_msg_size(seq), 8);
        if (k == n_want) {
            assert_int_equal(be64(zmq_msg_data(seq)), -1);
            assert_int_equal(zmq_msg_size(payload), 0);
        } else {
            assert_int_equal(be64(zmq_msg_data(seq)), want[k].seq);
            assert_int_equal(zmq_msg_size(payload), want[k].len);
            assert_memory_equal(zmq_msg_data(payload), want[k].payload, want[k].len);
        }
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
    zmq_close(d);
}

static void check_replay_and_faults(bool array_form)
{
    struct sub s;
    struct msg m[4];
    start_with(&s, array_form, false, &m[0]);
    int64_t base = m[0].seq;
    complete(&s.m, "replay one......replay one......");
    assert_int_equal(sub_next(&s, &m[1], WAIT_MS), 1);
    assert_int_equal(m[1].seq, base + 1);
    /* Everything from base: the reset's batch and the completion's. */
    check_replay(&s, base, m, 2, array_form);
    check_replay(&s, base + 1, m + 1, 1, array_form);

    /* Dropped on PUB, still replayed. */
    assert_int_equal(h_mock_faults(s.m.url, "{\"kv_events_drop_batches\": 1}"), 0);
    complete(&s.m, "dropped.........dropped.........");
    struct msg none;
    assert_int_equal(sub_next(&s, &none, 300), 0);
    complete(&s.m, "after the drop..after the drop..");
    assert_int_equal(sub_next(&s, &m[3], WAIT_MS), 1);
    assert_int_equal(m[3].seq, base + 3); /* base + 2 was not sent */
    struct msg replayed[2];
    memset(replayed, 0, sizeof(replayed));
    replayed[1] = m[3];
    /* The dropped batch's bytes are unknown here: check its seq and the next. */
    void *d = zmq_socket(s.ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof(linger));
    assert_int_equal(zmq_connect(d, s.replay), 0);
    unsigned char st[8] = {0};
    for (int i = 0; i < 8; i++)
        st[i] = (unsigned char)((uint64_t)(base + 2) >> (56 - 8 * i));
    assert_int_equal(zmq_send(d, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(d, st, 8, 0), 8);
    zmq_msg_t f[5];
    int per = array_form ? 3 : 4;
    int n = recv_frames(d, f, 5, WAIT_MS);
    assert_int_equal(n, per);
    assert_int_equal(be64(zmq_msg_data(&f[per - 2])), base + 2);
    assert_true(zmq_msg_size(&f[per - 1]) > 0);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    zmq_close(d);
    msg_fini(&m[3]);

    /* Reordered: the next two batches arrive swapped. */
    assert_int_equal(h_mock_faults(s.m.url, "{\"kv_events_reorder\": true}"), 0);
    complete(&s.m, "first...........first...........");
    complete(&s.m, "second..........second..........");
    struct msg x, y;
    assert_int_equal(sub_next(&s, &x, WAIT_MS), 1);
    assert_int_equal(sub_next(&s, &y, WAIT_MS), 1);
    assert_int_equal(x.seq, base + 5);
    assert_int_equal(y.seq, base + 4);
    /* Replay unavailable: no answer; back on: answers again (the buffer
     * holds every batch in sequence order, swapped ones too). */
    assert_int_equal(h_mock_faults(s.m.url, "{\"kv_events_replay_off\": true}"), 0);
    check_replay(&s, base, NULL, -1, array_form);
    assert_int_equal(h_mock_faults(s.m.url, "{\"kv_events_replay_off\": false}"), 0);
    struct msg last[2] = {y, x};
    check_replay(&s, base + 4, last, 2, array_form);
    msg_fini(&x);
    msg_fini(&y);
    msg_fini(&m[0]);
    msg_fini(&m[1]);
    sub_stop(&s);
}

static void test_replay_and_faults_current(void **state)
{
    (void)state;
    check_replay_and_faults(false);
}

/* The older vLLM (arrays) answered replays as (seq, payload). */
static void test_replay_and_faults_old(void **state)
{
    (void)state;
    check_replay_and_faults(true);
}

static void test_cache_config_info(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", MODEL, "--block-tokens", "32", NULL), 0);
    char url[H_URL_MAX];
    snprintf(url, sizeof(url), "%s/metrics", m.url);
    struct h_resp r;
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "# TYPE vllm:cache_config_info gauge"));
    const char *line = strstr(r.body, "\nvllm:cache_config_info{");
    assert_non_null(line);
    const char *end = strchr(line + 1, '\n');
    assert_non_null(end);
    char one[512];
    snprintf(one, sizeof(one), "%.*s", (int)(end - line - 1), line + 1);
    assert_non_null(strstr(one, "block_size=\"32\""));
    assert_non_null(strstr(one, "engine=\"0\""));
    assert_non_null(strstr(one, "} 1.0"));
    h_resp_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_stored_map_int),
        H_TEST(test_stored_array_bytes),
        H_TEST(test_removed_under_lru_pressure),
        H_TEST(test_replay_and_faults_current),
        H_TEST(test_replay_and_faults_old),
        H_TEST(test_cache_config_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
