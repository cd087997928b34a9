/*
 * End-to-end: the whole precise_cache_aware chain with nothing filled in by
 * the test. Mock workers publish their LRU's real stores and evictions as
 * vLLM's KV-cache events over ZeroMQ; the control plane, given each
 * worker's kv_events, subscribes, maps the events onto the router's chain
 * and writes the shared holder index; the data plane tokenizes each request
 * through a worker's /tokenize and routes on that index.
 *
 * The test only reads: decisions from the debug headers, counters from the
 * control plane's and the data plane's /metrics, and the holder index
 * itself (attached read-only as the data plane does, to check a prefix is
 * or is no longer held by a worker). Speculative entries are off, so an
 * `affinity` decision comes from the workers' events alone.
 *
 * A SUB socket misses what is published before it joins, so each fleet
 * first sends probe requests straight to every worker until the control
 * plane has delivered a batch of each.
 */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/token_chain.h"
#include "shm/kv_holders.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"

#define MODEL      "mock-model"
#define WAIT_MS    10000
#define BLOCK_SIZE 16 /* the mock's default --block-tokens, the policy's default */
#define BLOCK_TEXT (4 * BLOCK_SIZE)
#define MAX_W      4
#define MAX_CHAIN  64

/* ---- a fleet with KV events on ------------------------------------------- */

struct kw {
    struct h_mock m;
    char id[32];
    char pub[64], replay[64];
    const char *argv[24]; /* the mock's flags, kept to restart it alike */
};

struct kfx {
    struct kw w[MAX_W];
    size_t n;
    struct h_config cfg;
    struct h_proc *cp, *dp;
    struct shm_segment seg;
    bool attached;
    struct kvh_index *ix;
    char base[64];        /* the data plane */
    char cp_metrics[128]; /* the control plane's /metrics */
    unsigned probes;
};

struct kfx_opts {
    size_t n;
    const char *kv_blocks;    /* the mocks' --kv-blocks, NULL = default */
    const char *policy_extra; /* more precise_cache_aware keys, indented by 2 */
};

/* Writes the worker list with each worker's kv_events ('*' = its host). */
static void add_kv_events(struct kfx *f)
{
    FILE *fp = fopen(f->cfg.path, "r");
    assert_non_null(fp);
    char *text = calloc(1, 1 << 16);
    assert_non_null(text);
    size_t len = fread(text, 1, (1 << 16) - 1, fp);
    fclose(fp);
    text[len] = '\0';
    fp = fopen(f->cfg.path, "w");
    assert_non_null(fp);
    /* After each worker's `id:` line, its kv_events mapping. */
    for (char *line = text; *line != '\0';) {
        char *nl = strchr(line, '\n');
        size_t ll = nl != NULL ? (size_t)(nl - line + 1) : strlen(line);
        fwrite(line, 1, ll, fp);
        for (size_t i = 0; i < f->n; i++) {
            char want[64];
            snprintf(want, sizeof(want), "    id: \"%s\"\n", f->w[i].id);
            if (ll == strlen(want) && strncmp(line, want, ll) == 0) {
                const char *pp = strrchr(f->w[i].pub, ':'), *qp = strrchr(f->w[i].replay, ':');
                fprintf(fp,
                        "    kv_events:\n      endpoint: \"tcp://*%s\"\n"
                        "      replay_endpoint: \"tcp://*%s\"\n",
                        pp, qp);
            }
        }
        line += ll;
    }
    fclose(fp);
    free(text);
}

static bool registry_complete(void *arg)
{
    struct kfx *f = arg;
    struct shm_worker_info w[MAX_W + 1];
    return shm_registry_snapshot(&f->seg, w, MAX_W + 1) >= f->n;
}

static bool seg_attach(void *arg)
{
    struct kfx *f = arg;
    char err[256];
    return shm_segment_attach(&f->seg, f->cfg.shm_name, err, sizeof(err)) == 0;
}

static bool dp_attached_holders(void *arg)
{
    return h_proc_log_contains(arg, "KV holder index: attached");
}

/* One sample of a /metrics page; -1 when absent. */
static long long metric_at(const char *url, const char *sample)
{
    struct h_resp resp = {0};
    long long v = -1;
    size_t sl = strlen(sample);
    if (h_http_get(url, &resp) == 0 && resp.status == 200) {
        for (const char *line = resp.body; line != NULL && *line != '\0';) {
            if (strncmp(line, sample, sl) == 0 && line[sl] == ' ') {
                v = strtoll(line + sl + 1, NULL, 10);
                break;
            }
            line = strchr(line, '\n');
            line = line != NULL ? line + 1 : NULL;
        }
    }
    h_resp_fini(&resp);
    return v;
}

static long long cp_metric(const struct kfx *f, const char *sample)
{
    return metric_at(f->cp_metrics, sample);
}

static long long dp_metric(const struct kfx *f, const char *sample)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", f->base);
    return metric_at(url, sample);
}

/* A per-worker control-plane sample, e.g. ("switchyard_kv_events_gaps_total", "w1"). */
static long long cp_worker_metric(const struct kfx *f, const char *family, const char *id)
{
    char sample[160];
    snprintf(sample, sizeof(sample), "%s{worker=\"%s\"}", family, id);
    return cp_metric(f, sample);
}

struct metric_ge {
    const struct kfx *f;
    char sample[160];
    long long want;
};

static bool cp_metric_ge(void *arg)
{
    struct metric_ge *m = arg;
    return cp_metric(m->f, m->sample) >= m->want;
}

static void wait_cp_metric_ge(const struct kfx *f, const char *sample, long long want)
{
    struct metric_ge m = {.f = f, .want = want};
    snprintf(m.sample, sizeof(m.sample), "%s", sample);
    if (h_wait_until(cp_metric_ge, &m, WAIT_MS) != 0)
        fail_msg("%s is %lld after %d ms, want >= %lld", sample, cp_metric(f, sample), WAIT_MS,
                 want);
}

static void wait_batches_ge(const struct kfx *f, size_t i, long long want)
{
    char sample[160];
    snprintf(sample, sizeof(sample), "switchyard_kv_events_batches_total{worker=\"%s\"}",
             f->w[i].id);
    wait_cp_metric_ge(f, sample, want);
}

/* A chat turn's content of len bytes, distinct per seed from byte 0. */
static char *content_of(unsigned seed, size_t len)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    unsigned long long x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[k] = (char)('a' + x % 26);
    }
    t[len] = '\0';
    return t;
}

/* Content whose turn ("user" + content) is exactly `blocks` full blocks. */
static char *blocks_of(unsigned seed, size_t blocks)
{
    return content_of(seed, blocks * BLOCK_TEXT - 4);
}

/* The router's chain for one user message: the mock's tokens (4 bytes
 * each, little-endian) of "user" + content, seeded by the model. */
static size_t chain_of(const char *content, uint64_t *out, size_t max)
{
    size_t len = 4 + strlen(content);
    char *text = malloc(len);
    assert_non_null(text);
    memcpy(text, "user", 4);
    memcpy(text + 4, content, len - 4);
    size_t n_tok = (len + 3) / 4;
    uint32_t *tok = calloc(n_tok, sizeof(*tok));
    assert_non_null(tok);
    for (size_t i = 0; i < len; i++)
        tok[i / 4] |= (uint32_t)(unsigned char)text[i] << (8 * (i % 4));
    size_t n = tkc_chain(tkc_seed(MODEL), tok, n_tok, BLOCK_SIZE, out, max);
    free(tok);
    free(text);
    return n;
}

static uint32_t slot_of(struct kfx *f, size_t i)
{
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&f->seg, f->w[i].id, &w), 0);
    return w.slot;
}

/* How many of content's blocks the index says worker i holds. */
static size_t held(struct kfx *f, size_t i, const char *content)
{
    uint64_t chain[MAX_CHAIN];
    size_t n = chain_of(content, chain, MAX_CHAIN);
    uint32_t slot = slot_of(f, i);
    size_t k = 0;
    for (size_t b = 0; b < n; b++)
        k += kvh_has(f->ix, chain[b], slot);
    return k;
}

static size_t n_blocks(const char *content)
{
    return (4 + strlen(content)) / BLOCK_TEXT;
}

struct held_wait {
    struct kfx *f;
    size_t i;
    const char *content;
};

static bool all_held(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->i, h->content) == n_blocks(h->content);
}

/* Waits until the index holds every block of content on worker i. */
static void wait_held(struct kfx *f, size_t i, const char *content)
{
    struct held_wait h = {f, i, content};
    if (h_wait_until(all_held, &h, WAIT_MS) != 0)
        fail_msg("%s holds %zu of %zu blocks after %d ms", f->w[i].id, held(f, i, content),
                 n_blocks(content), WAIT_MS);
}

static char *chat_body(const char *content)
{
    json_t *body = json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", MODEL, "messages", "role",
                             "user", "content", content, "max_tokens", 2);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    return text;
}

/* POSTs one chat turn through the router; the worker and decision from the
 * debug headers. */
static void chat(const struct kfx *f, const char *content, char *worker, size_t wlen,
                 char *decision, size_t dlen)
{
    char *text = chat_body(content);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-worker", worker, wlen), 0);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-decision", decision, dlen), 0);
    h_resp_fini(&resp);
    free(text);
}

/* The same turn sent straight to worker i, bypassing the router. */
static void chat_direct(const struct kfx *f, size_t i, const char *content)
{
    char *text = chat_body(content);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->w[i].m.url);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    free(text);
}

/* A fresh one-block prompt straight to worker i: one event batch. */
static void probe(struct kfx *f, size_t i)
{
    char *c = blocks_of(100000 + f->probes++, 1);
    chat_direct(f, i, c);
    free(c);
}

static size_t worker_index(const struct kfx *f, const char *id)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->w[i].id, id) == 0)
            return i;
    fail_msg("unknown worker %s", id);
    return 0;
}

static void start_mock(struct kw *w)
{
    assert_int_equal(h_mock_startv(&w->m, w->argv), 0);
}

static void kfx_start(struct kfx *f, const struct kfx_opts *o)
{
    memset(f, 0, sizeof(*f));
    f->n = o->n;
    for (size_t i = 0; i < o->n; i++) {
        struct kw *w = &f->w[i];
        uint16_t p, q;
        assert_int_equal(h_free_port(&p), 0);
        assert_int_equal(h_free_port(&q), 0);
        snprintf(w->id, sizeof(w->id), "w%zu", i + 1);
        snprintf(w->pub, sizeof(w->pub), "tcp://127.0.0.1:%u", p);
        snprintf(w->replay, sizeof(w->replay), "tcp://127.0.0.1:%u", q);
        size_t k = 0;
        w->argv[k++] = "--model";
        w->argv[k++] = MODEL;
        w->argv[k++] = "--kv-events-endpoint";
        w->argv[k++] = w->pub;
        w->argv[k++] = "--kv-events-replay-endpoint";
        w->argv[k++] = w->replay;
        if (o->kv_blocks != NULL) {
            w->argv[k++] = "--kv-blocks";
            w->argv[k++] = o->kv_blocks;
        }
        w->argv[k] = NULL;
        start_mock(w);
        assert_int_equal(h_config_add_worker(&f->cfg, w->m.url, w->id, MODEL, NULL), 0);
    }
    static char policy_extra[512];
    snprintf(policy_extra, sizeof(policy_extra),
             "precise_cache_aware:\n"
             /* Decisions from the workers' events alone. */
             "  speculative_ttl: 0ms\n%s",
             o->policy_extra != NULL ? o->policy_extra : "  tokenize_timeout: 2s\n");
    f->cfg.policy = "precise_cache_aware";
    f->cfg.policy_extra = policy_extra;
    f->cfg.health_interval = "100ms";
    /* One event loop: one tokenize cache, as predictable as one router. */
    f->cfg.dataplane_extra = "debug_headers: true\nthreads: 1\n";
    assert_int_equal(h_config_write(&f->cfg, NULL), 0);
    add_kv_events(f);
    assert_int_equal(h_start_controlplane(f->cfg.path, &f->cp), 0);
    assert_int_equal(h_wait_until(seg_attach, f, H_READY_TIMEOUT_MS), 0);
    f->attached = true;
    assert_int_equal(h_wait_until(registry_complete, f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_url(f->cp_metrics, sizeof(f->cp_metrics), f->cfg.admin_port, "/metrics"), 0);
    assert_int_equal(h_start_dataplane(f->cfg.path, &f->dp), 0);
    assert_int_equal(h_url(f->base, sizeof(f->base), f->cfg.dataplane_port, NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_wait_until(dp_attached_holders, f->dp, WAIT_MS), 0);
    char name[128], err[256];
    assert_int_equal(kvh_segment_name(f->cfg.shm_name, name, sizeof(name)), 0);
    int rc = kvh_attach(name, &f->ix, err, sizeof(err));
    if (rc != 0)
        fail_msg("kvh_attach: %s", err);
    wait_cp_metric_ge(f, "switchyard_kv_events_subscriptions", (long long)f->n);
    /* Every subscription has joined: probe each worker until a batch of it
     * is delivered. */
    for (size_t i = 0; i < f->n; i++) {
        int64_t deadline = h_now_ms() + WAIT_MS;
        while (cp_worker_metric(f, "switchyard_kv_events_batches_total", f->w[i].id) < 1) {
            if (h_now_ms() > deadline)
                fail_msg("no KV event batch of %s delivered within %d ms", f->w[i].id, WAIT_MS);
            probe(f, i);
            struct metric_ge m = {.f = f, .want = 1};
            snprintf(m.sample, sizeof(m.sample),
                     "switchyard_kv_events_batches_total{worker=\"%s\"}", f->w[i].id);
            (void)h_wait_until(cp_metric_ge, &m, 200);
        }
    }
}

static void kfx_stop(struct kfx *f)
{
    if (f->ix != NULL)
        kvh_destroy(f->ix);
    f->ix = NULL;
    if (f->attached)
        shm_segment_close(&f->seg);
    f->attached = false;
}

/* ---- 1. the whole chain ---------------------------------------------------- */

/* A prompt lands on X, X's BlockStored reaches the index, and the same
 * prompt, then a longer one extending it, go to X as `affinity`. */
static void test_chain_routes_to_the_holder(void **state)
{
    (void)state;
    struct kfx f;
    kfx_start(&f, &(struct kfx_opts){.n = 3});
    char *content = blocks_of(1, 10);
    char worker[64], decision[64], x[64];
    long long facts0 = cp_metric(&f, "switchyard_kv_index_facts");
    assert_true(facts0 >= 0);
    chat(&f, content, x, sizeof(x), decision, sizeof(decision));
    assert_string_equal(decision, "no_match"); /* nobody held it */
    size_t xi = worker_index(&f, x);
    /* The event crosses the wire, the control plane maps it, the index has it. */
    wait_held(&f, xi, content);
    assert_true(cp_metric(&f, "switchyard_kv_index_facts") >= facts0 + 10);
    for (size_t i = 0; i < f.n; i++)
        if (i != xi)
            assert_int_equal(held(&f, i, content), 0);
    chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* A longer prompt extending it: its first 10 blocks are held by X. */
    size_t len = strlen(content);
    char *longer = malloc(len + 5 * BLOCK_TEXT + 1);
    assert_non_null(longer);
    char *tail = content_of(2, 5 * BLOCK_TEXT);
    memcpy(longer, content, len);
    memcpy(longer + len, tail, 5 * BLOCK_TEXT + 1);
    chat(&f, longer, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* And X's events of the extension make the whole of it held there. */
    wait_held(&f, xi, longer);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_skipped_total{reason=\"unknown_parent\"}"),
                     0);
    /* Every tokenize round trip is timed, and every applied batch's lag
     * (on loopback, well under 10 s). */
    long long trips = dp_metric(&f, "switchyard_tokenize_requests_total{result=\"ok\"}") +
                      dp_metric(&f, "switchyard_tokenize_requests_total{result=\"timeout\"}") +
                      dp_metric(&f, "switchyard_tokenize_requests_total{result=\"error\"}");
    assert_true(trips >= 2);
    assert_int_equal(dp_metric(&f, "switchyard_tokenize_duration_seconds_count"), trips);
    assert_int_equal(cp_metric(&f, "switchyard_kv_block_size_mismatches_total"), 0);
    long long lagged = cp_metric(&f, "switchyard_kv_events_lag_seconds_count");
    assert_true(lagged >= 2);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_lag_seconds_bucket{le=\"10\"}"), lagged);
    free(tail);
    free(longer);
    free(content);
    kfx_stop(&f);
}

/* ---- 2. a prefix computed by a request that bypassed the router ------------ */

/* A client sends a prompt straight to Y; Y's event teaches the router, and
 * the next request with that prefix through the router goes to Y. */
static void test_bypassed_prefix_matched(void **state)
{
    (void)state;
    struct kfx f;
    kfx_start(&f, &(struct kfx_opts){.n = 3});
    char worker[64], decision[64];
    for (size_t y = 0; y < f.n; y++) {
        char *content = blocks_of(10 + (unsigned)y, 8);
        chat_direct(&f, y, content);
        wait_held(&f, y, content);
        /* The router never saw it, yet sends it (and a longer one) to Y. */
        chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
        assert_string_equal(worker, f.w[y].id);
        assert_string_equal(decision, "affinity");
        free(content);
    }
    kfx_stop(&f);
}

/* ---- 3. evictions ------------------------------------------------------------ */

/* X's LRU (16 blocks) evicts a prefix under pressure: within the one event
 * batch of the request that evicted it the index no longer holds it, and a
 * request for it goes by load, not to the stale holder. */
static void test_evicted_prefix_not_matched(void **state)
{
    (void)state;
    struct kfx f;
    kfx_start(&f, &(struct kfx_opts){.n = 3, .kv_blocks = "16"});
    char *content = blocks_of(20, 6);
    char worker[64], decision[64], x[64];
    chat(&f, content, x, sizeof(x), decision, sizeof(decision));
    size_t xi = worker_index(&f, x);
    wait_held(&f, xi, content);
    chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, x);
    assert_string_equal(decision, "affinity");
    /* A prompt as large as X's whole cache, straight to X: one batch that
     * stores it and removes everything else, the prefix included. */
    long long batches = cp_worker_metric(&f, "switchyard_kv_events_batches_total", x);
    long long removed = cp_metric(&f, "switchyard_kv_blocks_total{op=\"removed\"}");
    assert_true(batches >= 1);
    char *filler = blocks_of(21, 16);
    chat_direct(&f, xi, filler);
    wait_batches_ge(&f, xi, batches + 1);
    assert_int_equal(held(&f, xi, content), 0);
    assert_true(cp_metric(&f, "switchyard_kv_blocks_total{op=\"removed\"}") >= removed + 6);
    assert_int_equal(cp_worker_metric(&f, "switchyard_kv_events_gaps_total", x), 0);
    /* Nobody holds it now: by load. */
    chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "no_match");
    free(filler);
    free(content);
    kfx_stop(&f);
}

/* ---- 4. dropped batches, replay off, a restarted worker -------------------- */

static bool none_held(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->i, h->content) == 0;
}

/* Waits until the index holds none of content's blocks on worker i. */
static void wait_not_held(struct kfx *f, size_t i, const char *content)
{
    struct held_wait h = {f, i, content};
    if (h_wait_until(none_held, &h, WAIT_MS) != 0)
        fail_msg("%s still holds %zu of %zu blocks after %d ms", f->w[i].id, held(f, i, content),
                 n_blocks(content), WAIT_MS);
}

/* Worker i stops and starts again on the same HTTP and ZeroMQ ports: an
 * empty cache, its sequence numbers from 0 again. */
static void restart_mock(struct kfx *f, size_t i)
{
    struct kw *w = &f->w[i];
    assert_int_equal(h_proc_stop(w->m.proc, H_STOP_TIMEOUT_MS), 0);
    assert_int_equal(h_start_mockworker(w->m.port, w->argv, &w->m.proc), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", w->m.url);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

static void test_dropped_batches_replayed_or_resynced(void **state)
{
    (void)state;
    struct kfx f;
    kfx_start(&f, &(struct kfx_opts){.n = 2});
    char worker[64], decision[64];
    /* w2's facts: untouched by everything w1 goes through below. */
    char *other = blocks_of(30, 3);
    chat_direct(&f, 1, other);
    wait_held(&f, 1, other);

    /* Two batches of w1 dropped on PUB: the third shows the gap, replay
     * brings the two back, and the index ends holding all three prompts. */
    char *d[3];
    for (unsigned k = 0; k < 3; k++)
        d[k] = blocks_of(31 + k, 2);
    assert_int_equal(h_mock_faults(f.w[0].m.url, "{\"kv_events_drop_batches\": 2}"), 0);
    for (unsigned k = 0; k < 3; k++)
        chat_direct(&f, 0, d[k]);
    for (unsigned k = 0; k < 3; k++)
        wait_held(&f, 0, d[k]);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_replayed_batches_total"), 2);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_replays_total"), 1);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_gaps_total{worker=\"w1\"}"), 1);
    assert_int_equal(cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}"), 0);
    chat(&f, d[0], worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, "w1");
    assert_string_equal(decision, "affinity");

    /* Replay switched off: the next gap cannot be filled, so w1's facts are
     * forgotten (a resync) and the index rebuilds from the batch after. */
    long long forgets = cp_metric(&f, "switchyard_kv_worker_forgets_total");
    assert_true(forgets >= 0);
    char *e1 = blocks_of(40, 2), *e2 = blocks_of(41, 2);
    assert_int_equal(
        h_mock_faults(f.w[0].m.url,
                      "{\"kv_events_drop_batches\": 1, \"kv_events_replay_off\": true}"),
        0);
    chat_direct(&f, 0, e1); /* dropped, and never replayed */
    chat_direct(&f, 0, e2); /* shows the gap */
    wait_cp_metric_ge(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}", 1);
    wait_held(&f, 0, e2);
    assert_true(cp_metric(&f, "switchyard_kv_worker_forgets_total") >= forgets + 1);
    for (unsigned k = 0; k < 3; k++)
        assert_int_equal(held(&f, 0, d[k]), 0);
    assert_int_equal(held(&f, 0, e1), 0);
    assert_int_equal(held(&f, 1, other), n_blocks(other));
    /* w1 still caches d[0], but the router no longer knows it: by load. */
    chat(&f, d[0], worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "no_match");

    /* w1 restarts on the same ports: its entries are cleared. */
    wait_held(&f, 0, e2);
    long long resyncs = cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}");
    restart_mock(&f, 0);
    int64_t deadline = h_now_ms() + WAIT_MS;
    while (cp_metric(&f, "switchyard_kv_events_restarts_total") < 1) {
        if (h_now_ms() > deadline)
            fail_msg("the restart of w1 was not seen within %d ms", WAIT_MS);
        probe(&f, 0);
        struct metric_ge m = {.f = &f, .want = 1};
        snprintf(m.sample, sizeof(m.sample), "switchyard_kv_events_restarts_total");
        (void)h_wait_until(cp_metric_ge, &m, 200);
    }
    wait_not_held(&f, 0, e2);
    assert_true(cp_metric(&f, "switchyard_kv_events_resyncs_total{worker=\"w1\"}") >= resyncs + 1);
    assert_int_equal(held(&f, 1, other), n_blocks(other));
    /* And w1's new events are learned again. */
    char *after = blocks_of(42, 2);
    chat_direct(&f, 0, after);
    wait_held(&f, 0, after);
    free(after);
    free(e1);
    free(e2);
    for (unsigned k = 0; k < 3; k++)
        free(d[k]);
    free(other);
    kfx_stop(&f);
}

/* ---- 5. the tokenizer down or slow while events flow ------------------------ */

/* Requests keep being answered through a tokenizer that fails as `reason`
 * says, each counted as a fallback and never waiting much beyond the
 * 50 ms budget, while w2's events keep filling the index. */
static void run_tokenizer_fallback(const char *tokenizer_url, const char *reason)
{
    struct kfx f;
    char extra[256];
    snprintf(extra, sizeof(extra), "  tokenizer_url: \"%s\"\n  tokenize_timeout: 50ms\n",
             tokenizer_url);
    kfx_start(&f, &(struct kfx_opts){.n = 2, .policy_extra = extra});
    char *content = blocks_of(50, 4);
    chat_direct(&f, 1, content);
    wait_held(&f, 1, content); /* the events flow: the index knows w2 holds it */
    char worker[64], decision[64], first[64];
    int64_t worst = 0;
    for (unsigned k = 0; k < 4; k++) {
        int64_t t0 = h_now_ms();
        chat(&f, content, worker, sizeof(worker), decision, sizeof(decision));
        int64_t took = h_now_ms() - t0;
        worst = took > worst ? took : worst;
        if (k == 0) {
            snprintf(first, sizeof(first), "%s", worker);
        } else {
            /* cache_aware's approximate match from the first turn. */
            assert_string_equal(worker, first);
            assert_string_equal(decision, "affinity");
        }
        /* More events meanwhile, learned as ever. */
        char *more = blocks_of(60 + k, 2);
        chat_direct(&f, 1, more);
        wait_held(&f, 1, more);
        free(more);
    }
    assert_true(worst < 1500); /* generous: a loaded CI */
    char sample[128];
    snprintf(sample, sizeof(sample), "switchyard_precise_fallbacks_total{reason=\"%s\"}", reason);
    assert_int_equal(dp_metric(&f, sample), 4);
    assert_int_equal(dp_metric(&f, "switchyard_tokenize_requests_total{result=\"ok\"}"), 0);
    free(content);
    kfx_stop(&f);
}

static void test_tokenizer_down_falls_back(void **state)
{
    (void)state;
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0); /* nothing listens there */
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), port, "/tokenize"), 0);
    run_tokenizer_fallback(url, "error");
}

static void test_tokenizer_slow_falls_back(void **state)
{
    (void)state;
    /* Listens, never accepts nor answers: every tokenize times out. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), ntohs(a.sin_port), "/tokenize"), 0);
    run_tokenizer_fallback(url, "timeout");
    close(fd);
}

/* ---- 6. the workers' block size against the policy's ----------------------- */

/* The mocks say block_size 16 in vllm:cache_config_info (as vLLM does);
 * a policy hashing 32-token blocks could never match their events: each
 * worker is logged and counted once, not at every scrape. */
static bool cp_logged_block_size(void *arg)
{
    return h_proc_log_contains(arg, "vllm:cache_config_info says block_size 16");
}

static void test_block_size_mismatch_reported(void **state)
{
    (void)state;
    struct kfx f;
    kfx_start(&f, &(struct kfx_opts){.n = 2, .policy_extra = "  block_size: 32\n"});
    wait_cp_metric_ge(&f, "switchyard_kv_block_size_mismatches_total", 2);
    assert_int_equal(h_wait_until(cp_logged_block_size, f.cp, WAIT_MS), 0);
    /* More scrapes of both workers: still counted once each. */
    char sample[160];
    snprintf(sample, sizeof(sample),
             "switchyard_load_report_scrapes_total{worker=\"%s\",result=\"success\"}", f.w[1].id);
    wait_cp_metric_ge(&f, sample, cp_metric(&f, sample) + 3);
    assert_int_equal(cp_metric(&f, "switchyard_kv_block_size_mismatches_total"), 2);
    kfx_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_chain_routes_to_the_holder),
        H_TEST(test_bypassed_prefix_matched),
        H_TEST(test_evicted_prefix_not_matched),
        H_TEST(test_dropped_batches_replayed_or_resynced),
        H_TEST(test_block_size_mismatch_reported),
        H_TEST(test_tokenizer_down_falls_back),
        H_TEST(test_tokenizer_slow_falls_back),
    };
    return cmocka_run_group_tests_name("precise_e2e", tests, NULL, NULL);
}
