/*
 * A request's end for the access log and the span exporter (see obs.h).
 * The line is built on the loop's stack and copied into the loop's ring:
 * nothing is allocated per request here.
 */
#include "dataplane/obs.h"

#include "common/proc.h"
#include "dataplane/access_log.h"
#include "dataplane/access_log_line.h"
#include "dataplane/journal.h"
#include "dataplane/loop.h"

void dp_obs_request_done(struct dp_request *req, int status, bool client_left)
{
    struct dp_journal *j = req->journal;
    if (j == NULL)
        return;
    struct dp_shared *sh = req->loop->sh;
    if (sh->alog != NULL) {
        char line[DP_ALOG_LINE_MAX];
        size_t n = dp_alog_format(req, j, status, client_left, proc_monotonic_ms(), line,
                                  sizeof(line));
        if (n > 0)
            dp_alog_write(sh->alog, req->loop->index, line, n);
        else
            atomic_fetch_add_explicit(&sh->metrics.access_log_dropped, 1, memory_order_relaxed);
    }
}
