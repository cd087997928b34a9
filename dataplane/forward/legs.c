/*
 * The leg interface (see legs.h) and the one-leg plan of a plain request,
 * defined here; the prefill/decode plan is pd.c's. Which plan a request
 * follows is chosen once, when forwarding begins, by plan.c; afterwards
 * every transition goes to the plan of the request's current leg.
 */
#include "dataplane/forward/legs.h"

#include "dataplane/core/loop.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/workers.h"

static struct pol_policy *legs_plain_policy(struct dp_loop *loop)
{
    return &loop->policy;
}

static void legs_plain_body(const struct dp_request *req, const char **body, size_t *len)
{
    *body = req->body.data != NULL ? req->body.data : "";
    *len = req->body.len;
}

/* A plain request has no transition of its own: its one leg relays. */
static enum dp_leg_action legs_plain_next(struct dp_request *req, enum dp_leg_event ev,
                                          struct dp_leg_step *step)
{
    (void)req;
    (void)ev;
    (void)step;
    return DP_LEG_ACT_CONTINUE;
}

static const struct dp_leg legs_plain = {
    .label = "",
    .collects = false,
    .relays_last_error = true,
    .is_eligible = dp_workers_is_eligible,
    .policy = legs_plain_policy,
    .body = legs_plain_body,
    .count_decision = dp_metrics_decision,
    .collect = NULL,
    .next = legs_plain_next,
};

void dp_legs_begin_plain(struct dp_request *req)
{
    req->leg = &legs_plain;
}

enum dp_leg_action dp_legs_next(struct dp_request *req, enum dp_leg_event ev,
                                struct dp_leg_step *step)
{
    if (req->leg == NULL)
        return DP_LEG_ACT_CONTINUE;
    return req->leg->next(req, ev, step);
}
