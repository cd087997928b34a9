/*
 * The OpenAI/vLLM wire format of the mock worker: parsing inference request
 * bodies into the few facts the simulation needs, and writing every body the
 * mock answers with (completions, chat completions, their SSE chunks,
 * embeddings, the model list, errors), byte-compatible with what vLLM's
 * OpenAI server sends: compact JSON, "data: {chunk}\n\n" events ending with
 * "data: [DONE]\n\n", an optional usage chunk with empty choices, and errors
 * as {"error":{"message","type","param","code"}} with code = HTTP status.
 *
 * The prompt text that the cost model hashes is built here: completions use
 * the prompt string (several strings are concatenated; token-id prompts
 * count 4 bytes per id), chat uses role + content of every message in order
 * with no separator (content parts: their "text" fields), embeddings their
 * input the same way as completions.
 *
 * Generated text is a deterministic function of (seed, prompt hash, token
 * index): token i is one word from a fixed list, so equal requests get equal
 * answers for a given --seed.
 *
 * Threading: pure functions; safe from any thread.
 */
#ifndef SY_TESTS_MOCKWORKER_OPENAI_H
#define SY_TESTS_MOCKWORKER_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MW_REQUEST_ID_MAX 160 /* "chatcmpl-" + up to 128 id characters + NUL */

enum mw_endpoint {
    MW_EP_UNSET = 0,
    MW_EP_CHAT,        /* POST /v1/chat/completions */
    MW_EP_COMPLETIONS, /* POST /v1/completions */
    MW_EP_EMBEDDINGS,  /* POST /v1/embeddings */
};

/* An error to answer with. message is NUL-terminated. */
struct mw_error {
    int status;
    char message[512];
};

/* What parsing needs to know about the server. Borrowed strings. */
struct mw_openai_cfg {
    const char *model;
    const char *const *names; /* every model name a request may ask for */
    size_t n_names;
    uint64_t max_model_len;
    uint64_t output_tokens;
    bool kv_ids_flat; /* remote_block_ids flat, not grouped (pd_kv.h) */
    /* Names known besides names (the LoRA adapters loaded now), or NULL. */
    bool (*model_extra)(const char *name);
};

/* A parsed inference request. Caller storage; mw_infer_fini frees prompt. */
struct mw_infer {
    enum mw_endpoint ep;
    char model[128]; /* the request's "model" ("" when absent) */
    char *prompt;    /* owned: the text the cost model sees */
    size_t prompt_len;
    uint64_t prompt_tokens;
    uint64_t prompt_hash; /* XXH3 of prompt, seeds the generated text */
    char *salt;           /* owned: the request's cache_salt, NULL when none or "" */
    size_t salt_len;
    bool stream;
    bool include_usage;
    uint64_t max_tokens;   /* tokens to generate */
    bool max_tokens_given; /* decides finish_reason: "length" if given, else "stop" */
    uint64_t n_inputs;     /* embeddings: vectors to return */
    /* kv_transfer_params as sent by a P/D router. */
    bool do_remote_decode;     /* a prefill request for a remote decode */
    bool remote_prefill_valid; /* a decode request with usable remote blocks */
    uint64_t remote_blocks;    /* blocks remote_block_ids names when valid (pd_kv.h) */
    char remote_request_id[MW_REQUEST_ID_MAX + 24];
    char remote_host[64];
    uint16_t remote_port;
};

/*
 * Parses body for ep. Returns 0 with *out filled, or -EINVAL with *err set:
 * 400 for malformed JSON or fields, 404 for an unknown model. out is always
 * safe to mw_infer_fini.
 */
int mw_openai_parse(enum mw_endpoint ep, const char *body, size_t len,
                    const struct mw_openai_cfg *cfg, struct mw_infer *out, struct mw_error *err);

void mw_infer_fini(struct mw_infer *r);

/* The OpenAI error "type" vLLM uses for status (e.g. 404 -> "NotFoundError"). */
const char *mw_openai_error_type(int status);

/*
 * {"error":{"message":..,"type":..,"param":null,"code":status}} as a
 * malloc'd string (length in *len), or NULL on allocation failure.
 */
char *mw_openai_error_body(int status, const char *message, size_t *len);

/*
 * Writes into id "<prefix>-<request_id>" when the client sent X-Request-Id
 * (non-printable characters, quotes and backslashes become '_', at most 128
 * are kept) or "<prefix>-<32 hex digits>" from unique otherwise. The prefix
 * is "chatcmpl", "cmpl" or "embd" as in vLLM.
 */
void mw_openai_request_id(enum mw_endpoint ep, const char *x_request_id, uint64_t unique,
                          char id[MW_REQUEST_ID_MAX]);

/* Word number i of the answer (with its leading space). */
const char *mw_openai_token_text(uint64_t seed, uint64_t prompt_hash, uint64_t i);

/* Everything a response body needs besides the parsed request. Borrowed. */
struct mw_gen {
    const char *id;    /* plain: no JSON escaping needed (mw_openai_request_id) */
    const char *model; /* plain (see options.c) */
    int64_t created;
    uint64_t seed;
    uint64_t n_tokens; /* tokens generated */
    /* Prompt tokens not computed here: local prefix-cache hits plus, on a
     * decode worker, the KV pulled from a prefill worker (vLLM counts both). */
    uint64_t cached_tokens;
};

/*
 * Non-streaming completion or chat completion body; kv (may be NULL) is
 * added as the top-level "kv_transfer_params" (reference stolen). Returns a
 * malloc'd string (length in *len) or NULL.
 */
char *mw_openai_completion_body(const struct mw_infer *r, const struct mw_gen *g, json_t *kv,
                                size_t *len);

/* Embeddings response with r->n_inputs vectors of dim floats (unit length). */
char *mw_openai_embeddings_body(const struct mw_infer *r, const struct mw_gen *g, uint32_t dim,
                                size_t *len);

/* GET /v1/models body. */
char *mw_openai_models_body(const char *const *names, size_t n_names, const char *const *lora_names,
                            const char *const *lora_paths, size_t n_lora, uint64_t max_model_len,
                            int64_t created, size_t *len);

/* The error body in vLLM's old top-level shape
 * {"object":"error","message":..,"type":..,"param":null,"code":status}. */
char *mw_openai_legacy_error_body(int status, const char *message, size_t *len);

/*
 * SSE events of a stream, written into buf (cap bytes, at least
 * MW_SSE_EVENT_MIN + strlen(id) + strlen(model)). Each returns the event's
 * length, or -ENOSPC when it does not fit.
 *   role:  chat only, first event: delta {"role":"assistant","content":""}
 *   token: token i; the last one (i == n_tokens-1) carries finish_reason
 *   usage: choices [] and usage, when stream_options.include_usage is true
 *   done:  "data: [DONE]\n\n"
 */
#define MW_SSE_EVENT_MIN 512
int mw_openai_sse_role(const struct mw_infer *r, const struct mw_gen *g, char *buf, size_t cap);
int mw_openai_sse_token(const struct mw_infer *r, const struct mw_gen *g, uint64_t i, char *buf,
                        size_t cap);
int mw_openai_sse_usage(const struct mw_infer *r, const struct mw_gen *g, char *buf, size_t cap);
int mw_openai_sse_done(char *buf, size_t cap);

#endif
