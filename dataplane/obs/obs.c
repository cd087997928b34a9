/*
 * A request's end for the access log and the span exporter (see obs.h).
 * The line is built on the loop's stack and copied into the loop's ring:
 * nothing is allocated per request here.
 */
#include "dataplane/obs/obs.h"

#include "common/proc.h"
#include "dataplane/obs/access_log.h"
#include "dataplane/obs/access_log_line.h"
#include "dataplane/obs/journal.h"
#include "dataplane/core/loop.h"
#include "dataplane/obs/trace_export.h"
#include "dataplane/obs/trace_spans.h"

static void obs_push_span(void *ctx, const char *span, size_t len)
{
    struct dp_loop *loop = ctx;
    dp_tracer_push(loop->sh->tracer, loop->index, span, len);
}

void dp_obs_request_done(struct dp_request *req, int status, bool client_left)
{
    struct dp_journal *j = req->journal;
    if (j == NULL)
        return;
    struct dp_shared *sh = req->loop->sh;
    if (sh->alog != NULL) {
        char line[DP_ALOG_LINE_MAX];
        size_t n =
            dp_alog_format(req, j, status, client_left, proc_monotonic_ms(), line, sizeof(line));
        if (n > 0)
            dp_alog_write(sh->alog, req->loop->index, line, n);
        else
            atomic_fetch_add_explicit(&sh->metrics.access_log_dropped, 1, memory_order_relaxed);
    }
    /* Spans of sampled traces only: a client that said "not sampled" is obeyed. */
    if (sh->tracer != NULL && j->traced && (j->trace.flags & 0x01) != 0) {
        uint64_t lost = 0;
        dp_trace_spans_emit(req, j, status, dp_journal_now_ns(), obs_push_span, req->loop, &lost);
        if (lost != 0)
            atomic_fetch_add_explicit(&sh->metrics.trace_spans_dropped, lost, memory_order_relaxed);
    }
}
