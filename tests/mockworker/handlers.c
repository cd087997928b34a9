/*
 * HTTP handlers of the mock worker (see handlers.h). An inference request
 * walks through explicit phases (request.h, enum mw_phase) because
 * libmicrohttpd calls the access handler again after every resume: each call
 * continues from the phase it parked in. Timing is absolute: the moment the
 * first token is out is fixed when the request is admitted, and every later
 * event is due at a fixed offset from it, so parking granularity never adds
 * up to drift.
 *
 * Accounting rules (the ground truth e2e tests compare the router with):
 * an inference request holds one inflight count from its first header until
 * its completion callback, or until a hang-up is noticed while parked,
 * whichever is first; a request the client abandons counts once in
 * client_aborts; a connection closed on purpose by a reset fault or by
 * shutdown does not.
 */
#include "tests/mockworker/sleep_mode.h"
#include "tests/mockworker/handlers.h"

#include "common/log.h"
#include "common/prom.h"
#include "common/version.h"
#include "tests/mockworker/lora.h"
#include "tests/mockworker/pd_kv.h"
#include "tests/mockworker/server.h"
#include "tests/mockworker/vllm_metrics.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define CT_JSON "application/json"
#define CT_SSE  "text/event-stream; charset=utf-8"
#define CT_PROM "text/plain; version=0.0.4; charset=utf-8"

/* ---- small helpers ------------------------------------------------------------ */

/* Collected request headers and the /metrics text are small; past this something is wrong. */
#define TEXT_MAX (1u << 20)

static uint64_t ms_to_ns(uint64_t ms)
{
    return ms * 1000000ull;
}

static bool is_method(const char *method, const char *want)
{
    return strcmp(method, want) == 0;
}

/*
 * Closes the connection. MHD (with MHD_USE_TURBO) neither shuts the socket
 * down nor closes it until a later pass over that connection, which after a
 * resume may not come until some other event: the peer then waits on an
 * open connection that /mock/stats already counts as finished. Shutting the
 * socket down here makes the peer see the end at once; MHD's own close
 * follows (the kick asks for the pass).
 */
static void shut_connection(struct mw_req *req)
{
    const union MHD_ConnectionInfo *ci =
        req->conn != NULL ? MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD)
                          : NULL;
    if (ci != NULL)
        shutdown(ci->connect_fd, SHUT_RDWR);
    mw_loop_kick(req->loop);
}

static enum MHD_Result fail_handler(struct mw_req *req)
{
    shut_connection(req);
    return MHD_NO;
}

static ssize_t fail_reader(struct mw_req *req)
{
    shut_connection(req);
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* ---- responses ----------------------------------------------------------------- */

static void add_common_headers(struct mw_req *req, struct MHD_Response *resp, const char *ctype)
{
    if (ctype != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (req->route == MW_ROUTE_BAD_METHOD && req->allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, req->allow);
    if (req->route == MW_ROUTE_INFERENCE && req->plan.fail_status != 0 &&
        req->plan.fail_retry_after_s != 0) {
        char v[24];
        snprintf(v, sizeof(v), "%llu", (unsigned long long)req->plan.fail_retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (req->route == MW_ROUTE_INFERENCE || req->route == MW_ROUTE_API) {
        const char *rid = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Request-Id");
        if (rid != NULL)
            MHD_add_response_header(resp, "x-request-id", rid);
    }
}

static void count_status(struct mw_req *req, int status)
{
    if (req->route == MW_ROUTE_INFERENCE || req->route == MW_ROUTE_API)
        mw_stats_status(&req->server->stats, status);
}

/* Queues body (malloc'd, ownership taken; NULL = allocation failed) with status. */
static enum MHD_Result respond(struct mw_req *req, int status, char *body, size_t len,
                               const char *ctype)
{
    struct MHD_Response *resp;
    if (body == NULL && len > 0) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"InternalServerError\",\"param\":null,\"code\":500}}";
        status = 500;
        resp =
            MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    } else if (body == NULL || len == 0) {
        free(body);
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL)
            free(body);
    }
    if (resp == NULL)
        return MHD_NO;
    add_common_headers(req, resp, ctype);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    count_status(req, status);
    req->phase = MW_PHASE_RESPONDING;
    return ret;
}

/* An error body in the shape the server was started with (--legacy-errors). */
static char *error_body(const struct mw_server *s, int status, const char *message, size_t *len)
{
    return s->opts.legacy_errors ? mw_openai_legacy_error_body(status, message, len)
                                 : mw_openai_error_body(status, message, len);
}

static enum MHD_Result respond_error(struct mw_req *req, int status, const char *message)
{
    size_t len = 1;
    char *body = error_body(req->server, status, message, &len);
    return respond(req, status, body, len, CT_JSON);
}

static enum MHD_Result respond_json(struct mw_req *req, int status, json_t *obj)
{
    size_t len = 1;
    char *body = NULL;
    if (obj != NULL) {
        body = json_dumps(obj, JSON_COMPACT);
        json_decref(obj);
    }
    if (body != NULL)
        len = strlen(body);
    return respond(req, status, body, len, CT_JSON);
}

/* ---- request setup ------------------------------------------------------------- */

static enum mw_route route_of(struct mw_req *req, const char *url, const char *method)
{
    bool get = is_method(method, "GET") || is_method(method, "HEAD");
    bool post = is_method(method, "POST");
    bool api_ok = false;
    if (mw_api_route(url, method, &req->api, req->api_id, &req->allow, &api_ok))
        return api_ok ? MW_ROUTE_API : MW_ROUTE_BAD_METHOD;
    static const struct {
        const char *path;
        enum mw_route route;
        enum mw_endpoint ep;
        const char *allow;
    } table[] = {
        {"/v1/chat/completions", MW_ROUTE_INFERENCE, MW_EP_CHAT, "POST"},
        {"/v1/completions", MW_ROUTE_INFERENCE, MW_EP_COMPLETIONS, "POST"},
        {"/v1/embeddings", MW_ROUTE_INFERENCE, MW_EP_EMBEDDINGS, "POST"},
        {"/health", MW_ROUTE_HEALTH, MW_EP_UNSET, "GET, HEAD"},
        {"/ping", MW_ROUTE_HEALTH, MW_EP_UNSET, "GET, HEAD, POST"},
        {"/metrics", MW_ROUTE_METRICS, MW_EP_UNSET, "GET, HEAD"},
        {"/v1/models", MW_ROUTE_MODELS, MW_EP_UNSET, "GET, HEAD"},
        {"/version", MW_ROUTE_VERSION, MW_EP_UNSET, "GET, HEAD"},
        {"/mock/stats", MW_ROUTE_MOCK_STATS, MW_EP_UNSET, "GET, HEAD"},
        {"/mock/faults", MW_ROUTE_MOCK_FAULTS, MW_EP_UNSET, "GET, HEAD, POST"},
        {"/mock/reset", MW_ROUTE_MOCK_RESET, MW_EP_UNSET, "POST"},
        {"/mock/kv_read", MW_ROUTE_MOCK_KV_READ, MW_EP_UNSET, "POST"},
        {"/sleep", MW_ROUTE_SLEEP, MW_EP_UNSET, "POST"},
        {"/wake_up", MW_ROUTE_WAKE_UP, MW_EP_UNSET, "POST"},
        {"/is_sleeping", MW_ROUTE_IS_SLEEPING, MW_EP_UNSET, "GET, HEAD"},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(url, table[i].path) != 0)
            continue;
        req->allow = table[i].allow;
        bool ok = strstr(table[i].allow, "POST") != NULL && strstr(table[i].allow, "GET") != NULL
                      ? (get || post)
                  : strcmp(table[i].allow, "POST") == 0 ? post
                                                        : get;
        if (!ok)
            return MW_ROUTE_BAD_METHOD;
        req->ep = table[i].ep;
        return table[i].route;
    }
    return MW_ROUTE_NOT_FOUND;
}

static struct mw_req *req_new(struct mw_loop *loop, struct mw_server *s,
                              struct MHD_Connection *conn, const char *url, const char *method)
{
    struct mw_req *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->loop = loop;
    req->server = s;
    req->conn = conn;
    req->watch_fd = -1;
    buf_init(&req->body, s->opts.max_body_bytes);
    th_timer_init(&req->timer);
    req->phase = MW_PHASE_RECEIVING;
    req->route = route_of(req, url, method);
    req->sched.owner = mw_loop_index(loop);
    req->lora = -1;
    if (req->route == MW_ROUTE_INFERENCE || req->route == MW_ROUTE_API) {
        mw_stats_accept(&s->stats);
        req->accounted = true;
    }
    return req;
}

static void body_append(struct mw_req *req, const char *data, size_t n)
{
    if (req->too_large)
        return;
    /* -E2BIG past --max-body-bytes; -ENOMEM is answered as 413 too: the mock has no better status.
     */
    if (buf_append(&req->body, data, n) != 0)
        req->too_large = true;
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct buf *b = cls;
    size_t klen = strlen(key);
    size_t start = b->len;
    if (buf_append(b, key, klen + 1) == 0) {
        for (size_t i = start; i < start + klen; i++)
            b->data[i] = (char)tolower((unsigned char)b->data[i]);
    }
    const char *v = value != NULL ? value : "";
    (void)buf_append(b, v, strlen(v) + 1);
    return MHD_YES;
}

/* Hands body and headers to the stats as the last request. */
static void record_last_request(struct mw_req *req)
{
    struct buf h = BUF_INIT(TEXT_MAX);
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, collect_header, &h);
    if (buf_error(&h) != 0)
        buf_fini(&h);
    char *body = NULL;
    size_t len = 0;
    if (!req->too_large)
        body = buf_detach(&req->body, &len);
    buf_fini(&req->body);
    mw_stats_last_request(&req->server->stats, body, len, h.data, h.len);
}

/* ---- inference ------------------------------------------------------------------- */

static void infer_receive(struct mw_req *req)
{
    struct mw_server *s = req->server;
    struct mw_error err = {0};
    if (req->too_large) {
        req->parse_status = 413;
        snprintf(err.message, sizeof(err.message),
                 "Request body larger than %" PRIu64 " bytes (--max-body-bytes)",
                 s->opts.max_body_bytes);
    } else if (mw_openai_parse(req->ep, req->body.data != NULL ? req->body.data : "", req->body.len,
                               &s->ocfg, &req->infer, &err) != 0) {
        req->parse_status = err.status;
    }
    if (req->parse_status != 0)
        req->parse_error = error_body(s, req->parse_status, err.message, &req->parse_error_len);
    else if (req->infer.model[0] != '\0')
        req->lora = mw_lora_begin(req->infer.model);
    record_last_request(req);
    /* A decode worker that got the params consumes the prefill's blocks,
     * whether it then serves, rejects or aborts the request (pd_pins.h). */
    const struct mw_infer *in = &req->infer;
    if (req->parse_status == 0 && s->opts.role == MW_ROLE_DECODE && in->remote_prefill_valid &&
        in->remote_request_id[0] != '\0' &&
        mw_pd_pins_notify(in->remote_host, in->remote_port, in->remote_request_id) != 0)
        log_warn("could not tell %s:%u that the blocks of %s were read", in->remote_host,
                 (unsigned)in->remote_port, in->remote_request_id);
    mw_fault_state_arrival(&s->faults, &req->plan);
    const char *rid = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Request-Id");
    mw_openai_request_id(req->ep, rid,
                         atomic_fetch_add_explicit(&s->unique, 1, memory_order_relaxed), req->id);
    req->gen.id = req->id;
    req->gen.model = s->opts.model;
    req->gen.created = (int64_t)time(NULL);
    req->gen.seed = s->opts.seed;
}

/* Prepares the engine entry and submits it. Returns 1 admitted, 0 queued, <0 error. */
static int infer_submit(struct mw_req *req)
{
    struct mw_server *s = req->server;
    const struct mw_infer *in = &req->infer;
    uint32_t bt = s->opts.block_tokens;
    bool cached = req->ep != MW_EP_EMBEDDINGS;
    size_t n = cached ? mw_full_blocks(in->prompt_len, bt) : 0;
    if (n > 0) {
        req->hashes = malloc(sizeof(*req->hashes) * n);
        req->block_ids = malloc(sizeof(*req->block_ids) * n);
        if (req->hashes == NULL || req->block_ids == NULL)
            return -ENOMEM;
        mw_block_hashes_from(mw_salted_seed(s->none_hash, in->salt, in->salt_len), in->prompt,
                             in->prompt_len, bt, req->hashes, n);
    }
    struct mw_sched_entry *x = &req->sched;
    x->hashes = req->hashes;
    x->n_hashes = n;
    x->text = in->prompt;
    x->salt = in->salt;
    x->salt_len = in->salt_len;
    x->block_ids = req->block_ids;
    x->prompt_tokens = in->prompt_tokens;
    x->use_prefix_cache = cached;
    if (s->opts.role == MW_ROLE_DECODE && cached) {
        if (in->remote_prefill_valid) {
            uint64_t remote = in->remote_blocks * bt;
            x->remote_tokens = remote < in->prompt_tokens ? remote : in->prompt_tokens;
        }
        mw_stats_prefill_kind(&s->stats, in->remote_prefill_valid);
    }
    req->submitted = true;
    return mw_engine_submit(&s->engine, x) ? 1 : 0;
}

/* Ends the request in the engine (once) and wakes loops with newly admitted work. */
static void infer_finish(struct mw_req *req, uint64_t generated)
{
    if (!req->submitted || req->finished)
        return;
    req->finished = true;
    uint64_t wake = mw_engine_finish(&req->server->engine, &req->sched, generated);
    if (wake != 0)
        mw_server_wake(req->server, wake);
}

/* Fixes the schedule once admitted: prefill of the uncached tokens, then tokens. */
static void infer_start(struct mw_req *req)
{
    const struct mw_options *o = &req->server->opts;
    req->started = true;
    double prefill_us =
        o->prefill_base_us + (double)req->sched.compute_tokens * o->prefill_us_per_token;
    req->first_token_ns =
        mw_now_ns() + ms_to_ns(req->plan.extra_latency_ms) + (uint64_t)(prefill_us * 1000.0);
    req->tpot_ns = (uint64_t)(o->tpot_ms * 1e6);
    req->gen.n_tokens = req->ep == MW_EP_EMBEDDINGS ? 0 : req->infer.max_tokens;
    req->gen.cached_tokens = req->sched.prompt_tokens - req->sched.compute_tokens;
}

static uint64_t last_token_ns(const struct mw_req *req)
{
    uint64_t n = req->gen.n_tokens;
    return req->first_token_ns + (n > 1 ? (n - 1) * req->tpot_ns : 0);
}

static json_t *kv_transfer_params(struct mw_req *req)
{
    struct mw_server *s = req->server;
    uint32_t bt = s->opts.block_tokens;
    size_t n = req->sched.n_hashes;
    uint32_t *ids = malloc(sizeof(*ids) * (n + 1));
    if (ids == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        ids[i] = req->block_ids[i];
    /* The partial tail block is never in the prefix cache: ids >= kv_blocks name it. */
    if (req->infer.prompt_tokens > (uint64_t)n * bt) {
        uint64_t t = atomic_fetch_add_explicit(&s->tail_ids, 1, memory_order_relaxed);
        ids[n++] = (uint32_t)(s->opts.kv_blocks + t % s->opts.kv_blocks);
    }
    /* Unique per prefill, even for a request id the router sends twice. */
    char rid[MW_REQUEST_ID_MAX + 24];
    snprintf(rid, sizeof(rid), "%s-%016" PRIx64, req->id,
             atomic_fetch_add_explicit(&s->unique, 1, memory_order_relaxed));
    struct mw_pd_answer a = {
        .engine_id = s->engine_id,
        .host = s->opts.host,
        .port = s->port,
        .block_ids = ids,
        .n_blocks = n,
        .flat = s->opts.kv_ids_flat,
        .push = s->opts.kv_push,
        .request_id = rid,
        .num_tokens = req->infer.prompt_tokens,
        .expiry = (int64_t)time(NULL) + (int64_t)(s->opts.kv_lease_ms / 1000),
    };
    json_t *kv = mw_pd_answer_params(&a);
    if (kv != NULL)
        mw_pd_pins_add(&s->pins, rid, (uint32_t)n);
    free(ids);
    return kv;
}

static enum MHD_Result respond_final(struct mw_req *req)
{
    struct mw_server *s = req->server;
    infer_finish(req, req->gen.n_tokens);
    size_t len = 1;
    char *body;
    if (req->ep == MW_EP_EMBEDDINGS) {
        body = mw_openai_embeddings_body(&req->infer, &req->gen, s->opts.embedding_dim, &len);
    } else {
        json_t *kv = NULL;
        if (s->opts.role == MW_ROLE_PREFILL && req->infer.do_remote_decode)
            kv = kv_transfer_params(req);
        body = mw_openai_completion_body(&req->infer, &req->gen, kv, &len);
    }
    return respond(req, 200, body, len, CT_JSON);
}

/* Reader of a failed response held open (fail_body_hold_ms). */
static ssize_t held_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct mw_req *req = cls;
    if (req->gone)
        return fail_reader(req);
    size_t limit = req->hold_done ? req->out_len : req->hold_split;
    if (req->out_off >= limit) {
        if (req->hold_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        req->hold_done = true;
        uint64_t until = mw_now_ns() + ms_to_ns(req->plan.fail_body_hold_ms);
        if (mw_park(req, until) == 0)
            return 0;
        limit = req->out_len;
    }
    size_t n = limit - req->out_off < max ? limit - req->out_off : max;
    memcpy(buf, req->out_buf + req->out_off, n);
    req->out_off += n;
    return (ssize_t)n;
}

static enum MHD_Result respond_fault(struct mw_req *req)
{
    int status = req->plan.fail_status;
    char msg[128];
    snprintf(msg, sizeof(msg), "mock worker fault: injected status %d", status);
    size_t len = 1;
    char *body = error_body(req->server, status, msg, &len);
    if (req->plan.fail_body_hold_ms == 0 || body == NULL || len < 2)
        return respond(req, status, body, len, CT_JSON);
    req->out_buf = body;
    req->out_len = len;
    req->hold_split = len / 2;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(len, 4096, held_reader, req, NULL);
    if (resp == NULL)
        return MHD_NO;
    add_common_headers(req, resp, CT_JSON);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    count_status(req, status);
    req->phase = MW_PHASE_RESPONDING;
    return ret;
}

enum stream_event {
    STREAM_EVENT_UNSET = 0,
    STREAM_EVENT_ROLE,
    STREAM_EVENT_TOKEN,
    STREAM_EVENT_USAGE,
    STREAM_EVENT_DONE,
    STREAM_EVENT_END,
};

/* The next event of the stream, its token index and when it is due. */
static enum stream_event next_event(const struct mw_req *req, uint64_t *token, uint64_t *due)
{
    uint64_t k = req->events_sent;
    uint64_t n = req->gen.n_tokens;
    uint64_t base = req->first_token_ns + req->shift_ns;
    *due = 0;
    if (req->ep == MW_EP_CHAT) {
        if (k == 0) {
            *due = base;
            return STREAM_EVENT_ROLE;
        }
        k--;
    }
    if (k < n) {
        *token = k;
        *due = base + k * req->tpot_ns;
        return STREAM_EVENT_TOKEN;
    }
    k -= n;
    if (req->infer.include_usage) {
        if (k == 0)
            return STREAM_EVENT_USAGE;
        k--;
    }
    return k == 0 ? STREAM_EVENT_DONE : STREAM_EVENT_END;
}

static ssize_t copy_pending(struct mw_req *req, char *buf, size_t max)
{
    size_t n = req->out_len - req->out_off < max ? req->out_len - req->out_off : max;
    memcpy(buf, req->out_buf + req->out_off, n);
    req->out_off += n;
    return (ssize_t)n;
}

/* Makes the pending piece the len bytes in out_buf (len < 0: did not fit) and copies out. */
static ssize_t stream_put(struct mw_req *req, int len, char *buf, size_t max)
{
    if (len < 0) {
        log_warn("stream %s: event does not fit its buffer", req->id);
        return fail_reader(req);
    }
    req->out_len = (size_t)len;
    req->out_off = 0;
    return copy_pending(req, buf, max);
}

/* Writes the stream_error fault's event into out_buf (grown to fit); its length or -ENOMEM. */
static int sse_error_event(struct mw_req *req)
{
    size_t len = 0;
    char *body = mw_openai_error_body(500, req->plan.stream_error, &len);
    if (body == NULL)
        return -ENOMEM;
    size_t need = len + sizeof("data: \n\n");
    if (need > req->out_cap) {
        char *grown = realloc(req->out_buf, need);
        if (grown == NULL) {
            free(body);
            return -ENOMEM;
        }
        req->out_buf = grown;
        req->out_cap = need;
    }
    int n = snprintf(req->out_buf, req->out_cap, "data: %s\n\n", body);
    free(body);
    return n;
}

/* One SSE event per call (vLLM writes each chunk on its own). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct mw_req *req = cls;
    if (req->gone)
        return fail_reader(req);
    if (req->out_off < req->out_len)
        return copy_pending(req, buf, max);
    if (!req->admitted) {
        /* Headers are out; the engine has not taken the request yet. */
        if (mw_park(req, 0) == 0)
            return 0;
        infer_finish(req, 0);
        return fail_reader(req);
    }
    if (!req->started)
        infer_start(req);
    const struct mw_fault_plan *plan = &req->plan;
    if (plan->reset_after_chunks > 0 && req->events_sent >= plan->reset_after_chunks) {
        req->reset_by_us = true;
        infer_finish(req, req->events_sent);
        return fail_reader(req);
    }
    uint64_t now = mw_now_ns();
    if (plan->stall_ms > 0 && !req->stalled && req->events_sent >= plan->stall_after_chunks) {
        req->stalled = true;
        req->shift_ns += ms_to_ns(plan->stall_ms);
        if (mw_park(req, now + ms_to_ns(plan->stall_ms)) == 0)
            return 0;
    }
    bool in_band =
        plan->stream_error[0] != '\0' && req->events_sent >= plan->stream_error_after_chunks;
    if (in_band && req->error_events >= 2)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (in_band && req->error_events == 1) {
        req->error_events++;
        return stream_put(req, mw_openai_sse_done(req->out_buf, req->out_cap), buf, max);
    }
    uint64_t token = 0;
    uint64_t due = 0;
    enum stream_event ev = next_event(req, &token, &due);
    if (ev == STREAM_EVENT_END)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (due > now && mw_park(req, due) == 0)
        return 0;
    if (in_band) {
        /* The stream answered 200 already: vLLM reports the failure in band. */
        req->error_events++;
        infer_finish(req, req->events_sent);
        return stream_put(req, sse_error_event(req), buf, max);
    }
    int len = -ENOSPC;
    switch (ev) {
    case STREAM_EVENT_ROLE:
        len = mw_openai_sse_role(&req->infer, &req->gen, req->out_buf, req->out_cap);
        break;
    case STREAM_EVENT_TOKEN:
        len = mw_openai_sse_token(&req->infer, &req->gen, token, req->out_buf, req->out_cap);
        if (token + 1 == req->gen.n_tokens)
            infer_finish(req, req->gen.n_tokens);
        break;
    case STREAM_EVENT_USAGE:
        len = mw_openai_sse_usage(&req->infer, &req->gen, req->out_buf, req->out_cap);
        break;
    default:
        len = mw_openai_sse_done(req->out_buf, req->out_cap);
        break;
    }
    if (len < 0) {
        log_warn("stream %s: event does not fit its buffer", req->id);
        return fail_reader(req);
    }
    req->events_sent++;
    req->out_len = (size_t)len;
    req->out_off = 0;
    return copy_pending(req, buf, max);
}

static enum MHD_Result respond_stream(struct mw_req *req)
{
    req->out_cap = MW_SSE_EVENT_MIN + strlen(req->gen.id) + strlen(req->gen.model);
    req->out_buf = malloc(req->out_cap);
    if (req->out_buf == NULL) {
        infer_finish(req, 0);
        return respond_error(req, 500, "out of memory");
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, req, NULL);
    if (resp == NULL)
        return MHD_NO;
    add_common_headers(req, resp, CT_SSE);
    enum MHD_Result ret = MHD_queue_response(req->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    count_status(req, MHD_HTTP_OK);
    req->phase = MW_PHASE_RESPONDING;
    return ret;
}

/* Each case continues from the phase the request parked in. */
static enum MHD_Result infer_step(struct mw_req *req)
{
    switch (req->phase) {
    case MW_PHASE_RECEIVING:
        infer_receive(req);
        req->phase = MW_PHASE_STALLED;
        if (req->plan.stall_before_headers_ms > 0 &&
            mw_park(req, mw_now_ns() + ms_to_ns(req->plan.stall_before_headers_ms)) == 0)
            return MHD_YES;
        __attribute__((fallthrough));
    case MW_PHASE_STALLED: {
        if (req->parse_status != 0) {
            char *body = req->parse_error;
            req->parse_error = NULL;
            return respond(req, req->parse_status, body, req->parse_error_len, CT_JSON);
        }
        if (req->plan.fail_status != 0)
            return respond_fault(req);
        if (req->plan.reset_after_chunks > 0 && !req->infer.stream) {
            req->reset_by_us = true;
            return fail_handler(req);
        }
        int rc = infer_submit(req);
        if (rc < 0)
            return respond_error(req, 500, "out of memory");
        req->phase = MW_PHASE_QUEUED;
        req->admitted = rc == 1;
        /* vLLM answers a stream before its engine queues the request: the
         * 200 headers go out now, the reader waits for the admission. */
        if (req->infer.stream && req->ep != MW_EP_EMBEDDINGS)
            return respond_stream(req);
        if (rc == 0) {
            if (mw_park(req, 0) == 0)
                return MHD_YES;
            infer_finish(req, 0);
            return respond_error(req, 503, "mock worker: cannot park a queued request");
        }
        __attribute__((fallthrough));
    }
    case MW_PHASE_QUEUED:
        infer_start(req);
        req->phase = MW_PHASE_GENERATING;
        __attribute__((fallthrough));
    case MW_PHASE_GENERATING: {
        uint64_t done = last_token_ns(req);
        if (mw_now_ns() < done && mw_park(req, done) == 0)
            return MHD_YES;
        return respond_final(req);
    }
    default:
        return MHD_NO;
    }
}

/* ---- Responses, Messages, pooling, tokenizer (api.h) ---------------------------- */

static enum MHD_Result api_step(struct mw_req *req)
{
    struct mw_server *s = req->server;
    struct mw_api_reply r;
    if (req->too_large) {
        char msg[128];
        snprintf(msg, sizeof(msg), "Request body larger than %" PRIu64 " bytes (--max-body-bytes)",
                 s->opts.max_body_bytes);
        return respond_error(req, 413, msg);
    }
    mw_api_handle(s, req->api, req->api_id, req->body.data, req->body.len, &r);
    record_last_request(req);
    return respond(req, r.status, r.body, r.body != NULL ? r.len : 1, r.ctype);
}

/* ---- other endpoints ---------------------------------------------------------------- */

/* A double as Python's repr spells it (prometheus_client writes repr):
 * the shortest digits that read back exactly, ".0" on whole numbers. */
static void vllm_float(double x, char *out, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x)
            break;
    }
    if (strpbrk(out, ".eEni") == NULL && strlen(out) + 2 < cap)
        strcat(out, ".0");
}

/*
 * One vLLM-named family with a series per engine (--data-parallel-size),
 * values spelled as vLLM does ("3.0"), labels in vLLM's order (its
 * labelnames are ["model_name", "engine"]). A count is split over the
 * engines (engine i gets v / n, plus one when i < v % n: each engine's
 * counter still only grows, and the series sum to v); a fraction (kv) is
 * the same on every engine.
 */
static void vllm_metric(struct prom_writer *w, const char *name, enum prom_type type,
                        const char *help, const char *model, uint32_t engines, uint64_t count,
                        const double *fraction)
{
    prom_family(w, name, type, help);
    for (uint32_t i = 0; i < engines; i++) {
        char engine[16], v[64];
        snprintf(engine, sizeof(engine), "%" PRIu32, i);
        if (fraction != NULL)
            vllm_float(*fraction, v, sizeof(v));
        else
            snprintf(v, sizeof(v), "%" PRIu64 ".0", count / engines + (i < count % engines));
        const struct prom_label labels[] = {{"model_name", model}, {"engine", engine}};
        prom_sample_text(w, type == PROM_COUNTER ? "_total" : "", labels, 2, v);
    }
}

/* The metrics_garbage fault's page: what a misconfigured path or a proxy's
 * error page looks like to a scraper (HTML, a half line, binary bytes). */
static const char metrics_garbage[] = "<html><body><h1>502 Bad Gateway</h1></body></html>\n"
                                      "vllm:num_requests_running{model_name=\"\x01\xfe\n"
                                      "\x00\x01\x02 not prometheus {{{ \"\n";

static enum MHD_Result respond_metrics(struct mw_req *req)
{
    struct mw_server *s = req->server;
    struct mw_faults f;
    mw_fault_state_get(&s->faults, &f);
    if (req->phase == MW_PHASE_RECEIVING && f.metrics_stall_ms > 0) {
        /* The hang fault: park, answer when the stall is over (or never
         * see the client again: a scraper that gave up closes). */
        req->phase = MW_PHASE_STALLED;
        if (mw_park(req, mw_now_ns() + ms_to_ns(f.metrics_stall_ms)) == 0)
            return MHD_YES;
    }
    if (f.metrics_garbage) {
        char *g = malloc(sizeof(metrics_garbage) - 1);
        if (g == NULL)
            return respond(req, 500, NULL, 1, CT_JSON);
        memcpy(g, metrics_garbage, sizeof(metrics_garbage) - 1);
        return respond(req, 200, g, sizeof(metrics_garbage) - 1, CT_PROM);
    }
    struct mw_engine_snapshot snap;
    mw_engine_snapshot(&s->engine, &snap);
    const char *m = s->opts.model;
    struct buf b = BUF_INIT(TEXT_MAX);
    struct prom_writer w;
    prom_init(&w, &b);
    if (s->opts.metrics_vllm)
        mw_vllm_metrics_head(&w, s);
    uint32_t n = s->opts.data_parallel_size;
    vllm_metric(&w, "vllm:num_requests_running", PROM_GAUGE,
                "Number of requests in model execution batches.", m, n, snap.running, NULL);
    vllm_metric(&w, "vllm:num_requests_waiting", PROM_GAUGE,
                "Number of requests waiting to be processed.", m, n, snap.waiting, NULL);
    mw_sleep_metrics(&w, m, n, snap.sleep_level);
    vllm_metric(&w, "vllm:kv_cache_usage_perc", PROM_GAUGE,
                "KV-cache usage. 1 means 100 percent usage.", m, n, 0, &snap.kv_usage);
    vllm_metric(&w, "vllm:prefix_cache_queries", PROM_COUNTER,
                "Prefix cache queries, in terms of number of queried tokens.", m, n,
                snap.prefix_query_tokens, NULL);
    vllm_metric(&w, "vllm:prefix_cache_hits", PROM_COUNTER,
                "Prefix cache hits, in terms of number of cached tokens.", m, n,
                snap.prefix_hit_tokens, NULL);
    vllm_metric(&w, "vllm:prompt_tokens", PROM_COUNTER, "Number of prefill tokens processed.", m, n,
                snap.prompt_tokens, NULL);
    vllm_metric(&w, "vllm:generation_tokens", PROM_COUNTER,
                "Number of generation tokens processed.", m, n, snap.generation_tokens, NULL);
    /* As vLLM: an info gauge, value 1, the cache config as labels (its
     * metrics_info(): attributes in declaration order, a few of them
     * here), then engine; one series per engine. */
    prom_family(&w, "vllm:cache_config_info", PROM_GAUGE,
                "Information of the LLMEngine CacheConfig");
    for (uint32_t i = 0; i < n; i++) {
        char bs[16], gpu_blocks[24], engine[16];
        snprintf(bs, sizeof(bs), "%" PRIu32, s->opts.block_tokens);
        snprintf(gpu_blocks, sizeof(gpu_blocks), "%" PRIu32, s->opts.kv_blocks);
        snprintf(engine, sizeof(engine), "%" PRIu32, i);
        const struct prom_label cl[] = {{"block_size", bs},
                                        {"gpu_memory_utilization", "0.9"},
                                        {"cache_dtype", "auto"},
                                        {"enable_prefix_caching", "True"},
                                        {"prefix_caching_hash_algo", "sha256"},
                                        {"num_gpu_blocks", gpu_blocks},
                                        {"num_cpu_blocks", "None"},
                                        {"engine", engine}};
        prom_sample_text(&w, "", cl, sizeof(cl) / sizeof(cl[0]), "1.0");
    }
    if (s->opts.metrics_vllm)
        mw_vllm_metrics_tail(&w, s, &snap);
    if (mw_lora_enabled()) {
        /* As vLLM: an info gauge whose value is the time it was last set,
         * labels say the state; old label sets stay in the output. */
        struct mw_lora_info hist[MW_LORA_HISTORY];
        char max_lora[16];
        snprintf(max_lora, sizeof(max_lora), "%d", MW_LORA_MAX);
        prom_family(&w, "vllm:lora_requests_info", PROM_GAUGE, "Running stats on lora requests.");
        size_t n_hist = mw_lora_info(hist, MW_LORA_HISTORY);
        for (size_t i = 0; i < n_hist; i++) {
            char when[40];
            /* Python's client spells a timestamp as 1.764619936123456e+09. */
            snprintf(when, sizeof(when), "%.15e", hist[i].unix_s);
            const struct prom_label ll[] = {{"max_lora", max_lora},
                                            {"waiting_lora_adapters", ""},
                                            {"running_lora_adapters", hist[i].running}};
            prom_sample_text(&w, "", ll, 3, when);
        }
    }
    if (prom_error(&w) != 0) {
        buf_fini(&b);
        return respond(req, 500, NULL, 1, CT_JSON);
    }
    return respond(req, 200, b.data, b.len, CT_PROM);
}

static enum MHD_Result respond_mock_stats(struct mw_req *req)
{
    struct mw_server *s = req->server;
    struct mw_engine_snapshot snap;
    mw_engine_snapshot(&s->engine, &snap);
    struct mw_faults f;
    mw_fault_state_get(&s->faults, &f);
    json_t *obj = json_object();
    if (obj == NULL)
        return respond(req, 500, NULL, 1, CT_JSON);
    mw_stats_to_json(&s->stats, obj);
    mw_tls_to_json(&s->tls, obj);
    json_object_set_new(obj, "waiting", json_integer((json_int_t)snap.waiting));
    json_object_set_new(obj, "running", json_integer((json_int_t)snap.running));
    json_object_set_new(obj, "prefix_hit_tokens", json_integer((json_int_t)snap.prefix_hit_tokens));
    json_object_set_new(obj, "prefix_query_tokens",
                        json_integer((json_int_t)snap.prefix_query_tokens));
    json_object_set_new(obj, "kv_blocks_used", json_integer((json_int_t)snap.kv_used_blocks));
    json_object_set_new(obj, "kv_cache_usage_perc", json_real(snap.kv_usage));
    json_object_set_new(obj, "model", json_string(s->opts.model));
    json_object_set_new(obj, "role", json_string(mw_role_name(s->opts.role)));
    json_object_set_new(obj, "engine_id", json_string(s->engine_id));
    json_object_set_new(obj, "port", json_integer(s->port));
    json_object_set_new(obj, "faults", mw_faults_to_json(&f));
    mw_pd_pins_to_json(&s->pins, obj);
    return respond_json(req, 200, obj);
}

/* Hands the KV-event faults a /mock/faults body (valid by now) names to
 * the publisher: they arm one-shot actions, so only a body naming one
 * (re)arms it; the others stay as they are. */
static void apply_kv_faults(struct mw_kv_events *ev, const struct buf *body,
                            const struct mw_faults *f)
{
    json_t *o = json_loadb(body->data != NULL ? body->data : "", body->len, 0, NULL);
    mw_kv_events_set_faults(
        ev,
        json_object_get(o, "kv_events_drop_batches") != NULL ? (int64_t)f->kv_events_drop_batches
                                                             : -1,
        json_object_get(o, "kv_events_reorder") != NULL ? f->kv_events_reorder : -1,
        json_object_get(o, "kv_events_replay_off") != NULL ? f->kv_events_replay_off : -1);
    json_decref(o);
}

static enum MHD_Result respond_mock_faults(struct mw_req *req, const char *method)
{
    struct mw_server *s = req->server;
    struct mw_faults f;
    if (!is_method(method, "POST")) {
        mw_fault_state_get(&s->faults, &f);
        return respond_json(req, 200, mw_faults_to_json(&f));
    }
    if (req->too_large)
        return respond_error(req, 413, "body too large");
    char err[256];
    if (mw_fault_state_update(&s->faults, req->body.data != NULL ? req->body.data : "",
                              req->body.len, &f, err, sizeof(err)) != 0)
        return respond_error(req, 400, err);
    if (s->kv_events != NULL)
        apply_kv_faults(s->kv_events, &req->body, &f);
    log_info("faults updated: fail_status=%d fail_count=%" PRId64
             " stall_before_headers_ms=%" PRIu64 " stall_after_chunks=%" PRIu64 " stall_ms=%" PRIu64
             " reset_after_chunks=%" PRIu64 " health_status=%d extra_latency_ms=%" PRIu64
             " fail_body_hold_ms=%" PRIu64 " stream_error='%s' stream_error_after_chunks=%" PRIu64,
             f.fail_status, f.fail_count, f.stall_before_headers_ms, f.stall_after_chunks,
             f.stall_ms, f.reset_after_chunks, f.health_status, f.extra_latency_ms,
             f.fail_body_hold_ms, f.stream_error, f.stream_error_after_chunks);
    return respond_json(req, 200, mw_faults_to_json(&f));
}

static enum MHD_Result respond_mock_reset(struct mw_req *req)
{
    struct mw_server *s = req->server;
    mw_stats_reset(&s->stats);
    mw_pd_pins_reset(&s->pins);
    mw_fault_state_clear(&s->faults);
    if (s->kv_events != NULL)
        mw_kv_events_set_faults(s->kv_events, 0, 0, 0);
    mw_engine_reset(&s->engine);
    mw_api_reset();
    log_info("mock state reset");
    return respond_json(req, 200, json_pack("{s:b}", "reset", 1));
}

/* A decode worker consumed the blocks of one of this prefill's answers. */
static enum MHD_Result respond_mock_kv_read(struct mw_req *req)
{
    json_t *j = req->body.data != NULL ? json_loadb(req->body.data, req->body.len, 0, NULL) : NULL;
    const char *rid = json_string_value(json_object_get(j, "remote_request_id"));
    if (rid == NULL) {
        json_decref(j);
        return respond_error(req, 400, "expected {\"remote_request_id\": string}");
    }
    int rc = mw_pd_pins_read(&req->server->pins, rid);
    if (rc == -EALREADY)
        log_warn("the blocks of %s were read a second time", rid);
    json_t *out = json_pack("{s:s}", "result",
                            rc == 0           ? "read"
                            : rc == -EALREADY ? "read_twice"
                                              : "unknown");
    json_decref(j);
    return respond_json(req, 200, out);
}

static enum MHD_Result handle_control(struct mw_req *req, const char *method)
{
    struct mw_server *s = req->server;
    size_t len = 1;
    switch (req->route) {
    case MW_ROUTE_HEALTH: {
        int status = mw_fault_state_health(&s->faults);
        if (status >= 200 && status < 300)
            return respond(req, status, NULL, 0, NULL);
        return respond_error(req, status, "mock worker: unhealthy (health_status fault)");
    }
    case MW_ROUTE_METRICS:
        return respond_metrics(req);
    case MW_ROUTE_MODELS: {
        char names[MW_LORA_MAX][128], paths[MW_LORA_MAX][256];
        const char *np[MW_LORA_MAX], *pp[MW_LORA_MAX];
        size_t n_lora = mw_lora_list(names, paths, MW_LORA_MAX);
        for (size_t i = 0; i < n_lora; i++) {
            np[i] = names[i];
            pp[i] = paths[i];
        }
        char *body = mw_openai_models_body(s->model_names, s->opts.n_names, np, pp, n_lora,
                                           s->opts.max_model_len, s->started, &len);
        return respond(req, 200, body, len, CT_JSON);
    }
    case MW_ROUTE_VERSION:
        return respond_json(req, 200, json_pack("{s:s}", "version", SY_VERSION "-mock"));
    case MW_ROUTE_MOCK_STATS:
        return respond_mock_stats(req);
    case MW_ROUTE_MOCK_FAULTS:
        return respond_mock_faults(req, method);
    case MW_ROUTE_MOCK_RESET:
        return respond_mock_reset(req);
    case MW_ROUTE_MOCK_KV_READ:
        return respond_mock_kv_read(req);
    case MW_ROUTE_SLEEP:
    case MW_ROUTE_WAKE_UP:
    case MW_ROUTE_IS_SLEEPING: {
        char *body = NULL;
        int status = mw_sleep_handle(s, req->conn,
                                     req->route == MW_ROUTE_SLEEP     ? MW_SLEEP_SLEEP
                                     : req->route == MW_ROUTE_WAKE_UP ? MW_SLEEP_WAKE_UP
                                                                      : MW_SLEEP_IS_SLEEPING,
                                     &body, &len);
        return respond(req, status, body, body != NULL ? len : 0, body != NULL ? CT_JSON : NULL);
    }
    case MW_ROUTE_BAD_METHOD:
        return respond_error(req, 405, "Method Not Allowed");
    default:
        return respond_error(req, 404, "Not Found");
    }
}

/* ---- entry points ----------------------------------------------------------------- */

enum MHD_Result mw_handle_access(struct mw_loop *loop, struct mw_server *server,
                                 struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    struct mw_req *req = *con_cls;
    if (req == NULL) {
        if (atomic_load_explicit(&server->stopping, memory_order_acquire))
            return MHD_NO;
        req = req_new(loop, server, conn, url, method);
        if (req == NULL)
            return MHD_NO;
        *con_cls = req;
        /* Answering in this first call would make MHD close the connection. */
        return MHD_YES;
    }
    if (req->gone)
        return fail_handler(req);
    if (*upload_data_size > 0) {
        body_append(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->route == MW_ROUTE_INFERENCE)
        return infer_step(req);
    if (req->route == MW_ROUTE_METRICS && req->phase == MW_PHASE_STALLED)
        return respond_metrics(req); /* the metrics_stall_ms fault is over */
    if (req->route == MW_ROUTE_API && req->phase == MW_PHASE_RECEIVING)
        return api_step(req);
    if (req->phase != MW_PHASE_RECEIVING)
        return MHD_NO;
    return handle_control(req, method);
}

void mw_handle_gone(struct mw_req *req, bool shutdown)
{
    req->gone = true;
    if (req->route == MW_ROUTE_API && req->accounted) {
        req->accounted = false;
        mw_stats_release(&req->server->stats);
    }
    if (req->route != MW_ROUTE_INFERENCE)
        return;
    infer_finish(req, req->ep == MW_EP_EMBEDDINGS ? 0 : req->events_sent);
    if (req->accounted) {
        req->accounted = false;
        if (!shutdown)
            mw_stats_client_abort(&req->server->stats);
        mw_stats_release(&req->server->stats);
    }
}

void mw_handle_completed(struct mw_req *req, enum MHD_RequestTerminationCode toe)
{
    if (req == NULL)
        return;
    if (req->route == MW_ROUTE_INFERENCE) {
        infer_finish(req, req->events_sent);
        if (req->accounted) {
            bool abandoned = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
                             toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN && !req->reset_by_us;
            if (abandoned)
                mw_stats_client_abort(&req->server->stats);
            mw_stats_release(&req->server->stats);
            req->accounted = false;
        }
    }
    if (req->route == MW_ROUTE_API && req->accounted) {
        req->accounted = false;
        mw_stats_release(&req->server->stats);
    }
    mw_lora_end(req->lora);
    mw_infer_fini(&req->infer);
    buf_fini(&req->body);
    free(req->parse_error);
    free(req->hashes);
    free(req->block_ids);
    free(req->out_buf);
    free(req);
}
