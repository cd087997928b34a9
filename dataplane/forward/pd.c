/*
 * Prefill/decode legs (see pd.h and docs/pd.md): the plan's phases, its
 * legs' roles and policies, and its outcomes. The bodies it sends and the
 * answers it merges are pd_body.c's; the decode stream's usage rewriting
 * is pd_usage_filter.c's. A prefill response is collected into a buffer
 * bounded by DP_PD_RESP_MAX; one that does not fit is treated like one
 * without kv_transfer_params.
 */
#include "dataplane/forward/pd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "dataplane/forward/pd_body.h"
#include "dataplane/forward/pd_usage_filter.h"
#include "dataplane/http/errors.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/loop.h"
#include "dataplane/http/request.h"
#include "dataplane/core/routes.h"
#include "dataplane/core/relay.h"

/* ---- legs ------------------------------------------------------------------- */

int dp_pd_loop_init(struct dp_loop *loop)
{
    /* Main thread, before the loops run: every loop writes the same names. */
    struct dp_metrics *m = &loop->sh->metrics;
    m->pd_policy[DP_PD_PREFILL] = cfg_policy_name_str(loop->sh->cfg->policy.prefill.name);
    m->pd_policy[DP_PD_DECODE] = cfg_policy_name_str(loop->sh->cfg->policy.decode.name);
    struct cfg_policy pc = loop->sh->cfg->policy;
    pc.name = loop->sh->cfg->policy.prefill.name;
    int rc = pol_create(&pc, loop->sh->policies, &loop->pd.prefill);
    if (rc != 0)
        return rc;
    pc.name = loop->sh->cfg->policy.decode.name;
    return pol_create(&pc, loop->sh->policies, &loop->pd.decode);
}

void dp_pd_loop_fini(struct dp_loop *loop)
{
    pol_destroy(&loop->pd.prefill);
    pol_destroy(&loop->pd.decode);
}

bool dp_pd_applies(struct dp_loop *loop, const struct dp_request *req)
{
    if (!dp_route_row(req->route)->prefill_decode)
        return false;
    const struct dp_workers *v = &loop->workers;
    bool prefill = false, decode = false;
    for (size_t i = 0; i < v->n && !(prefill && decode); i++) {
        if (strcmp(v->w[i].model, req->model) != 0)
            continue;
        prefill = prefill || v->w[i].role == CFG_ROLE_PREFILL;
        decode = decode || v->w[i].role == CFG_ROLE_DECODE;
    }
    return prefill && decode;
}

/* ---- the two legs ------------------------------------------------------------ */

static bool pd_prefill_eligible(const struct shm_worker_info *w)
{
    return w->healthy && !w->draining && !w->sleeping && w->role == CFG_ROLE_PREFILL;
}

static bool pd_decode_eligible(const struct shm_worker_info *w)
{
    return w->healthy && !w->draining && !w->sleeping && w->role == CFG_ROLE_DECODE;
}

static struct pol_policy *pd_prefill_policy(struct dp_loop *loop)
{
    return &loop->pd.prefill;
}

static struct pol_policy *pd_decode_policy(struct dp_loop *loop)
{
    return &loop->pd.decode;
}

static void pd_prefill_leg_body(const struct dp_request *req, const char **body, size_t *len)
{
    *body = req->pd.prefill_body;
    *len = req->pd.prefill_len;
}

static void pd_decode_leg_body(const struct dp_request *req, const char **body, size_t *len)
{
    *body = req->pd.decode_body;
    *len = req->pd.decode_len;
}

static void pd_prefill_decision(struct dp_metrics *m, enum pol_decision decision)
{
    dp_metrics_pd_decision(m, DP_PD_PREFILL, decision);
}

static void pd_decode_decision(struct dp_metrics *m, enum pol_decision decision)
{
    dp_metrics_pd_decision(m, DP_PD_DECODE, decision);
}

/* Appends a prefill response's body bytes (bounded by DP_PD_RESP_MAX). */
static void pd_collect(struct dp_request *req, const char *data, size_t len)
{
    /* Past the cap, or out of memory, the buffer keeps its error: the
     * response is unusable (a fallback or a 502), never a crash. */
    (void)buf_append(&req->pd.resp, data, len);
}

static enum dp_leg_action pd_next(struct dp_request *req, enum dp_leg_event ev,
                                  struct dp_leg_step *step);
static void pd_filter(struct dp_request *req, const char *data, size_t len, const char **out,
                      size_t *out_len);
static void pd_filter_commit(struct dp_request *req, const char *data, size_t len);

static const struct dp_leg pd_prefill_leg = {
    .label = "prefill ",
    .collects = true,
    .is_eligible = pd_prefill_eligible,
    .policy = pd_prefill_policy,
    .body = pd_prefill_leg_body,
    .count_decision = pd_prefill_decision,
    .collect = pd_collect,
    .next = pd_next,
};

static const struct dp_leg pd_decode_leg = {
    .label = "decode ",
    .collects = false,
    .is_eligible = pd_decode_eligible,
    .policy = pd_decode_policy,
    .body = pd_decode_leg_body,
    .count_decision = pd_decode_decision,
    .collect = NULL,
    .filter = pd_filter,
    .filter_commit = pd_filter_commit,
    .next = pd_next,
};

static void pd_local_leg_body(const struct dp_request *req, const char **body, size_t *len)
{
    *body = req->body.data != NULL ? req->body.data : "";
    *len = req->body.len;
}

/* The client's body, unchanged, to a decode worker, which prefills it
 * itself: a request P/D cannot split in a fleet with no regular worker, and
 * the fallback when a prefill answer carries no usable params. */
static const struct dp_leg pd_local_leg = {
    .label = "decode ",
    .collects = false,
    .is_eligible = pd_decode_eligible,
    .policy = pd_decode_policy,
    .body = pd_local_leg_body,
    .count_decision = pd_decode_decision,
    .collect = NULL,
    .next = pd_next,
};

/* True when a regular worker of req's model is registered (healthy or not). */
static bool pd_has_regular(struct dp_loop *loop, const struct dp_request *req)
{
    const struct dp_workers *v = &loop->workers;
    for (size_t i = 0; i < v->n; i++)
        if (v->w[i].role == CFG_ROLE_REGULAR && strcmp(v->w[i].model, req->model) == 0)
            return true;
    return false;
}

enum dp_leg_action dp_pd_begin(struct dp_request *req, struct dp_leg_step *step)
{
    struct dp_pd_state *pd = &req->pd;
    buf_init(&pd->resp, DP_PD_RESP_MAX);
    dp_pd_filter_init(pd);
    int rc = dp_pd_prefill_body(req->body.data, req->body.len, &pd->prefill_body, &pd->prefill_len);
    if (rc == -EDOM) {
        /* Several prompts: not a P/D request. A regular worker takes it when
         * there is one, else a decode worker, as a plain request. */
        if (pd_has_regular(req->loop, req))
            dp_legs_begin_plain(req);
        else
            req->leg = &pd_local_leg;
        return DP_LEG_ACT_NEXT;
    }
    /* In the prefill phase first: a failure here still counts an outcome. */
    pd->phase = DP_PD_PREFILL;
    pd->phase_start_ms = proc_monotonic_ms();
    req->leg = &pd_prefill_leg;
    if (rc != 0) {
        step->reply_status = 500;
        step->reply_body = dp_error_body(500, "out_of_memory", "the router is out of memory");
        return DP_LEG_ACT_ANSWER;
    }
    return DP_LEG_ACT_NEXT;
}

/*
 * The prefill response is complete and 2xx: builds the decode body from it
 * and enters the decode phase. 0, or -EPROTO with err set when the response
 * carries no usable kv_transfer_params, or -ENOMEM.
 */
static int pd_start_decode(struct dp_request *req, const char *prefill_worker, char *err,
                           size_t err_len)
{
    struct dp_pd_state *pd = &req->pd;
    char why[DP_CAUSE_MAX];
    int rc;
    if (buf_error(&pd->resp) != 0) {
        snprintf(why, sizeof(why), "the prefill response is over %u bytes", DP_PD_RESP_MAX);
        rc = -EPROTO;
    } else {
        rc = dp_pd_decode_body(req->body.data, req->body.len, pd->resp.data, pd->resp.len,
                               &pd->decode_body, &pd->decode_len, why, sizeof(why));
    }
    if (rc == -EPROTO || rc == -EINVAL) {
        snprintf(err, err_len, "%s", rc == -EINVAL ? "the request body is not a JSON object" : why);
        return -EPROTO;
    }
    if (rc != 0)
        return rc;
    uint64_t now = proc_monotonic_ms();
    dp_metrics_pd_phase(&req->loop->sh->metrics, DP_PD_PREFILL, (now - pd->phase_start_ms) * 1000);
    snprintf(pd->prefill_worker, sizeof(pd->prefill_worker), "%s", prefill_worker);
    pd->phase = DP_PD_DECODE;
    pd->phase_start_ms = now;
    dp_pd_prefill_usage(pd->resp.data, pd->resp.len, &pd->usage);
    free(pd->prefill_answer);
    pd->prefill_answer = NULL;
    if (req->body.data != NULL &&
        memmem(req->body.data, req->body.len, "\"prompt_logprobs\"", 17) != NULL) {
        /* Kept for the decode answer, which has no prompt logits of its own. */
        pd->prefill_answer = buf_detach(&pd->resp, &pd->prefill_answer_len);
    }
    buf_fini(&pd->resp);
    req->leg = &pd_decode_leg;
    return 0;
}

/* The client's answer when a prefill leg answered status >= 300 (not
 * retried): the worker's body when it is an OpenAI error object, else an
 * error naming the worker and its status. A malloc'd body, or NULL. */
static char *pd_error_body(const struct dp_request *req, int status, const char *worker_id)
{
    const struct dp_pd_state *pd = &req->pd;
    if (buf_error(&pd->resp) == 0 && dp_pd_is_error_answer(pd->resp.data, pd->resp.len))
        return strdup(pd->resp.data);
    char msg[CFG_ID_MAX + 64];
    /* The worker's id is the operator's: it goes to the log, not here. */
    log_info("request %s: prefill worker %s answered HTTP %d", req->request_id, worker_id, status);
    snprintf(msg, sizeof(msg), "the prefill worker answered HTTP %d", status);
    return dp_error_body(status, "upstream_error", msg);
}

/* Records req's outcome and counts it; only the first call counts. */
static void pd_finish(struct dp_request *req, enum dp_pd_outcome outcome)
{
    struct dp_pd_state *pd = &req->pd;
    if (pd->phase == DP_PD_NONE || pd->outcome != DP_PD_OUT_UNSET)
        return;
    pd->outcome = outcome;
    struct dp_metrics *m = &req->loop->sh->metrics;
    dp_metrics_pd_outcome(m, outcome);
    if (outcome == DP_PD_OUT_OK && pd->phase == DP_PD_DECODE)
        dp_metrics_pd_phase(m, DP_PD_DECODE, (proc_monotonic_ms() - pd->phase_start_ms) * 1000);
}

/* No usable params: the decode phase runs the client's body as a plain
 * request on a decode worker (the local leg), counted as pd_fallback. */
static void pd_fallback(struct dp_request *req, const char *prefill_worker)
{
    struct dp_pd_state *pd = &req->pd;
    uint64_t now = proc_monotonic_ms();
    dp_metrics_pd_phase(&req->loop->sh->metrics, DP_PD_PREFILL, (now - pd->phase_start_ms) * 1000);
    pd_finish(req, DP_PD_OUT_FALLBACK);
    snprintf(pd->prefill_worker, sizeof(pd->prefill_worker), "%s", prefill_worker);
    pd->phase = DP_PD_DECODE;
    pd->phase_start_ms = now;
    buf_fini(&pd->resp);
    req->leg = &pd_local_leg;
}

/*
 * The prefill response ended (its transfer complete, its guard released):
 * an error status goes to the client; a 2xx starts the decode leg with the
 * kv_transfer_params it carries.
 */
static enum dp_leg_action pd_collected(struct dp_request *req, struct dp_leg_step *step)
{
    int status = (int)step->status;
    if (status < 200 || status >= 300) {
        step->reply_status = status;
        step->reply_body = pd_error_body(req, status, step->worker_id);
        return DP_LEG_ACT_ANSWER;
    }
    char err[DP_CAUSE_MAX + CFG_ID_MAX];
    int rc = pd_start_decode(req, step->worker_id, err, sizeof(err));
    if (rc == -EPROTO && req->loop->sh->cfg->policy.pd_fallback == CFG_PD_FALLBACK_LOCAL_PREFILL) {
        /* A format change costs speed, not availability: the decode
         * worker prefills the client's body itself. */
        log_warn("request %s: prefill worker %s: %s; sent to a decode worker to prefill locally",
                 req->request_id, step->worker_id, err);
        pd_fallback(req, step->worker_id);
        return DP_LEG_ACT_NEXT;
    }
    if (rc == -EPROTO) {
        log_warn("request %s: prefill worker %s: %s", req->request_id, step->worker_id, err);
        pd_finish(req, DP_PD_OUT_BAD_KV_PARAMS);
        step->reply_status = 502;
        step->reply_body = dp_error_body(502, "bad_kv_transfer_params", err);
        return DP_LEG_ACT_ANSWER;
    }
    if (rc != 0) {
        step->reply_status = 500;
        step->reply_body = dp_error_body(500, "out_of_memory", "the router is out of memory");
        return DP_LEG_ACT_ANSWER;
    }
    return DP_LEG_ACT_NEXT;
}

static void pd_filter(struct dp_request *req, const char *data, size_t len, const char **out,
                      size_t *out_len)
{
    dp_pd_filter(&req->pd, req->sse, data, len, out, out_len);
}

static void pd_filter_commit(struct dp_request *req, const char *data, size_t len)
{
    dp_pd_filter_commit(&req->pd, req->sse, data, len);
}

/*
 * The decode answer ended: a non-streamed one, still whole in the relay,
 * gets the prefill's usage (and prompt_logprobs when asked); a stream's
 * held-back partial line goes out as it is.
 */
static void pd_decode_done(struct dp_request *req)
{
    struct dp_pd_state *pd = &req->pd;
    if (req->leg != &pd_decode_leg)
        return;
    if (req->sse) {
        if (pd->line.len > 0)
            (void)dp_relay_append(&req->relay, pd->line.data, pd->line.len);
        buf_reset(&pd->line);
        return;
    }
    if (!dp_relay_is_whole(&req->relay) || (!pd->usage.known && pd->prefill_answer == NULL))
        return;
    size_t len = 0;
    unsigned char *whole = dp_relay_release(&req->relay, &len);
    if (whole == NULL)
        return;
    char *merged = NULL;
    size_t merged_len = 0;
    int rc = dp_pd_merge_answer((const char *)whole, len, &pd->usage, pd->prefill_answer,
                                pd->prefill_answer_len, &merged, &merged_len);
    /* Reopened whole; the merged answer, or the worker's when it cannot be. */
    if (dp_relay_open(&req->relay, true) == 0 &&
        (rc != 0 || dp_relay_append(&req->relay, merged, merged_len) != 0))
        (void)dp_relay_append(&req->relay, whole, len);
    free(merged);
    free(whole);
}

/* Frees what req->pd owns: its bodies once sent, everything when req dies. */
static void pd_free(struct dp_request *req, bool ev_free)
{
    struct dp_pd_state *pd = &req->pd;
    free(pd->prefill_body);
    free(pd->decode_body);
    buf_fini(&pd->resp);
    pd->prefill_body = pd->decode_body = NULL;
    if (ev_free) {
        dp_pd_filter_fini(pd);
        free(pd->prefill_answer);
        pd->prefill_answer = NULL;
    }
}

/*
 * A failed attempt may be retried. A decode attempt that may have reached
 * its worker must never be retried with the same params: that worker may
 * have read the prefill's blocks, or freed them by rejecting or aborting
 * the request, and NIXL reads are one-sided, so a second decode worker
 * would read whatever those blocks hold by then. Such a failure runs the
 * whole request again (a new prefill, new blocks), at most
 * retry.max_attempts prefills in all; the forwarder only asks while
 * nothing was sent to the client. A decode that provably never reached a
 * worker (connect failure), a prefill and the local fallback retry as
 * usual.
 */
static enum dp_leg_action pd_retry(struct dp_request *req, const struct dp_leg_step *step)
{
    struct dp_pd_state *pd = &req->pd;
    if (req->leg != &pd_decode_leg || step->unreached)
        return DP_LEG_ACT_CONTINUE;
    if (pd->reruns + 1 >= req->loop->sh->cfg->dataplane.retry.max_attempts ||
        pd->prefill_body == NULL)
        return DP_LEG_ACT_FAIL;
    pd->reruns++;
    free(pd->decode_body);
    pd->decode_body = NULL;
    pd->decode_len = 0;
    pd->phase = DP_PD_PREFILL;
    pd->phase_start_ms = proc_monotonic_ms();
    req->leg = &pd_prefill_leg;
    return DP_LEG_ACT_NEXT;
}

static enum dp_leg_action pd_next(struct dp_request *req, enum dp_leg_event ev,
                                  struct dp_leg_step *step)
{
    bool decode = req->pd.phase == DP_PD_DECODE;
    switch (ev) {
    case DP_LEG_EV_RETRY:
        return pd_retry(req, step);
    case DP_LEG_EV_RESPONSE:
        /* A new prefill response (another attempt's): forget the earlier one. */
        buf_reset(&req->pd.resp);
        break;
    case DP_LEG_EV_COLLECTED:
        return pd_collected(req, step);
    case DP_LEG_EV_SENT:
        pd_free(req, false);
        break;
    case DP_LEG_EV_FREE:
        pd_free(req, true);
        break;
    case DP_LEG_EV_DONE:
        pd_decode_done(req);
        pd_finish(req, DP_PD_OUT_OK);
        break;
    case DP_LEG_EV_FAILED:
        pd_finish(req, decode ? DP_PD_OUT_DECODE_ERROR : DP_PD_OUT_PREFILL_ERROR);
        break;
    case DP_LEG_EV_CUT:
        pd_finish(req, DP_PD_OUT_DECODE_ERROR);
        break;
    case DP_LEG_EV_ABORTED:
        pd_finish(req, decode ? DP_PD_OUT_ABORTED_DECODE : DP_PD_OUT_ABORTED_PREFILL);
        break;
    default:
        break;
    }
    return DP_LEG_ACT_CONTINUE;
}
