/*
 * Routes the dataplane answers itself: GET /health, GET /v1/models (the
 * union of the models of healthy, non-draining workers, in OpenAI's list
 * shape) and GET /metrics (metrics.h).
 *
 * Threading: the loop's thread; reads the loop's registry copy.
 */
#ifndef SY_DATAPLANE_ROUTES_H
#define SY_DATAPLANE_ROUTES_H

#include <stddef.h>

#include "dataplane/loop.h"

/* A local answer: status, a malloc'd body, its content type. */
struct dp_local_reply {
    int status;
    char *body; /* owned by the caller after the call; NULL only with status 500 */
    size_t len;
    const char *content_type;
};

/* Answers req's local route (health, models, metrics). */
void dp_routes_answer(struct dp_loop *loop, const struct dp_request *req,
                      struct dp_local_reply *out);

#endif
