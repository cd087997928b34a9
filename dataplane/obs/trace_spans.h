/*
 * A request's spans, encoded as OTLP/JSON Span objects (the JSON mapping
 * of opentelemetry.proto.trace.v1.Span: hex traceId/spanId/parentSpanId,
 * times as decimal strings of Unix nanoseconds, kind and status code as
 * integers, attributes as key / AnyValue pairs), one per line, from its
 * journal:
 *
 *   request (SERVER)            the client's request, child of the client's span
 *     [prefill|decode leg]      P/D only: each leg, from its first decision to its last attempt
 *       routing decision        each pick of a worker (policy, reason, candidates)
 *         attempt (CLIENT)      each try on a worker; its span id is the parent
 *                               the worker received in its traceparent
 *
 * A plain request has no leg span: its decisions hang under the request.
 * trace_export.h wraps the lines in an ExportTraceServiceRequest.
 *
 * Threading: the request's loop thread.
 */
#ifndef SY_DATAPLANE_TRACE_SPANS_H
#define SY_DATAPLANE_TRACE_SPANS_H

#include <stddef.h>
#include <stdint.h>

#define DP_SPAN_MAX (4u * 1024u) /* bytes of one encoded span, at most */

struct dp_request;
struct dp_journal;

/* Called with each encoded span (its '\n' included). */
typedef void (*dp_span_sink_fn)(void *ctx, const char *span, size_t len);

/* Encodes req's spans (status sent, end_ns its end) and hands each to
 * sink; a span that does not fit DP_SPAN_MAX is counted in *lost. */
void dp_trace_spans_emit(const struct dp_request *req, const struct dp_journal *j, int status,
                         uint64_t end_ns, dp_span_sink_fn sink, void *ctx, uint64_t *lost);

#endif
