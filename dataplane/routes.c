/*
 * The route table and the local answers (see routes.h). The table is
 * indexed by enum dp_route; a value without a row would read as serve
 * DP_SERVE_UNSET, which the unit test catches. Local bodies are built with
 * jansson; /metrics is rendered by metrics.c from the loop's registry copy.
 */
#include "dataplane/routes.h"

#include <jansson.h>
#include <stdatomic.h>
#include <string.h>

#include "dataplane/errors.h"
#include "dataplane/loop.h"

static void answer_health(struct dp_loop *loop, struct dp_local_reply *out);
static void answer_models(struct dp_loop *loop, struct dp_local_reply *out);
static void answer_metrics(struct dp_loop *loop, struct dp_local_reply *out);

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
            .answer = answer_models,
        },
    [DP_ROUTE_HEALTH] =
        {
            .path = "/health",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/health",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = answer_health,
        },
    [DP_ROUTE_METRICS] =
        {
            .path = "/metrics",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/metrics",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = answer_metrics,
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

static void reply_json(struct dp_local_reply *out, int status, json_t *obj)
{
    out->status = status;
    out->content_type = "application/json";
    out->body = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (out->body == NULL) {
        out->status = 500;
        out->len = 0;
        return;
    }
    out->len = strlen(out->body);
}

static void answer_health(struct dp_loop *loop, struct dp_local_reply *out)
{
    bool draining = loop->draining;
    reply_json(out, draining ? 503 : 200,
               json_pack("{s:s}", "status", draining ? "draining" : "ok"));
}

static void answer_models(struct dp_loop *loop, struct dp_local_reply *out)
{
    struct dp_workers *v = &loop->workers;
    json_t *data = json_array();
    json_t *seen = json_object();
    for (size_t i = 0; data != NULL && seen != NULL && i < v->n; i++) {
        const struct shm_worker_info *w = &v->w[i];
        if (!w->healthy || w->draining || w->model[0] == '\0' ||
            json_object_get(seen, w->model) != NULL)
            continue;
        json_object_set_new(seen, w->model, json_true());
        json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id", w->model, "object",
                                              "model", "created", 0, "owned_by", "switchyard"));
    }
    json_decref(seen);
    reply_json(out, 200,
               data != NULL ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

static void answer_metrics(struct dp_loop *loop, struct dp_local_reply *out)
{
    if (dp_metrics_render(&loop->sh->metrics, loop->workers.w, loop->workers.n, &loop->sh->guards,
                          &out->body, &out->len) != 0) {
        out->body = NULL;
        return;
    }
    out->status = 200;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

void dp_routes_answer(struct dp_loop *loop, const struct dp_request *req,
                      struct dp_local_reply *out)
{
    memset(out, 0, sizeof(*out));
    dp_workers_refresh(&loop->workers);
    const struct dp_route_row *row = dp_route_row(req->route);
    if (row->answer != NULL)
        row->answer(loop, out);
    if (out->body != NULL)
        return;
    out->status = 500;
    out->content_type = "application/json";
    out->body = dp_error_body(500, "internal_error", "the router could not answer");
    out->len = out->body != NULL ? strlen(out->body) : 0;
}
