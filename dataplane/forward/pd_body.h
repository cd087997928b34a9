/*
 * The P/D legs' bodies and answers, rewritten (pd.h has the protocol):
 * pure functions of their inputs, any thread, unit-tested and fuzzed on
 * their own.
 *
 * Request bodies are rewritten on their skeleton (json_skeleton.h's
 * dp_skel_doc_open/close): the few fields the protocol names change, keys
 * keep their order and the long strings come back as the client sent
 * them, so a 400 KB prompt is never decoded. Answers (the prefill's, the
 * decode's) are small and parsed whole.
 */
#ifndef SY_DATAPLANE_PD_BODY_H
#define SY_DATAPLANE_PD_BODY_H

#include <stdbool.h>
#include <stddef.h>

#include "dataplane/types/pd_types.h"

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

/* True when resp is an OpenAI error answer (an object with an "error" object). */
bool dp_pd_is_error_answer(const char *resp, size_t len);

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

#endif
