/*
 * The admin API's browser guard: what keeps a web page from driving the
 * admin API through the operator's own browser (docs/security.md, "The
 * admin API and browsers"). With no token (the loopback default) any page
 * the operator opens could otherwise
 *   - send a "simple" cross-origin request, one a browser sends without
 *     asking first: a POST with Content-Type text/plain adds a worker that
 *     points at the attacker (CSRF), and
 *   - make its own name resolve to 127.0.0.1 and then read and write the
 *     API as if it were its own origin (DNS rebinding).
 * So, before any byte of a body is read:
 *   - Host must name this API: an IP literal (no DNS name, nothing to
 *     rebind), `localhost`, or a name of controlplane.admin_allowed_hosts;
 *   - an Origin, when a client sends one, must be this API's own origin:
 *     an allowed host and the admin port (another local service's page is
 *     another origin); `null` is refused; so is Sec-Fetch-Site: cross-site;
 *   - POST, PUT and PATCH must say Content-Type: application/json, which no
 *     browser sends cross-origin without a preflight that is never
 *     granted (the API answers no CORS).
 * Tools (switchyard-ctl, curl, scripts) send no Origin and pass. The bearer
 * token, when configured, is checked after this, as before.
 *
 * Pure functions of the request's headers; no state beyond the config.
 */
#ifndef SY_CONTROLPLANE_ADMIN_GUARD_H
#define SY_CONTROLPLANE_ADMIN_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

/* Caller storage, filled by adm_guard_init. Holds its own copy of the
 * allowed names: a reload may free the config they came from. */
struct adm_guard {
    uint16_t port; /* the admin API's port, for Origin */
    struct cfg_str_list allowed_hosts;
};

/* From controlplane.admin_listen (HOST:PORT) and admin_allowed_hosts (NULL:
 * none). 0 or -EINVAL. */
int adm_guard_init(struct adm_guard *g, const char *admin_listen,
                   const struct cfg_str_list *allowed_hosts);

/* The headers the guard reads; NULL when absent. */
struct adm_guard_request {
    const char *method;
    const char *host;
    const char *origin;
    const char *sec_fetch_site;
    const char *content_type;
};

/*
 * 0 when the request may go on to authentication and its route; else the
 * HTTP status to answer (403, or 415 for a missing or other Content-Type)
 * with a sentence in why.
 */
unsigned adm_guard_check(const struct adm_guard *g, const struct adm_guard_request *r, char *why,
                         size_t why_len);

/* True when host (a Host header's value, port included or not) names this
 * API under g's rules. */
bool adm_guard_host_is_ours(const struct adm_guard *g, const char *host);

#endif
