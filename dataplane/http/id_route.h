/*
 * The worker URL of a route that names its object in the path
 * (GET /v1/responses/{id}, POST /v1/responses/{id}/cancel; routes.h rows
 * with an id_suffix): the row's upstream prefix, the id as the client sent
 * it, the row's suffix, and the client's query string rebuilt from the
 * arguments libmicrohttpd decoded (it hands the handler the path alone),
 * each name and value percent-encoded again. vLLM reads `stream` and
 * `starting_after` there.
 *
 * Threading: the request's loop thread (it reads the MHD connection).
 */
#ifndef SY_DATAPLANE_ID_ROUTE_H
#define SY_DATAPLANE_ID_ROUTE_H

#include <stddef.h>

struct dp_request;

/* Writes base + path (+ "?" query) into out. 0, or -ENAMETOOLONG when it
 * does not fit in cap, or -ENOMEM. */
int dp_id_route_url(const struct dp_request *req, const char *base, char *out, size_t cap);

#endif
