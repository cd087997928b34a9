/*
 * What happened to one request, for the access log (access_log.h) and for
 * tracing (trace.h): its routing decisions and attempts in order (worker,
 * leg, outcome, status, times), the bytes sent to the client, the phase in
 * which the client left, and its trace context. The forwarder and the
 * listener report to it through the small dp_journal_* hooks below, each
 * a no-op when the request has no journal (observability off); at the
 * request's end obs.h writes the access-log line and the spans from it,
 * then the journal dies with the request.
 *
 * A journal is kept only when something reads it: an access log or span
 * export (every request), or trace propagation alone (forwarded requests;
 * then without steps, about 150 bytes, since only the trace context is
 * read). With steps it holds at most DP_JOURNAL_STEPS decisions and
 * attempts (about 2 KiB); later ones are counted, not kept (a request
 * makes a few: retry.max_attempts per leg).
 *
 * Ownership: the request's (req->journal), freed with it. Threading: the
 * request's loop thread only.
 */
#ifndef SY_DATAPLANE_JOURNAL_H
#define SY_DATAPLANE_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/config.h"
#include "dataplane/core/policy.h"
#include "dataplane/obs/trace.h"
#include "dataplane/types/request_types.h"

#define DP_JOURNAL_STEPS 16u

/* How an attempt ended; its name is the "outcome" of the access log. */
enum dp_jout {
    DP_JOUT_UNSET = 0,
    DP_JOUT_OK,        /* its response was relayed or collected to the end */
    DP_JOUT_STATUS,    /* answered a status of retry.on_status and was given up */
    DP_JOUT_CONNECT,   /* the worker could not be reached */
    DP_JOUT_TRANSFER,  /* reset, truncated, protocol error */
    DP_JOUT_TIMEOUT,   /* first-byte or idle timeout */
    DP_JOUT_IN_BAND,   /* a 200 stream that carried an error event */
    DP_JOUT_CANCELLED, /* the client left or the data plane stopped it */
    DP_JOUT_COUNT,
};

enum dp_jstep_kind {
    DP_JSTEP_UNSET = 0,
    DP_JSTEP_DECISION,
    DP_JSTEP_ATTEMPT,
};

/* The leg a step ran for: a plain request's one leg, or a P/D leg. */
enum dp_jleg {
    DP_JLEG_PLAIN = 0,
    DP_JLEG_PREFILL,
    DP_JLEG_DECODE,
    DP_JLEG_COUNT,
};

/* One decision or attempt. */
struct dp_jstep {
    enum dp_jstep_kind kind;
    enum dp_jleg leg;
    enum pol_decision decision; /* DECISION; and the decision an ATTEMPT followed */
    uint32_t candidates;        /* DECISION: workers it chose among */
    enum dp_jout outcome;       /* ATTEMPT */
    long status;                /* ATTEMPT: the worker's HTTP status, 0 = none */
    const void *attempt;        /* ATTEMPT: the live struct dp_attempt, NULL once ended */
    uint64_t span_id;
    uint64_t parent_id;        /* ATTEMPT: its decision's span */
    uint64_t start_ns, end_ns; /* wall clock */
    char worker[CFG_ID_MAX];   /* DECISION: chosen ("" = none); ATTEMPT: its worker */
};

struct dp_journal {
    uint64_t start_ns; /* wall clock at arrival */
    char method[8];
    struct dp_trace_ctx trace;
    bool traced; /* trace holds a context (propagation on and the request forwarded) */
    uint32_t n_steps;
    uint32_t cap_steps; /* DP_JOURNAL_STEPS, or 0: nothing reads steps */
    uint32_t n_lost;    /* decisions and attempts past cap_steps */
    uint32_t n_attempts;
    uint64_t leg_span[DP_JLEG_COUNT]; /* P/D legs' spans, 0 = none yet */
    enum dp_phase disconnect;         /* counted client disconnect, UNSET = none */
    uint64_t bytes_out;
    uint64_t prompt_bytes;
    struct dp_jstep steps[]; /* cap_steps of them */
};

/* A journal for a new request of loop on route when observability wants
 * one (NULL otherwise, or without memory: the request runs unobserved). */
struct dp_journal *dp_journal_create(const struct dp_loop *loop, enum dp_route route,
                                     const char *method);
void dp_journal_destroy(struct dp_journal *j);

/* Wall clock in ns (CLOCK_REALTIME). */
uint64_t dp_journal_now_ns(void);

/* The forwarder chose (or failed to choose: worker NULL) among n
 * candidates; started_ns is when it began (for the decision's span). */
void dp_journal_decision(struct dp_request *req, enum pol_decision decision, size_t n,
                         const char *worker, uint64_t started_ns);
/* Attempt a starts (after its decision); sets the traceparent its worker gets. */
void dp_journal_attempt_start(struct dp_attempt *a);
/* What a's end will be called, when known before its end (first one set wins). */
void dp_journal_attempt_outcome(const struct dp_attempt *a, enum dp_jout outcome);
/* a's transfer finished with result (an outcome unless one was set). */
void dp_journal_attempt_done(const struct dp_attempt *a, CURLcode result);
/* a ends (its guard released): its time and status are final. */
void dp_journal_attempt_end(const struct dp_attempt *a);
/* The request is about to be forwarded: starts its trace context from the
 * client's traceparent. *replace: the caller leaves the client's
 * traceparent (and *keep_state false: its tracestate) out of the upstream
 * headers and adds dp_journal_trace_header's instead. */
void dp_journal_trace_begin(struct dp_request *req, bool *replace, bool *keep_state);
/* Appends the request's traceparent header to *list. 0 or -ENOMEM. */
int dp_journal_trace_header(struct dp_request *req, struct curl_slist **list);
/* The list dp_journal_trace_header appended to is freed: no attempt follows. */
void dp_journal_trace_header_gone(struct dp_request *req);
/* The client left in phase (counted as a disconnect). */
void dp_journal_disconnect(struct dp_request *req, enum dp_phase phase);
/* n body bytes went to the client connection. */
void dp_journal_sent(struct dp_request *req, size_t n);

/* Names for the access log and spans. */
const char *dp_jout_name(enum dp_jout outcome);
const char *dp_jleg_name(enum dp_jleg leg);

#endif
