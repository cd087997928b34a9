/*
 * The routes answered by the data plane itself (see local_answer.h).
 * Bodies are built with jansson; /metrics is rendered by metrics.c from the
 * loop's registry copy, refreshed before every answer.
 */
#include "dataplane/http/local_answer.h"

#include <jansson.h>
#include <stdatomic.h>
#include <string.h>

#include "dataplane/http/errors.h"
#include "dataplane/core/loop.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/routes.h"
#include "dataplane/core/workers.h"

/* Fills out; leaves out->body NULL when it cannot (the caller then answers 500). */
typedef void (*local_answer_fn)(struct dp_loop *loop, struct dp_local_reply *out);

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

static void local_health(struct dp_loop *loop, struct dp_local_reply *out)
{
    bool draining = loop->draining;
    reply_json(out, draining ? 503 : 200,
               json_pack("{s:s}", "status", draining ? "draining" : "ok"));
}

/* Adds name to the model list unless it is there already. */
static void models_add(json_t *data, json_t *seen, const char *name, size_t len)
{
    char buf[SHM_ALIASES_MAX];
    if (len == 0 || len >= sizeof(buf))
        return;
    memcpy(buf, name, len);
    buf[len] = '\0';
    if (json_object_get(seen, buf) != NULL)
        return;
    json_object_set_new(seen, buf, json_true());
    json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id", buf, "object", "model",
                                          "created", 0, "owned_by", "switchyard"));
}

/* The union of the fleet's model names: each worker's model and aliases. */
static void local_models(struct dp_loop *loop, struct dp_local_reply *out)
{
    struct dp_workers *v = &loop->workers;
    json_t *data = json_array();
    json_t *seen = json_object();
    for (size_t i = 0; data != NULL && seen != NULL && i < v->n; i++) {
        const struct shm_worker_info *w = &v->w[i];
        if (!w->healthy || w->draining || w->sleeping || w->model[0] == '\0')
            continue;
        models_add(data, seen, w->model, strlen(w->model));
        for (const char *p = w->aliases; *p != '\0';) {
            const char *end = strchr(p, '\n');
            size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
            models_add(data, seen, p, n);
            if (end == NULL)
                break;
            p = end + 1;
        }
    }
    json_decref(seen);
    reply_json(out, 200,
               data != NULL ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

static void local_metrics(struct dp_loop *loop, struct dp_local_reply *out)
{
    if (dp_metrics_render(&loop->sh->metrics, loop->workers.w, loop->workers.n, &loop->sh->guards,
                          &out->body, &out->len) != 0) {
        out->body = NULL;
        return;
    }
    out->status = 200;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* Each local answer, by the name its route's row gives it. */
static const local_answer_fn local_answers[DP_ANSWER_COUNT] = {
    [DP_ANSWER_HEALTH] = local_health,
    [DP_ANSWER_MODELS] = local_models,
    [DP_ANSWER_METRICS] = local_metrics,
};

void dp_local_answer(struct dp_loop *loop, const struct dp_request *req, struct dp_local_reply *out)
{
    memset(out, 0, sizeof(*out));
    dp_workers_refresh(&loop->workers);
    const struct dp_route_row *row = dp_route_row(req->route);
    if (row->answer > DP_ANSWER_UNSET && row->answer < DP_ANSWER_COUNT &&
        local_answers[row->answer] != NULL)
        local_answers[row->answer](loop, out);
    if (out->body != NULL)
        return;
    out->status = 500;
    out->content_type = "application/json";
    out->body = dp_error_body(500, "internal_error", "the router could not answer");
    out->len = out->body != NULL ? strlen(out->body) : 0;
}
