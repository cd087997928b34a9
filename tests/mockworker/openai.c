/*
 * Request parsing and response bodies in vLLM's OpenAI format (see
 * openai.h). Non-streaming bodies are built with jansson (compact, insertion
 * order kept, which is the field order vLLM's pydantic models print); SSE
 * chunks are formatted directly because they are many and their strings
 * (id, model, generated words) never need escaping.
 */
#include "tests/mockworker/openai.h"

#include "tests/mockworker/pd_kv.h"

#include "common/buf.h"
#include "common/rng.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- prompt text ------------------------------------------------------------ */

/*
 * Prompt text is at most twice the body: a token id adds 4 bytes and takes
 * at least 2 bytes of JSON ("1,"); strings add at most their JSON length.
 */
#define PROMPT_TEXT_MAX(body_len) (2 * (body_len) + 64)

/* Appends n bytes; a failure is kept in t's sticky error and checked once. */
static void text_append(struct buf *t, const void *src, size_t n)
{
    if (n > 0)
        (void)buf_append(t, src, n);
}

/* A token id counts 4 bytes (one token): its little-endian bytes. */
static void text_append_token_id(struct buf *t, json_int_t id)
{
    uint32_t v = (uint32_t)id;
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    text_append(t, b, sizeof(b));
}

static bool is_token_array(const json_t *a)
{
    if (!json_is_array(a) || json_array_size(a) == 0)
        return false;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return false;
    }
    return true;
}

/*
 * A completions prompt or an embeddings input: a string, a list of strings,
 * a list of token ids, or a list of lists of token ids. *n_items is the
 * number of separate inputs.
 */
static int append_prompt(struct buf *t, const json_t *p, uint64_t *n_items)
{
    size_t i;
    json_t *v;
    if (json_is_string(p)) {
        text_append(t, json_string_value(p), json_string_length(p));
        *n_items = 1;
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return -EINVAL;
    if (is_token_array(p)) {
        json_array_foreach(p, i, v) text_append_token_id(t, json_integer_value(v));
        *n_items = 1;
        return 0;
    }
    json_array_foreach(p, i, v)
    {
        if (json_is_string(v)) {
            text_append(t, json_string_value(v), json_string_length(v));
        } else if (is_token_array(v)) {
            size_t j;
            json_t *tok;
            json_array_foreach(v, j, tok) text_append_token_id(t, json_integer_value(tok));
        } else {
            return -EINVAL;
        }
    }
    *n_items = json_array_size(p);
    return 0;
}

/* role + content of every message, in order. */
static int append_messages(struct buf *t, const json_t *msgs, char *why, size_t why_len)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(why, why_len, "'messages' must be a non-empty array");
        return -EINVAL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            snprintf(why, why_len, "messages[%zu]: expected an object with a string 'role'", i);
            return -EINVAL;
        }
        text_append(t, json_string_value(role), json_string_length(role));
        json_t *content = json_object_get(m, "content");
        if (content == NULL || json_is_null(content))
            continue;
        if (json_is_string(content)) {
            text_append(t, json_string_value(content), json_string_length(content));
            continue;
        }
        if (!json_is_array(content)) {
            snprintf(why, why_len, "messages[%zu].content: expected a string or an array", i);
            return -EINVAL;
        }
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part)
        {
            json_t *text = json_object_get(part, "text");
            if (json_is_string(text))
                text_append(t, json_string_value(text), json_string_length(text));
        }
    }
    return 0;
}

/* ---- parsing ------------------------------------------------------------------ */

static int fail(struct mw_error *err, int status, const char *message)
{
    err->status = status;
    snprintf(err->message, sizeof(err->message), "%s", message);
    return -EINVAL;
}

/* max_tokens style field: absent/null, or an integer >= 1. */
static int get_max_tokens(const json_t *body, const char *key, uint64_t *out, bool *given,
                          struct mw_error *err)
{
    json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        char msg[128];
        snprintf(msg, sizeof(msg), "'%s' must be an integer of at least 1", key);
        return fail(err, 400, msg);
    }
    *out = (uint64_t)json_integer_value(v);
    *given = true;
    return 0;
}

static int parse_sampling(const json_t *body, enum mw_endpoint ep, const struct mw_openai_cfg *cfg,
                          struct mw_infer *out, struct mw_error *err)
{
    json_t *stream = json_object_get(body, "stream");
    if (stream != NULL && !json_is_null(stream) && !json_is_boolean(stream))
        return fail(err, 400, "'stream' must be a boolean");
    out->stream = json_is_true(stream);
    json_t *opts = json_object_get(body, "stream_options");
    if (opts != NULL && !json_is_null(opts)) {
        if (!json_is_object(opts))
            return fail(err, 400, "'stream_options' must be an object");
        if (!out->stream)
            return fail(err, 400, "Stream options can only be defined when `stream=True`.");
        out->include_usage = json_is_true(json_object_get(opts, "include_usage"));
    }
    int rc = get_max_tokens(body, "max_tokens", &out->max_tokens, &out->max_tokens_given, err);
    if (rc == 0 && ep == MW_EP_CHAT)
        rc = get_max_tokens(body, "max_completion_tokens", &out->max_tokens, &out->max_tokens_given,
                            err);
    if (rc != 0)
        return rc;
    if (!out->max_tokens_given)
        out->max_tokens = cfg->output_tokens;
    /* vLLM's SamplingParams check, which a P/D prefill leg (max_tokens 1) trips. */
    json_t *min = json_object_get(body, "min_tokens");
    if (json_is_integer(min) && json_integer_value(min) > (json_int_t)out->max_tokens) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "min_tokens must be less than or equal to max_tokens=%" PRIu64 ", got %" PRId64
                 ".",
                 out->max_tokens, (int64_t)json_integer_value(min));
        return fail(err, 400, msg);
    }
    uint64_t asked = out->max_tokens_given ? out->max_tokens : 0;
    if (out->prompt_tokens + asked > cfg->max_model_len) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "This model's maximum context length is %" PRIu64 " tokens. However, you "
                 "requested %" PRIu64 " tokens (%" PRIu64 " in the messages, %" PRIu64
                 " in the completion). Please reduce the length of the messages or completion.",
                 cfg->max_model_len, out->prompt_tokens + asked, out->prompt_tokens, asked);
        return fail(err, 400, msg);
    }
    return 0;
}

int mw_openai_parse(enum mw_endpoint ep, const char *body, size_t len,
                    const struct mw_openai_cfg *cfg, struct mw_infer *out, struct mw_error *err)
{
    memset(out, 0, sizeof(*out));
    out->ep = ep;
    struct buf t = BUF_INIT(PROMPT_TEXT_MAX(len));
    char why[160] = "";
    uint64_t n_items = 1;
    json_error_t jerr;
    /* Python's json module (vLLM's) takes an escaped NUL in a string. */
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        char msg[300];
        snprintf(msg, sizeof(msg), "Invalid JSON body: %s (line %d, column %d)", jerr.text,
                 jerr.line, jerr.column);
        return fail(err, 400, msg);
    }
    int rc = 0;
    json_t *model = json_object_get(root, "model");
    if (model != NULL && !json_is_null(model) && !json_is_string(model)) {
        rc = fail(err, 400, "'model' must be a string");
        goto out_decref;
    }
    bool known = false;
    for (size_t i = 0; json_is_string(model) && i < cfg->n_names && !known; i++)
        known = strcmp(json_string_value(model), cfg->names[i]) == 0;
    if (json_is_string(model) && !known && cfg->model_extra != NULL)
        known = cfg->model_extra(json_string_value(model));
    if (json_is_string(model))
        snprintf(out->model, sizeof(out->model), "%s", json_string_value(model));
    if (json_is_string(model) && !known) {
        char msg[300];
        snprintf(msg, sizeof(msg), "The model `%.200s` does not exist.", json_string_value(model));
        rc = fail(err, 404, msg);
        goto out_decref;
    }

    if (ep == MW_EP_CHAT) {
        rc = append_messages(&t, json_object_get(root, "messages"), why, sizeof(why));
    } else {
        const char *key = ep == MW_EP_EMBEDDINGS ? "input" : "prompt";
        rc = append_prompt(&t, json_object_get(root, key), &n_items);
        if (rc != 0)
            snprintf(why, sizeof(why),
                     "'%s' must be a string, a list of strings or a list of token ids", key);
    }
    out->prompt = t.data;
    out->prompt_len = t.len;
    if (rc != 0) {
        rc = fail(err, 400, why);
        goto out_decref;
    }
    if (buf_error(&t) != 0) {
        rc = fail(err, 500, "out of memory");
        goto out_decref;
    }
    out->n_inputs = n_items;
    /* vLLM mixes a non-empty cache_salt into the first block's hash. */
    json_t *salt = json_object_get(root, "cache_salt");
    if (json_is_string(salt) && json_string_length(salt) > 0) {
        out->salt_len = json_string_length(salt);
        out->salt = malloc(out->salt_len + 1);
        if (out->salt == NULL) {
            rc = fail(err, 500, "out of memory");
            goto out_decref;
        }
        memcpy(out->salt, json_string_value(salt), out->salt_len + 1);
    }
    out->prompt_tokens = (out->prompt_len + 3) / 4;
    out->prompt_hash = XXH3_64bits(out->prompt != NULL ? out->prompt : "", out->prompt_len);
    if (ep != MW_EP_EMBEDDINGS) {
        rc = parse_sampling(root, ep, cfg, out, err);
        if (rc != 0)
            goto out_decref;
        mw_pd_parse_params(root, cfg->kv_ids_flat, out);
    } else if (out->prompt_tokens > cfg->max_model_len) {
        rc = fail(err, 400, "input is longer than the model's maximum context length");
        goto out_decref;
    }
out_decref:
    json_decref(root);
    return rc;
}

void mw_infer_fini(struct mw_infer *r)
{
    free(r->prompt);
    r->prompt = NULL;
    r->prompt_len = 0;
    free(r->salt);
    r->salt = NULL;
    r->salt_len = 0;
}

/* ---- small bodies ------------------------------------------------------------ */

const char *mw_openai_error_type(int status)
{
    switch (status) {
    case 400:
        return "BadRequestError";
    case 401:
        return "AuthenticationError";
    case 403:
        return "PermissionDeniedError";
    case 404:
        return "NotFoundError";
    case 405:
        return "MethodNotAllowedError";
    case 408:
        return "RequestTimeoutError";
    case 409:
        return "ConflictError";
    case 413:
        return "RequestEntityTooLargeError";
    case 422:
        return "UnprocessableEntityError";
    case 429:
        return "RateLimitError";
    case 500:
        return "InternalServerError";
    case 502:
        return "BadGatewayError";
    case 503:
        return "ServiceUnavailableError";
    case 504:
        return "GatewayTimeoutError";
    default:
        return status >= 500 ? "InternalServerError" : "BadRequestError";
    }
}

static char *dump(json_t *obj, size_t *len)
{
    if (obj == NULL)
        return NULL;
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (s != NULL)
        *len = strlen(s);
    return s;
}

char *mw_openai_error_body(int status, const char *message, size_t *len)
{
    json_t *msg = json_string(message);
    if (msg == NULL)
        msg = json_string("(message is not valid UTF-8)");
    return dump(json_pack("{s:{s:o, s:s, s:n, s:i}}", "error", "message", msg, "type",
                          mw_openai_error_type(status), "param", "code", status),
                len);
}

char *mw_openai_legacy_error_body(int status, const char *message, size_t *len)
{
    json_t *msg = json_string(message);
    if (msg == NULL)
        msg = json_string("(message is not valid UTF-8)");
    return dump(json_pack("{s:s, s:o, s:s, s:n, s:i}", "object", "error", "message", msg, "type",
                          mw_openai_error_type(status), "param", "code", status),
                len);
}

void mw_openai_request_id(enum mw_endpoint ep, const char *x_request_id, uint64_t unique,
                          char id[MW_REQUEST_ID_MAX])
{
    const char *prefix = ep == MW_EP_CHAT ? "chatcmpl" : ep == MW_EP_EMBEDDINGS ? "embd" : "cmpl";
    int n = snprintf(id, MW_REQUEST_ID_MAX, "%s-", prefix);
    if (x_request_id != NULL && x_request_id[0] != '\0') {
        size_t pos = (size_t)n;
        for (size_t i = 0; x_request_id[i] != '\0' && i < 128; i++) {
            unsigned char c = (unsigned char)x_request_id[i];
            id[pos++] = (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : (char)c;
        }
        id[pos] = '\0';
        return;
    }
    uint64_t hi = XXH3_64bits_withSeed(&unique, sizeof(unique), 0x6d6f636b);
    uint64_t lo = XXH3_64bits_withSeed(&unique, sizeof(unique), hi);
    snprintf(id + n, MW_REQUEST_ID_MAX - (size_t)n, "%016" PRIx64 "%016" PRIx64, hi, lo);
}

/* ---- generated text ------------------------------------------------------------ */

static const char *const mw_words[] = {
    " the",    " cache",  " router", " token",  " prefix", " block",  " worker", " fleet",
    " load",   " stream", " model",  " reply",  " is",     " a",      " of",     " and",
    " to",     " in",     " fast",   " warm",   " cold",   " queue",  " batch",  " page",
    " kv",     " hit",    " miss",   " keeps",  " moves",  " waits",  " runs",   " ends",
    " decode", " fill",   " light",  " heavy",  " river",  " stone",  " north",  " quiet",
    " bright", " small",  " large",  " many",   " few",    " every",  " other",  " same",
    " first",  " last",   " next",   " early",  " late",   " green",  " blue",   " amber",
    " copper", " silver", " window", " garden", " signal", " bridge", " harbor", ".",
};

#define MW_N_WORDS (sizeof(mw_words) / sizeof(mw_words[0]))

const char *mw_openai_token_text(uint64_t seed, uint64_t prompt_hash, uint64_t i)
{
    return mw_words[rng_mix64(seed ^ rng_mix64(prompt_hash ^ rng_mix64(i))) % MW_N_WORDS];
}

static char *generated_text(const struct mw_infer *r, const struct mw_gen *g)
{
    size_t longest = 0;
    for (size_t i = 0; i < MW_N_WORDS; i++) {
        size_t n = strlen(mw_words[i]);
        longest = n > longest ? n : longest;
    }
    struct buf t = BUF_INIT(g->n_tokens * longest + 1);
    for (uint64_t i = 0; i < g->n_tokens; i++) {
        const char *w = mw_openai_token_text(g->seed, r->prompt_hash, i);
        text_append(&t, w, strlen(w));
    }
    text_append(&t, "", 1);
    if (buf_error(&t) != 0) {
        buf_fini(&t);
        return NULL;
    }
    return t.data;
}

static const char *finish_reason(const struct mw_infer *r)
{
    return r->max_tokens_given ? "length" : "stop";
}

static json_t *usage_json(const struct mw_infer *r, const struct mw_gen *g)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r->prompt_tokens,
                     "total_tokens", (json_int_t)(r->prompt_tokens + g->n_tokens),
                     "completion_tokens", (json_int_t)g->n_tokens, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)g->cached_tokens);
}

char *mw_openai_completion_body(const struct mw_infer *r, const struct mw_gen *g, json_t *kv,
                                size_t *len)
{
    char *text = generated_text(r, g);
    json_t *obj = NULL;
    if (text == NULL)
        goto out_kv;
    if (r->ep == MW_EP_CHAT) {
        obj =
            json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:{s:s, s:s, s:[]}, s:n, s:s, s:n}], "
                      "s:o, s:n}",
                      "id", g->id, "object", "chat.completion", "created", (json_int_t)g->created,
                      "model", g->model, "choices", "index", 0, "message", "role", "assistant",
                      "content", text, "tool_calls", "logprobs", "finish_reason", finish_reason(r),
                      "stop_reason", "usage", usage_json(r, g), "prompt_logprobs");
    } else {
        obj = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:s, s:n, s:s, s:n, s:n}], s:o}", "id",
                        g->id, "object", "text_completion", "created", (json_int_t)g->created,
                        "model", g->model, "choices", "index", 0, "text", text, "logprobs",
                        "finish_reason", finish_reason(r), "stop_reason", "prompt_logprobs",
                        "usage", usage_json(r, g));
    }
    free(text);
    if (obj != NULL && kv != NULL) {
        json_object_set_new(obj, "kv_transfer_params", kv);
        kv = NULL;
    }
out_kv:
    json_decref(kv);
    return dump(obj, len);
}

char *mw_openai_embeddings_body(const struct mw_infer *r, const struct mw_gen *g, uint32_t dim,
                                size_t *len)
{
    json_t *data = json_array();
    double *vec = malloc(sizeof(double) * dim);
    if (data == NULL || vec == NULL) {
        json_decref(data);
        free(vec);
        return NULL;
    }
    for (uint64_t k = 0; k < r->n_inputs; k++) {
        double norm = 0;
        for (uint32_t d = 0; d < dim; d++) {
            uint64_t h = rng_mix64(g->seed ^ rng_mix64(r->prompt_hash ^ rng_mix64(k * 65537 + d)));
            vec[d] = (double)(h >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
            norm += vec[d] * vec[d];
        }
        norm = norm > 0 ? sqrt(norm) : 1.0;
        json_t *emb = json_array();
        for (uint32_t d = 0; d < dim; d++)
            json_array_append_new(emb, json_real(vec[d] / norm));
        json_array_append_new(data, json_pack("{s:i, s:s, s:o}", "index", (int)k, "object",
                                              "embedding", "embedding", emb));
    }
    free(vec);
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:I, s:I, s:i, s:n}}", "id", g->id,
                          "object", "list", "created", (json_int_t)g->created, "model", g->model,
                          "data", data, "usage", "prompt_tokens", (json_int_t)r->prompt_tokens,
                          "total_tokens", (json_int_t)r->prompt_tokens, "completion_tokens", 0,
                          "prompt_tokens_details"),
                len);
}

static json_t *model_card(const char *id, const char *root, const char *parent,
                          uint64_t max_model_len, int64_t created)
{
    char perm[MW_REQUEST_ID_MAX];
    snprintf(perm, sizeof(perm), "modelperm-%016" PRIx64, XXH3_64bits(id, strlen(id)));
    json_t *card = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:o, s:I, s:[{s:s, s:s, s:I, s:b, s:b, s:b, s:b, s:b, s:b, "
        "s:b, s:s, s:n, s:b}]}",
        "id", id, "object", "model", "created", (json_int_t)created, "owned_by", "vllm", "root",
        root, "parent", parent != NULL ? json_string(parent) : json_null(), "max_model_len",
        (json_int_t)max_model_len, "permission", "id", perm, "object", "model_permission",
        "created", (json_int_t)created, "allow_create_engine", 0, "allow_sampling", 1,
        "allow_logprobs", 1, "allow_search_indices", 0, "allow_view", 1, "allow_fine_tuning", 0,
        "allow_aggregation", 0, "organization", "*", "group", "is_blocking", 0);
    return card;
}

char *mw_openai_models_body(const char *const *names, size_t n_names, const char *const *lora_names,
                            const char *const *lora_paths, size_t n_lora, uint64_t max_model_len,
                            int64_t created, size_t *len)
{
    /* As vLLM: one card per served name (root: the model), then one per adapter. */
    json_t *data = json_array();
    for (size_t i = 0; i < n_names; i++)
        json_array_append_new(data, model_card(names[i], names[0], NULL, max_model_len, created));
    for (size_t i = 0; i < n_lora; i++)
        json_array_append_new(
            data, model_card(lora_names[i], lora_paths[i], names[0], max_model_len, created));
    return dump(json_pack("{s:s, s:o}", "object", "list", "data", data), len);
}

/* ---- SSE --------------------------------------------------------------------------- */

static int sse_result(int n, size_t cap)
{
    return (n < 0 || (size_t)n >= cap) ? -ENOSPC : n;
}

int mw_openai_sse_role(const struct mw_infer *r, const struct mw_gen *g, char *buf, size_t cap)
{
    (void)r;
    int n =
        snprintf(buf, cap,
                 "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%" PRId64
                 ",\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                 "\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}"
                 "\n\n",
                 g->id, g->created, g->model);
    return sse_result(n, cap);
}

int mw_openai_sse_token(const struct mw_infer *r, const struct mw_gen *g, uint64_t i, char *buf,
                        size_t cap)
{
    const char *word = mw_openai_token_text(g->seed, r->prompt_hash, i);
    bool last = i + 1 >= g->n_tokens;
    char reason[32] = "null";
    if (last)
        snprintf(reason, sizeof(reason), "\"%s\"", finish_reason(r));
    int n;
    if (r->ep == MW_EP_CHAT) {
        n = snprintf(
            buf, cap,
            "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%" PRId64
            ",\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},"
            "\"logprobs\":null,\"finish_reason\":%s%s}]}\n\n",
            g->id, g->created, g->model, word, reason, last ? ",\"stop_reason\":null" : "");
    } else {
        n = snprintf(
            buf, cap,
            "data: {\"id\":\"%s\",\"object\":\"text_completion\",\"created\":%" PRId64
            ",\"model\":\"%s\",\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,"
            "\"finish_reason\":%s,\"stop_reason\":null}]}\n\n",
            g->id, g->created, g->model, word, reason);
    }
    return sse_result(n, cap);
}

int mw_openai_sse_usage(const struct mw_infer *r, const struct mw_gen *g, char *buf, size_t cap)
{
    const char *object = r->ep == MW_EP_CHAT ? "chat.completion.chunk" : "text_completion";
    int n = snprintf(buf, cap,
                     "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%" PRId64
                     ",\"model\":\"%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":%" PRIu64
                     ",\"total_tokens\":%" PRIu64 ",\"completion_tokens\":%" PRIu64
                     ",\"prompt_tokens_details\":{\"cached_tokens\":%" PRIu64 "}}}\n\n",
                     g->id, object, g->created, g->model, r->prompt_tokens,
                     r->prompt_tokens + g->n_tokens, g->n_tokens, g->cached_tokens);
    return sse_result(n, cap);
}

int mw_openai_sse_done(char *buf, size_t cap)
{
    return sse_result(snprintf(buf, cap, "data: [DONE]\n\n"), cap);
}
