/*
 * A client request's life outside the state machine: creation when MHD
 * reports it (its route and whether the method is allowed, from the route
 * table, routes.h), reference counting (the MHD connection holds one, every
 * live attempt one), the bounded body buffer, the few fields routing needs
 * (model, stream, user, and the routing text its route's body shape names),
 * the request id, and the header list sent upstream (end-to-end headers
 * only).
 *
 * Threading: the owning loop's thread only.
 */
#ifndef SY_DATAPLANE_REQUEST_H
#define SY_DATAPLANE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataplane/types/request_types.h"
#include "dataplane/core/routes.h"

/* Called when a request's last reference goes, after the request freed
 * what it owns itself: frees what other modules hung on it and hands it to
 * its loop to be freed. Registered by the request's creator. */
typedef void (*dp_request_release_fn)(struct dp_request *req);

/* A new request of loop with one reference (MHD's), or NULL. Its upload
 * keeps max_body bytes at most; release runs when it dies. */
struct dp_request *dp_request_create(struct dp_loop *loop, struct MHD_Connection *conn,
                                     const char *url, const char *method, uint64_t max_body,
                                     dp_request_release_fn release);

void dp_request_ref(struct dp_request *req);
/* Drops a reference; the last one frees what the request owns and calls
 * its release function. */
void dp_request_unref(struct dp_request *req);

/* Appends upload bytes; past the request's max_body they are dropped and
 * body_too_large is set. 0 or -ENOMEM. */
int dp_request_append_body(struct dp_request *req, const char *data, size_t len);

enum dp_parse_result {
    DP_PARSE_UNSET = 0,
    DP_PARSE_OK,
    DP_PARSE_BAD_JSON,  /* not JSON, or not an object */
    DP_PARSE_BAD_FIELD, /* model or stream of the wrong type */
    DP_PARSE_NO_MODEL,  /* model absent */
    DP_PARSE_NO_MEMORY,
};

/* The shape req's body is parsed as (routes.h): its route's, or for
 * /invocations, once parsed, the one its fields name (DP_BODY_CHAT,
 * DP_BODY_COMPLETION or DP_BODY_BY_LOAD). */
enum dp_body dp_request_shape(const struct dp_request *req);

/* Parses the body for model, stream, user and the routing text of its
 * route's body shape (routes.h). A route whose body is not read (local,
 * not found) parses nothing: DP_PARSE_OK. */
enum dp_parse_result dp_request_parse(struct dp_request *req);

/* Sets the request id (client's X-Request-Id or a fresh one) and builds the
 * upstream header list. 0 or -ENOMEM. */
int dp_request_prepare_upstream(struct dp_request *req);

/* True for headers that must not cross a proxy (RFC 9110 7.6.1) or that
 * the dataplane sets itself. */
bool dp_header_is_hop_by_hop(const char *name, size_t len);

#endif
