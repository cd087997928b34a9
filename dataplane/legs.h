/*
 * The legs of a request: what the forwarder asks, and nothing more, about
 * the plan a request follows. A plan is a sequence of legs, each run as
 * ordinary forwarder attempts (own worker, load guard, retries and
 * timeouts); a plain request is a one-leg plan, a prefill/decode request
 * (pd.h) a two-leg one, and plan.h chooses which a request follows. The
 * forwarder never names a plan: it reads the current leg's descriptor
 * (req->leg) to pick and start an attempt, and reports each transition of
 * the request to the leg's plan through dp_legs_next, which says what to
 * do next.
 *
 * A leg either relays its response to the client or collects it for its
 * plan (collects: the bytes go to dp_leg.collect, the client never sees
 * them), and the plan decides at the end of a collected response whether a
 * next leg runs or the client gets an answer.
 *
 * Descriptors are static and immutable; a request points at its current
 * one and each attempt at the one it ran, so an attempt of an earlier leg
 * still draining keeps its own. Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_LEGS_H
#define SY_DATAPLANE_LEGS_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/policy.h"

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

/* Starts req on the one-leg plan of a plain request (legs.c): sets
 * req->leg to its leg, which relays. The choice of plan is plan.h's. */
void dp_legs_begin_plain(struct dp_request *req);

/* Reports ev to req's plan; step carries the event's arguments and the
 * answer. To RETRY a plan answers CONTINUE (retry the same leg), NEXT
 * (req->leg is an earlier leg to run again, with a fresh attempt budget) or
 * FAIL (no retry). Before a plan began (dp_plan_begin) nothing happens:
 * DP_LEG_ACT_CONTINUE. */
enum dp_leg_action dp_legs_next(struct dp_request *req, enum dp_leg_event ev,
                                struct dp_leg_step *step);

#endif
