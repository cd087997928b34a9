/*
 * The route table (see routes.h). The table is indexed by enum dp_route; a
 * value without a row would read as serve DP_SERVE_UNSET, which the unit
 * test catches. A local row names its answer (enum dp_answer); the answers
 * themselves are local_answer.c's, which needs the loop and this table
 * does not.
 */
#include "dataplane/core/routes.h"

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
    [DP_ROUTE_RESPONSES] =
        {
            .path = "/v1/responses",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/responses",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/responses",
            .body = DP_BODY_RESPONSES,
        },
    [DP_ROUTE_RESPONSES_GET] =
        {
            .path = "/v1/responses/",
            .methods = DP_METHODS_GET,
            .allow = "GET, HEAD",
            .label = "/v1/responses/{id}",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/responses/",
            .body = DP_BODY_ID,
            .id_suffix = "",
        },
    [DP_ROUTE_RESPONSES_CANCEL] =
        {
            .path = "/v1/responses/",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/responses/{id}/cancel",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/responses/",
            .body = DP_BODY_ID,
            .id_suffix = "/cancel",
        },
    [DP_ROUTE_MESSAGES] =
        {
            .path = "/v1/messages",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/messages",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/messages",
            .body = DP_BODY_MESSAGES,
            .anthropic_errors = true,
        },
    [DP_ROUTE_MESSAGES_COUNT] =
        {
            .path = "/v1/messages/count_tokens",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/messages/count_tokens",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/messages/count_tokens",
            .body = DP_BODY_MESSAGES,
            .anthropic_errors = true,
        },
    [DP_ROUTE_RERANK] =
        {
            .path = "/rerank",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/rerank",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/rerank",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_RERANK_V1] =
        {
            .path = "/v1/rerank",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/rerank",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/rerank",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_RERANK_V2] =
        {
            .path = "/v2/rerank",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v2/rerank",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v2/rerank",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_SCORE] =
        {
            .path = "/score",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/score",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/score",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_SCORE_V1] =
        {
            .path = "/v1/score",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/score",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/score",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_POOLING] =
        {
            .path = "/pooling",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/pooling",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/pooling",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_CLASSIFY] =
        {
            .path = "/classify",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/classify",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/classify",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_TOKENIZE] =
        {
            .path = "/tokenize",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/tokenize",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/tokenize",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_DETOKENIZE] =
        {
            .path = "/detokenize",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/detokenize",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/detokenize",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_PING] =
        {
            .path = "/ping",
            .methods = DP_METHODS_GET | DP_METHOD_POST,
            .allow = "GET, HEAD, POST",
            .label = "/ping",
            .serve = DP_SERVE_LOCAL,
            .body = DP_BODY_NONE,
            .answer = DP_ANSWER_HEALTH,
        },
    [DP_ROUTE_EMBED_V2] =
        {
            .path = "/v2/embed",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v2/embed",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v2/embed",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_INVOCATIONS] =
        {
            .path = "/invocations",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/invocations",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/invocations",
            .body = DP_BODY_INVOCATIONS,
        },
    [DP_ROUTE_CHAT_RENDER] =
        {
            .path = "/v1/chat/completions/render",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/chat/completions/render",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/chat/completions/render",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_COMPLETIONS_RENDER] =
        {
            .path = "/v1/completions/render",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/completions/render",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/completions/render",
            .body = DP_BODY_BY_LOAD,
        },
    [DP_ROUTE_MESSAGES_RENDER] =
        {
            .path = "/v1/messages/render",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/messages/render",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/messages/render",
            .body = DP_BODY_BY_LOAD,
            .anthropic_errors = true,
        },
    [DP_ROUTE_GENERATE] =
        {
            .path = "/inference/v1/generate",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/inference/v1/generate",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/inference/v1/generate",
            .body = DP_BODY_GENERATE,
        },
    [DP_ROUTE_TRANSCRIPTIONS] =
        {
            .path = "/v1/audio/transcriptions",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/audio/transcriptions",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/audio/transcriptions",
            .body = DP_BODY_FORM,
        },
    [DP_ROUTE_TRANSLATIONS] =
        {
            .path = "/v1/audio/translations",
            .methods = DP_METHOD_POST,
            .allow = "POST",
            .label = "/v1/audio/translations",
            .serve = DP_SERVE_PROXY,
            .upstream_path = "/v1/audio/translations",
            .body = DP_BODY_FORM,
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

/* path is row's prefix, one non-empty segment, then row's suffix. */
static bool dp_route_id_match(const struct dp_route_row *row, const char *path, const char **id,
                              size_t *id_len)
{
    size_t plen = strlen(row->path);
    if (strncmp(path, row->path, plen) != 0)
        return false;
    const char *seg = path + plen;
    size_t n = strcspn(seg, "/");
    if (n == 0 || strcmp(seg + n, row->id_suffix) != 0)
        return false;
    *id = seg;
    *id_len = n;
    return true;
}

enum dp_route dp_route_match(const char *path, const char **id, size_t *id_len)
{
    *id = NULL;
    *id_len = 0;
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++) {
        const struct dp_route_row *row = &dp_routes[r];
        if (row->path == NULL)
            continue;
        if (row->id_suffix != NULL ? dp_route_id_match(row, path, id, id_len)
                                   : strcmp(row->path, path) == 0)
            return (enum dp_route)r;
    }
    return DP_ROUTE_OTHER;
}

enum dp_route dp_route_find(const char *path)
{
    const char *id;
    size_t id_len;
    return dp_route_match(path, &id, &id_len);
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
