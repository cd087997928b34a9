/*
 * Honest overload answers. A worker that answers 429 or 503 is overloaded,
 * not broken: when every attempt of a request's current leg ended that way,
 * the client is told so (that status, the shortest Retry-After the workers
 * gave, an OpenAI-style "fleet overloaded" body) instead of a 502, which
 * stays for real upstream failures (connect errors, resets, timeouts,
 * other statuses). The forwarder notes each attempt that ends with a
 * status in retry.on_status, and asks before it answers a failed request.
 * The mapping of every upstream outcome to the client's status is in
 * docs/routing.md.
 *
 * Threading: the request's loop thread.
 */
#ifndef SY_DATAPLANE_OVERLOAD_H
#define SY_DATAPLANE_OVERLOAD_H

#include <stdbool.h>

struct dp_request;

/* An attempt of req ended with status (its headers are req->resp_hdrs). */
void dp_overload_note(struct dp_request *req, long status);

/* True when every attempt of req's current leg ended in 429 or 503; then
 * *status is the last one's and req->retry_after_s the shortest seen
 * (1 s when no worker sent one). */
bool dp_overload_all(struct dp_request *req, int *status);

#endif
