/*
 * The request journal (see journal.h). Steps are appended in the order
 * they happen; an attempt's step is found again by its attempt's address
 * while the attempt lives (a request has a handful), and forgotten at the
 * attempt's end so a later attempt at the same address is not mistaken
 * for it.
 */
#include "dataplane/obs/journal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/str.h"
#include "dataplane/types/leg_types.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/routes.h"
#include "dataplane/obs/trace.h"

static const char *const dp_jout_names[DP_JOUT_COUNT] = {
    [DP_JOUT_UNSET] = "unknown",           [DP_JOUT_OK] = "ok",
    [DP_JOUT_STATUS] = "retryable_status", [DP_JOUT_CONNECT] = "connect_error",
    [DP_JOUT_TRANSFER] = "transfer_error", [DP_JOUT_TIMEOUT] = "timeout",
    [DP_JOUT_IN_BAND] = "in_band_error",   [DP_JOUT_CANCELLED] = "cancelled",
};

const char *dp_jout_name(enum dp_jout outcome)
{
    return outcome > DP_JOUT_UNSET && outcome < DP_JOUT_COUNT ? dp_jout_names[outcome]
                                                              : dp_jout_names[DP_JOUT_UNSET];
}

const char *dp_jleg_name(enum dp_jleg leg)
{
    static const char *const names[DP_JLEG_COUNT] = {
        [DP_JLEG_PLAIN] = "request", [DP_JLEG_PREFILL] = "prefill", [DP_JLEG_DECODE] = "decode"};
    return leg < DP_JLEG_COUNT ? names[leg] : names[DP_JLEG_PLAIN];
}

uint64_t dp_journal_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t jr_span_id(void)
{
    return dp_trace_new_id();
}

struct dp_journal *dp_journal_create(const struct dp_loop *loop, enum dp_route route,
                                     const char *method)
{
    const struct dp_shared *sh = loop->sh;
    bool record = sh->alog != NULL || sh->tracer != NULL;
    /* Propagation alone reads only the trace context of forwarded requests. */
    if (!record && (!sh->cfg->tracing.propagate || dp_route_row(route)->serve != DP_SERVE_PROXY))
        return NULL;
    uint32_t cap = record ? DP_JOURNAL_STEPS : 0;
    struct dp_journal *j = calloc(1, sizeof(*j) + cap * sizeof(j->steps[0]));
    if (j == NULL)
        return NULL;
    j->cap_steps = cap;
    j->start_ns = dp_journal_now_ns();
    str_copy(j->method, sizeof(j->method), method != NULL ? method : "");
    return j;
}

void dp_journal_destroy(struct dp_journal *j)
{
    free(j);
}

/* The leg a label names (leg_types.h: "prefill ", "decode " or ""). */
static enum dp_jleg jr_leg(const struct dp_leg *leg)
{
    if (leg == NULL || leg->label[0] == '\0')
        return DP_JLEG_PLAIN;
    return leg->label[0] == 'p' ? DP_JLEG_PREFILL : DP_JLEG_DECODE;
}

static struct dp_jstep *jr_add(struct dp_journal *j, enum dp_jstep_kind kind)
{
    if (j->n_steps >= j->cap_steps) {
        j->n_lost++;
        return NULL;
    }
    struct dp_jstep *s = &j->steps[j->n_steps++];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->start_ns = dp_journal_now_ns();
    return s;
}

static struct dp_jstep *jr_find(struct dp_journal *j, const void *attempt)
{
    for (uint32_t i = j->n_steps; i-- > 0;)
        if (j->steps[i].kind == DP_JSTEP_ATTEMPT && j->steps[i].attempt == attempt)
            return &j->steps[i];
    return NULL;
}

static const struct dp_jstep *jr_last_decision(const struct dp_journal *j)
{
    for (uint32_t i = j->n_steps; i-- > 0;)
        if (j->steps[i].kind == DP_JSTEP_DECISION)
            return &j->steps[i];
    return NULL;
}

void dp_journal_decision(struct dp_request *req, enum pol_decision decision, size_t n,
                         const char *worker, uint64_t started_ns)
{
    struct dp_journal *j = req->journal;
    if (j == NULL || j->cap_steps == 0)
        return;
    if (req->routing_text.len > j->prompt_bytes)
        j->prompt_bytes = req->routing_text.len;
    enum dp_jleg leg = jr_leg(req->leg);
    if (leg != DP_JLEG_PLAIN && j->leg_span[leg] == 0)
        j->leg_span[leg] = jr_span_id();
    struct dp_jstep *s = jr_add(j, DP_JSTEP_DECISION);
    if (s == NULL)
        return;
    s->leg = leg;
    s->decision = decision;
    s->candidates = (uint32_t)n;
    s->span_id = jr_span_id();
    s->start_ns = started_ns;
    s->end_ns = dp_journal_now_ns();
    snprintf(s->worker, sizeof(s->worker), "%s", worker != NULL ? worker : "");
}

void dp_journal_attempt_start(struct dp_attempt *a)
{
    struct dp_journal *j = a->req->journal;
    if (j == NULL)
        return;
    j->n_attempts++;
    struct dp_jstep *s = jr_add(j, DP_JSTEP_ATTEMPT);
    uint64_t span = jr_span_id();
    /* The worker's parent span is this attempt's. */
    dp_trace_set_span(&j->trace, span);
    if (s == NULL)
        return;
    const struct dp_jstep *d = jr_last_decision(j);
    s->leg = jr_leg(a->leg);
    s->attempt = a;
    s->span_id = span;
    s->parent_id = d != NULL ? d->span_id : 0;
    s->decision = d != NULL ? d->decision : POL_DECISION_UNSET;
    snprintf(s->worker, sizeof(s->worker), "%s", a->worker_id);
}

void dp_journal_attempt_outcome(const struct dp_attempt *a, enum dp_jout outcome)
{
    struct dp_journal *j = a->req->journal;
    struct dp_jstep *s = j != NULL ? jr_find(j, a) : NULL;
    if (s != NULL && s->outcome == DP_JOUT_UNSET)
        s->outcome = outcome;
}

void dp_journal_attempt_done(const struct dp_attempt *a, CURLcode result)
{
    enum dp_jout o = DP_JOUT_TRANSFER;
    if (result == CURLE_OK && a->status != 0)
        o = DP_JOUT_OK;
    else if (result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST ||
             (result == CURLE_OPERATION_TIMEDOUT && a->status == 0))
        o = DP_JOUT_CONNECT;
    dp_journal_attempt_outcome(a, o);
}

void dp_journal_attempt_end(const struct dp_attempt *a)
{
    struct dp_journal *j = a->req->journal;
    struct dp_jstep *s = j != NULL ? jr_find(j, a) : NULL;
    if (s == NULL)
        return;
    if (s->outcome == DP_JOUT_UNSET)
        s->outcome = DP_JOUT_CANCELLED;
    s->status = a->status;
    s->end_ns = dp_journal_now_ns();
    s->attempt = NULL;
}

void dp_journal_trace_begin(struct dp_request *req, bool *replace, bool *keep_state)
{
    *replace = *keep_state = false;
    struct dp_journal *j = req->journal;
    const struct cfg_tracing *tc = &req->loop->sh->cfg->tracing;
    if (j == NULL || (!tc->propagate && req->loop->sh->tracer == NULL))
        return;
    const char *tp = req->conn != NULL
                         ? MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "traceparent")
                         : NULL;
    bool continued = dp_trace_start(&j->trace, tp);
    j->traced = true;
    *replace = tc->propagate;
    *keep_state = continued;
}

int dp_journal_trace_header(struct dp_request *req, struct curl_slist **list)
{
    if (req->journal == NULL || !req->journal->traced)
        return 0;
    return dp_trace_add_header(&req->journal->trace, list);
}

void dp_journal_trace_header_gone(struct dp_request *req)
{
    if (req->journal != NULL)
        req->journal->trace.header = NULL;
}

void dp_journal_disconnect(struct dp_request *req, enum dp_phase phase)
{
    if (req->journal != NULL && req->journal->disconnect == DP_PHASE_UNSET)
        req->journal->disconnect = phase;
}

void dp_journal_sent(struct dp_request *req, size_t n)
{
    if (req->journal != NULL)
        req->journal->bytes_out += n;
}
