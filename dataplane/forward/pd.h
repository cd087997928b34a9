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
 *            returned (checked only for do_remote_prefill, passed on
 *            verbatim), sent to a worker of role decode picked by
 *            policy.decode; its response is relayed to the client, its
 *            usage taken from the prefill answer's prompt and cached tokens.
 *
 * A prefill answer without usable params falls back to the client's body
 * on a decode worker (policy.pd_fallback); a decode that may have seen the
 * params is never retried with them elsewhere (its blocks may be gone):
 * the request runs again from a new prefill instead.
 *
 * This module owns the legs' choice of role and policy, the phase
 * transitions and the P/D metrics: it is the two-leg plan of legs.h. The
 * bodies and answers it rewrites are pd_body.h's (pure functions), the
 * decode stream's usage rewriting pd_usage_filter.h's. The forwarder runs the
 * attempts and knows the plan only through that interface; plan.c chooses
 * it for a request (dp_pd_applies, dp_pd_begin).
 *
 * Accounting: the prefill guard is released when the prefill response is
 * complete or its transfer aborted, before any decode starts; the decode
 * guard is a relayed attempt's guard, held to the end of its body. A
 * request counts exactly one outcome: the first of the plan's ending
 * events (done, failed, cut, aborted, a bad prefill answer, the fallback).
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_PD_H
#define SY_DATAPLANE_PD_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/forward/legs.h"
#include "dataplane/types/pd_types.h"
#include "dataplane/core/policy.h"

struct dp_loop;
struct dp_request;

#define DP_PD_RESP_MAX (4u << 20) /* largest prefill response kept */

/* ---- legs ------------------------------------------------------------------ */

/* Creates loop->pd: the prefill and decode policies (policy.prefill/decode). 0 or -errno. */
int dp_pd_loop_init(struct dp_loop *loop);
void dp_pd_loop_fini(struct dp_loop *loop);

/* True when req must run as P/D: a chat or completions request whose model
 * has at least one prefill and one decode worker in the registry. */
bool dp_pd_applies(struct dp_loop *loop, const struct dp_request *req);

/* Starts req's P/D plan: enters the prefill phase (builds the prefill body)
 * and sets req->leg to the prefill leg; a completions request with several
 * prompts instead goes as a plain request, to a regular worker when the
 * model has one, else to a decode worker. DP_LEG_ACT_NEXT, or
 * DP_LEG_ACT_ANSWER with step holding a 500 (out of memory). */
enum dp_leg_action dp_pd_begin(struct dp_request *req, struct dp_leg_step *step);

#endif
