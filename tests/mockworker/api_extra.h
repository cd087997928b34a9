/*
 * More of vLLM's API in the mock worker (api.h routes them here): Cohere's
 * /v2/embed, SageMaker's /invocations, the render endpoints, token in /
 * token out (/inference/v1/generate) and the audio uploads. Like api.h's,
 * they answer at once, without the engine simulation.
 *
 * Wire formats follow vLLM (vllm/entrypoints/pooling/embed/protocol.py,
 * vllm/entrypoints/sagemaker/api_router.py, .../scale_out/render/ and
 * token_in_token_out/, .../openai/speech_to_text/):
 *   - /v2/embed: {model?, texts | images | inputs (exactly one, non-empty),
 *     input_type?, embedding_types?} -> {id: "embd-...", embeddings:
 *     {float: [[...]]}, texts, meta: {api_version: {version: "2"},
 *     billed_units: {input_tokens}}, response_type: "embeddings_by_type"}.
 *   - /invocations: the first of chat (messages), completion (prompt),
 *     embeddings (input) the body fits, answered as that endpoint answers;
 *     none: 400 "Cannot find suitable handler for request. Expected one
 *     of: [...]".
 *   - /v1/chat/completions/render: a GenerateRequest {request_id,
 *     token_ids, sampling_params, model, stream: false, ...};
 *     /v1/completions/render: a list of them, one per prompt;
 *     /v1/messages/render as chat, from system and messages.
 *   - /inference/v1/generate: {token_ids (non-empty, >= 0),
 *     sampling_params {max_tokens (16)}, model?, stream?} ->
 *     GenerateResponse {request_id, model, created, choices: [{index,
 *     logprobs, finish_reason, token_ids}], usage}; streamed as data:
 *     chunks of GenerateStreamResponse and data: [DONE].
 *   - /v1/audio/transcriptions and /translations: multipart/form-data with
 *     a file part and a model field -> {text, usage: {type: "duration",
 *     seconds}} (translations: {text}); stream=true: transcription.chunk /
 *     translation.chunk events and data: [DONE].
 *   Tokens follow api.h's rule (4 bytes of text a token).
 *
 * Threading: any loop thread.
 */
#ifndef SY_TESTS_MOCKWORKER_API_EXTRA_H
#define SY_TESTS_MOCKWORKER_API_EXTRA_H

#include <jansson.h>
#include <stddef.h>

#include "tests/mockworker/api.h"

struct mw_server;

/* JSON endpoints: root is the parsed body object (borrowed). */
void mw_apix_embed_v2(struct mw_server *s, json_t *root, struct mw_api_reply *out);
void mw_apix_invocations(struct mw_server *s, const char *body, size_t len, json_t *root,
                         struct mw_api_reply *out);
void mw_apix_render(struct mw_server *s, enum mw_api api, json_t *root, struct mw_api_reply *out);
void mw_apix_generate(struct mw_server *s, json_t *root, struct mw_api_reply *out);

/* A multipart upload (body as received, its own first line the boundary). */
void mw_apix_audio(struct mw_server *s, enum mw_api api, const char *body, size_t len,
                   struct mw_api_reply *out);

#endif
