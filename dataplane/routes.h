/*
 * The data plane's routes: one table, one row per route, holding
 * everything the data plane knows about it: its path and allowed methods,
 * the Allow header of its 405, its label in switchyard_requests_total,
 * whether it is proxied (and to which upstream path, with the body parsed
 * for what) or answered here (and by which function), and whether it may
 * run as prefill/decode legs. The listener, the request parser, the
 * forwarder, pd and the metrics read the row; none of them names a route.
 * Adding a route is an enum dp_route value (types.h: the metrics arrays are
 * sized by it) and one row, plus a body parser in request.c if its body is a
 * new shape.
 *
 * The routes answered here: GET /health, GET /v1/models (the union of the
 * models of healthy, non-draining workers, in OpenAI's list shape) and
 * GET /metrics (metrics.h).
 *
 * Threading: the table is constant, read by any thread; dp_routes_answer
 * runs on the loop's thread and reads the loop's registry copy.
 */
#ifndef SY_DATAPLANE_ROUTES_H
#define SY_DATAPLANE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/types.h"

struct dp_loop;
struct dp_request;

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
    DP_BODY_COUNT,
};

/* A local answer: status, a malloc'd body, its content type. */
struct dp_local_reply {
    int status;
    char *body; /* owned by the caller after the call; NULL only with status 500 */
    size_t len;
    const char *content_type;
};

/* Fills out for a local route; leaves out->body NULL when it cannot (the
 * caller then answers 500). */
typedef void (*dp_local_answer_fn)(struct dp_loop *loop, struct dp_local_reply *out);

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
    dp_local_answer_fn answer; /* LOCAL: builds the answer */
};

/* The row of route; an unset or out-of-range value gets the not-found row
 * (DP_ROUTE_OTHER). Never NULL. */
const struct dp_route_row *dp_route_row(enum dp_route route);

/* The route whose path is exactly path (no query string), or DP_ROUTE_OTHER. */
enum dp_route dp_route_find(const char *path);

/* True when method (e.g. "GET") is one of route's methods. True for the
 * not-found route, whose answer is 404 whatever the method. */
bool dp_route_allows(enum dp_route route, const char *method);

/* Answers req's local route (health, models, metrics): a 500 with an error
 * body if the route has no answer or the answer failed. */
void dp_routes_answer(struct dp_loop *loop, const struct dp_request *req,
                      struct dp_local_reply *out);

#endif
