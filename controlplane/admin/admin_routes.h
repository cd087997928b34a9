/*
 * The admin REST routes (docs/admin-api.md): matching a method and path to a
 * handler, and the handlers for /workers, /workers/{id}, drain, reset_load,
 * /status and /metrics. Handlers read the registry and load counters and,
 * being on the loop thread, are the registry's writer for admin changes.
 */
#ifndef SY_CONTROLPLANE_ADMIN_ROUTES_H
#define SY_CONTROLPLANE_ADMIN_ROUTES_H

#include <stddef.h>

#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_reply.h"

/* Route labels for metrics: index into adm_route_labels. */
enum adm_route_id {
    ADM_ROUTE_UNSET = 0,
    ADM_ROUTE_WORKERS,
    ADM_ROUTE_WORKER,
    ADM_ROUTE_DRAIN,
    ADM_ROUTE_RESET_LOAD,
    ADM_ROUTE_STATUS,
    ADM_ROUTE_METRICS,
    ADM_ROUTE_RELOAD,
    ADM_ROUTE_PAGE,
    ADM_ROUTE_DECISIONS,
    ADM_ROUTE_DECISIONS_HISTORY, /* /decisions/history */
    ADM_ROUTE_ADAPTERS,          /* /adapters (adapters.h) */
    ADM_ROUTE_ADAPTER,           /* /adapters/{name} */
    ADM_ROUTE_OTHER,
    ADM_ROUTE_COUNT,
};

extern const char *const adm_route_labels[ADM_ROUTE_COUNT];

/* Which route a path belongs to (before method checks), for metrics. */
enum adm_route_id adm_route_match(const char *url);

/*
 * Serves one request. Returns 1 with reply filled, or 0 when the route went
 * asynchronous: it copied *later and will answer through it exactly once.
 */
int adm_route_serve(struct adm_ctx *ctx, const char *method, const char *url, const char *body,
                    size_t body_len, const struct adm_reply_later *later, struct adm_reply *reply);

#endif
