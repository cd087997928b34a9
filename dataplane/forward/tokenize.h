/*
 * The tokenize step of precise_cache_aware: before such a request is
 * routed, its token ids, turned into the router's chain of block hashes
 * (common/token_chain.h), which the policy looks up in the KV holder index.
 *
 * The ids come from vLLM's own /tokenize (it applies the model's chat
 * template, so the ids are the ones the worker will hash): POSTed to
 * policy.precise_cache_aware.tokenizer_url when set, else to the
 * least-loaded eligible worker of the request's model, asynchronously on
 * the loop's curl multi, within policy.precise_cache_aware.tokenize_timeout.
 * The request waits suspended meanwhile (holding no load) and is routed
 * when the answer, an error or the timeout comes: a failure leaves the
 * request without a chain, and the policy routes it by cache_aware's
 * approximate match (counted by reason in switchyard_precise_fallbacks_total).
 *
 * What is tokenized: chat completions' messages (with add_generation_prompt,
 * tools and chat_template_kwargs, as the request has them); a completion's
 * prompt (a string; an array of token ids is used as is); Responses'
 * instructions and input, and Messages' system and messages, as chat
 * messages (vLLM renders both through the chat template). Other shapes
 * (several prompts) are not tokenized.
 *
 * Chains are cached per event loop (tokenize_cache_entries prompts, keyed by
 * a hash of the tokenize body, at most DP_TOK_CACHE_BYTES of hashes), so a
 * repeated prompt (a retry, a benchmark, a popular system prompt alone)
 * costs no round trip.
 *
 * Threading: the loop's thread. Its counters are tokenize_stats.h's.
 */
#ifndef SY_DATAPLANE_TOKENIZE_H
#define SY_DATAPLANE_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataplane/core/policy.h"

struct dp_loop;
struct dp_request;

#define DP_TOK_CACHE_BYTES (8u << 20) /* block hashes kept per loop, at most */

/* Resumes a request's routing once its tokens are known or given up on. */
typedef void (*dp_tok_resume_fn)(struct dp_request *req);

/*
 * Before picking a worker for req under precise_cache_aware (cands: the
 * eligible workers with their loads). True: the request now waits for its
 * tokens and resume(req) runs when they came (or failed); the caller
 * returns. False: pick now (the chain is known, from the cache or an
 * earlier call, or the step failed and the policy falls back).
 */
bool dp_tok_prepare(struct dp_request *req, const struct pol_candidate *cands, size_t n,
                    dp_tok_resume_fn resume);

/* What the policy reads: pr's kv_chain fields from req's tokenize state. */
void dp_tok_fill(const struct dp_request *req, struct pol_request *pr);

/* The client left or the request is being cut: a pending tokenize ends
 * without resuming it. */
void dp_tok_cancel(struct dp_request *req);

/* Frees req's tokenize state (its release). */
void dp_tok_release(struct dp_request *req);

/* Frees the loop's cache (every request was cancelled before). */
void dp_tok_loop_fini(struct dp_loop *loop);

#endif
