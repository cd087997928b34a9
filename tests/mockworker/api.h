/*
 * The rest of vLLM's HTTP API in the mock worker, beyond chat, completions
 * and embeddings: the Responses API with its response store (as vLLM runs
 * with VLLM_ENABLE_RESPONSES_API_STORE=1), Anthropic's Messages API,
 * rerank, score, pooling, classify, tokenize and detokenize. These answer
 * at once, without the engine simulation (no queue, no prefix cache):
 * tests use them for routing and wire format, not for load.
 *
 * Wire formats follow vLLM (vllm/entrypoints/openai/responses/,
 * vllm/entrypoints/anthropic/, vllm/entrypoints/pooling/,
 * vllm/entrypoints/serve/tokenize/):
 *   - Responses: POST /v1/responses answers a `response` object (a stream:
 *     `event: <type>` + `data: <json>` pairs from response.created to
 *     response.completed, no [DONE]); stored unless "store": false.
 *     previous_response_id continues a stored conversation; an unknown one
 *     (and an unknown id on GET /v1/responses/{id} or
 *     POST /v1/responses/{id}/cancel) answers 404 invalid_request_error with
 *     param "response_id". Cancelling a finished response answers 400, as
 *     vLLM does for a response that did not run in the background.
 *   - Messages: POST /v1/messages answers a `message` (a stream:
 *     message_start, content_block_start, content_block_delta...,
 *     content_block_stop, message_delta, message_stop), errors in
 *     Anthropic's shape; POST /v1/messages/count_tokens {input_tokens}.
 *   - Tokens follow the mock's rule (cost_model.h): a text of B bytes is
 *     ceil(B/4) tokens, token i being bytes [4i, 4i+4) as a little-endian
 *     number; /detokenize reverses it.
 *
 * Threading: any loop thread; the response store has its own lock.
 */
#ifndef SY_TESTS_MOCKWORKER_API_H
#define SY_TESTS_MOCKWORKER_API_H

#include <stdbool.h>
#include <stddef.h>

struct mw_server;

enum mw_api {
    MW_API_UNSET = 0,
    MW_API_RESPONSES,
    MW_API_RESPONSES_GET,
    MW_API_RESPONSES_CANCEL,
    MW_API_MESSAGES,
    MW_API_COUNT_TOKENS,
    MW_API_RERANK,
    MW_API_SCORE,
    MW_API_POOLING,
    MW_API_CLASSIFY,
    MW_API_TOKENIZE,
    MW_API_DETOKENIZE,
    MW_API_LOAD_LORA,
    MW_API_UNLOAD_LORA,
    MW_API_EMBED_V2, /* api_extra.h from here on */
    MW_API_INVOCATIONS,
    MW_API_CHAT_RENDER,
    MW_API_COMPLETIONS_RENDER,
    MW_API_MESSAGES_RENDER,
    MW_API_GENERATE,
    MW_API_TRANSCRIPTIONS,
    MW_API_TRANSLATIONS,
};

#define MW_API_ID_MAX 192

/*
 * Matches url (no query) and method. Returns true when url is one of these
 * routes: then *api and id (the {id} segment, NUL-terminated) are set,
 * *allow is the route's Allow header and *method_ok says whether method is
 * one of them.
 */
bool mw_api_route(const char *url, const char *method, enum mw_api *api, char id[MW_API_ID_MAX],
                  const char **allow, bool *method_ok);

/* An answer: status, malloc'd body (NULL = out of memory), content type. */
struct mw_api_reply {
    int status;
    char *body;
    size_t len;
    const char *ctype;
};

/* Answers api for body[0..len) (stream: the query's stream=true on GET). */
void mw_api_handle(struct mw_server *s, enum mw_api api, const char *id, const char *body,
                   size_t len, struct mw_api_reply *out);

/* Frees every stored response (tests' /mock/reset). */
void mw_api_reset(void);

#endif
