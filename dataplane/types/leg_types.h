/*
 * The types of a request's legs (forward/legs.h says what a leg is and
 * runs them): the events a plan hears, the actions it answers, and the
 * immutable leg descriptor a request and each attempt point at. Types
 * only, so that the request's types and the observers (the journal, the
 * response-id tracker) can read a leg without depending on the forwarder.
 */
#ifndef SY_DATAPLANE_CORE_LEG_TYPES_H
#define SY_DATAPLANE_CORE_LEG_TYPES_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/types/policy_types.h"

struct dp_loop;
struct dp_metrics;
struct dp_request;
struct pol_policy;
struct shm_worker_info;

/* What the forwarder reports to the request's plan. */
enum dp_leg_event {
    DP_LEG_EV_UNSET = 0,
    DP_LEG_EV_RESPONSE,  /* a collecting leg's response headers arrived: forget earlier bytes */
    DP_LEG_EV_COLLECTED, /* a collecting leg's response ended (step: status, worker_id) */
    DP_LEG_EV_SENT,      /* relaying began and every body was sent: the plan's copies may go */
    DP_LEG_EV_DONE,      /* the relayed body reached its end */
    DP_LEG_EV_FAILED,    /* the request ends with an error answer of the router's */
    DP_LEG_EV_CUT,       /* the relayed body was cut (the worker failed or timed out) */
    DP_LEG_EV_ABORTED,   /* the client left */
    DP_LEG_EV_FREE,      /* the request dies: the plan frees its state */
    DP_LEG_EV_RETRY,     /* an attempt failed and may be retried (step: unreached) */
    DP_LEG_EV_COUNT,
};

/* What the forwarder does after a transition. */
enum dp_leg_action {
    DP_LEG_ACT_UNSET = 0,
    DP_LEG_ACT_CONTINUE, /* nothing new: carry on as before */
    DP_LEG_ACT_NEXT,     /* req->leg is a new leg: start its first attempt */
    DP_LEG_ACT_ANSWER,   /* answer the client with step->reply_status and step->reply_body */
    DP_LEG_ACT_FAIL,     /* RETRY: do not retry; answer with the last failure */
};

/* The arguments and results of a transition. */
struct dp_leg_step {
    long status;           /* in, COLLECTED: the response's HTTP status */
    const char *worker_id; /* in, COLLECTED: the worker that answered */
    bool unreached;        /* in, RETRY: the attempt provably never reached its worker */
    int reply_status;      /* out, ANSWER */
    char *reply_body;      /* out, ANSWER: malloc'd (caller owns), NULL = out of memory */
};

/* One leg of a plan: static, immutable. */
struct dp_leg {
    const char *label; /* "prefill ", "decode " or "": in messages ("no healthy %sworker") */
    bool collects;     /* its response goes to collect, not to the client */
    /* When no retry is left, a status in retry.on_status is relayed as the
     * worker sent it (its own message and error shape) instead of our 502. */
    bool relays_last_error;
    /* May w take this leg's next attempt? */
    bool (*is_eligible)(const struct shm_worker_info *w);
    /* The loop's policy that picks this leg's workers. */
    struct pol_policy *(*policy)(struct dp_loop *loop);
    /* What this leg's attempts POST (borrowed from the request). */
    void (*body)(const struct dp_request *req, const char **body, size_t *len);
    /* Counts a routing decision of this leg. */
    void (*count_decision)(struct dp_metrics *m, enum pol_decision decision);
    /* A collecting leg's response bytes (the plan bounds what it keeps). */
    void (*collect)(struct dp_request *req, const char *data, size_t len);
    /* Optional, a relaying leg: the bytes to relay for a chunk of the
     * response (*out, valid until the next call; the plan may hold some
     * back), computed without changing the plan's state; filter_commit
     * then says the relay took them. A chunk the relay could not take is
     * offered again later, so only a commit may change state. */
    void (*filter)(struct dp_request *req, const char *data, size_t len, const char **out,
                   size_t *out_len);
    void (*filter_commit)(struct dp_request *req, const char *data, size_t len);
    /* The plan's answer to a transition (see dp_legs_next). */
    enum dp_leg_action (*next)(struct dp_request *req, enum dp_leg_event ev,
                               struct dp_leg_step *step);
};

#endif
