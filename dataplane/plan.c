/*
 * The choice of a request's plan (see plan.h): prefill/decode when pd.c
 * says it applies, else the plain one-leg plan of legs.c.
 */
#include "dataplane/plan.h"

#include "dataplane/pd.h"
#include "dataplane/types.h"

enum dp_leg_action dp_plan_begin(struct dp_request *req, struct dp_leg_step *step)
{
    if (dp_pd_applies(req->loop, req))
        return dp_pd_begin(req, step);
    dp_legs_begin_plain(req);
    return DP_LEG_ACT_NEXT;
}
