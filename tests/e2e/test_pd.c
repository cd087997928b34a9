/*
 * End-to-end tests of prefill/decode disaggregation (docs/pd.md) with mock
 * prefill and decode workers: the two legs' bodies and the kv_transfer_params
 * round trip (streaming and not), exact per-phase load when the client
 * leaves during either phase, decode load held through a stall until EOF,
 * retries of each leg on another worker, a failed decode attempt's load
 * held while its error body is (the guard released at the body's end, not
 * at its 503 headers), a prefill answer without usable params, and a soak of P/D requests with
 * random aborts and faults that must end with every load at 0 and load equal to the mocks'
 * in-flight count at held points.
 *
 * Fleet: prefill workers first (ids w1.., mock --role prefill, engine ids
 * eng-p1..), then decode workers. Load is read from the segment, the
 * worker's truth from /mock/stats. Every wait has a deadline.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define ABORT_MS 1000 /* the contract: a disconnect releases within 1 s */

static const char *const CHAT_PLAIN =
    "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":8,\"temperature\":0.5,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"tell me about disaggregated prefill: "
    "how the prompt is computed on one worker, its KV cache blocks are handed over, and "
    "another worker generates the answer from them\"}]}"; /* 2 full mock KV blocks + a tail */
static const char *const CHAT_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"max_completion_tokens\":6,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"stream me a story please\"}]}";

/* ---- the fleet ---------------------------------------------------------------- */

struct pd_fleet {
    struct h_fleet f;
    size_t n_prefill, n_decode;
};

struct pd_opts {
    size_t n_prefill, n_decode;
    size_t n_regular;                /* regular workers of the model, after the decode ones */
    const char *const *prefill_args; /* extra mock flags, NULL-terminated, or NULL */
    const char *const *decode_args;
    const char *dataplane_extra;
    const char *policy_extra;
    bool prefill_mocks_regular; /* prefill slots run a --role regular mock (no params) */
    bool decode_dead;           /* decode slots: a port nobody listens on, no mock */
};

static bool pd_registry_complete(void *arg)
{
    struct h_fleet *f = arg;
    struct shm_worker_info w[H_FLEET_MAX_MOCKS + 1];
    return shm_registry_snapshot(&f->seg, w, H_FLEET_MAX_MOCKS + 1) >= f->cfg.n_workers;
}

static void pd_start_mock(struct h_fleet *f, size_t i, const char *role, const char *engine,
                          const char *const *extra)
{
    const char *argv[24] = {"--model", H_FLEET_MODEL, "--seed", "7", "--role", role};
    size_t k = 6;
    if (engine != NULL) {
        argv[k++] = "--engine-id";
        argv[k++] = engine;
    }
    for (size_t j = 0; extra != NULL && extra[j] != NULL && k < 23; j++)
        argv[k++] = extra[j];
    argv[k] = NULL;
    assert_int_equal(h_mock_startv(&f->mock[i], argv), 0);
}

static void pd_fleet_start(struct pd_fleet *p, const struct pd_opts *o)
{
    memset(p, 0, sizeof(*p));
    struct h_fleet *f = &p->f;
    p->n_prefill = o->n_prefill;
    p->n_decode = o->n_decode;
    f->n = o->n_prefill + o->n_decode + o->n_regular;
    assert_true(f->n <= H_FLEET_MAX_MOCKS);
    for (size_t i = 0; i < f->n; i++) {
        bool prefill = i < o->n_prefill;
        bool regular = i >= o->n_prefill + o->n_decode;
        char engine[32], id[32];
        snprintf(engine, sizeof(engine), "eng-p%zu", i + 1);
        snprintf(id, sizeof(id), "w%zu", i + 1);
        if (regular) {
            pd_start_mock(f, i, "regular", NULL, NULL);
        } else if (!prefill && o->decode_dead) {
            assert_int_equal(h_free_port(&f->mock[i].port), 0);
            assert_int_equal(h_url(f->mock[i].url, sizeof(f->mock[i].url), f->mock[i].port, NULL),
                             0);
        } else {
            pd_start_mock(f, i,
                          prefill ? (o->prefill_mocks_regular ? "regular" : "prefill") : "decode",
                          prefill ? engine : NULL, prefill ? o->prefill_args : o->decode_args);
        }
        assert_int_equal(h_config_add_worker(&f->cfg, f->mock[i].url, id, H_FLEET_MODEL,
                                             regular   ? "regular"
                                             : prefill ? "prefill"
                                                       : "decode"),
                         0);
    }
    f->cfg.dataplane_extra = o->dataplane_extra;
    f->cfg.policy_extra = o->policy_extra;
    assert_int_equal(h_config_write(&f->cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f->cfg.path, &f->cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, f, H_READY_TIMEOUT_MS), 0);
    f->attached = true;
    assert_int_equal(h_wait_until(pd_registry_complete, f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_start_dataplane(f->cfg.path, &f->dp), 0);
    assert_int_equal(h_url(f->base, sizeof(f->base), f->cfg.dataplane_port, NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

static void chat_url(struct pd_fleet *p, char *buf, size_t len)
{
    snprintf(buf, len, "%s/v1/chat/completions", p->f.base);
}

/* ---- conditions --------------------------------------------------------------- */

/* Worker i: the router's load and the mock's in-flight count both equal want. */
struct held {
    struct pd_fleet *p;
    size_t i;
    long long want;
};

static bool worker_holds(void *arg)
{
    struct held *h = arg;
    return h_fleet_load(&h->p->f, h->i) == h->want &&
           h_fleet_mock_stat(&h->p->f, h->i, "inflight") == h->want;
}

/* Every worker: router load 0 and mock in-flight 0. */
static bool all_idle(void *arg)
{
    struct pd_fleet *p = arg;
    for (size_t i = 0; i < p->f.n; i++)
        if (h_fleet_load(&p->f, i) != 0 || h_fleet_mock_stat(&p->f, i, "inflight") != 0)
            return false;
    return true;
}

static bool async_done(void *arg)
{
    struct h_async_state st;
    h_async_get_state(arg, &st);
    return st.done;
}

/* ---- helpers ------------------------------------------------------------------- */

static json_t *last_request(struct pd_fleet *p, size_t i)
{
    json_t *st = h_mock_stats(p->f.mock[i].url);
    assert_non_null(st);
    json_t *body = json_incref(json_object_get(st, "last_request"));
    json_decref(st);
    assert_true(json_is_object(body));
    return body;
}

static const char *last_header(struct pd_fleet *p, size_t i, const char *name, char *buf,
                               size_t len)
{
    json_t *st = h_mock_stats(p->f.mock[i].url);
    assert_non_null(st);
    const char *v =
        json_string_value(json_object_get(json_object_get(st, "last_request_headers"), name));
    snprintf(buf, len, "%s", v != NULL ? v : "");
    json_decref(st);
    return buf;
}

static long long json_int(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    assert_true(json_is_integer(v));
    return (long long)json_integer_value(v);
}

/* The prefill leg's body as docs/pd.md describes it. */
static void assert_prefill_body(json_t *b, bool had_completion_tokens)
{
    assert_int_equal(json_int(b, "max_tokens"), 1);
    if (had_completion_tokens)
        assert_int_equal(json_int(b, "max_completion_tokens"), 1);
    else
        assert_null(json_object_get(b, "max_completion_tokens"));
    assert_true(json_is_false(json_object_get(b, "stream")));
    assert_null(json_object_get(b, "stream_options"));
    json_t *kv = json_object_get(b, "kv_transfer_params");
    assert_true(json_is_object(kv));
    assert_true(json_is_true(json_object_get(kv, "do_remote_decode")));
    assert_true(json_is_false(json_object_get(kv, "do_remote_prefill")));
    const char *nulls[] = {"remote_engine_id", "remote_block_ids", "remote_host", "remote_port"};
    for (size_t i = 0; i < 4; i++)
        assert_true(json_is_null(json_object_get(kv, nulls[i])));
    assert_int_equal(json_object_size(kv), 6);
}

/* The decode leg got the params prefill worker `pi` issued. */
static void assert_decode_params(struct pd_fleet *p, json_t *b, size_t pi)
{
    json_t *kv = json_object_get(b, "kv_transfer_params");
    assert_true(json_is_object(kv));
    assert_true(json_is_true(json_object_get(kv, "do_remote_prefill")));
    char engine[32];
    snprintf(engine, sizeof(engine), "eng-p%zu", pi + 1);
    assert_string_equal(json_string_value(json_object_get(kv, "remote_engine_id")), engine);
    assert_string_equal(json_string_value(json_object_get(kv, "remote_host")), "127.0.0.1");
    assert_int_equal(json_int(kv, "remote_port"), p->f.mock[pi].port);
    /* One group of block ids (vLLM since March 2026), passed through as is. */
    json_t *ids = json_object_get(kv, "remote_block_ids");
    assert_int_equal(json_array_size(ids), 1);
    assert_true(json_array_size(json_array_get(ids, 0)) >= 1);
    assert_int_equal(json_int(kv, "tp_size"), 1); /* fields we do not know pass through */
    assert_true(json_is_string(json_object_get(kv, "remote_request_id")));
}

/* The block ids of a mock's params: its one KV-cache group. */
static json_t *group_ids(json_t *kv)
{
    json_t *ids = json_object_get(kv, "remote_block_ids");
    assert_int_equal(json_array_size(ids), 1);
    return json_array_get(ids, 0);
}

/*
 * The decode worker (di) got exactly the block ids prefill worker pi issued
 * for the request. The ids of full blocks are prefill-cache slots: sending
 * the same prefill body to pi again returns the same ones (now cached);
 * the tail block's id is a per-worker counter: kv_blocks + 0 for pi's first
 * prefill, + 1 for this second one.
 */
static void assert_block_ids_issued_by_prefill(struct pd_fleet *p, size_t pi, size_t di)
{
    json_t *db = last_request(p, di);
    json_t *got = group_ids(json_object_get(db, "kv_transfer_params"));
    json_t *pb = last_request(p, pi);
    char *prefill_body = json_dumps(pb, JSON_COMPACT);
    assert_non_null(prefill_body);
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), p->f.mock[pi].port, "/v1/chat/completions"), 0);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, prefill_body, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *again = h_resp_json(&r);
    assert_non_null(again);
    json_t *want = group_ids(json_object_get(again, "kv_transfer_params"));
    size_t n = json_array_size(want);
    assert_true(n >= 3); /* full blocks and the tail */
    assert_int_equal(json_array_size(got), n);
    for (size_t i = 0; i + 1 < n; i++)
        assert_int_equal(json_integer_value(json_array_get(got, i)),
                         json_integer_value(json_array_get(want, i)));
    assert_int_equal(json_integer_value(json_array_get(got, n - 1)), 4096);
    assert_int_equal(json_integer_value(json_array_get(want, n - 1)), 4097);
    json_decref(again);
    h_resp_fini(&r);
    free(prefill_body);
    json_decref(pb);
    json_decref(db);
}

static void assert_error_body(const struct h_resp *r, long status, const char *code)
{
    assert_int_equal(r->status, status);
    json_t *j = h_resp_json(r);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_true(json_is_string(json_object_get(e, "type")));
    if (code != NULL)
        assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
}

/* ---- the full flow ------------------------------------------------------------- */

static void test_full_flow_plain(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .dataplane_extra = "debug_headers: true\n"});
    char url[128];
    chat_url(&p, url, sizeof(url));
    const char *hdrs[] = {"X-Request-Id: pd-plain-1", NULL};
    struct h_resp r;
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = CHAT_PLAIN, .headers = hdrs}, &r),
                     0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    /* The decode worker's answer: all 8 tokens, under the client's request id. */
    assert_int_equal(json_int(json_object_get(j, "usage"), "completion_tokens"), 8);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "chatcmpl-pd-plain-1");
    assert_null(json_object_get(j, "kv_transfer_params"));
    json_decref(j);
    /* Debug headers name both legs' workers (w1 prefills, w2 decodes). */
    char dbg[64];
    assert_int_equal(h_resp_header(&r, "x-switchyard-worker", dbg, sizeof(dbg)), 0);
    assert_string_equal(dbg, "w2");
    assert_int_equal(h_resp_header(&r, "x-switchyard-prefill-worker", dbg, sizeof(dbg)), 0);
    assert_string_equal(dbg, "w1");
    h_resp_fini(&r);

    json_t *pb = last_request(&p, 0);
    assert_prefill_body(pb, false);
    assert_true(json_real_value(json_object_get(pb, "temperature")) == 0.5);
    json_decref(pb);
    json_t *db = last_request(&p, 1);
    assert_decode_params(&p, db, 0);
    assert_int_equal(json_int(db, "max_tokens"), 8);
    assert_null(json_object_get(db, "stream"));
    json_decref(db);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "remote_prefill_used"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "local_prefill"), 0);
    char v[64];
    assert_string_equal(last_header(&p, 0, "x-request-id", v, sizeof(v)), "pd-plain-1");
    assert_string_equal(last_header(&p, 1, "x-request-id", v, sizeof(v)), "pd-plain-1");
    /* Last: it sends the prefill mock a request of its own. */
    assert_block_ids_issued_by_prefill(&p, 0, 1);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 1);
    /* Each leg decided by its own policy, counted apart from regular decisions. */
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_routing_decisions_total{phase=\"prefill\","
                                        "policy=\"cache_aware\",decision=\"no_match\"}"),
        1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_routing_decisions_total{phase=\"decode\","
                                        "policy=\"least_load\",decision=\"least_load\"}"),
        1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_routing_decisions_total{policy=\"cache_aware\","
                                        "decision=\"no_match\"}"),
        -1);
    assert_int_equal(h_fleet_dp_metric_checked(
                         &p.f, "switchyard_pd_phase_duration_seconds_count{phase=\"decode\"}"),
                     1);
    h_fleet_stop(&p.f);
}

static void test_full_flow_stream(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    char url[128];
    chat_url(&p, url, sizeof(url));
    const char *hdrs[] = {"X-Request-Id: pd-stream-1", NULL};
    struct h_sse s;
    assert_int_equal(
        h_http_stream_req(&(struct h_req){.url = url, .body = CHAT_STREAM, .headers = hdrs}, &s),
        0);
    assert_int_equal(s.resp.status, 200);
    assert_true(s.saw_done);
    assert_false(s.malformed);
    /* role + 6 tokens + usage + [DONE], exactly what the decode worker streams. */
    assert_int_equal(s.n_events, 9);
    assert_non_null(strstr(s.events[s.n_events - 2].data, "\"completion_tokens\":6"));
    h_sse_fini(&s);

    json_t *pb = last_request(&p, 0);
    assert_prefill_body(pb, true);
    json_decref(pb);
    json_t *db = last_request(&p, 1);
    assert_decode_params(&p, db, 0);
    assert_true(json_is_true(json_object_get(db, "stream")));
    assert_true(json_is_object(json_object_get(db, "stream_options")));
    assert_int_equal(json_int(db, "max_completion_tokens"), 6);
    json_decref(db);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "remote_prefill_used"), 1);
    char v[64];
    assert_string_equal(last_header(&p, 0, "x-request-id", v, sizeof(v)), "pd-stream-1");
    assert_string_equal(last_header(&p, 1, "x-request-id", v, sizeof(v)), "pd-stream-1");
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    h_fleet_stop(&p.f);
}

/* A fleet of older vLLM (flat remote_block_ids): the params pass through in their shape. */
static void test_full_flow_flat_block_ids(void **state)
{
    (void)state;
    struct pd_fleet p;
    const char *flat[] = {"--kv-block-ids-shape", "flat", NULL};
    pd_fleet_start(&p,
                   &(struct pd_opts){
                       .n_prefill = 1, .n_decode = 1, .prefill_args = flat, .decode_args = flat});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    json_t *db = last_request(&p, 1);
    json_t *ids = json_object_get(json_object_get(db, "kv_transfer_params"), "remote_block_ids");
    assert_true(json_array_size(ids) >= 3);
    assert_true(json_is_integer(json_array_get(ids, 0)));
    json_decref(db);
    /* The decode mock accepted them: it pulled the KV instead of prefilling. */
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "remote_prefill_used"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "local_prefill"), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 1);
    h_fleet_stop(&p.f);
}

/* min_tokens above the prefill's max_tokens of 1 is dropped from the prefill leg (vLLM
 * rejects min_tokens > max_tokens), kept for the decode leg. */
static void test_min_tokens(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    char url[128];
    chat_url(&p, url, sizeof(url));
    const char *body = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":8,\"min_tokens\":4,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"at least four\"}]}";
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    json_t *pb = last_request(&p, 0);
    assert_null(json_object_get(pb, "min_tokens"));
    json_decref(pb);
    json_t *db = last_request(&p, 1);
    assert_int_equal(json_int(db, "min_tokens"), 4);
    json_decref(db);
    h_fleet_stop(&p.f);
}

/* Several prompts in one completions request: vLLM would return the first prompt's params
 * only, so the request is not disaggregated. With a regular worker it goes there; in a fleet
 * of prefill and decode workers only, to a decode worker as a plain request. */
static void post_batch(struct pd_fleet *p, const char *prompt)
{
    char url[128], body[256];
    snprintf(url, sizeof(url), "%s/v1/completions", p->f.base);
    snprintf(body, sizeof(body), "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":3,\"prompt\":%s}",
             prompt);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
}

static void test_list_of_prompts_routed_as_regular(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1, .n_regular = 1});
    post_batch(&p, "[\"one prompt\",\"another prompt\"]");
    post_batch(&p, "[[1,2,3],[4,5]]");
    assert_int_equal(h_fleet_mock_stat(&p.f, 2, "requests_total"), 2);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    /* A single prompt (a list of one, or one token-id list) is still disaggregated. */
    post_batch(&p, "[\"just one prompt\"]");
    post_batch(&p, "[1,2,3,4]");
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 2);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "remote_prefill_used"), 2);
    assert_int_equal(h_fleet_mock_stat(&p.f, 2, "requests_total"), 2);
    h_fleet_stop(&p.f);

    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    post_batch(&p, "[\"one prompt\",\"another prompt\"]");
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "local_prefill"), 1);
    json_t *db = last_request(&p, 1);
    assert_null(json_object_get(db, "kv_transfer_params"));
    json_decref(db);
    /* Not a P/D request: no P/D outcome. */
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 0);
    h_fleet_stop(&p.f);
}

/* The usage of the prefill answer's prompt_tokens_details. */
static long long cached_of(json_t *usage)
{
    return json_int(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
}

/*
 * Usage under P/D: the decode worker counts the KV it pulled as cached prompt tokens, so the
 * client gets the prompt and cached tokens of the prefill answer, the completion tokens of the
 * decode answer: a cold request reports 0 cached, the same request again the prefill's hit.
 */
static void test_usage_from_prefill(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    char url[128];
    chat_url(&p, url, sizeof(url));
    for (int round = 0; round < 2; round++) {
        struct h_resp r;
        assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
        assert_int_equal(r.status, 200);
        json_t *j = h_resp_json(&r);
        assert_non_null(j);
        json_t *u = json_object_get(j, "usage");
        long long prompt = json_int(u, "prompt_tokens");
        assert_true(prompt > 32);
        assert_int_equal(json_int(u, "completion_tokens"), 8);
        assert_int_equal(json_int(u, "total_tokens"), prompt + 8);
        /* Cold: nothing cached; warm: the prefill's two full blocks of 16 tokens. */
        assert_int_equal(cached_of(u), round == 0 ? 0 : 32);
        json_decref(j);
        h_resp_fini(&r);
    }
    /* A stream's usage chunk the same way (its prompt is shorter than a block). */
    struct h_sse s;
    assert_int_equal(h_http_stream(url, CHAT_STREAM, &s), 0);
    assert_int_equal(s.resp.status, 200);
    assert_true(s.saw_done);
    assert_int_equal(s.n_events, 9);
    json_t *chunk = json_loads(s.events[s.n_events - 2].data, 0, NULL);
    assert_non_null(chunk);
    json_t *u = json_object_get(chunk, "usage");
    assert_int_equal(json_int(u, "completion_tokens"), 6);
    assert_int_equal(json_int(u, "total_tokens"), json_int(u, "prompt_tokens") + 6);
    assert_int_equal(cached_of(u), 0);
    json_decref(chunk);
    h_sse_fini(&s);
    h_fleet_stop(&p.f);
}

/* The prefill mock's pins: an answer's blocks stay pinned until a decode worker consumes them
 * (through the router: at once) or the lease runs out (a prefill nobody decodes). */
static bool prefill_unpinned(void *arg)
{
    struct pd_fleet *p = arg;
    return h_fleet_mock_stat(&p->f, 0, "pinned_blocks") == 0;
}

static void test_prefill_pins_until_read_or_lease(void **state)
{
    (void)state;
    struct pd_fleet p;
    const char *lease[] = {"--kv-lease-ms", "1000", NULL};
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1, .prefill_args = lease});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "kv_reads"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "pinned_blocks"), 0);
    /* A prefill answer no decode reads: its 3 blocks (2 full, the tail) stay pinned. */
    json_t *pb = last_request(&p, 0);
    char *body = json_dumps(pb, JSON_COMPACT);
    json_decref(pb);
    assert_non_null(body);
    char purl[128];
    assert_int_equal(h_url(purl, sizeof(purl), p.f.mock[0].port, "/v1/chat/completions"), 0);
    assert_int_equal(h_http_post_json(purl, body, &r), 0);
    free(body);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    json_t *kv = json_object_get(j, "kv_transfer_params");
    assert_true(json_is_string(json_object_get(kv, "remote_request_id")));
    assert_true(json_int(kv, "remote_num_tokens") > 32);
    assert_true(json_int(kv, "remote_blocks_expiry_time") > 0);
    json_decref(j);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "pinned_blocks"), 3);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "pinned_requests"), 1);
    assert_int_equal(h_wait_until(prefill_unpinned, &p, 3000), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "kv_lease_expired"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "blocks_read_twice"), 0);
    h_fleet_stop(&p.f);
}

/* ---- cancellation in each phase --------------------------------------------------- */

static void test_abort_while_prefill_pending(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    assert_int_equal(h_mock_faults(p.f.mock[0].url, "{\"stall_before_headers_ms\":10000}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct held prefill = {.p = &p, .i = 0, .want = 1};
    assert_int_equal(h_wait_until(worker_holds, &prefill, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_fleet_load(&p.f, 1), 0);
    assert_int_equal(h_async_abort(a), 0);
    int64_t t0 = h_now_ms();
    prefill.want = 0;
    assert_int_equal(h_wait_until(worker_holds, &prefill, ABORT_MS), 0);
    print_message("prefill released %lld ms after the client left\n", (long long)(h_now_ms() - t0));
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "client_aborts"), 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    assert_int_equal(h_fleet_load(&p.f, 1), 0);
    assert_int_equal(h_fleet_dp_metric_checked(
                         &p.f, "switchyard_pd_requests_total{outcome=\"aborted_prefill\"}"),
                     1);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_load_underflows_total"), 0);
    h_async_destroy(a);
    h_fleet_stop(&p.f);
}

static void test_abort_while_decode_pending(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    assert_int_equal(h_mock_faults(p.f.mock[1].url, "{\"stall_before_headers_ms\":10000}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct held decode = {.p = &p, .i = 1, .want = 1};
    assert_int_equal(h_wait_until(worker_holds, &decode, H_READY_TIMEOUT_MS), 0);
    /* The prefill leg ended before decode started: its load is already gone. */
    struct held prefill = {.p = &p, .i = 0, .want = 0};
    assert_int_equal(h_wait_until(worker_holds, &prefill, ABORT_MS), 0);
    assert_int_equal(h_async_abort(a), 0);
    int64_t t0 = h_now_ms();
    decode.want = 0;
    assert_int_equal(h_wait_until(worker_holds, &decode, ABORT_MS), 0);
    print_message("decode released %lld ms after the client left\n", (long long)(h_now_ms() - t0));
    assert_true(worker_holds(&prefill));
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "client_aborts"), 1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"aborted_decode\"}"),
        1);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_load_underflows_total"), 0);
    h_async_destroy(a);
    h_fleet_stop(&p.f);
}

/* Watches a decode stall: while the decode mock holds the request, the router's decode load
 * must be 1 (not released at headers); the prefill load must be 0. */
struct stall_watch {
    struct pd_fleet *p;
    struct h_async *a;
    int bad, checks;
};

static bool stall_over(void *arg)
{
    struct stall_watch *w = arg;
    long long m1 = h_fleet_mock_stat(&w->p->f, 1, "inflight");
    long long load = h_fleet_load(&w->p->f, 1);
    long long m2 = h_fleet_mock_stat(&w->p->f, 1, "inflight");
    if (m1 == 1 && m2 == 1) {
        w->checks++;
        if (load != 1 || h_fleet_load(&w->p->f, 0) != 0)
            w->bad++;
    }
    struct h_async_state st;
    h_async_get_state(w->a, &st);
    return st.done && load == 0;
}

static void test_decode_stall_keeps_load_until_eof(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    assert_int_equal(h_mock_faults(p.f.mock[1].url, "{\"stall_after_chunks\":0,\"stall_ms\":1500}"),
                     0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    struct stall_watch w = {.p = &p, .a = a};
    assert_int_equal(h_wait_until(stall_over, &w, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(w.bad, 0);
    assert_true(w.checks > 10); /* we really watched during the stall */
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    h_async_destroy(a);
    h_fleet_stop(&p.f);
}

static void test_decode_stall_client_leaves(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    assert_int_equal(
        h_mock_faults(p.f.mock[1].url, "{\"stall_after_chunks\":2,\"stall_ms\":10000}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &a), 0);
    assert_int_equal(h_async_wait_body(a, 1, H_READY_TIMEOUT_MS), 0);
    struct held decode = {.p = &p, .i = 1, .want = 1};
    assert_int_equal(h_wait_until(worker_holds, &decode, H_READY_TIMEOUT_MS), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_false(st.done);
    assert_int_equal(st.status, 200);
    assert_int_equal(h_async_abort(a), 0);
    int64_t t0 = h_now_ms();
    decode.want = 0;
    assert_int_equal(h_wait_until(worker_holds, &decode, ABORT_MS), 0);
    print_message("decode released %lld ms after the client left mid-stall\n",
                  (long long)(h_now_ms() - t0));
    assert_int_equal(h_fleet_load(&p.f, 0), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "client_aborts"), 1);
    h_async_destroy(a);
    h_fleet_stop(&p.f);
}

/* ---- failures ---------------------------------------------------------------------- */

static void test_prefill_503_retried_on_other_prefill(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 2,
                                         .n_decode = 1,
                                         .dataplane_extra = "retry:\n  backoff: 10ms\n",
                                         .policy_extra = "prefill: { name: round_robin }\n"});
    assert_int_equal(h_mock_faults(p.f.mock[0].url, "{\"fail_status\":503}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    for (int i = 0; i < 6; i++) {
        struct h_resp r;
        assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
        /* Every decode used the params of the prefill worker that answered: w2. */
        json_t *db = last_request(&p, 2);
        assert_decode_params(&p, db, 1);
        json_decref(db);
    }
    assert_true(h_fleet_mock_stat(&p.f, 0, "requests_total") >= 1);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 6);
    assert_int_equal(h_fleet_mock_stat(&p.f, 2, "remote_prefill_used"), 6);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_true(h_fleet_dp_metric_checked(&p.f, "switchyard_retries_total") >= 1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 6);
    h_fleet_stop(&p.f);
}

/*
 * A decode worker that answers 503 has seen the params: it may have read or freed the
 * prefill's blocks, so the same params never go to another decode worker. The request runs
 * again from a new prefill; the prefill mock counts every consumption of its blocks by a decode
 * mock and must never see the same blocks consumed twice.
 */
static void test_decode_503_reruns_prefill(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 2,
                                         .dataplane_extra = "retry:\n  backoff: 10ms\n",
                                         .policy_extra = "decode: { name: round_robin }\n"});
    assert_int_equal(h_mock_faults(p.f.mock[1].url, "{\"fail_status\":503}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    for (int i = 0; i < 6; i++) {
        struct h_sse s;
        assert_int_equal(h_http_stream(url, CHAT_STREAM, &s), 0);
        assert_int_equal(s.resp.status, 200);
        assert_true(s.saw_done);
        h_sse_fini(&s);
    }
    long long failed = h_fleet_mock_stat(&p.f, 1, "requests_total");
    assert_true(failed >= 1);
    /* No blocks consumed twice, one prefill per decode attempt: a failed decode's params were
     * never reused. */
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "blocks_read_twice"), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 6 + failed);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "kv_reads"), 6 + failed);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "pinned_requests"), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 2, "remote_prefill_used"), 6);
    json_t *db = last_request(&p, 2);
    assert_decode_params(&p, db, 0);
    json_decref(db);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 6);
    h_fleet_stop(&p.f);
}

/*
 * Watches a decode worker that answers 503 with an error body it holds open: the router's load
 * of each worker must never read below the mock's in-flight count (sampled around it, so the
 * mock's count was stable), and once the client has its answer (the re-run's), the failed
 * attempt alone is in flight on the decode worker, counted 1 until its body ends.
 */
struct error_body_watch {
    struct pd_fleet *p;
    struct h_async *a;
    int bad, checks, held_after_answer;
};

static bool error_body_drained(void *arg)
{
    struct error_body_watch *w = arg;
    struct h_async_state st;
    h_async_get_state(w->a, &st);
    long long decode_load = 0;
    for (size_t i = 0; i < w->p->f.n; i++) {
        long long m1 = h_fleet_mock_stat(&w->p->f, i, "inflight");
        long long load = h_fleet_load(&w->p->f, i);
        long long m2 = h_fleet_mock_stat(&w->p->f, i, "inflight");
        if (i == 1)
            decode_load = load;
        if (m1 < 0 || m1 != m2)
            continue;
        w->checks++;
        if (load < m1) {
            print_message("worker w%zu: router load %lld below the mock's in-flight %lld\n", i + 1,
                          load, m1);
            w->bad++;
        }
        if (i == 1 && st.done && m1 == 1) {
            w->held_after_answer++;
            if (load != 1) {
                print_message("decode worker: load %lld while its error body is held\n", load);
                w->bad++;
            }
        }
    }
    return st.done && decode_load == 0 && h_fleet_mock_stat(&w->p->f, 1, "inflight") == 0;
}

static void test_decode_error_body_keeps_load_until_its_end(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .dataplane_extra = "retry:\n  backoff: 10ms\n"});
    /* The first decode attempt: 503, its headers and half its body at once, the rest 1 s later. */
    assert_int_equal(h_mock_faults(p.f.mock[1].url, "{\"fail_status\":503,\"fail_count\":1,"
                                                    "\"fail_body_hold_ms\":1000}"),
                     0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_async *a;
    int64_t t0 = h_now_ms();
    assert_int_equal(h_async_start(url, CHAT_PLAIN, &(struct h_async_opts){0}, &a), 0);
    struct error_body_watch w = {.p = &p, .a = a};
    assert_int_equal(h_wait_until(error_body_drained, &w, H_READY_TIMEOUT_MS), 0);
    int64_t took = h_now_ms() - t0;
    print_message("decode load 0 after %lld ms; %d checks, %d while the error body was held\n",
                  (long long)took, w.checks, w.held_after_answer);
    assert_int_equal(w.bad, 0);
    assert_true(w.held_after_answer > 10); /* we really watched while the body was held */
    assert_true(took >= 1000);             /* released at the body's end, not before */

    /* As documented: the failed decode saw the params, so the whole request ran again from a
     * new prefill (new blocks, none read twice), and the client got the re-run's answer. */
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_int_equal(json_int(json_object_get(j, "usage"), "completion_tokens"), 8);
    json_decref(j);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 2);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "kv_reads"), 2);
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "blocks_read_twice"), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 2);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(h_fleet_dp_metric_checked(
                         &p.f, "switchyard_upstream_errors_total{worker=\"w2\",kind=\"status\"}"),
                     1);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_retries_total"), 1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}"), 1);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_load_underflows_total"), 0);
    h_async_destroy(a);
    h_fleet_stop(&p.f);
}

static void test_prefill_without_params_is_502(void **state)
{
    (void)state;
    struct pd_fleet p;
    /* A worker registered as prefill that answers like a regular one: no kv_transfer_params. */
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .prefill_mocks_regular = true,
                                         .policy_extra = "pd_fallback: error\n"});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 502, "bad_kv_transfer_params");
    assert_null(strstr(r.body, "w1")); /* in the log, not the client's answer */
    assert_non_null(strstr(r.body, "no kv_transfer_params"));
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"bad_kv_params\"}"),
        1);
    h_fleet_stop(&p.f);
}

/* The default fallback: a prefill answer without usable params sends the client's body to a
 * decode worker as a plain request (it prefills locally) instead of a 502. */
static void test_prefill_without_params_falls_back(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p,
                   &(struct pd_opts){.n_prefill = 1, .n_decode = 1, .prefill_mocks_regular = true});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_int_equal(json_int(json_object_get(j, "usage"), "completion_tokens"), 8);
    json_decref(j);
    h_resp_fini(&r);
    json_t *db = last_request(&p, 1);
    assert_null(json_object_get(db, "kv_transfer_params"));
    assert_int_equal(json_int(db, "max_tokens"), 8);
    json_decref(db);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "local_prefill"), 1);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"pd_fallback\"}"),
        1);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"bad_kv_params\"}"),
        0);
    h_fleet_stop(&p.f);
}

/* vLLM's push mode (no remote_block_ids: the legs would have to run concurrently) is refused:
 * the local fallback by default, a 502 saying so with pd_fallback: error. */
static void test_push_mode_refused(void **state)
{
    (void)state;
    struct pd_fleet p;
    const char *push[] = {"--kv-transfer-mode", "push", NULL};
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1, .prefill_args = push});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "local_prefill"), 1);
    json_t *db = last_request(&p, 1);
    assert_null(json_object_get(db, "kv_transfer_params"));
    json_decref(db);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"pd_fallback\"}"),
        1);
    h_fleet_stop(&p.f);

    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .prefill_args = push,
                                         .policy_extra = "pd_fallback: error\n"});
    chat_url(&p, url, sizeof(url));
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 502, "bad_kv_transfer_params");
    assert_non_null(strstr(r.body, "push mode"));
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    h_fleet_stop(&p.f);
}

/* A decode that never starts (its only worker refuses connections) holds no prefill load. */
static void test_unreachable_decode_releases_prefill(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .decode_dead = true,
                                         .dataplane_extra = "retry:\n  backoff: 10ms\n"});
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 502, "upstream_error");
    /* Which worker failed is the operator's: the log has it, the body not. */
    assert_null(strstr(r.body, "w2"));
    assert_true(h_proc_log_contains(p.f.dp, "decode worker w2"));
    h_resp_fini(&r);
    /* One prefill: decode retries do not prefill again. */
    assert_int_equal(h_fleet_mock_stat(&p.f, 0, "requests_total"), 1);
    struct held prefill = {.p = &p, .i = 0, .want = 0};
    assert_int_equal(h_wait_until(worker_holds, &prefill, ABORT_MS), 0);
    assert_int_equal(h_fleet_load(&p.f, 1), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"decode_error\"}"),
        1);
    h_fleet_stop(&p.f);
}

/* A silent prefill worker: 504 in OpenAI form, its transfer aborted, no load left. */
static void test_prefill_timeouts(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1,
                                         .n_decode = 1,
                                         .dataplane_extra =
                                             "first_byte_timeout: 400ms\nidle_timeout: 400ms\n"});
    char url[128];
    chat_url(&p, url, sizeof(url));
    /* No headers in time. */
    assert_int_equal(h_mock_faults(p.f.mock[0].url, "{\"stall_before_headers_ms\":3000}"), 0);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 504, "upstream_timeout");
    assert_non_null(strstr(r.body, "the prefill worker sent no response headers"));
    assert_null(strstr(r.body, "w1")); /* worker ids are the operator's */
    assert_true(r.elapsed_ms < 2000);
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    /* Headers, then a body that goes silent while the router collects it. */
    assert_int_equal(h_mock_faults(p.f.mock[0].url, "{\"stall_before_headers_ms\":0,"
                                                    "\"fail_status\":400,\"fail_count\":1,"
                                                    "\"fail_body_hold_ms\":3000}"),
                     0);
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 504, "upstream_timeout");
    assert_non_null(strstr(r.body, "the prefill worker was silent"));
    assert_null(strstr(r.body, "w1"));
    assert_true(r.elapsed_ms < 2000);
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"prefill_error\"}"),
        2);
    h_fleet_stop(&p.f);
}

static void test_prefill_client_error_passed_through(void **state)
{
    (void)state;
    struct pd_fleet p;
    pd_fleet_start(&p, &(struct pd_opts){.n_prefill = 1, .n_decode = 1});
    assert_int_equal(h_mock_faults(p.f.mock[0].url, "{\"fail_status\":400,\"fail_count\":1}"), 0);
    char url[128];
    chat_url(&p, url, sizeof(url));
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, CHAT_PLAIN, &r), 0);
    assert_error_body(&r, 400, NULL);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&p.f, 1, "requests_total"), 0);
    assert_int_equal(h_wait_until(all_idle, &p, ABORT_MS), 0);
    assert_int_equal(
        h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"prefill_error\"}"),
        1);
    h_fleet_stop(&p.f);
}

/* ---- soak ----------------------------------------------------------------------------- */

#define SOAK_REQUESTS 1000
#define SOAK_WINDOW   16
#define SOAK_HOLDS    4

/* Router load equals the mock's in-flight count on every worker (read around it). */
static void assert_loads_match_mocks(struct pd_fleet *p)
{
    for (size_t i = 0; i < p->f.n; i++) {
        long long m1 = h_fleet_mock_stat(&p->f, i, "inflight");
        long long load = h_fleet_load(&p->f, i);
        long long m2 = h_fleet_mock_stat(&p->f, i, "inflight");
        assert_int_equal(m1, m2);
        assert_int_equal(load, m1);
    }
}

/* Workers [from, to) of the fleet hold `want` requests in total (mock in-flight). */
struct pool_held {
    struct pd_fleet *p;
    size_t from, to;
    long long want;
};

static bool pool_holds(void *arg)
{
    struct pool_held *h = arg;
    long long sum = 0;
    for (size_t i = h->from; i < h->to; i++)
        sum += h_fleet_mock_stat(&h->p->f, i, "inflight");
    return sum == h->want;
}

/*
 * A held point: 4 requests parked before response headers on the prefill
 * workers (odd points) or the decode workers (even points); every worker's
 * router load must equal its mock's in-flight count; then the clients
 * leave and everything must drop to 0.
 */
static void soak_hold_point(struct pd_fleet *p, const char *url, int point)
{
    struct pool_held h = {.p = p, .want = 4};
    h.from = point % 2 ? 0 : p->n_prefill;
    h.to = point % 2 ? p->n_prefill : p->f.n;
    for (size_t i = h.from; i < h.to; i++)
        assert_int_equal(h_mock_faults(p->f.mock[i].url, "{\"stall_before_headers_ms\":20000}"), 0);
    struct h_async *held[4];
    for (size_t k = 0; k < 4; k++)
        assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){0}, &held[k]), 0);
    assert_int_equal(h_wait_until(pool_holds, &h, H_READY_TIMEOUT_MS), 0);
    assert_loads_match_mocks(p);
    for (size_t i = h.from; i < h.to; i++)
        assert_int_equal(h_mock_faults(p->f.mock[i].url, "{\"stall_before_headers_ms\":0}"), 0);
    for (size_t k = 0; k < 4; k++)
        h_async_destroy(held[k]);
    assert_int_equal(h_wait_until(all_idle, p, ABORT_MS), 0);
}

/* Frees a finished soak request; 1 when its client got a whole 200 response. */
static int soak_finish(struct h_async *a)
{
    struct h_async_state st;
    h_async_get_state(a, &st);
    h_async_destroy(a);
    return st.done && !st.aborted && st.status == 200 && st.curl_code == 0;
}

static void soak_fault(struct pd_fleet *p, unsigned r)
{
    static const char *const faults[] = {
        "{\"fail_status\":503,\"fail_count\":3}",
        "{\"reset_after_chunks\":1}",
        "{\"reset_after_chunks\":0}",
        "{\"stall_before_headers_ms\":30}",
        "{\"stall_before_headers_ms\":0}",
        "{\"fail_status\":500,\"fail_count\":2}",
    };
    size_t worker = r % p->f.n;
    const char *fault = faults[(r / 8) % (sizeof(faults) / sizeof(faults[0]))];
    assert_int_equal(h_mock_faults(p->f.mock[worker].url, fault), 0);
}

static void test_soak_random_aborts_and_faults(void **state)
{
    (void)state;
    struct pd_fleet p;
    const char *args[] = {"--prefill-base-us", "2000", "--tpot-ms", "1", NULL};
    pd_fleet_start(
        &p, &(struct pd_opts){.n_prefill = 2,
                              .n_decode = 2,
                              .prefill_args = args,
                              .decode_args = args,
                              /* The mock's reset_after_chunks fault now and then
                               * releases its request but leaves the connection open
                               * and silent; the router's idle timeout cuts it. */
                              .dataplane_extra = "idle_timeout: 2s\nretry:\n  backoff: 5ms\n"});
    char url[128];
    chat_url(&p, url, sizeof(url));
    srand(20261129);
    struct h_async *win[SOAK_WINDOW] = {0};
    int started = 0;
    long long complete_ok = 0; /* clients that got a whole 200 response */
    int holds = 0;
    int next_hold = SOAK_REQUESTS / (SOAK_HOLDS + 1);
    while (started < SOAK_REQUESTS) {
        for (size_t k = 0; k < SOAK_WINDOW && started < SOAK_REQUESTS; k++) {
            if (win[k] != NULL) {
                if (!async_done(win[k]))
                    continue;
                complete_ok += soak_finish(win[k]);
                win[k] = NULL;
            }
            unsigned r = (unsigned)rand();
            if (r % 23 == 0)
                soak_fault(&p, r);
            struct h_async_opts o = {0};
            if (r % 3 == 0) {
                o.abort_at = H_ABORT_AFTER_MS;
                o.ms = (int64_t)(r / 3 % 40);
            }
            assert_int_equal(h_async_start(url, (r & 16) ? CHAT_STREAM : CHAT_PLAIN, &o, &win[k]),
                             0);
            started++;
        }
        if (started >= next_hold && started < SOAK_REQUESTS) {
            for (size_t k = 0; k < SOAK_WINDOW; k++) {
                if (win[k] == NULL)
                    continue;
                assert_int_equal(h_async_wait(win[k], H_HTTP_TIMEOUT_MS), 0);
                complete_ok += soak_finish(win[k]);
                win[k] = NULL;
            }
            for (size_t i = 0; i < p.f.n; i++)
                assert_int_equal(h_mock_reset(p.f.mock[i].url), 0);
            assert_int_equal(h_wait_until(all_idle, &p, H_READY_TIMEOUT_MS), 0);
            soak_hold_point(&p, url, holds++);
            next_hold += SOAK_REQUESTS / (SOAK_HOLDS + 1);
        }
        /* Let the window move: wait for the oldest slot rather than spinning. */
        if (win[0] != NULL)
            h_wait_until(async_done, win[0], 50);
    }
    for (size_t k = 0; k < SOAK_WINDOW; k++)
        if (win[k] != NULL) {
            assert_int_equal(h_async_wait(win[k], H_HTTP_TIMEOUT_MS), 0);
            complete_ok += soak_finish(win[k]);
        }
    assert_int_equal(h_wait_until(all_idle, &p, H_READY_TIMEOUT_MS), 0);
    assert_loads_match_mocks(&p);
    assert_int_equal(holds, SOAK_HOLDS);
    long long total = 0;
    const char *outcomes[] = {"ok",           "prefill_error",   "bad_kv_params",
                              "decode_error", "aborted_prefill", "aborted_decode",
                              "pd_fallback"};
    for (size_t o = 0; o < 7; o++) {
        char series[96];
        snprintf(series, sizeof(series), "switchyard_pd_requests_total{outcome=\"%s\"}",
                 outcomes[o]);
        long long v = h_fleet_dp_metric_checked(&p.f, series);
        print_message("%s: %lld\n", outcomes[o], v);
        total += v;
    }
    /* At most one outcome per request (a client gone before its upload ended never became a
     * P/D request), and every whole answer a client got counted as ok. */
    print_message("%lld whole answers, %lld outcomes\n", complete_ok, total);
    assert_true(total <= SOAK_REQUESTS + 4 * SOAK_HOLDS);
    assert_true(total >= complete_ok + 4 * SOAK_HOLDS);
    assert_true(h_fleet_dp_metric_checked(&p.f, "switchyard_pd_requests_total{outcome=\"ok\"}") >=
                complete_ok);
    assert_true(complete_ok >= SOAK_REQUESTS / 4);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_pd_load{phase=\"prefill\"}"), 0);
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_pd_load{phase=\"decode\"}"), 0);
    /* Exactly each phase's load was released: never one release too many. */
    assert_int_equal(h_fleet_dp_metric_checked(&p.f, "switchyard_load_underflows_total"), 0);
    h_fleet_stop(&p.f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_full_flow_plain),
        H_TEST(test_full_flow_stream),
        H_TEST(test_full_flow_flat_block_ids),
        H_TEST(test_min_tokens),
        H_TEST(test_list_of_prompts_routed_as_regular),
        H_TEST(test_usage_from_prefill),
        H_TEST(test_prefill_pins_until_read_or_lease),
        H_TEST(test_abort_while_prefill_pending),
        H_TEST(test_abort_while_decode_pending),
        H_TEST(test_decode_stall_keeps_load_until_eof),
        H_TEST(test_decode_stall_client_leaves),
        H_TEST(test_prefill_503_retried_on_other_prefill),
        H_TEST(test_decode_503_reruns_prefill),
        H_TEST(test_decode_error_body_keeps_load_until_its_end),
        H_TEST(test_prefill_without_params_is_502),
        H_TEST(test_prefill_without_params_falls_back),
        H_TEST(test_push_mode_refused),
        H_TEST(test_unreachable_decode_releases_prefill),
        H_TEST(test_prefill_timeouts),
        H_TEST(test_prefill_client_error_passed_through),
        H_TEST(test_soak_random_aborts_and_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
