/*
 * Prefill/decode disaggregation with vLLM's NixlConnector protocol
 * (docs/pd.md). When the fleet of a request's model has prefill and decode
 * workers, a chat or completions request runs in two legs, each an ordinary
 * forwarder attempt (with its own load guard, retries and timeouts):
 *
 *   prefill: the client's body rewritten (max_tokens 1, stream false,
 *            kv_transfer_params asking for a remote decode), sent to a
 *            worker of role prefill picked by policy.prefill; its response
 *            is collected by the router, never relayed;
 *   decode:  the client's body plus the kv_transfer_params the prefill
 *            returned, sent to a worker of role decode picked by
 *            policy.decode; its response is relayed to the client.
 *
 * This module owns the rewriting of bodies (pure functions, unit-tested),
 * the legs' choice of role and policy, the phase transitions and the P/D
 * metrics. The forwarder (forwarder.c) runs the attempts and calls in here
 * at its few P/D hooks.
 *
 * Accounting: the prefill guard is released when the prefill response is
 * complete or its transfer aborted, before any decode starts; the decode
 * guard is a relayed attempt's guard, held to the end of its body. A
 * request counts exactly one outcome (dp_pd_finish).
 *
 * Threading: the loop's thread only, except the pure body functions (any
 * thread).
 */
#ifndef SY_DATAPLANE_PD_H
#define SY_DATAPLANE_PD_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/loop.h"

#define DP_PD_RESP_MAX (4u << 20) /* largest prefill response kept */

/* ---- bodies (pure) --------------------------------------------------------- */

/*
 * The prefill leg's body from the client's: max_tokens 1, max_completion_tokens
 * 1 when present, stream false, stream_options removed, kv_transfer_params
 * {do_remote_decode: true, do_remote_prefill: false, remote_*: null}.
 * Returns 0 and a malloc'd NUL-terminated body in *out (caller frees),
 * -EINVAL when body is not a JSON object, -ENOMEM.
 */
int dp_pd_prefill_body(const char *body, size_t len, char **out, size_t *out_len);

/*
 * The decode leg's body: the client's body with kv_transfer_params set to
 * the object the prefill response (resp) carries. Returns 0 and *out as
 * above; -EPROTO when resp has no usable kv_transfer_params (err says what
 * is wrong), -EINVAL when body is not a JSON object, -ENOMEM.
 */
int dp_pd_decode_body(const char *body, size_t len, const char *resp, size_t resp_len, char **out,
                      size_t *out_len, char *err, size_t err_len);

/* ---- legs ------------------------------------------------------------------ */

/* Creates the loop's prefill and decode policies (policy.prefill/decode). 0 or -errno. */
int dp_pd_loop_init(struct dp_loop *loop);
void dp_pd_loop_fini(struct dp_loop *loop);

/* True when req must run as P/D: a chat or completions request whose model
 * has at least one prefill and one decode worker in the registry. */
bool dp_pd_applies(struct dp_loop *loop, const struct dp_request *req);

/* Enters the prefill phase (builds the prefill body). 0, -EINVAL, -ENOMEM. */
int dp_pd_begin(struct dp_request *req);

/* May w take req's next attempt? Plain requests: regular workers; P/D legs:
 * workers of the leg's role. Healthy and not draining in both cases. */
bool dp_pd_is_eligible(const struct dp_request *req, const struct shm_worker_info *w);

/* The policy that picks req's next attempt. */
struct pol_policy *dp_pd_policy(struct dp_loop *loop, const struct dp_request *req);

/* What req's next attempt sends. */
void dp_pd_leg_body(const struct dp_request *req, const char **body, size_t *len);

/* "prefill ", "decode " or "" (for messages: "no healthy %sworker"). */
const char *dp_pd_leg_label(enum dp_pd_phase leg);

/* Appends a prefill response's body bytes (bounded by DP_PD_RESP_MAX). */
void dp_pd_collect(struct dp_request *req, const char *data, size_t len);

/* Forgets a collected response (a new prefill attempt's headers arrived). */
void dp_pd_collect_reset(struct dp_request *req);

/*
 * The prefill response is complete and 2xx: builds the decode body from it
 * and enters the decode phase (attempt counters start again). 0, or -EPROTO
 * with err set when the response carries no usable kv_transfer_params, or
 * -ENOMEM.
 */
int dp_pd_start_decode(struct dp_request *req, const char *prefill_worker, char *err,
                       size_t err_len);

/* The client's answer when a prefill leg answered status >= 300 (not
 * retried): the worker's body when it is an OpenAI error object, else an
 * error naming the worker and its status. A malloc'd body, or NULL. */
char *dp_pd_error_body(const struct dp_request *req, int status, const char *worker_id);

/* Records req's outcome and counts it; only the first call counts. No-op
 * for plain requests. */
void dp_pd_finish(struct dp_request *req, enum dp_pd_outcome outcome);

/* The outcome of a request ending in its current phase with an error
 * (PREFILL_ERROR or DECODE_ERROR) or a client abort. */
enum dp_pd_outcome dp_pd_error_outcome(const struct dp_request *req);
enum dp_pd_outcome dp_pd_abort_outcome(const struct dp_request *req);

/* Frees what req->pd owns (request.c, when the request dies). */
void dp_pd_fini(struct dp_request *req);

#endif
