/*
 * Span export over OTLP/HTTP with JSON encoding: the spans of
 * trace_spans.h, wrapped in an ExportTraceServiceRequest
 * ({"resourceSpans":[{"resource":…,"scopeSpans":[{"scope":…,"spans":[…]}]}]}),
 * POSTed to tracing.otlp_endpoint (with /v1/traces appended unless the URL
 * already ends with it) by a thread of its own with libcurl.
 *
 * Bounded, never in the way: each event loop appends its spans to a ring of
 * its own (tracing.queue_size bytes); a span that does not fit is dropped
 * and counted (switchyard_trace_spans_dropped_total), so a slow or absent
 * collector costs requests nothing. The exporter empties the rings every
 * tracing.batch_interval, or sooner when a loop's ring is half full, and
 * sends at most tracing.batch_size spans per request, one request at a
 * time, each bounded by tracing.export_timeout. A failed export drops its
 * spans (counted, and switchyard_trace_export_failures_total); accepted
 * ones count in switchyard_trace_spans_exported_total. No retry: the
 * spans behind it would wait and be dropped anyway.
 *
 * Threading: dp_tracer_open / dp_tracer_close on the main thread;
 * dp_tracer_push on event loop i for ring i.
 */
#ifndef SY_DATAPLANE_TRACE_EXPORT_H
#define SY_DATAPLANE_TRACE_EXPORT_H

#include <stddef.h>

#include "common/config.h"

struct dp_metrics;
struct dp_tracer;

/* Starts the exporter of cfg's tracing section: *out NULL when
 * otlp_endpoint is "". Counters go to m (outlives the tracer). 0 or -errno. */
int dp_tracer_open(const struct cfg *cfg, struct dp_metrics *m, struct dp_tracer **out);

/* Sends what the rings hold (within one export_timeout in all: what is
 * not sent by then is dropped), stops the thread.
 * NULL is a no-op. Call after the loops stopped. */
void dp_tracer_close(struct dp_tracer *t);

/* Event loop `index`: queues one encoded span (with its '\n'); dropped and
 * counted when its ring is full. */
void dp_tracer_push(struct dp_tracer *t, unsigned index, const char *span, size_t len);

#endif
