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

#include "dataplane/types/leg_types.h"

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
