/*
 * The mock worker's Responses, Messages, pooling and tokenizer endpoints
 * (see api.h). Every answer is built whole with jansson; a stream is the
 * whole event sequence written at once with an event-stream content type,
 * which a client reads exactly as it reads vLLM's (vLLM flushes each event
 * on its own; nothing here depends on the split).
 *
 * The response store maps an id to the stored response object and the
 * conversation text so far (prompt plus answer), which is what vLLM
 * prepends when a request names it as previous_response_id. It is bounded
 * (MW_API_STORE_MAX, oldest dropped first); vLLM's never evicts, but no
 * test stores that many.
 */
#include "tests/mockworker/api.h"

#include "tests/mockworker/api_extra.h"

#include "tests/mockworker/lora.h"
#include "tests/mockworker/request.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define CT_JSON "application/json"
#define CT_SSE  "text/event-stream; charset=utf-8"

#define MW_API_STORE_MAX 4096u
#define MW_API_TEXT_MAX  (8u << 20) /* conversation text kept per response */

/* ---- the response store ---------------------------------------------------------- */

struct mw_stored {
    char id[MW_API_ID_MAX];
    json_t *resp;
    char *conv; /* the conversation text, prompt and answer */
    size_t conv_len;
};

static pthread_mutex_t mw_store_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mw_stored mw_store[MW_API_STORE_MAX];
static size_t mw_store_next; /* the slot written next (oldest first once full) */

static void mw_stored_clear(struct mw_stored *e)
{
    json_decref(e->resp);
    free(e->conv);
    memset(e, 0, sizeof(*e));
}

/* Takes resp (a reference) and conv (owned). */
static void mw_store_put(const char *id, json_t *resp, char *conv, size_t conv_len)
{
    pthread_mutex_lock(&mw_store_lock);
    struct mw_stored *e = &mw_store[mw_store_next];
    mw_store_next = (mw_store_next + 1) % MW_API_STORE_MAX;
    mw_stored_clear(e);
    snprintf(e->id, sizeof(e->id), "%s", id);
    e->resp = resp;
    e->conv = conv;
    e->conv_len = conv_len;
    pthread_mutex_unlock(&mw_store_lock);
}

/* A copy of the stored response (new reference) and, when conv is not
 * NULL, of its conversation text; NULL when unknown. */
static json_t *mw_store_get(const char *id, struct buf *conv)
{
    json_t *out = NULL;
    pthread_mutex_lock(&mw_store_lock);
    for (size_t i = 0; i < MW_API_STORE_MAX; i++) {
        struct mw_stored *e = &mw_store[i];
        if (e->resp == NULL || strcmp(e->id, id) != 0)
            continue;
        out = json_deep_copy(e->resp);
        if (conv != NULL && e->conv_len > 0)
            (void)buf_append(conv, e->conv, e->conv_len);
        break;
    }
    pthread_mutex_unlock(&mw_store_lock);
    return out;
}

void mw_api_reset(void)
{
    pthread_mutex_lock(&mw_store_lock);
    for (size_t i = 0; i < MW_API_STORE_MAX; i++)
        mw_stored_clear(&mw_store[i]);
    mw_store_next = 0;
    pthread_mutex_unlock(&mw_store_lock);
}

/* ---- routes ------------------------------------------------------------------------ */

bool mw_api_route(const char *url, const char *method, enum mw_api *api, char id[MW_API_ID_MAX],
                  const char **allow, bool *method_ok)
{
    static const struct {
        const char *path;
        enum mw_api api;
    } exact[] = {
        {"/v1/responses", MW_API_RESPONSES},
        {"/v1/messages", MW_API_MESSAGES},
        {"/v1/messages/count_tokens", MW_API_COUNT_TOKENS},
        {"/rerank", MW_API_RERANK},
        {"/v1/rerank", MW_API_RERANK},
        {"/v2/rerank", MW_API_RERANK},
        {"/score", MW_API_SCORE},
        {"/v1/score", MW_API_SCORE},
        {"/pooling", MW_API_POOLING},
        {"/classify", MW_API_CLASSIFY},
        {"/tokenize", MW_API_TOKENIZE},
        {"/detokenize", MW_API_DETOKENIZE},
        {"/v1/load_lora_adapter", MW_API_LOAD_LORA},
        {"/v1/unload_lora_adapter", MW_API_UNLOAD_LORA},
        {"/v2/embed", MW_API_EMBED_V2},
        {"/invocations", MW_API_INVOCATIONS},
        {"/v1/chat/completions/render", MW_API_CHAT_RENDER},
        {"/v1/completions/render", MW_API_COMPLETIONS_RENDER},
        {"/v1/messages/render", MW_API_MESSAGES_RENDER},
        {"/inference/v1/generate", MW_API_GENERATE},
        {"/v1/audio/transcriptions", MW_API_TRANSCRIPTIONS},
        {"/v1/audio/translations", MW_API_TRANSLATIONS},
    };
    bool post = strcmp(method, "POST") == 0;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    id[0] = '\0';
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        if (strcmp(url, exact[i].path) != 0)
            continue;
        *api = exact[i].api;
        *allow = "POST";
        *method_ok = post;
        return true;
    }
    static const char prefix[] = "/v1/responses/";
    if (strncmp(url, prefix, sizeof(prefix) - 1) != 0)
        return false;
    const char *seg = url + sizeof(prefix) - 1;
    size_t n = strcspn(seg, "/");
    if (n == 0 || n >= MW_API_ID_MAX)
        return false;
    if (seg[n] == '\0') {
        *api = MW_API_RESPONSES_GET;
        *allow = "GET, HEAD";
        *method_ok = get;
    } else if (strcmp(seg + n, "/cancel") == 0) {
        *api = MW_API_RESPONSES_CANCEL;
        *allow = "POST";
        *method_ok = post;
    } else {
        return false;
    }
    memcpy(id, seg, n);
    id[n] = '\0';
    return true;
}

/* ---- answers ------------------------------------------------------------------------ */

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

/* Anthropic's error shape, as vLLM's Messages endpoints answer. */
static void reply_anthropic_error(struct mw_api_reply *out, int status, const char *msg)
{
    const char *type = status == 404   ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status >= 500 ? "api_error"
                                       : "invalid_request_error";
    reply_json(
        out, status,
        json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", msg));
}

static void reply_not_found(struct mw_api_reply *out, const char *id)
{
    char msg[MW_API_ID_MAX + 64];
    snprintf(msg, sizeof(msg), "Response with id '%s' not found.", id);
    reply_json(out, 404,
               json_pack("{s:{s:s, s:s, s:s, s:i}}", "error", "message", msg, "type",
                         "invalid_request_error", "param", "response_id", "code", 404));
}

static void new_id(struct mw_server *s, const char *prefix, char *out, size_t cap)
{
    uint64_t u = atomic_fetch_add_explicit(&s->unique, 1, memory_order_relaxed);
    uint64_t a = XXH3_64bits_withSeed(&u, sizeof(u), (uint64_t)s->port);
    uint64_t b = XXH3_64bits_withSeed(&u, sizeof(u), a ^ (uint64_t)time(NULL));
    snprintf(out, cap, "%s%016" PRIx64 "%016" PRIx64, prefix, a, b);
}

/* NULL or absent: the default model; else it must be a name this worker serves. */
static bool model_ok(const struct mw_server *s, json_t *model)
{
    if (model == NULL || json_is_null(model))
        return true;
    if (!json_is_string(model))
        return false;
    for (size_t i = 0; i < s->ocfg.n_names; i++)
        if (strcmp(s->ocfg.names[i], json_string_value(model)) == 0)
            return true;
    return mw_lora_has(json_string_value(model));
}

static const char *model_name(const struct mw_server *s, json_t *root)
{
    json_t *m = json_object_get(root, "model");
    return json_is_string(m) ? json_string_value(m) : s->opts.model;
}

static void text_of(struct buf *b, json_t *content)
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

/* Role then content of each message or item, no separator (the chat rule). */
static void items_text(struct buf *b, json_t *items)
{
    size_t i;
    json_t *m;
    json_array_foreach(items, i, m)
    {
        json_t *role = json_object_get(m, "role");
        if (json_is_string(role))
            (void)buf_append(b, json_string_value(role), json_string_length(role));
        text_of(b, json_object_get(m, "content"));
    }
}

static uint64_t tokens_of(size_t bytes)
{
    return (bytes + 3) / 4;
}

/* The answer's n words, deterministic in the prompt. */
static char *answer_text(const struct mw_server *s, const struct buf *prompt, uint64_t n,
                         json_t **deltas)
{
    uint64_t h = XXH3_64bits(prompt->data != NULL ? prompt->data : "", prompt->len);
    struct buf b = BUF_INIT(MW_API_TEXT_MAX);
    if (deltas != NULL)
        *deltas = json_array();
    for (uint64_t i = 0; i < n; i++) {
        const char *w = mw_openai_token_text(s->opts.seed, h, i);
        (void)buf_append(&b, w, strlen(w));
        if (deltas != NULL)
            json_array_append_new(*deltas, json_string(w));
    }
    (void)buf_append(&b, "", 1);
    return b.data != NULL ? b.data : strdup("");
}

static uint64_t max_tokens_of(const struct mw_server *s, json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        return (uint64_t)json_integer_value(v);
    return s->opts.output_tokens;
}

/* Appends "event: type\ndata: obj\n\n" (obj's reference taken). */
static void sse_event(struct buf *b, const char *type, json_t *obj)
{
    char *data = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (data == NULL)
        return;
    (void)buf_append(b, "event: ", 7);
    (void)buf_append(b, type, strlen(type));
    (void)buf_append(b, "\ndata: ", 7);
    (void)buf_append(b, data, strlen(data));
    (void)buf_append(b, "\n\n", 2);
    free(data);
}

static void reply_sse(struct mw_api_reply *out, struct buf *b)
{
    out->status = 200;
    out->ctype = CT_SSE;
    if (buf_error(b) != 0) {
        buf_fini(b);
        out->body = NULL;
        out->len = 1;
        return;
    }
    out->body = buf_detach(b, &out->len);
}

/* ---- Responses ---------------------------------------------------------------------- */

static json_t *response_message(const char *msg_id, const char *text, const char *status)
{
    json_t *content = json_array();
    if (text != NULL)
        json_array_append_new(content, json_pack("{s:s, s:s, s:[]}", "type", "output_text", "text",
                                                 text, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", msg_id, "type", "message", "role",
                     "assistant", "status", status, "content", content);
}

static json_t *response_object(const char *id, const char *model, json_t *root, const char *status,
                               json_t *output, json_t *usage)
{
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer((json_int_t)time(NULL)));
    json_object_set_new(r, "model", json_string(model));
    json_object_set_new(r, "status", json_string(status));
    json_object_set_new(r, "output", output);
    json_object_set_new(r, "usage", usage != NULL ? usage : json_null());
    json_t *instr = json_object_get(root, "instructions");
    json_object_set_new(r, "instructions", json_is_string(instr) ? json_copy(instr) : json_null());
    json_t *prev = json_object_get(root, "previous_response_id");
    json_object_set_new(r, "previous_response_id",
                        json_is_string(prev) ? json_copy(prev) : json_null());
    json_object_set_new(r, "store", json_boolean(!json_is_false(json_object_get(root, "store"))));
    json_object_set_new(r, "background", json_false());
    json_object_set_new(r, "error", json_null());
    json_object_set_new(r, "incomplete_details", json_null());
    json_object_set_new(r, "max_output_tokens", json_null());
    json_object_set_new(r, "metadata", json_object());
    json_object_set_new(r, "parallel_tool_calls", json_true());
    json_object_set_new(r, "temperature", json_real(1.0));
    json_object_set_new(r, "top_p", json_real(1.0));
    json_object_set_new(r, "tool_choice", json_string("auto"));
    json_object_set_new(r, "tools", json_array());
    json_object_set_new(r, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(r, "truncation", json_string("disabled"));
    return r;
}

static void handle_responses(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    if (!model_ok(s, json_object_get(root, "model"))) {
        reply_error(out, 404, "The model does not exist.");
        return;
    }
    json_t *input = json_object_get(root, "input");
    if (!json_is_string(input) && !json_is_array(input)) {
        reply_error(out, 400, "'input' must be a string or a list of items");
        return;
    }
    struct buf prompt = BUF_INIT(MW_API_TEXT_MAX);
    json_t *prev = json_object_get(root, "previous_response_id");
    if (json_is_string(prev)) {
        json_t *old = mw_store_get(json_string_value(prev), &prompt);
        if (old == NULL) {
            buf_fini(&prompt);
            reply_not_found(out, json_string_value(prev));
            return;
        }
        json_decref(old);
    }
    json_t *instr = json_object_get(root, "instructions");
    if (json_is_string(instr)) {
        (void)buf_append(&prompt, "system", 6);
        (void)buf_append(&prompt, json_string_value(instr), json_string_length(instr));
    }
    if (json_is_string(input)) {
        (void)buf_append(&prompt, "user", 4);
        (void)buf_append(&prompt, json_string_value(input), json_string_length(input));
    } else {
        items_text(&prompt, input);
    }
    uint64_t n = max_tokens_of(s, root, "max_output_tokens");
    json_t *deltas = NULL;
    char *text = answer_text(s, &prompt, n, &deltas);
    char id[MW_FAULT_ID_MAX], msg_id[64];
    struct mw_faults f;
    mw_fault_state_get(&s->faults, &f);
    if (f.response_id[0] != '\0')
        snprintf(id, sizeof(id), "%s", f.response_id);
    else
        new_id(s, "resp_", id, sizeof(id));
    new_id(s, "msg_", msg_id, sizeof(msg_id));
    const char *model = model_name(s, root);
    uint64_t in_tok = tokens_of(prompt.len);
    json_t *usage = json_pack("{s:I, s:I, s:I, s:{s:i}, s:{s:i}}", "input_tokens",
                              (json_int_t)in_tok, "output_tokens", (json_int_t)n, "total_tokens",
                              (json_int_t)(in_tok + n), "input_tokens_details", "cached_tokens", 0,
                              "output_tokens_details", "reasoning_tokens", 0);
    json_t *output = json_pack("[o]", response_message(msg_id, text, "completed"));
    json_t *resp = response_object(id, model, root, "completed", output, usage);
    if (!json_is_false(json_object_get(root, "store"))) {
        (void)buf_append(&prompt, "assistant", 9);
        (void)buf_append(&prompt, text, strlen(text));
        size_t conv_len = 0;
        char *conv = buf_error(&prompt) == 0 ? buf_detach(&prompt, &conv_len) : NULL;
        mw_store_put(id, json_deep_copy(resp), conv, conv_len);
    }
    buf_fini(&prompt);
    if (!json_is_true(json_object_get(root, "stream"))) {
        json_decref(deltas);
        free(text);
        reply_json(out, 200, resp);
        return;
    }
    struct buf b = BUF_INIT(MW_API_TEXT_MAX);
    json_int_t seq = 0;
    json_t *start = response_object(id, model, root, "in_progress", json_array(), NULL);
    sse_event(&b, "response.created",
              json_pack("{s:s, s:I, s:O}", "type", "response.created", "sequence_number", seq++,
                        "response", start));
    sse_event(&b, "response.in_progress",
              json_pack("{s:s, s:I, s:o}", "type", "response.in_progress", "sequence_number", seq++,
                        "response", start));
    sse_event(&b, "response.output_item.added",
              json_pack("{s:s, s:I, s:i, s:o}", "type", "response.output_item.added",
                        "sequence_number", seq++, "output_index", 0, "item",
                        response_message(msg_id, NULL, "in_progress")));
    sse_event(&b, "response.content_part.added",
              json_pack("{s:s, s:I, s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "type",
                        "response.content_part.added", "sequence_number", seq++, "item_id", msg_id,
                        "output_index", 0, "content_index", 0, "part", "type", "output_text",
                        "text", "", "annotations"));
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d)
    {
        sse_event(&b, "response.output_text.delta",
                  json_pack("{s:s, s:I, s:s, s:i, s:i, s:O, s:[]}", "type",
                            "response.output_text.delta", "sequence_number", seq++, "item_id",
                            msg_id, "output_index", 0, "content_index", 0, "delta", d, "logprobs"));
    }
    sse_event(&b, "response.output_text.done",
              json_pack("{s:s, s:I, s:s, s:i, s:i, s:s, s:[]}", "type", "response.output_text.done",
                        "sequence_number", seq++, "item_id", msg_id, "output_index", 0,
                        "content_index", 0, "text", text, "logprobs"));
    sse_event(&b, "response.content_part.done",
              json_pack("{s:s, s:I, s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "type",
                        "response.content_part.done", "sequence_number", seq++, "item_id", msg_id,
                        "output_index", 0, "content_index", 0, "part", "type", "output_text",
                        "text", text, "annotations"));
    sse_event(&b, "response.output_item.done",
              json_pack("{s:s, s:I, s:i, s:o}", "type", "response.output_item.done",
                        "sequence_number", seq++, "output_index", 0, "item",
                        response_message(msg_id, text, "completed")));
    sse_event(&b, "response.completed",
              json_pack("{s:s, s:I, s:o}", "type", "response.completed", "sequence_number", seq++,
                        "response", resp));
    json_decref(deltas);
    free(text);
    reply_sse(out, &b);
}

static void handle_response_get(const char *id, struct mw_api_reply *out)
{
    json_t *r = mw_store_get(id, NULL);
    if (r == NULL) {
        reply_not_found(out, id);
        return;
    }
    reply_json(out, 200, r);
}

static void handle_response_cancel(const char *id, struct mw_api_reply *out)
{
    json_t *r = mw_store_get(id, NULL);
    if (r == NULL) {
        reply_not_found(out, id);
        return;
    }
    json_decref(r);
    /* Only a background response can be cancelled; the mock runs none. */
    reply_error(out, 400, "Cannot cancel a synchronous response.");
}

/* ---- Messages -------------------------------------------------------------------------- */

static void messages_prompt(json_t *root, struct buf *prompt)
{
    json_t *system = json_object_get(root, "system");
    if (json_is_string(system) || json_is_array(system)) {
        (void)buf_append(prompt, "system", 6);
        text_of(prompt, system);
    }
    items_text(prompt, json_object_get(root, "messages"));
}

static void handle_messages(struct mw_server *s, json_t *root, bool count, struct mw_api_reply *out)
{
    if (!model_ok(s, json_object_get(root, "model"))) {
        reply_anthropic_error(out, 404, "The model does not exist.");
        return;
    }
    if (!json_is_array(json_object_get(root, "messages"))) {
        reply_anthropic_error(out, 400, "messages: Field required");
        return;
    }
    struct buf prompt = BUF_INIT(MW_API_TEXT_MAX);
    messages_prompt(root, &prompt);
    uint64_t in_tok = tokens_of(prompt.len);
    if (count) {
        buf_fini(&prompt);
        reply_json(out, 200, json_pack("{s:I}", "input_tokens", (json_int_t)in_tok));
        return;
    }
    json_t *mt = json_object_get(root, "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
        buf_fini(&prompt);
        reply_anthropic_error(out, 400, "max_tokens: Field required");
        return;
    }
    uint64_t n = (uint64_t)json_integer_value(mt);
    json_t *deltas = NULL;
    char *text = answer_text(s, &prompt, n, &deltas);
    buf_fini(&prompt);
    char id[64];
    new_id(s, "msg_", id, sizeof(id));
    const char *model = model_name(s, root);
    if (!json_is_true(json_object_get(root, "stream"))) {
        json_decref(deltas);
        reply_json(out, 200,
                   json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s}], s:s, s:n, s:{s:I, s:I}}", "id",
                             id, "type", "message", "role", "assistant", "model", model, "content",
                             "type", "text", "text", text, "stop_reason", "max_tokens",
                             "stop_sequence", "usage", "input_tokens", (json_int_t)in_tok,
                             "output_tokens", (json_int_t)n));
        free(text);
        return;
    }
    struct buf b = BUF_INIT(MW_API_TEXT_MAX);
    sse_event(&b, "message_start",
              json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:i}}}", "type",
                        "message_start", "message", "id", id, "type", "message", "role",
                        "assistant", "model", model, "content", "stop_reason", "stop_sequence",
                        "usage", "input_tokens", (json_int_t)in_tok, "output_tokens", 0));
    sse_event(&b, "content_block_start",
              json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start", "index", 0,
                        "content_block", "type", "text", "text", ""));
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d)
    {
        sse_event(&b, "content_block_delta",
                  json_pack("{s:s, s:i, s:{s:s, s:O}}", "type", "content_block_delta", "index", 0,
                            "delta", "type", "text_delta", "text", d));
    }
    sse_event(&b, "content_block_stop",
              json_pack("{s:s, s:i}", "type", "content_block_stop", "index", 0));
    sse_event(&b, "message_delta",
              json_pack("{s:s, s:{s:s, s:n}, s:{s:I}}", "type", "message_delta", "delta",
                        "stop_reason", "max_tokens", "stop_sequence", "usage", "output_tokens",
                        (json_int_t)n));
    sse_event(&b, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    json_decref(deltas);
    free(text);
    reply_sse(out, &b);
}

/* ---- pooling and the tokenizer ------------------------------------------------------------- */

/* A deterministic score in [0, 1) for a pair of texts. */
static double pair_score(json_t *a, json_t *b)
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL)
        return 0.0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, json_string_value(a), json_string_length(a));
    XXH3_64bits_update(st, "\x1f", 1);
    XXH3_64bits_update(st, json_string_value(b), json_string_length(b));
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return (double)(h >> 11) / 9007199254740992.0;
}

static json_t *pool_usage(uint64_t tokens)
{
    return json_pack("{s:I, s:I, s:i}", "prompt_tokens", (json_int_t)tokens, "total_tokens",
                     (json_int_t)tokens, "completion_tokens", 0);
}

static json_t *strings_of(json_t *v)
{
    if (json_is_string(v))
        return json_pack("[O]", v);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return NULL;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_string(x)) return NULL;
    return json_incref(v);
}

static int by_score_desc(const void *pa, const void *pb)
{
    double a = json_real_value(json_object_get(*(json_t *const *)pa, "relevance_score"));
    double b = json_real_value(json_object_get(*(json_t *const *)pb, "relevance_score"));
    return a < b ? 1 : a > b ? -1 : 0;
}

static void handle_rerank(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    json_t *query = json_object_get(root, "query");
    json_t *docs = strings_of(json_object_get(root, "documents"));
    if (!json_is_string(query) || docs == NULL) {
        json_decref(docs);
        reply_error(out, 400, "'query' must be a string and 'documents' a list of strings");
        return;
    }
    size_t n = json_array_size(docs);
    json_t **rows = calloc(n, sizeof(*rows));
    if (rows == NULL) {
        json_decref(docs);
        reply_error(out, 500, "out of memory");
        return;
    }
    uint64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(docs, i);
        tokens += tokens_of(json_string_length(query) + json_string_length(d));
        rows[i] = json_pack("{s:I, s:{s:O}, s:f}", "index", (json_int_t)i, "document", "text", d,
                            "relevance_score", pair_score(query, d));
    }
    qsort(rows, n, sizeof(*rows), by_score_desc);
    json_t *top = json_object_get(root, "top_n");
    size_t keep =
        json_is_integer(top) && json_integer_value(top) > 0 && (size_t)json_integer_value(top) < n
            ? (size_t)json_integer_value(top)
            : n;
    json_t *results = json_array();
    for (size_t i = 0; i < n; i++) {
        if (i < keep)
            json_array_append_new(results, rows[i]);
        else
            json_decref(rows[i]);
    }
    free(rows);
    json_decref(docs);
    char id[64];
    new_id(s, "rerank-", id, sizeof(id));
    reply_json(out, 200,
               json_pack("{s:s, s:s, s:{s:I}, s:o}", "id", id, "model", model_name(s, root),
                         "usage", "total_tokens", (json_int_t)tokens, "results", results));
}

static void handle_score(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    json_t *t1 = json_object_get(root, "text_1");
    json_t *t2 = json_object_get(root, "text_2");
    if (t1 == NULL)
        t1 = json_object_get(root, "queries");
    if (t2 == NULL)
        t2 = json_object_get(root, "documents");
    if (t2 == NULL)
        t2 = json_object_get(root, "items");
    json_t *a = strings_of(t1), *b = strings_of(t2);
    size_t na = json_array_size(a), nb = json_array_size(b);
    if (a == NULL || b == NULL || (na != 1 && na != nb)) {
        json_decref(a);
        json_decref(b);
        reply_error(out, 400, "'text_1' and 'text_2' must be strings or lists of equal length");
        return;
    }
    json_t *data = json_array();
    uint64_t tokens = 0;
    for (size_t i = 0; i < nb; i++) {
        json_t *x = json_array_get(a, na == 1 ? 0 : i), *y = json_array_get(b, i);
        tokens += tokens_of(json_string_length(x) + json_string_length(y));
        json_array_append_new(data, json_pack("{s:I, s:s, s:f}", "index", (json_int_t)i, "object",
                                              "score", "score", pair_score(x, y)));
    }
    json_decref(a);
    json_decref(b);
    char id[64];
    new_id(s, "score-", id, sizeof(id));
    reply_json(out, 200,
               json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "list", "created",
                         (json_int_t)time(NULL), "model", model_name(s, root), "data", data,
                         "usage", pool_usage(tokens)));
}

static void handle_pooling(struct mw_server *s, json_t *root, bool classify,
                           struct mw_api_reply *out)
{
    json_t *in = strings_of(json_object_get(root, "input"));
    if (in == NULL) {
        reply_error(out, 400, "'input' must be a string or a list of strings");
        return;
    }
    json_t *data = json_array();
    uint64_t tokens = 0;
    size_t i;
    json_t *x;
    json_array_foreach(in, i, x)
    {
        tokens += tokens_of(json_string_length(x));
        uint64_t h =
            XXH3_64bits_withSeed(json_string_value(x), json_string_length(x), s->opts.seed);
        if (classify) {
            double p = (double)(h >> 11) / 9007199254740992.0;
            json_array_append_new(data,
                                  json_pack("{s:I, s:s, s:[f, f], s:i}", "index", (json_int_t)i,
                                            "label", p >= 0.5 ? "LABEL_0" : "LABEL_1", "probs", p,
                                            1.0 - p, "num_classes", 2));
            continue;
        }
        json_t *vec = json_array();
        for (uint32_t k = 0; k < s->opts.embedding_dim; k++)
            json_array_append_new(vec, json_real((double)((h >> (k % 64)) & 0xff) / 255.0));
        json_array_append_new(data, json_pack("{s:I, s:s, s:o}", "index", (json_int_t)i, "object",
                                              "pooling", "data", vec));
    }
    json_decref(in);
    char id[64];
    new_id(s, classify ? "classify-" : "pool-", id, sizeof(id));
    reply_json(out, 200,
               json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "list", "created",
                         (json_int_t)time(NULL), "model", model_name(s, root), "data", data,
                         "usage", pool_usage(tokens)));
}

static void handle_tokenize(struct mw_server *s, json_t *root, struct mw_api_reply *out)
{
    struct buf text = BUF_INIT(MW_API_TEXT_MAX);
    json_t *prompt = json_object_get(root, "prompt");
    json_t *messages = json_object_get(root, "messages");
    if (json_is_string(prompt)) {
        (void)buf_append(&text, json_string_value(prompt), json_string_length(prompt));
    } else if (json_is_array(messages)) {
        items_text(&text, messages);
    } else {
        reply_error(out, 400, "either 'prompt' or 'messages' is required");
        return;
    }
    json_t *tokens = json_array();
    for (size_t i = 0; i < text.len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4 && i + k < text.len; k++)
            v |= (uint32_t)(unsigned char)text.data[i + k] << (8 * k);
        json_array_append_new(tokens, json_integer((json_int_t)v));
    }
    buf_fini(&text);
    reply_json(out, 200,
               json_pack("{s:I, s:I, s:o, s:n}", "count", (json_int_t)json_array_size(tokens),
                         "max_model_len", (json_int_t)s->opts.max_model_len, "tokens", tokens,
                         "token_strs"));
}

static void handle_detokenize(json_t *root, struct mw_api_reply *out)
{
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        reply_error(out, 400, "'tokens' must be a list of token ids");
        return;
    }
    struct buf text = BUF_INIT(MW_API_TEXT_MAX);
    size_t i;
    json_t *t;
    json_array_foreach(tokens, i, t)
    {
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) > (json_int_t)UINT32_MAX) {
            buf_fini(&text);
            reply_error(out, 400, "token ids must be integers in [0, 2^32)");
            return;
        }
        uint32_t v = (uint32_t)json_integer_value(t);
        for (int k = 0; k < 4 && (v >> (8 * k)) != 0; k++) {
            char c = (char)((v >> (8 * k)) & 0xff);
            (void)buf_append(&text, &c, 1);
        }
    }
    (void)buf_append(&text, "", 1);
    reply_json(out, 200, json_pack("{s:s}", "prompt", text.data != NULL ? text.data : ""));
    buf_fini(&text);
}

/* ---- LoRA adapters at run time ------------------------------------------------------- */

static void reply_text(struct mw_api_reply *out, int status, const char *text)
{
    out->status = status;
    out->ctype = "text/plain; charset=utf-8";
    out->body = strdup(text);
    out->len = out->body != NULL ? strlen(text) : 1;
}

/* vLLM's load/unload answers: plain text on success, its error body otherwise. */
static void handle_lora(json_t *root, bool load, struct mw_api_reply *out)
{
    json_t *name = json_object_get(root, "lora_name");
    json_t *path = json_object_get(root, "lora_path");
    if (!json_is_string(name) || (load && !json_is_string(path))) {
        reply_error(out, 400,
                    load ? "Both 'lora_name' and 'lora_path' must be provided."
                         : "'lora_name' needs to be provided to unload a LoRA adapter.");
        return;
    }
    char msg[512];
    const char *n = json_string_value(name);
    if (load) {
        int rc = mw_lora_load(n, json_string_value(path));
        if (rc == -EEXIST) {
            snprintf(msg, sizeof(msg), "The lora adapter '%s' has already been loaded.", n);
            reply_error(out, 400, msg);
            return;
        }
        if (rc != 0) {
            snprintf(msg, sizeof(msg), "Failed to load the lora adapter '%s'.", n);
            reply_error(out, 400, msg);
            return;
        }
        snprintf(msg, sizeof(msg), "Success: LoRA adapter '%s' added successfully.", n);
    } else {
        if (mw_lora_unload(n) != 0) {
            snprintf(msg, sizeof(msg), "The lora adapter '%s' cannot be found.", n);
            reply_error(out, 404, msg);
            return;
        }
        snprintf(msg, sizeof(msg), "Success: LoRA adapter '%s' removed successfully.", n);
    }
    reply_text(out, 200, msg);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

void mw_api_handle(struct mw_server *s, enum mw_api api, const char *id, const char *body,
                   size_t len, struct mw_api_reply *out)
{
    memset(out, 0, sizeof(*out));
    if (api == MW_API_RESPONSES_GET) {
        handle_response_get(id, out);
        return;
    }
    if (api == MW_API_RESPONSES_CANCEL) {
        handle_response_cancel(id, out);
        return;
    }
    if (api == MW_API_TRANSCRIPTIONS || api == MW_API_TRANSLATIONS) {
        mw_apix_audio(s, api, body, len, out);
        return;
    }
    bool anthropic = api == MW_API_MESSAGES || api == MW_API_COUNT_TOKENS;
    json_t *root = json_loadb(body != NULL ? body : "", len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        if (anthropic)
            reply_anthropic_error(out, 400, "Invalid JSON body");
        else
            reply_error(out, 400, "Invalid JSON body");
        return;
    }
    switch (api) {
    case MW_API_RESPONSES:
        handle_responses(s, root, out);
        break;
    case MW_API_MESSAGES:
    case MW_API_COUNT_TOKENS:
        handle_messages(s, root, api == MW_API_COUNT_TOKENS, out);
        break;
    case MW_API_RERANK:
        handle_rerank(s, root, out);
        break;
    case MW_API_SCORE:
        handle_score(s, root, out);
        break;
    case MW_API_POOLING:
    case MW_API_CLASSIFY:
        handle_pooling(s, root, api == MW_API_CLASSIFY, out);
        break;
    case MW_API_TOKENIZE:
        handle_tokenize(s, root, out);
        break;
    case MW_API_DETOKENIZE:
        handle_detokenize(root, out);
        break;
    case MW_API_LOAD_LORA:
    case MW_API_UNLOAD_LORA:
        handle_lora(root, api == MW_API_LOAD_LORA, out);
        break;
    case MW_API_EMBED_V2:
        mw_apix_embed_v2(s, root, out);
        break;
    case MW_API_INVOCATIONS:
        mw_apix_invocations(s, body, len, root, out);
        break;
    case MW_API_CHAT_RENDER:
    case MW_API_COMPLETIONS_RENDER:
    case MW_API_MESSAGES_RENDER:
        mw_apix_render(s, api, root, out);
        break;
    case MW_API_GENERATE:
        mw_apix_generate(s, root, out);
        break;
    default:
        reply_error(out, 404, "Not Found");
        break;
    }
    if (out->status == 0)
        reply_error(out, 500, "mock worker: no answer");
    json_decref(root);
}
