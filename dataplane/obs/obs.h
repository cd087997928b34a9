/*
 * The end of a request, as observability sees it: its journal (journal.h)
 * becomes an access-log line (access_log.h) and, when spans are exported,
 * its spans (trace_export.h). The listener calls it once per request, when
 * MHD completed it.
 *
 * Threading: the request's loop thread.
 */
#ifndef SY_DATAPLANE_OBS_H
#define SY_DATAPLANE_OBS_H

#include <stdbool.h>

struct dp_request;

/* req is over with status sent (499: none); client_left: its connection
 * ended with an error (not a shutdown). A no-op without a journal. */
void dp_obs_request_done(struct dp_request *req, int status, bool client_left);

#endif
