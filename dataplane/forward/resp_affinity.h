/*
 * Response stickiness for the Responses API. vLLM keeps each response it
 * stores in the memory of the server that made it, so a request that names
 * one (previous_response_id, or GET /v1/responses/{id} and its cancel) is
 * answered right only by that server. This module
 *   - remembers, for every response created through this node, the worker
 *     that answered (slot + generation) in the node's response table
 *     (shm/responses.h), reading the id from the answer as it is relayed:
 *     the top-level "id" of a JSON answer, or response.id of the stream's
 *     response.created event;
 *   - pins a request that names a known id to that worker, whatever the
 *     policy would say (decision response_affinity); an id it does not know
 *     (made before, or elsewhere) leaves the request to the policy;
 *   - refuses such a request when its worker cannot take it: 404
 *     previous_response_unavailable when the worker is gone (removed, or
 *     its slot reused: the response is lost for good), 503 when it is
 *     there but unhealthy or draining (it may come back: retry later).
 *     Another worker would only answer "not found", or worse, continue a
 *     conversation it never saw.
 *   - binds each id to the tenant of the request that made it: another
 *     tenant naming it gets vLLM's own 404 for an id that does not exist,
 *     from the router, before the holder's health or any worker is looked
 *     at (docs/security.md, finding 12);
 *   - never moves a live id: a worker answering with an id the table
 *     holds for another worker or tenant is counted
 *     (switchyard_response_id_conflicts_total) and logged once per
 *     worker, and the id stays with its holder (finding 13);
 *   - refuses an id in the path that is not vLLM's alphabet with a 400
 *     (id_route.h, finding 21).
 *
 * The table is opened once per process (dp_resp_create) and shared by
 * every loop through struct dp_shared.resp; a request's capture state is
 * its own.
 *
 * Threading: dp_resp_create/destroy on the main thread, before the loops
 * start and after they end; the rest on the request's loop thread.
 */
#ifndef SY_DATAPLANE_RESP_AFFINITY_H
#define SY_DATAPLANE_RESP_AFFINITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "dataplane/types/leg_types.h"

struct dp_request;

/* The node's response table as this data plane uses it (opaque). */
struct dp_resp;

/* Opens (or creates) the node's response table beside cfg's segment, for
 * the registry registry_id (shm_segment_created_ms), into *out. A failure
 * is logged and leaves *out NULL, stickiness off: 0 or a negative errno. */
int dp_resp_create(const struct cfg *cfg, uint64_t registry_id, struct dp_resp **out);
/* Closes the table; NULL is a no-op. */
void dp_resp_destroy(struct dp_resp *r);

/* True when req's route is one of the Responses routes. */
bool dp_resp_applies(const struct dp_request *req);

/*
 * Before the first attempt: pins req to the worker of the id it names,
 * when the table (dp_shared.resp of req's loop) knows it for req's
 * tenant. Returns 0 (pinned, or left to the policy), or an HTTP status
 * (400 for a malformed id in the path, 404, 503) with a new error body in
 * *body (NULL = out of memory) to answer with.
 */
int dp_resp_pin(struct dp_request *req, char **body);

/* Starts req on the Responses plan: the plain one-leg plan that also
 * reads the response id from the answer it relays. */
void dp_resp_begin_plan(struct dp_request *req);

/*
 * The plan's id reader on its own, for the fuzz target: a capture is fed
 * an answer's bytes read by read (a JSON answer's top-level "id", or an
 * SSE stream's response.created event's response.id when sse).
 * dp_resp_capture_feed returns true once the id is found; later reads are
 * ignored. dp_resp_capture_id: the id (not NUL-terminated, borrowed until
 * the free), NULL while none was found.
 */
struct dp_resp_capture;
struct dp_resp_capture *dp_resp_capture_new(bool sse);
bool dp_resp_capture_feed(struct dp_resp_capture *c, const char *data, size_t len);
const char *dp_resp_capture_id(const struct dp_resp_capture *c, size_t *len);
void dp_resp_capture_free(struct dp_resp_capture *c);

#endif
