/*
 * The choice of a request's plan (see plan.h): prefill/decode when pd.c
 * says it applies, the Responses plan (resp_affinity.h: one leg that
 * reads the answer's id) on the Responses routes, else the plain one-leg
 * plan of legs.c.
 */
#include "dataplane/forward/plan.h"

#include "dataplane/forward/pd.h"
#include "dataplane/forward/resp_affinity.h"
#include "dataplane/types/request_types.h"

enum dp_leg_action dp_plan_begin(struct dp_request *req, struct dp_leg_step *step)
{
    if (dp_pd_applies(req->loop, req))
        return dp_pd_begin(req, step);
    if (dp_resp_applies(req)) {
        dp_resp_begin_plan(req);
        return DP_LEG_ACT_NEXT;
    }
    dp_legs_begin_plain(req);
    return DP_LEG_ACT_NEXT;
}
