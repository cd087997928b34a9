/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) between the
 * client and the workers. A request keeps the client's trace id when its
 * `traceparent` is valid (version 00, lowercase hex, ids not all zero;
 * a later version is read by its first four fields, as the recommendation
 * says), and then passes its `tracestate` on unchanged; otherwise (absent
 * or invalid) the router begins a new trace with random ids from
 * rng_secret64() (common/rng.h) and drops the client's `tracestate`, which belongs to the
 * trace it did not continue. Each attempt sends its worker a traceparent
 * naming the trace and a span id of its own (the attempt's span), so
 * vLLM's spans hang under the attempt that caused them. A new trace is
 * marked sampled (flags 01), so a worker that samples by its parent
 * records it; a client's flags are passed on as they came.
 *
 * The traceparent header line is one node of the request's upstream header
 * list, rewritten in place for each attempt (same length): attempts of one
 * request never send at the same time, so one node serves them all.
 *
 * Threading: the request's loop thread.
 */
#ifndef SY_DATAPLANE_TRACE_H
#define SY_DATAPLANE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#define DP_TRACEPARENT_LEN 55u /* "00-" 32 "-" 16 "-" 2 */

/* A request's W3C trace context. Caller storage (the request's journal). */
struct dp_trace_ctx {
    uint64_t trace_hi, trace_lo; /* the trace id */
    uint64_t parent_id;          /* the client's span, 0 = we began the trace */
    uint64_t span_id;            /* the request's span */
    uint8_t flags;               /* trace-flags sent on */
    struct curl_slist *header;   /* our traceparent line in the upstream headers, or NULL */
};

/* Parses a traceparent value into ctx's trace id, parent id and flags.
 * 0, or -EINVAL (ctx untouched) when it is not valid. */
int dp_trace_parse(const char *value, struct dp_trace_ctx *ctx);

/* Writes "00-TRACE-SPAN-FLAGS" (DP_TRACEPARENT_LEN chars and a NUL). */
void dp_trace_format(const struct dp_trace_ctx *ctx, uint64_t span_id,
                     char out[DP_TRACEPARENT_LEN + 1]);

/* 16 lowercase hex digits of v (no NUL). */
void dp_trace_hex64(char out[16], uint64_t v);

/* A new random span id (never 0). */
uint64_t dp_trace_new_id(void);

/* Starts ctx from the client's traceparent (NULL = none): continued when
 * valid, a new sampled trace otherwise. Returns true when it continued the
 * client's trace (its tracestate may then go on). */
bool dp_trace_start(struct dp_trace_ctx *ctx, const char *client_traceparent);

/* True for the headers this module sets itself: the client's traceparent
 * always, its tracestate when keep_state is false. */
bool dp_trace_header_is_replaced(const char *name, size_t len, bool keep_state);

/* Appends "traceparent: ..." for ctx to *list and remembers the node in
 * ctx->header. 0 or -ENOMEM. */
int dp_trace_add_header(struct dp_trace_ctx *ctx, struct curl_slist **list);

/* Points the traceparent header at span_id (the next attempt's span). */
void dp_trace_set_span(struct dp_trace_ctx *ctx, uint64_t span_id);

#endif
