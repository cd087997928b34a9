/*
 * The routes the data plane answers itself, without a worker (the rows of
 * routes.h served DP_SERVE_LOCAL): GET /health (503 while the loop
 * drains), GET /v1/models (the union of the models of healthy,
 * non-draining workers, in OpenAI's list shape) and GET /metrics
 * (metrics.h). Kept apart from the route table because an answer reads the
 * loop (its registry copy, its drain state, the process's metrics) and the
 * table must not depend on the loop.
 *
 * Threading: the loop's thread only; reads the loop's registry copy.
 */
#ifndef SY_DATAPLANE_LOCAL_ANSWER_H
#define SY_DATAPLANE_LOCAL_ANSWER_H

#include <stddef.h>

struct dp_loop;
struct dp_request;

/* A local answer: status, a malloc'd body, its content type. */
struct dp_local_reply {
    int status;
    char *body; /* owned by the caller after the call; NULL only with status 500 */
    size_t len;
    const char *content_type;
};

/* Answers req's local route (its row's enum dp_answer), refreshing the
 * loop's registry copy first: a 500 with an error body if the route has no
 * answer or the answer failed. */
void dp_local_answer(struct dp_loop *loop, const struct dp_request *req,
                     struct dp_local_reply *out);

#endif
