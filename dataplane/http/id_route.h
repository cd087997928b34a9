/*
 * The worker URL of a route that names its object in the path
 * (GET /v1/responses/{id}, POST /v1/responses/{id}/cancel; routes.h rows
 * with an id_suffix): the row's upstream prefix, the id as the client sent
 * it, the row's suffix, and the client's query string rebuilt from the
 * arguments libmicrohttpd decoded (it hands the handler the path alone),
 * each name and value percent-encoded again. vLLM reads `stream` and
 * `starting_after` there.
 *
 * The id is pasted into the worker's path, after libmicrohttpd decoded it:
 * "%2E%2E" arrives as "..", which the worker's URL would resolve
 * (POST /v1/responses/../cancel is the worker's /v1/cancel), and "%3F" or
 * "%23" would start a query or a fragment. So only vLLM's own alphabet is
 * taken (letters, digits, '_' and '-', as in "resp_<hex>"), at most
 * DP_ID_ROUTE_ID_MAX bytes; the caller refuses anything else with a 400
 * before a worker is picked, and dp_id_route_url refuses it again.
 *
 * Threading: the request's loop thread (it reads the MHD connection).
 */
#ifndef SY_DATAPLANE_ID_ROUTE_H
#define SY_DATAPLANE_ID_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#define DP_ID_ROUTE_ID_MAX 159u /* bytes: what fits a request's resp_id (routes.h) */

struct dp_request;

/* True when id (NUL-terminated) is 1..DP_ID_ROUTE_ID_MAX bytes of
 * [A-Za-z0-9_-]. */
bool dp_id_route_id_is_valid(const char *id);

/* Writes base + path (+ "?" query) into out. 0, -EINVAL when req's id is
 * not valid (above), -ENAMETOOLONG when it does not fit in cap, or -ENOMEM. */
int dp_id_route_url(const struct dp_request *req, const char *base, char *out, size_t cap);

#endif
