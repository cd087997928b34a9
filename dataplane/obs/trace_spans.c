/*
 * Span encoding (see trace_spans.h). Attribute names follow OpenTelemetry's
 * semantic conventions where one exists (http.request.method, http.route,
 * http.response.status_code, gen_ai.request.model, server.address); the
 * router's own are under switchyard.*.
 */
#include "dataplane/obs/trace_spans.h"

#include <stdbool.h>
#include <string.h>

#include "dataplane/obs/journal.h"
#include "dataplane/core/json_writer.h"
#include "dataplane/core/routes.h"
#include "dataplane/obs/trace.h"
#include "dataplane/types/request_types.h"

enum sp_kind {
    SP_KIND_INTERNAL = 1,
    SP_KIND_SERVER = 2,
    SP_KIND_CLIENT = 3,
};

struct sp_ctx {
    const struct dp_journal *j;
    dp_span_sink_fn sink;
    void *sink_ctx;
    uint64_t *lost;
    char buf[DP_SPAN_MAX];
    struct dp_jw w;
    bool first_attr;
};

static void sp_hex(struct dp_jw *w, uint64_t v)
{
    char h[18] = {'"'};
    dp_trace_hex64(h + 1, v);
    h[17] = '"';
    dp_jw_raw(w, h, sizeof(h));
}

/* Opens a span object up to its attributes array. */
static void sp_open(struct sp_ctx *c, const char *name, enum sp_kind kind, uint64_t span_id,
                    uint64_t parent_id, uint64_t start_ns, uint64_t end_ns)
{
    struct dp_jw *w = &c->w;
    dp_jw_init(w, c->buf, sizeof(c->buf));
    char tid[34] = {'"'};
    dp_trace_hex64(tid + 1, c->j->trace.trace_hi);
    dp_trace_hex64(tid + 17, c->j->trace.trace_lo);
    tid[33] = '"';
    dp_jw_lit(w, "{\"traceId\":");
    dp_jw_raw(w, tid, sizeof(tid));
    dp_jw_lit(w, ",\"spanId\":");
    sp_hex(w, span_id);
    if (parent_id != 0) {
        dp_jw_lit(w, ",\"parentSpanId\":");
        sp_hex(w, parent_id);
    }
    dp_jw_lit(w, ",\"name\":");
    dp_jw_str(w, name);
    dp_jw_lit(w, ",\"kind\":");
    dp_jw_u64(w, (uint64_t)kind);
    dp_jw_lit(w, ",\"startTimeUnixNano\":");
    dp_jw_u64_str(w, start_ns);
    dp_jw_lit(w, ",\"endTimeUnixNano\":");
    dp_jw_u64_str(w, end_ns > start_ns ? end_ns : start_ns);
    dp_jw_lit(w, ",\"attributes\":[");
    c->first_attr = true;
}

static void sp_attr_key(struct sp_ctx *c, const char *key)
{
    dp_jw_lit(&c->w, c->first_attr ? "{\"key\":" : ",{\"key\":");
    c->first_attr = false;
    dp_jw_str(&c->w, key);
}

static void sp_attr_str(struct sp_ctx *c, const char *key, const char *v)
{
    if (v == NULL || v[0] == '\0')
        return;
    sp_attr_key(c, key);
    dp_jw_lit(&c->w, ",\"value\":{\"stringValue\":");
    dp_jw_str(&c->w, v);
    dp_jw_lit(&c->w, "}}");
}

static void sp_attr_int(struct sp_ctx *c, const char *key, uint64_t v)
{
    sp_attr_key(c, key);
    dp_jw_lit(&c->w, ",\"value\":{\"intValue\":");
    dp_jw_u64_str(&c->w, v);
    dp_jw_lit(&c->w, "}}");
}

/* Closes the attributes, adds the status (2 = error, with message), and
 * hands the span to the sink. */
static void sp_close(struct sp_ctx *c, bool error, const char *message)
{
    struct dp_jw *w = &c->w;
    dp_jw_lit(w, "]");
    if (error) {
        dp_jw_lit(w, ",\"status\":{\"code\":2");
        if (message != NULL) {
            dp_jw_lit(w, ",\"message\":");
            dp_jw_str(w, message);
        }
        dp_jw_lit(w, "}");
    }
    dp_jw_lit(w, "}\n");
    if (dp_jw_ok(w))
        c->sink(c->sink_ctx, c->buf, w->len);
    else
        (*c->lost)++;
}

/* The span a step of leg hangs under: its leg's span, else the request's. */
static uint64_t sp_leg_parent(const struct dp_journal *j, enum dp_jleg leg)
{
    return leg != DP_JLEG_PLAIN && j->leg_span[leg] != 0 ? j->leg_span[leg] : j->trace.span_id;
}

static void sp_legs(struct sp_ctx *c, uint64_t end_ns)
{
    const struct dp_journal *j = c->j;
    for (int leg = DP_JLEG_PREFILL; leg < DP_JLEG_COUNT; leg++) {
        if (j->leg_span[leg] == 0)
            continue;
        uint64_t start = 0, end = 0;
        for (uint32_t i = 0; i < j->n_steps; i++) {
            const struct dp_jstep *s = &j->steps[i];
            if (s->leg != (enum dp_jleg)leg)
                continue;
            if (start == 0 || s->start_ns < start)
                start = s->start_ns;
            uint64_t e = s->end_ns != 0 ? s->end_ns : end_ns;
            if (e > end)
                end = e;
        }
        sp_open(c, dp_jleg_name((enum dp_jleg)leg), SP_KIND_INTERNAL, j->leg_span[leg],
                j->trace.span_id, start, end);
        sp_attr_str(c, "switchyard.leg", dp_jleg_name((enum dp_jleg)leg));
        sp_close(c, false, NULL);
    }
}

static void sp_steps(struct sp_ctx *c, uint64_t end_ns)
{
    const struct dp_journal *j = c->j;
    uint32_t attempt_no = 0;
    for (uint32_t i = 0; i < j->n_steps; i++) {
        const struct dp_jstep *s = &j->steps[i];
        if (s->kind == DP_JSTEP_DECISION) {
            sp_open(c, "routing decision", SP_KIND_INTERNAL, s->span_id, sp_leg_parent(j, s->leg),
                    s->start_ns, s->end_ns);
            sp_attr_str(c, "switchyard.decision", pol_decision_name(s->decision));
            sp_attr_str(c, "switchyard.worker", s->worker);
            sp_attr_int(c, "switchyard.candidates", s->candidates);
            if (s->leg != DP_JLEG_PLAIN)
                sp_attr_str(c, "switchyard.leg", dp_jleg_name(s->leg));
            sp_close(c, s->worker[0] == '\0', s->worker[0] == '\0' ? "no worker chosen" : NULL);
            continue;
        }
        attempt_no++;
        uint64_t parent = s->parent_id != 0 ? s->parent_id : sp_leg_parent(j, s->leg);
        sp_open(c, "attempt", SP_KIND_CLIENT, s->span_id, parent, s->start_ns,
                s->end_ns != 0 ? s->end_ns : end_ns);
        sp_attr_str(c, "switchyard.worker", s->worker);
        sp_attr_str(c, "switchyard.outcome", dp_jout_name(s->outcome));
        sp_attr_int(c, "switchyard.attempt", attempt_no);
        if (s->status > 0)
            sp_attr_int(c, "http.response.status_code", (uint64_t)s->status);
        if (s->leg != DP_JLEG_PLAIN)
            sp_attr_str(c, "switchyard.leg", dp_jleg_name(s->leg));
        bool failed = s->outcome != DP_JOUT_OK || s->status >= 500;
        sp_close(c, failed, failed ? dp_jout_name(s->outcome) : NULL);
    }
}

void dp_trace_spans_emit(const struct dp_request *req, const struct dp_journal *j, int status,
                         uint64_t end_ns, dp_span_sink_fn sink, void *ctx, uint64_t *lost)
{
    struct sp_ctx c = {.j = j, .sink = sink, .sink_ctx = ctx, .lost = lost};
    const char *route = dp_route_row(req->route)->label;
    char name[64];
    size_t ml = strlen(j->method), rl = strlen(route);
    if (ml + 1 + rl < sizeof(name)) {
        memcpy(name, j->method, ml);
        name[ml] = ' ';
        memcpy(name + ml + 1, route, rl + 1);
    } else {
        memcpy(name, "request", sizeof("request"));
    }
    sp_open(&c, name, SP_KIND_SERVER, j->trace.span_id, j->trace.parent_id, j->start_ns, end_ns);
    sp_attr_str(&c, "http.request.method", j->method);
    sp_attr_str(&c, "http.route", route);
    sp_attr_int(&c, "http.response.status_code", (uint64_t)(status > 0 ? status : 0));
    sp_attr_str(&c, "gen_ai.request.model", req->model);
    sp_attr_str(&c, "switchyard.request_id", req->request_id);
    sp_attr_str(&c, "switchyard.worker", req->worker_id);
    sp_attr_str(&c, "switchyard.prefill_worker", req->pd.prefill_worker);
    sp_attr_int(&c, "switchyard.attempts", j->n_attempts);
    sp_close(&c, status >= 500, NULL);
    sp_legs(&c, end_ns);
    sp_steps(&c, end_ns);
}
