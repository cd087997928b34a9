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
 * This module owns the rewriting of bodies (pure functions, unit-tested),
 * the legs' choice of role and policy, the phase transitions and the P/D
 * metrics: it is the two-leg plan of legs.h. The forwarder runs the
 * attempts and knows the plan only through that interface; plan.c chooses
 * it for a request (dp_pd_applies, dp_pd_begin).
 *
 * Accounting: the prefill guard is released when the prefill response is
 * complete or its transfer aborted, before any decode starts; the decode
 * guard is a relayed attempt's guard, held to the end of its body. A
 * request counts exactly one outcome: the first of the plan's ending
 * events (done, failed, cut, aborted, a bad prefill answer, the fallback).
 *
 * Threading: the loop's thread only, except the pure body functions (any
 * thread).
 */
#ifndef SY_DATAPLANE_PD_H
#define SY_DATAPLANE_PD_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/forward/legs.h"
#include "dataplane/core/pd_types.h"
#include "dataplane/core/policy.h"

struct dp_loop;
struct dp_request;

#define DP_PD_RESP_MAX (4u << 20) /* largest prefill response kept */

/* ---- bodies (pure) --------------------------------------------------------- */

/*
 * The prefill leg's body from the client's: max_tokens 1, max_completion_tokens
 * 1 when present, stream false, stream_options removed, kv_transfer_params
 * {do_remote_decode: true, do_remote_prefill: false, remote_*: null}.
 * min_tokens and min_completion_tokens removed. Returns 0 and a malloc'd
 * NUL-terminated body in *out (caller frees), -EDOM when body is a
 * completions request with several prompts (not disaggregated: vLLM returns
 * the first prompt's params only), -EINVAL when body is not a JSON object,
 * -ENOMEM.
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

/*
 * The usage the client gets under P/D (as vLLM's own router does): the
 * prompt and cached tokens of the prefill answer, the completion tokens of
 * the decode answer (whose cached tokens count the pulled KV), the total
 * recomputed.
 *
 * dp_pd_prefill_usage reads the prefill answer's usage into u (u->known
 * false when it has none). dp_pd_merge_answer rewrites a non-streamed
 * decode answer: its usage from u, and when prefill is not NULL the
 * prompt_logprobs of the prefill answer (top level, and per choice)
 * wherever the decode answer has them null. dp_pd_merge_line rewrites one
 * SSE line ("data: {...}") whose chunk carries a usage object. Both return
 * 0 and a malloc'd *out, -ENOENT when nothing changes (use the input),
 * -EINVAL when the input is not what they expect, -ENOMEM.
 */
void dp_pd_prefill_usage(const char *resp, size_t len, struct dp_pd_usage *u);
int dp_pd_merge_answer(const char *body, size_t len, const struct dp_pd_usage *u,
                       const char *prefill, size_t prefill_len, char **out, size_t *out_len);
int dp_pd_merge_line(const char *line, size_t len, const struct dp_pd_usage *u, char **out,
                     size_t *out_len);

/*
 * The decode leg's relay filter on a request's P/D state (legs.h's filter
 * and filter_commit; public for the unit tests): with sse and a known
 * prefill usage, the lines of a stream whose chunk carries a usage object
 * are rewritten by dp_pd_merge_line; a partial last line is held back
 * (at most 16 KiB; a longer one ends the rewriting) until the chunk that
 * ends it. dp_pd_filter sets *out (data itself, or pd's buffer) without
 * changing what is held; dp_pd_filter_commit, once the relay took *out,
 * does. dp_pd_filter_fini frees pd's buffers.
 */
struct dp_pd_state;
void dp_pd_filter(struct dp_pd_state *pd, bool sse, const char *data, size_t len, const char **out,
                  size_t *out_len);
void dp_pd_filter_commit(struct dp_pd_state *pd, bool sse, const char *data, size_t len);
void dp_pd_filter_fini(struct dp_pd_state *pd);

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
