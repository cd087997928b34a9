/*
 * The choice of a request's plan (legs.h): the prefill/decode plan (pd.h)
 * when the request and the registry call for it, else the one-leg plan of
 * a plain request. Made once, when forwarding begins. Kept apart from the
 * leg interface so that the plans, which implement that interface, and
 * the interface itself do not depend on each other; this module is the one
 * that knows every plan.
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_PLAN_H
#define SY_DATAPLANE_PLAN_H

#include "dataplane/forward/legs.h"

struct dp_request;

/*
 * The request is valid and ready to forward: chooses its plan and sets
 * req->leg to the plan's first leg. Returns DP_LEG_ACT_NEXT (start it) or
 * DP_LEG_ACT_ANSWER (the plan could not start: step says the answer).
 */
enum dp_leg_action dp_plan_begin(struct dp_request *req, struct dp_leg_step *step);

#endif
