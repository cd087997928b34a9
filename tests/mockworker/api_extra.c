/*
 * The mock worker's /v2/embed, /invocations, render, token-in/token-out and
 * audio endpoints (see api_extra.h). Answers are built whole with jansson.
 * The audio parts are found by the boundary the body opens with: this is
 * a test double reading uploads its own tests write, not a multipart
 * parser for the world.
 */
#include "tests/mockworker/api_extra.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/buf.h"
#include "tests/mockworker/lora.h"
#include "tests/mockworker/openai.h"
#include "tests/mockworker/request.h"

#define CT_JSON "application/json"
#define CT_SSE  "text/event-stream; charset=utf-8"

#define APIX_TEXT_MAX      (8u << 20)
#define APIX_DEFAULT_MAX   16u    /* SamplingParams' max_tokens default */
#define APIX_AUDIO_BYTES_S 32000u /* 16 kHz, 16-bit mono: bytes per second */

static void reply_json(struct mw_api_reply *out, int status, json_t *obj)
{
    out->status = status;
    out->ctype = CT_JSON;
    out->body = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    out->len = out->body != NULL ? strlen(out->body) : 0;
    json_decref(obj);
}

static void reply_error(struct mw_api_reply *out, int status, const char *msg)
{
    out->status = status;
    out->ctype = CT_JSON;
    out->body = mw_openai_error_body(status, msg, &out->len);
}

static void reply_sse(struct mw_api_reply *out, struct buf *b)
{
    out->status = 200;
    out->ctype = CT_SSE;
    out->body = b->data;
    out->len = b->len;
    if (out->body == NULL)
        reply_error(out, 500, "mock worker: out of memory");
}

/* Appends "data: obj\n\n" (obj's reference taken). */
static void sse_data(struct buf *b, json_t *obj)
{
    char *data = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (data == NULL)
        return;
    (void)buf_append(b, "data: ", 6);
    (void)buf_append(b, data, strlen(data));
    (void)buf_append(b, "\n\n", 2);
    free(data);
}

static void new_id(struct mw_server *s, const char *prefix, char *out, size_t cap)
{
    uint64_t u = atomic_fetch_add_explicit(&s->unique, 1, memory_order_relaxed);
    uint64_t a = XXH3_64bits_withSeed(&u, sizeof(u), (uint64_t)s->port);
    snprintf(out, cap, "%s%016" PRIx64 "%016" PRIx64, prefix, a, a ^ (uint64_t)time(NULL));
}

/* Absent or null: the default model; else one this worker serves (404). */
static bool model_check(const struct mw_server *s, json_t *model, struct mw_api_reply *out)
{
    if (model == NULL || json_is_null(model))
        return true;
    if (json_is_string(model)) {
        for (size_t i = 0; i < s->ocfg.n_names; i++)
            if (strcmp(s->ocfg.names[i], json_string_value(model)) == 0)
                return true;
        if (mw_lora_has(json_string_value(model)))
            return true;
    }
    char msg[256];
    snprintf(msg, sizeof(msg), "The model `%.128s` does not exist.",
             json_is_string(model) ? json_string_value(model) : "?");
    reply_error(out, 404, msg);
    return false;
}

static const char *model_name(const struct mw_server *s, json_t *root)
{
    json_t *m = json_object_get(root, "model");
    return json_is_string(m) ? json_string_value(m) : s->opts.model;
}

/* The mock's tokens of text: 4 bytes each, little-endian (api.h). */
static json_t *token_ids_of(const char *text, size_t len)
{
    json_t *ids = json_array();
    for (size_t i = 0; ids != NULL && i < len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4 && i + k < len; k++)
            v |= (uint32_t)(unsigned char)text[i + k] << (8 * k);
        json_array_append_new(ids, json_integer((json_int_t)v));
    }
    return ids;
}

static void content_text(struct buf *b, json_t *content)
{
    if (json_is_string(content)) {
        (void)buf_append(b, json_string_value(content), json_string_length(content));
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t))
            (void)buf_append(b, json_string_value(t), json_string_length(t));
    }
}

/* Role then content of each message, no separator (the mock's chat rule). */
static void messages_text(struct buf *b, json_t *messages)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        json_t *role = json_object_get(m, "role");
        if (json_is_string(role))
            (void)buf_append(b, json_string_value(role), json_string_length(role));
        content_text(b, json_object_get(m, "content"));
    }
}

static json_t *usage_of(uint64_t prompt, uint64_t completion)
{
    return json_pack("{s:I, s:I, s:I, s:n}", "prompt_tokens", (json_int_t)prompt, "total_tokens",
                     (json_int_t)(prompt + completion), "completion_tokens", (json_int_t)completion,
                     "prompt_tokens_details");
}

/* ---- /v2/embed ----------------------------------------------------------------------- */

void mw_apix_embed_v2(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    if (!model_check(s, json_object_get(root, "model"), out))
        return;
    static const char *const fields[] = {"texts", "images", "inputs"};
    json_t *in = NULL;
    int given = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(root, fields[i]);
        if (v != NULL && !json_is_null(v)) {
            given++;
            in = v;
        }
    }
    if (given != 1 || !json_is_array(in) || json_array_size(in) == 0) {
        reply_error(out, 400,
                    "Exactly one of texts, images, or inputs must be provided, and it must be "
                    "non-empty");
        return;
    }
    json_t *vectors = json_array();
    uint64_t tokens = 0;
    size_t i;
    json_t *x;
    json_array_foreach(in, i, x)
    {
        char *d = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
        size_t n = d != NULL ? strlen(d) : 0;
        tokens += (n + 3) / 4;
        uint64_t h = XXH3_64bits_withSeed(d != NULL ? d : "", n, s->opts.seed);
        free(d);
        json_t *vec = json_array();
        for (uint32_t k = 0; k < s->opts.embedding_dim; k++)
            json_array_append_new(vec, json_real((double)((h >> (k % 64)) & 0xff) / 255.0));
        json_array_append_new(vectors, vec);
    }
    char id[64];
    new_id(s, "embd-", id, sizeof(id));
    json_t *texts = json_object_get(root, "texts");
    reply_json(out, 200,
               json_pack("{s:s, s:{s:o}, s:O?, s:{s:{s:s}, s:{s:I}}, s:s}", "id", id, "embeddings",
                         "float", vectors, "texts", json_is_array(texts) ? texts : NULL, "meta",
                         "api_version", "version", "2", "billed_units", "input_tokens",
                         (json_int_t)tokens, "response_type", "embeddings_by_type"));
}

/* ---- /invocations ---------------------------------------------------------------------- */

/* An OpenAI endpoint's answer, as the mock's engine would send it, at once. */
static void answer_openai(struct mw_server *s, enum mw_endpoint ep, const char *body, size_t len,
                          struct mw_api_reply *out)
{
    struct mw_infer in = {0};
    struct mw_error err = {0};
    if (mw_openai_parse(ep, body, len, &s->ocfg, &in, &err) != 0) {
        reply_error(out, err.status != 0 ? err.status : 400, err.message);
        mw_infer_fini(&in);
        return;
    }
    char id[MW_REQUEST_ID_MAX];
    mw_openai_request_id(ep, NULL, atomic_fetch_add_explicit(&s->unique, 1, memory_order_relaxed),
                         id);
    struct mw_gen g = {
        .id = id,
        .model = s->opts.model,
        .created = (int64_t)time(NULL),
        .seed = s->opts.seed,
        .n_tokens = ep == MW_EP_EMBEDDINGS ? 0 : in.max_tokens,
    };
    if (ep == MW_EP_EMBEDDINGS) {
        out->status = 200;
        out->ctype = CT_JSON;
        out->body = mw_openai_embeddings_body(&in, &g, s->opts.embedding_dim, &out->len);
    } else if (!in.stream) {
        out->status = 200;
        out->ctype = CT_JSON;
        out->body = mw_openai_completion_body(&in, &g, NULL, &out->len);
    } else {
        struct buf b = BUF_INIT(APIX_TEXT_MAX);
        size_t cap = MW_SSE_EVENT_MIN + strlen(id) + strlen(g.model) + 256;
        char *ev = malloc(cap);
        int n;
        if (ev != NULL && ep == MW_EP_CHAT && (n = mw_openai_sse_role(&in, &g, ev, cap)) > 0)
            (void)buf_append(&b, ev, (size_t)n);
        for (uint64_t i = 0; ev != NULL && i < g.n_tokens; i++)
            if ((n = mw_openai_sse_token(&in, &g, i, ev, cap)) > 0)
                (void)buf_append(&b, ev, (size_t)n);
        if (ev != NULL && in.include_usage && (n = mw_openai_sse_usage(&in, &g, ev, cap)) > 0)
            (void)buf_append(&b, ev, (size_t)n);
        if (ev != NULL && (n = mw_openai_sse_done(ev, cap)) > 0)
            (void)buf_append(&b, ev, (size_t)n);
        free(ev);
        reply_sse(out, &b);
    }
    if (out->body == NULL)
        reply_error(out, 500, "mock worker: out of memory");
    mw_infer_fini(&in);
}

void mw_apix_invocations(struct mw_server *s, const char *body, size_t len, json_t *root,
                         struct mw_api_reply *out)
{
    /* vLLM's order: chat and completion first, then the pooling types. */
    if (json_is_array(json_object_get(root, "messages")))
        answer_openai(s, MW_EP_CHAT, body, len, out);
    else if (json_object_get(root, "prompt") != NULL)
        answer_openai(s, MW_EP_COMPLETIONS, body, len, out);
    else if (json_object_get(root, "input") != NULL)
        answer_openai(s, MW_EP_EMBEDDINGS, body, len, out);
    else
        reply_error(out, 400,
                    "Cannot find suitable handler for request. Expected one of: "
                    "['ChatCompletionRequest', 'CompletionRequest', 'EmbeddingRequest']");
}

/* ---- render ------------------------------------------------------------------------------ */

/* A GenerateRequest for the prompt text (its tokens by the mock's rule). */
static json_t *generate_request(struct mw_server *s, json_t *root, const struct buf *text)
{
    char id[64];
    new_id(s, "", id, sizeof(id));
    json_t *mt = json_object_get(root, "max_completion_tokens");
    if (!json_is_integer(mt))
        mt = json_object_get(root, "max_tokens");
    json_int_t max = json_is_integer(mt) ? json_integer_value(mt) : (json_int_t)APIX_DEFAULT_MAX;
    return json_pack("{s:s, s:o, s:n, s:n, s:n, s:n, s:{s:I}, s:s, s:b, s:n, s:O?, s:I, s:n, s:n}",
                     "request_id", id, "token_ids",
                     token_ids_of(text->data != NULL ? text->data : "", text->len),
                     "assistant_tokens_mask", "token_offsets", "features", "content_parts",
                     "sampling_params", "max_tokens", max, "model", model_name(s, root), "stream",
                     0, "stream_options", "cache_salt", json_object_get(root, "cache_salt"),
                     "priority", (json_int_t)0, "kv_transfer_params", "ec_transfer_params");
}

void mw_apix_render(struct mw_server *s, enum mw_api api, json_t *root, struct mw_api_reply *out)
{
    if (!model_check(s, json_object_get(root, "model"), out))
        return;
    struct buf text = BUF_INIT(APIX_TEXT_MAX);
    if (api == MW_API_COMPLETIONS_RENDER) {
        json_t *prompt = json_object_get(root, "prompt");
        json_t *list = json_array();
        if (json_is_string(prompt)) {
            (void)buf_append(&text, json_string_value(prompt), json_string_length(prompt));
            json_array_append_new(list, generate_request(s, root, &text));
        } else if (json_is_array(prompt)) {
            size_t i;
            json_t *p;
            json_array_foreach(prompt, i, p)
            {
                text.len = 0;
                if (json_is_string(p))
                    (void)buf_append(&text, json_string_value(p), json_string_length(p));
                json_array_append_new(list, generate_request(s, root, &text));
            }
        }
        buf_fini(&text);
        if (json_array_size(list) == 0) {
            json_decref(list);
            reply_error(out, 400, "'prompt' is required");
            return;
        }
        reply_json(out, 200, list);
        return;
    }
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages)) {
        buf_fini(&text);
        reply_error(out, 400, "'messages' is required");
        return;
    }
    if (api == MW_API_MESSAGES_RENDER) {
        json_t *system = json_object_get(root, "system");
        if (system != NULL) {
            (void)buf_append(&text, "system", 6);
            content_text(&text, system);
        }
    }
    messages_text(&text, messages);
    json_t *r = generate_request(s, root, &text);
    buf_fini(&text);
    reply_json(out, 200, r);
}

/* ---- token in, token out ------------------------------------------------------------------ */

void mw_apix_generate(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    if (!model_check(s, json_object_get(root, "model"), out))
        return;
    json_t *ids = json_object_get(root, "token_ids");
    json_t *sp = json_object_get(root, "sampling_params");
    bool ok = json_is_array(ids) && json_array_size(ids) > 0 && json_is_object(sp);
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) ok = ok && json_is_integer(v) && json_integer_value(v) >= 0;
    if (!ok) {
        reply_error(out, 400,
                    "'token_ids' must be a non-empty list of non-negative integers and "
                    "'sampling_params' an object");
        return;
    }
    json_t *mt = json_object_get(sp, "max_tokens");
    uint64_t n = json_is_integer(mt) && json_integer_value(mt) >= 0
                     ? (uint64_t)json_integer_value(mt)
                     : APIX_DEFAULT_MAX;
    char *prompt = json_dumps(ids, JSON_COMPACT);
    uint64_t h = XXH3_64bits_withSeed(prompt != NULL ? prompt : "",
                                      prompt != NULL ? strlen(prompt) : 0, s->opts.seed);
    free(prompt);
    json_t *rid = json_object_get(root, "request_id");
    char id[64];
    if (json_is_string(rid))
        snprintf(id, sizeof(id), "%.63s", json_string_value(rid));
    else
        new_id(s, "", id, sizeof(id));
    json_t *out_ids = json_array();
    for (uint64_t k = 0; k < n; k++)
        json_array_append_new(out_ids, json_integer((json_int_t)((h >> (k % 48)) & 0x7fff)));
    uint64_t prompt_tokens = json_array_size(ids);
    if (!json_is_true(json_object_get(root, "stream"))) {
        reply_json(out, 200,
                   json_pack("{s:s, s:s, s:I, s:[{s:i, s:n, s:s, s:o, s:n, s:n}], s:o, s:n, s:n, "
                             "s:n}",
                             "request_id", id, "model", model_name(s, root), "created",
                             (json_int_t)time(NULL), "choices", "index", 0, "logprobs",
                             "finish_reason", json_is_integer(mt) ? "length" : "stop", "token_ids",
                             out_ids, "routed_experts", "sampling_mask", "usage",
                             usage_of(prompt_tokens, n), "prompt_logprobs", "kv_transfer_params",
                             "ec_transfer_params"));
        return;
    }
    struct buf b = BUF_INIT(APIX_TEXT_MAX);
    json_array_foreach(out_ids, i, v)
    {
        bool last = i + 1 == n;
        sse_data(&b, json_pack("{s:s, s:[{s:i, s:n, s:s?, s:[O], s:n, s:n}], s:n}", "request_id",
                               id, "choices", "index", 0, "logprobs", "finish_reason",
                               last ? (json_is_integer(mt) ? "length" : "stop") : NULL, "token_ids",
                               v, "routed_experts", "sampling_mask", "usage"));
    }
    json_decref(out_ids);
    (void)buf_append(&b, "data: [DONE]\n\n", 14);
    reply_sse(out, &b);
}

/* ---- audio ----------------------------------------------------------------------------------- */

/* The part named name: its contents (between its blank line and the next
 * delimiter) into *at, *n; false when absent. */
static bool form_part(const char *body, size_t len, const char *delim, size_t dlen,
                      const char *name, const char **at, size_t *n)
{
    char want[96];
    snprintf(want, sizeof(want), "name=\"%s\"", name);
    const char *end = body + len;
    for (const char *p = memmem(body, len, delim, dlen); p != NULL;) {
        const char *hdr_end = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (hdr_end == NULL)
            return false;
        const char *next = memmem(hdr_end, (size_t)(end - hdr_end), delim, dlen);
        if (next == NULL)
            return false;
        const char *hit = memmem(p, (size_t)(hdr_end - p), want, strlen(want));
        if (hit != NULL) {
            *at = hdr_end + 4;
            *n = (size_t)(next - *at) >= 2 ? (size_t)(next - *at) - 2 : 0; /* its CRLF */
            return true;
        }
        p = next;
    }
    return false;
}

void mw_apix_audio(struct mw_server *s, enum mw_api api, const char *body, size_t len,
                   struct mw_api_reply *out)
{
    size_t dlen = body != NULL ? strcspn(body, "\r") : 0;
    if (body == NULL || dlen < 3 || dlen >= len || strncmp(body, "--", 2) != 0) {
        reply_error(out, 400, "There was an error parsing the body");
        return;
    }
    const char *file = NULL, *model = NULL, *stream = NULL;
    size_t file_len = 0, model_len = 0, stream_len = 0;
    if (!form_part(body, len, body, dlen, "file", &file, &file_len)) {
        reply_error(out, 400, "Field required: file");
        return;
    }
    bool has_model = form_part(body, len, body, dlen, "model", &model, &model_len);
    bool streamed = form_part(body, len, body, dlen, "stream", &stream, &stream_len) &&
                    stream_len == 4 && strncmp(stream, "true", 4) == 0;
    char name[128];
    snprintf(name, sizeof(name), "%.*s", has_model ? (int)(model_len < 127 ? model_len : 127) : 0,
             has_model ? model : "");
    json_t *m = has_model ? json_string(name) : NULL;
    bool ok = model_check(s, m, out);
    json_decref(m);
    if (!ok)
        return;
    uint64_t h = XXH3_64bits_withSeed(file, file_len, s->opts.seed);
    struct buf text = BUF_INIT(APIX_TEXT_MAX);
    uint64_t words = s->opts.output_tokens > 0 ? s->opts.output_tokens : 1;
    json_t *deltas = json_array();
    for (uint64_t i = 0; i < words; i++) {
        const char *w = mw_openai_token_text(s->opts.seed, h, i);
        (void)buf_append(&text, w, strlen(w));
        json_array_append_new(deltas, json_string(w));
    }
    (void)buf_append(&text, "", 1);
    bool translation = api == MW_API_TRANSLATIONS;
    const char *served = name[0] != '\0' ? name : s->opts.model;
    if (!streamed) {
        uint64_t seconds = (file_len + APIX_AUDIO_BYTES_S - 1) / APIX_AUDIO_BYTES_S;
        json_t *r = translation ? json_pack("{s:s}", "text", text.data != NULL ? text.data : "")
                                : json_pack("{s:s, s:{s:s, s:I}}", "text",
                                            text.data != NULL ? text.data : "", "usage", "type",
                                            "duration", "seconds", (json_int_t)seconds);
        buf_fini(&text);
        json_decref(deltas);
        reply_json(out, 200, r);
        return;
    }
    buf_fini(&text);
    char id[64];
    new_id(s, translation ? "trsl-" : "trsc-", id, sizeof(id));
    struct buf b = BUF_INIT(APIX_TEXT_MAX);
    size_t i;
    json_t *w;
    json_array_foreach(deltas, i, w)
    {
        bool last = i + 1 == json_array_size(deltas);
        sse_data(&b, json_pack("{s:s, s:s, s:I, s:s, s:[{s:{s:O}, s:s?, s:n}]}", "id", id, "object",
                               translation ? "translation.chunk" : "transcription.chunk", "created",
                               (json_int_t)time(NULL), "model", served, "choices", "delta",
                               "content", w, "finish_reason", last ? "stop" : NULL, "stop_reason"));
    }
    json_decref(deltas);
    (void)buf_append(&b, "data: [DONE]\n\n", 14);
    reply_sse(out, &b);
}
