/*
 * CORS for browser clients, as vLLM's --allowed-origins/--allowed-headers
 * (Starlette's CORSMiddleware) do it, configured by dataplane.cors and off
 * while allowed_origins is empty:
 *   - every answer to a request whose Origin is allowed, errors and
 *     streams included, carries Access-Control-Allow-Origin (the origin,
 *     with Vary: Origin; or "*" when the list holds "*") and exposes
 *     X-Request-Id;
 *   - a preflight (OPTIONS with Origin and Access-Control-Request-Method)
 *     on a route is answered by the router itself: 200 with the allowed
 *     methods (the route's, plus OPTIONS), headers and a max age; 400 when
 *     the origin, method or a requested header is not allowed. Without
 *     CORS, OPTIONS stays a 405 like any other method a route lacks.
 *
 * Threading: pure functions of the configuration and the request; any
 * loop thread.
 */
#ifndef SY_DATAPLANE_CORS_H
#define SY_DATAPLANE_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "common/config.h"

/* True when dataplane.cors is switched on. */
bool dp_cors_enabled(const struct cfg_cors *c);

/* True when conn's request is a CORS preflight (and CORS is on). */
bool dp_cors_is_preflight(const struct cfg_cors *c, struct MHD_Connection *conn,
                          const char *method);

/* Adds the CORS headers an answer to conn's request gets (none when off
 * or when its Origin is absent or not allowed). */
void dp_cors_add_headers(const struct cfg_cors *c, struct MHD_Connection *conn,
                         struct MHD_Response *resp);

/*
 * The answer to a preflight on a route allowing `allow` (its Allow header
 * value, e.g. "POST"): its status, and the headers added to resp (which
 * the caller creates with an empty or plain-text body and queues).
 */
int dp_cors_preflight(const struct cfg_cors *c, struct MHD_Connection *conn, const char *allow,
                      struct MHD_Response *resp, const char **reason);

/* Room for the Allow-Headers value made of dataplane.cors.allowed_headers:
 * every name whole (up to CFG_LIST_ITEM_MAX - 1 bytes) and a ", " between
 * two, NUL included. One item's size per name was too short by the
 * separators: sixteen of the longest names had the last one cut, and a
 * browser refused the requests that sent it. */
#define DP_CORS_ALLOW_HEADERS_MAX (CFG_LIST_MAX * (CFG_LIST_ITEM_MAX + 2))

/*
 * The part of a preflight that reads the client's headers (dp_cors_preflight
 * adds its results to the answer; the fuzz target calls it directly): the
 * verdict on origin, method and headers (the three Origin and
 * Access-Control-Request-* values, each may be NULL) for a route allowing
 * `allow`: NULL when the preflight passes, else the reason. *allow_origin:
 * the Allow-Origin value or NULL. *allow_headers: the Allow-Headers value
 * (headers itself, or the configured list written into list), or NULL.
 */
const char *dp_cors_check(const struct cfg_cors *c, const char *origin, const char *method,
                          const char *headers, const char *allow, const char **allow_origin,
                          char *list, size_t list_len, const char **allow_headers);

#endif
