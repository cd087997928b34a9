/*
 * Local routes (see routes.h). Bodies are built with jansson; /metrics is
 * rendered by metrics.c from the loop's registry copy.
 */
#include "dataplane/routes.h"

#include <jansson.h>
#include <stdatomic.h>
#include <string.h>

#include "dataplane/errors.h"

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

void dp_routes_answer(struct dp_loop *loop, const struct dp_request *req,
                      struct dp_local_reply *out)
{
    memset(out, 0, sizeof(*out));
    dp_workers_refresh(&loop->workers);
    switch (req->route) {
    case DP_ROUTE_HEALTH: {
        bool draining = loop->draining;
        reply_json(out, draining ? 503 : 200,
                   json_pack("{s:s}", "status", draining ? "draining" : "ok"));
        return;
    }
    case DP_ROUTE_MODELS:
        answer_models(loop, out);
        return;
    case DP_ROUTE_METRICS:
        out->content_type = "text/plain; version=0.0.4; charset=utf-8";
        if (dp_metrics_render(&loop->sh->metrics, loop->workers.w, loop->workers.n,
                              &loop->sh->guards, &out->body, &out->len) == 0) {
            out->status = 200;
            return;
        }
        break;
    default:
        break;
    }
    out->status = 500;
    out->content_type = "application/json";
    out->body = dp_error_body(500, "internal_error", "the router could not answer");
    out->len = out->body != NULL ? strlen(out->body) : 0;
}
