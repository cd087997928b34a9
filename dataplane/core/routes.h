/*
 * The data plane's routes: one table, one row per route, holding
 * everything the data plane knows about it: its path and allowed methods,
 * the Allow header of its 405, its label in switchyard_requests_total,
 * whether it is proxied (and to which upstream path, with the body parsed
 * for what) or answered by the data plane itself (and with which answer,
 * local_answer.h), and whether it may run as prefill/decode legs. The
 * listener, the request parser, the forwarder, pd and the metrics read the
 * row; none of them names a route. Adding a route is an enum dp_route
 * value (types.h: the metrics arrays are sized by it) and one row, plus a
 * body parser in request.c if its body is a new shape, or an answer in
 * local_answer.c if it is answered locally.
 *
 * The table is pure data: it depends on no loop state, so every module
 * (and the unit test) can read it.
 *
 * Threading: the table is constant, read by any thread.
 */
#ifndef SY_DATAPLANE_ROUTES_H
#define SY_DATAPLANE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/types/request_types.h"

/* Request methods a route allows, as bits. */
#define DP_METHOD_GET  0x1u
#define DP_METHOD_HEAD 0x2u
#define DP_METHOD_POST 0x4u

/* How a route is served. */
enum dp_serve {
    DP_SERVE_UNSET = 0,
    DP_SERVE_PROXY,     /* forwarded to a worker at the row's upstream_path */
    DP_SERVE_LOCAL,     /* answered by the row's answer function */
    DP_SERVE_NOT_FOUND, /* 404 whatever the method: the row of every unknown path */
};

/* What a proxied route's body is parsed for (request.c has a parser per
 * shape). Every shape yields model, stream and user; the routing text
 * (policy.h) depends on the shape. */
enum dp_body {
    DP_BODY_UNSET = 0,
    DP_BODY_NONE,       /* not read: answered locally, or 404 */
    DP_BODY_CHAT,       /* the chat messages are the routing text */
    DP_BODY_COMPLETION, /* the prompt (a string or strings) is the routing text */
    /* Chat-style embeddings' messages are the routing text; "input" is not
     * (it never was: embeddings are routed by load). */
    DP_BODY_EMBEDDINGS,
    /* Responses: instructions then input (a string or items) are the
     * routing text; previous_response_id is kept (resp_affinity.h). */
    DP_BODY_RESPONSES,
    /* Anthropic Messages: system then messages are the routing text. */
    DP_BODY_MESSAGES,
    /* Rerank, score, pooling, tokenize: model and stream only, routed by load. */
    DP_BODY_BY_LOAD,
    /* Not read: the request names its object by the id in its path
     * (GET /v1/responses/{id}); no model is needed. */
    DP_BODY_ID,
    /* SageMaker's /invocations: vLLM tries its request types in order and
     * serves the first that validates (chat, completion, then pooling
     * ones); the parser does the same by the fields each requires
     * (messages, prompt) and parses the body as that shape, else by load. */
    DP_BODY_INVOCATIONS,
    /* Token in, token out (/inference/v1/generate): token_ids are the
     * routing text, as a completion's token-id prompt is. */
    DP_BODY_GENERATE,
    /* multipart/form-data (audio uploads): model and stream are form
     * fields, read as the upload arrives (form.h); the bytes go on as
     * they came. */
    DP_BODY_FORM,
    DP_BODY_COUNT,
};

/* Which local answer a DP_SERVE_LOCAL route gets (local_answer.h builds it). */
enum dp_answer {
    DP_ANSWER_UNSET = 0, /* not answered locally */
    DP_ANSWER_HEALTH,    /* {"status": "ok"}, or 503 "draining" */
    DP_ANSWER_MODELS,    /* the models of healthy, non-draining workers */
    DP_ANSWER_METRICS,   /* the Prometheus exposition (metrics.h) */
    DP_ANSWER_COUNT,
};

/* One route. The rows are static and constant. */
struct dp_route_row {
    const char *path;  /* matched exactly; NULL in the not-found row */
    unsigned methods;  /* DP_METHOD_* bits */
    const char *allow; /* Allow header of a 405 (the methods, spelled out); NULL if none */
    const char *label; /* route label of switchyard_requests_total */
    enum dp_serve serve;
    const char *upstream_path; /* PROXY: the worker's path (also the policy's path) */
    enum dp_body body;         /* PROXY: what the body is parsed for */
    bool prefill_decode;       /* PROXY: may run as prefill and decode legs (pd.h) */
    enum dp_answer answer;     /* LOCAL: which answer (local_answer.h) */
    /* Non-NULL: path is a prefix followed by one id segment (no '/') and
     * then this suffix ("" or "/cancel"); the worker's path is
     * upstream_path + id + suffix, with the client's query string. */
    const char *id_suffix;
    /* Errors in Anthropic's shape ({"type":"error","error":{...}}), the
     * router's own included; else OpenAI's. */
    bool anthropic_errors;
};

/* The row of route; an unset or out-of-range value gets the not-found row
 * (DP_ROUTE_OTHER). Never NULL. */
const struct dp_route_row *dp_route_row(enum dp_route route);

/* The route whose path is exactly path (no query string), or DP_ROUTE_OTHER. */
enum dp_route dp_route_find(const char *path);

/* dp_route_find, and for a route with an id segment (id_suffix) where the
 * id starts in path and its length; *id = NULL, *id_len = 0 otherwise. */
enum dp_route dp_route_match(const char *path, const char **id, size_t *id_len);

/* True when method (e.g. "GET") is one of route's methods. True for the
 * not-found route, whose answer is 404 whatever the method. */
bool dp_route_allows(enum dp_route route, const char *method);

#endif
