/*
 * Fixtures for the precise_cache_aware end-to-end tests (see
 * harness_precise.h). The fleet with KV events is an h_fleet whose mocks
 * this file starts itself (each with its own PUB and replay endpoints, and
 * a kv_events mapping in its worker's config), then h_fleet_start_router
 * brings the daemons up exactly as for any other fleet.
 */
#include "tests/e2e/harness_precise.h"

#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/token_chain.h"
#include "shm/kv_holders.h"
#include "shm/registry.h"
#include "tests/e2e/harness_routed.h"

/* max_tokens of the fleet's turns, through the router or straight. */
#define H_PRECISE_FLEET_TOKENS 2

/* ---- prompts, chains, chat turns ---------------------------------------- */

char *h_precise_blocks(unsigned seed, size_t blocks)
{
    return h_routed_text(seed, blocks * H_PRECISE_BLOCK_TEXT - 4);
}

size_t h_precise_chain(const char *content, uint64_t *out, size_t max)
{
    return h_precise_chain_seeded(tkc_seed(H_FLEET_MODEL), content, out, max);
}

size_t h_precise_chain_seeded(uint64_t seed, const char *content, uint64_t *out, size_t max)
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
    size_t n = tkc_chain(seed, tok, n_tok, H_PRECISE_BLOCK_SIZE, out, max);
    free(tok);
    free(text);
    return n;
}

char *h_precise_chat_body(const char *content, int max_tokens)
{
    json_t *body = json_pack("{s:s, s:[{s:s, s:s}], s:i}", "model", H_FLEET_MODEL, "messages",
                             "role", "user", "content", content, "max_tokens", max_tokens);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    return text;
}

void h_precise_chat(const char *base, const char *content, int max_tokens, char *worker,
                    size_t wlen, char *decision, size_t dlen)
{
    char *text = h_precise_chat_body(content, max_tokens);
    h_routed_post(base, "/v1/chat/completions", text, worker, wlen, decision, dlen);
    free(text);
}

/* ---- the holder index ---------------------------------------------------- */

bool h_precise_dp_attached(void *dp)
{
    return h_proc_log_contains(dp, "KV holder index: attached");
}

struct kvh_index *h_precise_attach_holders(const char *shm_name)
{
    char name[128], err[256];
    assert_int_equal(kvh_segment_name(shm_name, name, sizeof(name)), 0);
    struct kvh_index *ix = NULL;
    if (kvh_attach(name, &ix, err, sizeof(err)) != 0)
        fail_msg("kvh_attach: %s", err);
    return ix;
}

uint32_t h_precise_slot(const struct h_fleet *f, const char *id)
{
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&f->seg, id, &w), 0);
    return w.slot;
}

/* ---- tokenizers that fail ------------------------------------------------ */

void h_precise_dead_tokenizer(char *url, size_t len)
{
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0); /* reserved: nothing else binds it */
    assert_int_equal(h_url(url, len, port, "/tokenize"), 0);
}

int h_precise_silent_tokenizer(char *url, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    assert_int_equal(h_url(url, len, ntohs(a.sin_port), "/tokenize"), 0);
    return fd;
}

/* ---- a fleet with KV events on -------------------------------------------- */

long long h_precise_cp_metric(const struct h_precise_fleet *f, const char *sample)
{
    return h_metric_at(f->cp_metrics, sample);
}

struct h_precise_metric_ge {
    const struct h_precise_fleet *f;
    const char *sample;
    long long want;
};

static bool h_precise_cp_metric_ge(void *arg)
{
    const struct h_precise_metric_ge *m = arg;
    return h_precise_cp_metric(m->f, m->sample) >= m->want;
}

void h_precise_wait_cp_metric_ge(const struct h_precise_fleet *f, const char *sample,
                                 long long want)
{
    struct h_precise_metric_ge m = {.f = f, .sample = sample, .want = want};
    if (h_wait_until(h_precise_cp_metric_ge, &m, H_PRECISE_WAIT_MS) != 0)
        fail_msg("%s is %lld after %d ms, want >= %lld", sample, h_precise_cp_metric(f, sample),
                 H_PRECISE_WAIT_MS, want);
}

void h_precise_fleet_chat(const struct h_precise_fleet *f, const char *content, char *worker,
                          size_t wlen, char *decision, size_t dlen)
{
    h_precise_chat(f->fleet.base, content, H_PRECISE_FLEET_TOKENS, worker, wlen, decision, dlen);
}

void h_precise_fleet_chat_direct(const struct h_precise_fleet *f, size_t i, const char *content)
{
    char *text = h_precise_chat_body(content, H_PRECISE_FLEET_TOKENS);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->fleet.mock[i].url);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, text, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    free(text);
}

void h_precise_fleet_probe_until(struct h_precise_fleet *f, size_t i, const char *sample)
{
    int64_t deadline = h_now_ms() + H_PRECISE_WAIT_MS;
    struct h_precise_metric_ge m = {.f = f, .sample = sample, .want = 1};
    while (h_precise_cp_metric(f, sample) < 1) {
        if (h_now_ms() > deadline)
            fail_msg("%s still below 1 after probing %s for %d ms", sample, f->w[i].id,
                     H_PRECISE_WAIT_MS);
        char *c = h_precise_blocks(100000 + f->probes++, 1);
        h_precise_fleet_chat_direct(f, i, c);
        free(c);
        (void)h_wait_until(h_precise_cp_metric_ge, &m, 200);
    }
}

void h_precise_fleet_restart_mock(struct h_precise_fleet *f, size_t i)
{
    struct h_mock *m = &f->fleet.mock[i];
    assert_int_equal(h_proc_stop(m->proc, H_STOP_TIMEOUT_MS), 0);
    assert_int_equal(h_start_mockworker(m->port, f->w[i].argv, &m->proc), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", m->url);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

/* Starts mock i publishing its events, and configures its worker with the
 * matching kv_events ('*' = the worker's host). */
static void h_precise_start_worker(struct h_precise_fleet *f, size_t i, const char *kv_blocks,
                                   const char *const *mock_args)
{
    struct h_precise_worker *w = &f->w[i];
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(w->id, sizeof(w->id), "w%zu", i + 1);
    snprintf(w->pub, sizeof(w->pub), "tcp://127.0.0.1:%u", p);
    snprintf(w->replay, sizeof(w->replay), "tcp://127.0.0.1:%u", q);
    snprintf(w->kv_events, sizeof(w->kv_events),
             "kv_events:\n  endpoint: \"tcp://*:%u\"\n  replay_endpoint: \"tcp://*:%u\"\n", p, q);
    size_t k = 0;
    w->argv[k++] = "--model";
    w->argv[k++] = H_FLEET_MODEL;
    w->argv[k++] = "--kv-events-endpoint";
    w->argv[k++] = w->pub;
    w->argv[k++] = "--kv-events-replay-endpoint";
    w->argv[k++] = w->replay;
    if (kv_blocks != NULL) {
        w->argv[k++] = "--kv-blocks";
        w->argv[k++] = kv_blocks;
    }
    for (size_t a = 0; mock_args != NULL && mock_args[a] != NULL; a++) {
        assert_true(k + 1 < sizeof(w->argv) / sizeof(w->argv[0]));
        w->argv[k++] = mock_args[a];
    }
    w->argv[k] = NULL;
    struct h_fleet *fl = &f->fleet;
    assert_int_equal(h_mock_startv(&fl->mock[i], w->argv), 0);
    assert_int_equal(h_config_add_worker(&fl->cfg, fl->mock[i].url, w->id, H_FLEET_MODEL, NULL), 0);
    fl->cfg.workers[fl->cfg.n_workers - 1].extra = w->kv_events;
}

void h_precise_fleet_start(struct h_precise_fleet *f, const struct h_precise_fleet_opts *o)
{
    memset(f, 0, sizeof(*f));
    assert_true(o->n <= H_PRECISE_MAX_WORKERS);
    f->fleet.n = o->n;
    for (size_t i = 0; i < o->n; i++)
        h_precise_start_worker(f, i, o->kv_blocks, o->mock_args);
    snprintf(f->policy_extra, sizeof(f->policy_extra), "%s%s", H_PRECISE_POLICY_EXACT,
             o->policy_extra != NULL ? o->policy_extra : "  tokenize_timeout: 2s\n");
    snprintf(f->dataplane_extra, sizeof(f->dataplane_extra), "%s%s", H_PRECISE_DATAPLANE_EXTRA,
             o->dataplane_extra != NULL ? o->dataplane_extra : "");
    h_fleet_start_router(&f->fleet, &(struct h_fleet_opts){
                                        .policy = "precise_cache_aware",
                                        .policy_extra = f->policy_extra,
                                        .health_interval = "100ms",
                                        .dataplane_extra = f->dataplane_extra,
                                    });
    assert_int_equal(
        h_url(f->cp_metrics, sizeof(f->cp_metrics), f->fleet.cfg.admin_port, "/metrics"), 0);
    assert_int_equal(h_wait_until(h_precise_dp_attached, f->fleet.dp, H_PRECISE_WAIT_MS), 0);
    f->ix = h_precise_attach_holders(f->fleet.cfg.shm_name);
    h_precise_wait_cp_metric_ge(f, "switchyard_kv_events_subscriptions", (long long)o->n);
    /* Every subscription has joined: probe each worker until a batch of it
     * is delivered. */
    for (size_t i = 0; i < o->n; i++) {
        char sample[160];
        snprintf(sample, sizeof(sample), "switchyard_kv_events_batches_total{worker=\"%s\"}",
                 f->w[i].id);
        h_precise_fleet_probe_until(f, i, sample);
    }
}

void h_precise_fleet_stop(struct h_precise_fleet *f)
{
    kvh_destroy(f->ix);
    f->ix = NULL;
    h_fleet_stop(&f->fleet);
}
