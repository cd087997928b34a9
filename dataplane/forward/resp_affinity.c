/*
 * Response stickiness (see resp_affinity.h). The answer's id is read by a
 * small scanner fed with each relayed chunk (the leg's filter_commit), so
 * nothing is buffered but the id itself, or, for a stream, the data line
 * of one event (capped: DP_RESP_LINE_MAX):
 *   - JSON: the string value of key "id" at depth 1, found by tracking
 *     strings, escapes and nesting byte by byte (keys of nested objects,
 *     such as each output item's "id", are ignored);
 *   - SSE: each "data: " line is gathered and, if it holds
 *     "response.created", parsed with jansson for response.id.
 * The mapping is stored as soon as the id is known: a stream cut later
 * still pins its id to the one worker that may hold it.
 */
#include "dataplane/forward/resp_affinity.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/proc.h"
#include "dataplane/http/errors.h"
#include "dataplane/core/loop.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/routes.h"
#include "dataplane/types/request_types.h"
#include "dataplane/core/workers.h"
#include "dataplane/http/id_route.h"
#include "shm/responses.h"

#define DP_RESP_LINE_MAX (256u * 1024u) /* an SSE data line looked at for the id */

/* Owned by the data plane's main thread (dp_resp_create/destroy); read by
 * every loop, the table itself being safe for any thread. */
struct dp_resp {
    struct shm_resp_table table;
    uint64_t ttl_ms;
    /* Per registry slot: the generation + 1 of the last worker whose id
     * conflict was logged, so a worker repeating one is logged once. */
    _Atomic uint32_t *conflict_logged;
    uint32_t max_workers;
};

int dp_resp_create(const struct cfg *cfg, uint64_t registry_id, struct dp_resp **out)
{
    *out = NULL;
    struct dp_resp *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        log_error("%s: Responses stickiness is off: out of memory", cfg->path);
        return -ENOMEM;
    }
    r->table.fd = -1;
    char name[CFG_PATH_MAX + 16], err[512];
    int rc = shm_resp_name(cfg->shm.name, name, sizeof(name));
    bool created = false;
    uint64_t forgot = 0;
    if (rc == 0)
        rc = shm_resp_open(&r->table, name, cfg->dataplane.response_table_size, registry_id,
                           &created, &forgot, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "the name of the response table is too long");
    if (rc != 0) {
        log_error("%s: Responses stickiness is off: %s", cfg->path, err);
        dp_resp_destroy(r);
        return rc;
    }
    r->ttl_ms = cfg->dataplane.response_ttl_ms;
    r->max_workers = cfg->shm.max_workers;
    r->conflict_logged = calloc(r->max_workers, sizeof(*r->conflict_logged));
    if (r->conflict_logged == NULL)
        r->max_workers = 0; /* conflicts are then counted, not logged */
    if (forgot > 0)
        log_info("response table %s: forgot %llu responses of a previous registry (their "
                 "workers' slots mean nothing in this one)",
                 name, (unsigned long long)forgot);
    if (!created && r->table.n_entries != cfg->dataplane.response_table_size)
        log_info("response table %s: %llu entries (kept from its creator; "
                 "dataplane.response_table_size applies when it is created anew)",
                 name, (unsigned long long)r->table.n_entries);
    log_info("response table %s: %s, %llu entries, ttl %llu ms", name,
             created ? "created" : "attached", (unsigned long long)r->table.n_entries,
             (unsigned long long)r->ttl_ms);
    *out = r;
    return 0;
}

void dp_resp_destroy(struct dp_resp *r)
{
    if (r == NULL)
        return;
    shm_resp_close(&r->table);
    free(r->conflict_logged);
    free(r);
}

bool dp_resp_applies(const struct dp_request *req)
{
    return req->route == DP_ROUTE_RESPONSES || req->route == DP_ROUTE_RESPONSES_GET ||
           req->route == DP_ROUTE_RESPONSES_CANCEL;
}

/* ---- pinning ------------------------------------------------------------------ */

/* The worker's id is the operator's (the log has it); the client is told
 * only why its conversation cannot go on. */
static char *dp_resp_unavailable(const struct dp_request *req, int status, const char *worker,
                                 const char *why)
{
    log_info("request %s: response '%s' is stored only by worker %s, which %s", req->request_id,
             req->resp_id, worker, why);
    char msg[DP_RESP_ID_MAX + 160];
    snprintf(msg, sizeof(msg), "response '%s' is stored only by a worker that %s", req->resp_id,
             why);
    return dp_error_body(status, "previous_response_unavailable", msg);
}

/* vLLM's answer for an id it does not hold (serving_responses.py), byte for
 * byte as the mock worker writes it: what another tenant's id must look
 * like. */
static char *dp_resp_not_found(const char *id)
{
    char msg[DP_RESP_ID_MAX + 48];
    snprintf(msg, sizeof(msg), "Response with id '%s' not found.", id);
    json_t *o = json_pack("{s:{s:s, s:s, s:s, s:i}}", "error", "message", msg, "type",
                          "invalid_request_error", "param", "response_id", "code", 404);
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* The tenant a response made by req belongs to: admission's hash of the
 * tenant's name, 0 for the anonymous tenant (no keys file). */
static uint64_t dp_resp_tenant(const struct dp_request *req)
{
    return req->adm.tenant_hash;
}

int dp_resp_pin(struct dp_request *req, char **body)
{
    *body = NULL;
    if (!dp_resp_applies(req))
        return 0;
    if (dp_route_row(req->route)->id_suffix != NULL && !dp_id_route_id_is_valid(req->resp_id)) {
        *body = dp_error_body(400, "invalid_response_id",
                              "a response id is 1 to 159 letters, digits, '_' or '-'");
        return 400;
    }
    if (req->resp_id[0] == '\0')
        return 0;
    struct dp_resp *r = req->loop->sh->resp;
    struct shm_resp_owner o;
    /* No table: stickiness is off, the policy decides. */
    if (r == NULL || shm_resp_get(&r->table, req->resp_id, strlen(req->resp_id),
                                  proc_monotonic_ms(), r->ttl_ms, &o) != 0)
        return 0; /* not made here (or forgotten): the policy decides */
    /* Another tenant's: answered as vLLM answers an id it lacks, before
     * anything (the holder's health included) can tell that it exists.
     * Not sent by the policy either: it could pick the holder. */
    if (o.tenant != dp_resp_tenant(req)) {
        *body = dp_resp_not_found(req->resp_id);
        return 404;
    }
    uint32_t slot = o.slot, generation = o.generation;
    struct dp_workers *v = &req->loop->workers;
    dp_workers_refresh(v);
    for (size_t i = 0; i < v->n; i++) {
        const struct shm_worker_info *w = &v->w[i];
        if (w->slot != slot || w->generation != generation)
            continue;
        /* A reset_load's drain ends within its timeout: the request waits
         * for it in the pick (forwarder.c) instead of failing here. */
        if (!dp_workers_is_eligible(w) && !dp_workers_back_after_reset(w, dp_workers_is_eligible)) {
            /* It may come back (a probe, an un-drain): say when to ask again. */
            req->retry_after_s = 1;
            *body = dp_resp_unavailable(req, 503, w->id,
                                        w->draining   ? "is draining"
                                        : w->sleeping ? "is sleeping"
                                                      : "is unhealthy");
            return 503;
        }
        req->pinned = true;
        req->pin_slot = slot;
        req->pin_generation = generation;
        return 0;
    }
    char gone[32];
    snprintf(gone, sizeof(gone), "in slot %u", slot);
    *body = dp_resp_unavailable(req, 404, gone, "is no longer in the fleet");
    return 404;
}

/* ---- reading the id from the answer -------------------------------------------- */

enum dp_resp_json {
    DP_RJ_UNSET = 0,
    DP_RJ_SCAN,   /* outside any string */
    DP_RJ_STRING, /* inside a string (not ours) */
    DP_RJ_KEY,    /* inside a key at depth 1: is it "id"? */
    DP_RJ_VALUE,  /* inside the value of "id": kept */
    DP_RJ_DONE,   /* found, or given up */
};

struct dp_resp_capture {
    bool sse;
    /* JSON */
    enum dp_resp_json st;
    int depth;
    bool escaped;
    bool expect_key; /* at depth 1, the next string is a key */
    bool key_is_id;  /* the last key at depth 1 was "id" (until its value) */
    size_t key_len;
    bool key_match;
    /* both: the id, or for SSE the data line being gathered */
    char id[DP_RESP_ID_MAX];
    size_t id_len;
    /* Grows with the line (a typical response.created line is a few KiB):
     * a fixed 256 KiB per stream was real memory per held stream. */
    struct buf line;
    bool line_skip; /* this line is not a data line, or too long */
    bool at_line_start;
    bool found;
};

static void dp_resp_remember(struct dp_request *req, const char *id, size_t len)
{
    struct dp_resp *r = req->loop->sh->resp;
    const struct dp_attempt *a = req->active;
    if (r == NULL || a == NULL || len == 0 || len >= DP_RESP_ID_MAX)
        return;
    struct shm_resp_owner o = {
        .slot = a->slot, .generation = a->generation, .tenant = dp_resp_tenant(req)};
    int rc = shm_resp_put(&r->table, id, len, &o, proc_monotonic_ms(), r->ttl_ms);
    if (rc == -EEXIST) {
        dp_metrics_response_id_conflict(&req->loop->sh->metrics);
        if (a->slot < r->max_workers &&
            atomic_exchange_explicit(&r->conflict_logged[a->slot], a->generation + 1,
                                     memory_order_relaxed) != a->generation + 1)
            log_warn("request %s: worker %s answered with response id %.*s, which another worker "
                     "or tenant holds: left with its holder (logged once per worker)",
                     req->request_id, a->worker_id, (int)len, id);
        return;
    }
    if (rc != 0 && rc != -EINVAL)
        log_warn("request %s: response %.*s not remembered: %s", req->request_id, (int)len, id,
                 strerror(-rc));
}

static void dp_resp_json_feed(struct dp_resp_capture *c, const char *p, size_t n)
{
    for (size_t i = 0; i < n && c->st != DP_RJ_DONE; i++) {
        char ch = p[i];
        if (c->st == DP_RJ_STRING || c->st == DP_RJ_KEY || c->st == DP_RJ_VALUE) {
            if (c->escaped) {
                c->escaped = false;
                c->key_match = false; /* an escaped "id" key is not worth matching */
                if (c->st == DP_RJ_VALUE)
                    c->st = DP_RJ_DONE; /* ids have no escapes: not one we can use */
                continue;
            }
            if (ch == '\\') {
                c->escaped = true;
                continue;
            }
            if (ch == '"') {
                if (c->st == DP_RJ_KEY)
                    c->key_is_id = c->key_match && c->key_len == 2;
                if (c->st == DP_RJ_VALUE) {
                    c->found = true;
                    c->st = DP_RJ_DONE;
                    continue;
                }
                c->st = DP_RJ_SCAN;
                continue;
            }
            if (c->st == DP_RJ_KEY) {
                c->key_match = c->key_match && c->key_len < 2 && ch == "id"[c->key_len];
                c->key_len++;
            } else if (c->st == DP_RJ_VALUE) {
                if (c->id_len + 1 >= sizeof(c->id))
                    c->st = DP_RJ_DONE;
                else
                    c->id[c->id_len++] = ch;
            }
            continue;
        }
        switch (ch) {
        case '{':
        case '[':
            c->depth++;
            c->expect_key = c->depth == 1 && ch == '{';
            break;
        case '}':
        case ']':
            c->depth--;
            if (c->depth <= 0)
                c->st = DP_RJ_DONE;
            break;
        case ',':
            c->expect_key = c->depth == 1;
            c->key_is_id = false;
            break;
        case ':':
            c->expect_key = false;
            break;
        case '"':
            if (c->depth == 1 && c->expect_key) {
                c->st = DP_RJ_KEY;
                c->key_len = 0;
                c->key_match = true;
            } else if (c->depth == 1 && c->key_is_id) {
                c->st = DP_RJ_VALUE;
                c->id_len = 0;
            } else {
                c->st = DP_RJ_STRING;
            }
            break;
        default:
            break;
        }
    }
}

/* A complete data line of the stream: the id if it is response.created. */
static void dp_resp_sse_line(struct dp_resp_capture *c)
{
    const char *line = c->line.data;
    size_t len = c->line.len;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len < 6 || memcmp(line, "data: ", 6) != 0 ||
        memmem(line, len, "response.created", 16) == NULL)
        return;
    json_t *root = json_loadb(line + 6, len - 6, 0, NULL);
    json_t *id = json_object_get(json_object_get(root, "response"), "id");
    if (json_is_string(json_object_get(root, "type")) &&
        strcmp(json_string_value(json_object_get(root, "type")), "response.created") == 0 &&
        json_is_string(id) && json_string_length(id) < sizeof(c->id)) {
        c->id_len = json_string_length(id);
        memcpy(c->id, json_string_value(id), c->id_len);
        c->found = true;
    }
    json_decref(root);
}

static void dp_resp_sse_feed(struct dp_resp_capture *c, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && !c->found) {
        const char *nl = memchr(p + i, '\n', n - i);
        size_t end = nl != NULL ? (size_t)(nl - p) : n;
        if (c->at_line_start) {
            buf_reset(&c->line);
            c->line_skip = false;
            c->at_line_start = false;
        }
        /* Too long for the cap (or out of memory): not looked at. */
        if (!c->line_skip && buf_append(&c->line, p + i, end - i) != 0)
            c->line_skip = true;
        if (nl == NULL)
            break;
        if (!c->line_skip)
            dp_resp_sse_line(c);
        c->at_line_start = true;
        i = end + 1;
    }
}

struct dp_resp_capture *dp_resp_capture_new(bool sse)
{
    struct dp_resp_capture *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->sse = sse;
    buf_init(&c->line, DP_RESP_LINE_MAX);
    c->st = DP_RJ_SCAN;
    c->at_line_start = true;
    return c;
}

bool dp_resp_capture_feed(struct dp_resp_capture *c, const char *data, size_t len)
{
    if (c->found || c->st == DP_RJ_DONE)
        return c->found;
    if (c->sse)
        dp_resp_sse_feed(c, data, len);
    else
        dp_resp_json_feed(c, data, len);
    if (c->found) {
        buf_fini(&c->line);
        c->st = DP_RJ_DONE;
    }
    return c->found;
}

const char *dp_resp_capture_id(const struct dp_resp_capture *c, size_t *len)
{
    *len = c->found ? c->id_len : 0;
    return c->found ? c->id : NULL;
}

void dp_resp_capture_free(struct dp_resp_capture *c)
{
    if (c == NULL)
        return;
    buf_fini(&c->line);
    free(c);
}

static void dp_resp_commit(struct dp_request *req, const char *data, size_t len)
{
    struct dp_resp_capture *c = req->resp_capture;
    if (c == NULL) {
        if (req->route != DP_ROUTE_RESPONSES || req->relay_status != 200)
            return; /* only a created response has a new id */
        c = dp_resp_capture_new(req->sse);
        if (c == NULL)
            return; /* not sticky: the answer itself is unharmed */
        req->resp_capture = c;
    }
    if (c->found || c->st == DP_RJ_DONE)
        return;
    if (dp_resp_capture_feed(c, data, len))
        dp_resp_remember(req, c->id, c->id_len);
}

/* ---- the plan -------------------------------------------------------------------- */

static struct pol_policy *dp_resp_policy(struct dp_loop *loop)
{
    return &loop->policy;
}

static void dp_resp_body(const struct dp_request *req, const char **body, size_t *len)
{
    *body = req->body.data != NULL ? req->body.data : "";
    *len = req->body.len;
}

static enum dp_leg_action dp_resp_next(struct dp_request *req, enum dp_leg_event ev,
                                       struct dp_leg_step *step)
{
    (void)step;
    if (ev == DP_LEG_EV_FREE && req->resp_capture != NULL) {
        dp_resp_capture_free(req->resp_capture);
        req->resp_capture = NULL;
    }
    return DP_LEG_ACT_CONTINUE;
}

static const struct dp_leg dp_resp_leg = {
    .label = "",
    .collects = false,
    .relays_last_error = true,
    .is_eligible = dp_workers_is_eligible,
    .policy = dp_resp_policy,
    .body = dp_resp_body,
    .count_decision = dp_metrics_decision,
    .filter_commit = dp_resp_commit,
    .next = dp_resp_next,
};

void dp_resp_begin_plan(struct dp_request *req)
{
    req->leg = &dp_resp_leg;
}
