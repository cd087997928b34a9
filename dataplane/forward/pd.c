/*
 * Prefill/decode legs (see pd.h and docs/pd.md).
 *
 * Bodies are rewritten through jansson on the body's skeleton
 * (json_skeleton.h): parse the structure, change the few fields the
 * protocol names, dump it compact and put the long strings back as the
 * client sent them. Keys keep their order (jansson objects preserve
 * insertion order) and values their meaning; only the spelling of numbers,
 * short strings and whitespace may differ from the client's bytes, and a
 * 400 KB prompt is never decoded. A prefill response is collected into a buffer bounded by
 * DP_PD_RESP_MAX; one that does not fit is treated like one without
 * kv_transfer_params.
 */
#include "dataplane/forward/pd.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "dataplane/http/errors.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/loop.h"
#include "dataplane/http/request.h"
#include "dataplane/core/routes.h"

/* ---- bodies ------------------------------------------------------------------ */

static json_t *pd_load_object(const char *body, size_t len)
{
    json_error_t jerr;
    /* As the request parser: an escaped NUL is valid JSON (and is dumped
     * back escaped). */
    json_t *root = json_loadb(body != NULL ? body : "", len, JSON_ALLOW_NUL, &jerr);
    if (root != NULL && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

/*
 * Several prompts in one completions request (["a","b"], or token-id
 * batches [[1,2],[3]]): vLLM answers with the first prompt's params only, so
 * such a request cannot be disaggregated. One string, one token-id list or
 * a list of one prompt is a single prompt.
 */
static bool pd_is_batch(const json_t *root)
{
    const json_t *prompt = json_object_get(root, "prompt");
    if (!json_is_array(prompt) || json_array_size(prompt) < 2)
        return false;
    const json_t *first = json_array_get(prompt, 0);
    return json_is_string(first) || json_is_array(first);
}

int dp_pd_prefill_body(const char *body, size_t len, char **out, size_t *out_len)
{
    struct dp_skel_doc b;
    int rc = dp_skel_doc_open(&b, body, len);
    if (rc != 0)
        return rc;
    json_t *root = b.root;
    if (pd_is_batch(root)) {
        rc = -EDOM;
        goto out_decref;
    }
    rc = -ENOMEM;
    json_t *kv =
        json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1, "do_remote_prefill", 0,
                  "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
    /* set_new takes kv even when it fails: nothing to free on the error path. */
    if (kv == NULL || json_object_set_new(root, "kv_transfer_params", kv) != 0)
        goto out_decref;
    if (json_object_set_new(root, "max_tokens", json_integer(1)) != 0 ||
        (json_object_get(root, "max_completion_tokens") != NULL &&
         json_object_set_new(root, "max_completion_tokens", json_integer(1)) != 0) ||
        json_object_set_new(root, "stream", json_false()) != 0)
        goto out_decref;
    json_object_del(root, "stream_options");
    /* vLLM rejects min_tokens > max_tokens, and the prefill's max_tokens is 1. */
    json_object_del(root, "min_tokens");
    json_object_del(root, "min_completion_tokens");
    return dp_skel_doc_close(&b, out, out_len);
out_decref:
    dp_skel_doc_close(&b, NULL, NULL);
    return rc;
}

__attribute__((format(printf, 3, 4))) static int pd_bad(char *err, size_t err_len, const char *fmt,
                                                        ...)
{
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -EPROTO;
}

/*
 * The only facts the router needs of the prefill answer's params: an object
 * saying do_remote_prefill. Everything else (remote_block_ids, flat before
 * vLLM's March 2026 release and one list per KV-cache group since, engine,
 * host, port, request id, tp_size, fields a newer vLLM adds) is the two
 * workers' business and passes through verbatim. Push mode is the one shape
 * refused: its decode must run concurrently with the prefill, which this
 * two-leg plan cannot do (docs/pd.md).
 */
static int pd_check_params(const json_t *kv, char *err, size_t err_len)
{
    if (kv == NULL || json_is_null(kv))
        return pd_bad(err, err_len, "the prefill response has no kv_transfer_params");
    if (!json_is_object(kv))
        return pd_bad(err, err_len, "the prefill response's kv_transfer_params is not an object");
    if (!json_is_true(json_object_get(kv, "do_remote_prefill")))
        return pd_bad(err, err_len, "kv_transfer_params.do_remote_prefill is not true");
    const json_t *mode = json_object_get(kv, "transfer_mode");
    if (json_is_string(mode) && strcmp(json_string_value(mode), "push") == 0)
        return pd_bad(err, err_len,
                      "kv_transfer_params asks for push mode, which is not supported");
    const json_t *ids = json_object_get(kv, "remote_block_ids");
    if (ids == NULL || json_is_null(ids))
        return pd_bad(err, err_len,
                      "kv_transfer_params has no remote_block_ids (push mode is not supported)");
    return 0;
}

int dp_pd_decode_body(const char *body, size_t len, const char *resp, size_t resp_len, char **out,
                      size_t *out_len, char *err, size_t err_len)
{
    json_t *answer = pd_load_object(resp, resp_len);
    if (answer == NULL)
        return pd_bad(err, err_len, "the prefill response is not a JSON object");
    json_t *kv = json_object_get(answer, "kv_transfer_params");
    int rc = pd_check_params(kv, err, err_len);
    if (rc != 0)
        goto out_answer;
    struct dp_skel_doc b;
    rc = dp_skel_doc_open(&b, body, len);
    if (rc != 0)
        goto out_answer;
    if (json_object_set(b.root, "kv_transfer_params", kv) == 0) {
        rc = dp_skel_doc_close(&b, out, out_len);
    } else {
        dp_skel_doc_close(&b, NULL, NULL);
        rc = -ENOMEM;
    }
out_answer:
    json_decref(answer);
    return rc;
}

/* ---- usage -------------------------------------------------------------------- */

void dp_pd_prefill_usage(const char *resp, size_t len, struct dp_pd_usage *u)
{
    memset(u, 0, sizeof(*u));
    json_t *answer = pd_load_object(resp, len);
    json_t *usage = json_object_get(answer, "usage");
    json_t *prompt = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(prompt)) {
        u->known = true;
        u->prompt_tokens = json_integer_value(prompt);
        json_t *cached =
            json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(cached)) {
            u->cached_known = true;
            u->cached_tokens = json_integer_value(cached);
        }
    }
    json_decref(answer);
}

/* Rewrites a usage object from the prefill's. True when it changed. */
static bool pd_fix_usage(json_t *usage, const struct dp_pd_usage *u)
{
    if (!json_is_object(usage) || !u->known)
        return false;
    json_t *completion = json_object_get(usage, "completion_tokens");
    json_int_t c = json_is_integer(completion) ? json_integer_value(completion) : 0;
    json_object_set_new(usage, "prompt_tokens", json_integer(u->prompt_tokens));
    json_object_set_new(usage, "total_tokens", json_integer(u->prompt_tokens + c));
    json_t *details = json_object_get(usage, "prompt_tokens_details");
    if (u->cached_known) {
        if (!json_is_object(details)) {
            details = json_object();
            json_object_set_new(usage, "prompt_tokens_details", details);
        }
        json_object_set_new(details, "cached_tokens", json_integer(u->cached_tokens));
    } else if (json_is_object(details)) {
        /* The decode's count is the pulled KV, not a cache hit: say nothing. */
        json_object_set_new(usage, "prompt_tokens_details", json_null());
    }
    return true;
}

/* Copies prompt_logprobs of from into to where to has none. True when it changed. */
static bool pd_take_logprobs(json_t *to, const json_t *from)
{
    bool changed = false;
    json_t *top = json_object_get(from, "prompt_logprobs");
    json_t *mine = json_object_get(to, "prompt_logprobs");
    if (top != NULL && !json_is_null(top) && (mine == NULL || json_is_null(mine))) {
        json_object_set(to, "prompt_logprobs", top);
        changed = true;
    }
    json_t *tc = json_object_get(to, "choices"), *fc = json_object_get(from, "choices");
    for (size_t i = 0; i < json_array_size(tc) && i < json_array_size(fc); i++) {
        json_t *t = json_array_get(tc, i);
        json_t *f = json_object_get(json_array_get(fc, i), "prompt_logprobs");
        json_t *m = json_object_get(t, "prompt_logprobs");
        if (json_is_object(t) && f != NULL && !json_is_null(f) && (m == NULL || json_is_null(m))) {
            json_object_set(t, "prompt_logprobs", f);
            changed = true;
        }
    }
    return changed;
}

static int pd_dump(json_t *root, char **out, size_t *out_len)
{
    char *text = json_dumps(root, JSON_COMPACT);
    if (text == NULL)
        return -ENOMEM;
    *out = text;
    *out_len = strlen(text);
    return 0;
}

int dp_pd_merge_answer(const char *body, size_t len, const struct dp_pd_usage *u,
                       const char *prefill, size_t prefill_len, char **out, size_t *out_len)
{
    json_t *root = pd_load_object(body, len);
    if (root == NULL)
        return -EINVAL;
    bool changed = pd_fix_usage(json_object_get(root, "usage"), u);
    if (prefill != NULL) {
        json_t *from = pd_load_object(prefill, prefill_len);
        if (from != NULL)
            changed = pd_take_logprobs(root, from) || changed;
        json_decref(from);
    }
    int rc = changed ? pd_dump(root, out, out_len) : -ENOENT;
    json_decref(root);
    return rc;
}

int dp_pd_merge_line(const char *line, size_t len, const struct dp_pd_usage *u, char **out,
                     size_t *out_len)
{
    static const char prefix[] = "data: ";
    if (len < sizeof(prefix) - 1 || memcmp(line, prefix, sizeof(prefix) - 1) != 0)
        return -EINVAL;
    json_t *root = pd_load_object(line + sizeof(prefix) - 1, len - (sizeof(prefix) - 1));
    if (root == NULL)
        return -EINVAL;
    int rc = -ENOENT;
    if (pd_fix_usage(json_object_get(root, "usage"), u)) {
        char *text = json_dumps(root, JSON_COMPACT);
        size_t n = text != NULL ? strlen(text) : 0;
        *out = text != NULL ? malloc(sizeof(prefix) - 1 + n + 1) : NULL;
        if (*out != NULL) {
            memcpy(*out, prefix, sizeof(prefix) - 1);
            memcpy(*out + sizeof(prefix) - 1, text, n + 1);
            *out_len = sizeof(prefix) - 1 + n;
            rc = 0;
        } else {
            rc = -ENOMEM;
        }
        free(text);
    }
    json_decref(root);
    return rc;
}

/* ---- legs ------------------------------------------------------------------- */

int dp_pd_loop_init(struct dp_loop *loop)
{
    /* Main thread, before the loops run: every loop writes the same names. */
    struct dp_metrics *m = &loop->sh->metrics;
    m->pd_policy[DP_PD_PREFILL] = cfg_policy_name_str(loop->sh->cfg->policy.prefill.name);
    m->pd_policy[DP_PD_DECODE] = cfg_policy_name_str(loop->sh->cfg->policy.decode.name);
    struct cfg_policy pc = loop->sh->cfg->policy;
    pc.name = loop->sh->cfg->policy.prefill.name;
    int rc = pol_create(&pc, &loop->pd.prefill);
    if (rc != 0)
        return rc;
    pc.name = loop->sh->cfg->policy.decode.name;
    return pol_create(&pc, &loop->pd.decode);
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
    return w->healthy && !w->draining && w->role == CFG_ROLE_PREFILL;
}

static bool pd_decode_eligible(const struct shm_worker_info *w)
{
    return w->healthy && !w->draining && w->role == CFG_ROLE_DECODE;
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
    json_t *answer = buf_error(&pd->resp) != 0 ? NULL : pd_load_object(pd->resp.data, pd->resp.len);
    bool openai = json_is_object(json_object_get(answer, "error"));
    json_decref(answer);
    if (openai)
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

/* ---- the decode answer's usage ---------------------------------------------------- */

#define PD_LINE_MAX (16u << 10) /* longest SSE line held back to rewrite */
#define PD_USAGE    "\"usage\":{"

/* What pd_filter_commit does: nothing; hold the whole chunk; hold the
 * chunk's partial last line; drop what was held and stop rewriting. */
enum { PD_KEEP_NONE, PD_KEEP_ALL, PD_KEEP_TAIL, PD_KEEP_GIVE_UP };

static int pd_out_add(struct dp_pd_state *pd, const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (pd->fout_len + n > pd->fout_cap) {
        size_t cap = pd->fout_cap ? pd->fout_cap : 4096;
        while (cap < pd->fout_len + n)
            cap *= 2;
        char *nb = realloc(pd->fout, cap);
        if (nb == NULL)
            return -ENOMEM;
        pd->fout = nb;
        pd->fout_cap = cap;
    }
    memcpy(pd->fout + pd->fout_len, p, n);
    pd->fout_len += n;
    return 0;
}

/* One whole line (n bytes, its '\n' included), its usage rewritten. */
static int pd_out_line(struct dp_pd_state *pd, const char *line, size_t n)
{
    if (memmem(line, n, PD_USAGE, sizeof(PD_USAGE) - 1) != NULL) {
        size_t body = n - 1;
        if (body > 0 && line[body - 1] == '\r')
            body--;
        char *o = NULL;
        size_t ol = 0;
        if (dp_pd_merge_line(line, body, &pd->usage, &o, &ol) == 0) {
            int rc = pd_out_add(pd, o, ol);
            free(o);
            return rc == 0 ? pd_out_add(pd, line + body, n - body) : rc;
        }
    }
    return pd_out_add(pd, line, n);
}

/*
 * The decode leg's relay filter: a stream's usage chunk gets the prefill's
 * prompt and cached tokens. Lines are rewritten whole, so a partial last
 * line is held back until its end arrives (at most PD_LINE_MAX bytes; a
 * longer one, never a usage chunk of vLLM's, ends the rewriting).
 */
void dp_pd_filter(struct dp_pd_state *pd, bool sse, const char *data, size_t len, const char **out,
                  size_t *out_len)
{
    *out = data;
    *out_len = len;
    pd->keep = PD_KEEP_NONE;
    if (!sse || !pd->usage.known || pd->no_rewrite || len == 0)
        return;
    const char *last = memrchr(data, '\n', len);
    if (pd->line_len == 0 && last == data + len - 1 &&
        memmem(data, len, PD_USAGE, sizeof(PD_USAGE) - 1) == NULL)
        return; /* whole lines, no usage: as they are */
    pd->fout_len = 0;
    if (last == NULL && pd->line_len + len <= PD_LINE_MAX) {
        pd->keep = PD_KEEP_ALL; /* all of it held back */
        *out_len = 0;
        return;
    }
    if (last == NULL) {
        /* Too long to hold: what was held, then the rest as it comes. */
        if (pd_out_add(pd, pd->line, pd->line_len) != 0 || pd_out_add(pd, data, len) != 0)
            return;
        pd->keep = PD_KEEP_GIVE_UP;
        *out = pd->fout;
        *out_len = pd->fout_len;
        return;
    }
    size_t upto = (size_t)(last - data) + 1;
    const char *nl = memchr(data, '\n', upto);
    size_t first = (size_t)(nl - data) + 1;
    int rc = 0;
    if (pd->line_len > 0) {
        char *joined = malloc(pd->line_len + first);
        if (joined == NULL)
            return;
        memcpy(joined, pd->line, pd->line_len);
        memcpy(joined + pd->line_len, data, first);
        rc = pd_out_line(pd, joined, pd->line_len + first);
        free(joined);
    } else {
        rc = pd_out_line(pd, data, first);
    }
    for (const char *p = data + first; rc == 0 && p < data + upto;) {
        nl = memchr(p, '\n', (size_t)(data + upto - p));
        rc = pd_out_line(pd, p, (size_t)(nl - p) + 1);
        p = nl + 1;
    }
    if (rc != 0 || len - upto > PD_LINE_MAX) {
        /* Out of memory, or a tail too long to hold: relay as is. */
        pd->fout_len = 0;
        if (pd_out_add(pd, pd->line, pd->line_len) != 0 || pd_out_add(pd, data, len) != 0)
            return;
        *out = pd->fout;
        *out_len = pd->fout_len;
        pd->keep = PD_KEEP_GIVE_UP;
        return;
    }
    pd->keep = PD_KEEP_TAIL;
    *out = pd->fout;
    *out_len = pd->fout_len;
}

void dp_pd_filter_commit(struct dp_pd_state *pd, bool sse, const char *data, size_t len)
{
    if (!sse || !pd->usage.known || pd->no_rewrite || len == 0)
        return;
    if (pd->keep == PD_KEEP_NONE)
        return;
    if (pd->keep == PD_KEEP_GIVE_UP) {
        pd->line_len = 0;
        pd->no_rewrite = true;
        return;
    }
    const char *last = memrchr(data, '\n', len);
    size_t from = pd->keep == PD_KEEP_ALL ? 0 : (size_t)(last - data) + 1;
    if (pd->keep == PD_KEEP_TAIL)
        pd->line_len = 0;
    size_t n = len - from;
    if (n == 0)
        return;
    if (pd->line_len + n > pd->line_cap) {
        char *nb = realloc(pd->line, PD_LINE_MAX);
        if (nb == NULL) {
            pd->no_rewrite = true; /* the held bytes are lost with the rewriting: rare */
            return;
        }
        pd->line = nb;
        pd->line_cap = PD_LINE_MAX;
    }
    memcpy(pd->line + pd->line_len, data + from, n);
    pd->line_len += n;
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

/* Frees the rewriting's buffers (and the kept prefill answer). */
void dp_pd_filter_fini(struct dp_pd_state *pd)
{
    free(pd->prefill_answer);
    free(pd->line);
    free(pd->fout);
    pd->prefill_answer = pd->line = pd->fout = NULL;
    pd->line_len = pd->line_cap = pd->fout_len = pd->fout_cap = 0;
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
        if (pd->line_len > 0)
            (void)dp_relay_append(&req->relay, pd->line, pd->line_len);
        pd->line_len = 0;
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
    if (ev_free)
        dp_pd_filter_fini(pd);
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
