/*
 * The route table (see routes.h). The table is indexed by enum dp_route; a
 * value without a row would read as serve DP_SERVE_UNSET, which the unit
 * test catches. A local row names its answer (enum dp_answer); the answers
 * themselves are local_answer.c's, which needs the loop and this table
 * does not.
 */
#include "dataplane/routes.h"

#include <string.h>

#define DP_METHODS_GET (DP_METHOD_GET | DP_METHOD_HEAD)

static const struct dp_route_row dp_routes[DP_ROUTE_COUNT] = {
    [DP_ROUTE_CHAT] =
        {
            .path = "/v1/chat/completions",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/chat/completions",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/chat/completions",
            .body = DP_BODY_CHAT,
            .prefill_decode = true,
        },
    [DP_ROUTE_COMPLETIONS] =
        {
            .path = "/v1/completions",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/completions",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/completions",
            .body = DP_BODY_COMPLETION,
            .prefill_decode = true,
        },
    [DP_ROUTE_EMBEDDINGS] =
        {
            .path = "/v1/embeddings",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/embeddings",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/embeddings",
            .body = DP_BODY_EMBEDDINGS,
        },
    [DP_ROUTE_MODELS] =
        {
            .path = "/v1/models",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/v1/models",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = DP_ANSWER_MODELS,
        },
    [DP_ROUTE_HEALTH] =
        {
            .path = "/health",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/health",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = DP_ANSWER_HEALTH,
        },
    [DP_ROUTE_METRICS] =
        {
            .path = "/metrics",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/metrics",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = DP_ANSWER_METRICS,
        },
    [DP_ROUTE_OTHER] =
        {
            .label = "other",
            .serve = DP_SERVE_NOT_FOUND,
            .body = DP_BODY_NONE,
        },
};

const struct dp_route_row *dp_route_row(enum dp_route route)
{
    if (route <= DP_ROUTE_UNSET || route >= DP_ROUTE_COUNT)
        route = DP_ROUTE_OTHER;
    return &dp_routes[route];
}

enum dp_route dp_route_find(const char *path)
{
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++)
        if (dp_routes[r].path != NULL && strcmp(dp_routes[r].path, path) == 0)
            return (enum dp_route)r;
    return DP_ROUTE_OTHER;
}

bool dp_route_allows(enum dp_route route, const char *method)
{
    const struct dp_route_row *row = dp_route_row(route);
    if (row->serve == DP_SERVE_NOT_FOUND)
        return true;
    unsigned bit = strcmp(method, "GET") == 0    ? DP_METHOD_GET
                   : strcmp(method, "HEAD") == 0 ? DP_METHOD_HEAD
                   : strcmp(method, "POST") == 0 ? DP_METHOD_POST
                                                 : 0u;
    return (row->methods & bit) != 0;
}
