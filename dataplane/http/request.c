/*
 * Client requests (see request.h). The body buffer grows by doubling up to
 * dataplane.max_body and no further; bytes past it are counted as "too
 * large" and dropped, so a huge upload costs no memory and gets a 413.
 */
#include "dataplane/http/request.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <xxhash.h>

#include "common/proc.h"
#include "common/rng.h"
#include "common/str.h"
#include "common/token_chain.h"
#include "dataplane/http/form.h"
#include "dataplane/http/header_rules.h"
#include "dataplane/obs/journal.h"
#include "dataplane/http/json_arena.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/routes.h"
#include "dataplane/obs/trace.h"
#include "common/list.h"

#define DP_BODY_RESERVE_MAX   (1u << 20) /* a body's first allocation, at most */
#define DP_ROUTING_TEXT_SLACK 256u       /* routing text beyond the body's size, reserved */

struct dp_request *dp_request_create(struct dp_loop *loop, struct MHD_Connection *conn,
                                     const char *url, const char *method, uint64_t max_body,
                                     dp_request_release_fn release)
{
    struct dp_request *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->loop = loop;
    req->conn = conn;
    req->refs = 1;
    req->client_fd = -1;
    req->phase = DP_REQ_RECEIVING;
    req->start_ms = proc_monotonic_ms();
    const char *id = NULL;
    size_t id_len = 0;
    req->route = dp_route_match(url, &id, &id_len);
    /* An id too long to keep stays empty: refused as malformed (id_route.h). */
    if (id != NULL && id_len < sizeof(req->resp_id))
        memcpy(req->resp_id, id, id_len);
    req->method_ok = dp_route_allows(req->route, method);
    req->shape = dp_route_row(req->route)->body;
    buf_init(&req->body, (size_t)max_body);
    buf_init(&req->routing_text, DP_ROUTING_TEXT_MAX);
    req->release = release;
    list_init(&req->attempt_list);
    req->journal = dp_journal_create(loop, req->route, method);
    return req;
}

void dp_request_ref(struct dp_request *req)
{
    req->refs++;
}

void dp_request_unref(struct dp_request *req)
{
    if (--req->refs > 0)
        return;
    buf_fini(&req->body);
    buf_fini(&req->routing_text);
    free(req->reply_body);
    free(req->resp_hdrs);
    curl_slist_free_all(req->up_headers);
    dp_journal_destroy(req->journal);
    dp_form_destroy(req->form);
    req->form = NULL;
    req->journal = NULL;
    req->reply_body = NULL;
    req->resp_hdrs = NULL;
    req->up_headers = NULL;
    req->release(req);
}

/* The first body bytes: the whole body in one allocation when the client
 * said how long it is (up to DP_BODY_RESERVE_MAX, so a Content-Length
 * alone cannot make the router reserve max_body), instead of doubling
 * from 256 bytes: a 400 KB prompt was copied once more by the reallocations
 * and faulted in its pages twice. */
static void request_reserve_body(struct dp_request *req)
{
    const char *cl = req->conn != NULL
                         ? MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Length")
                         : NULL;
    if (cl == NULL)
        return;
    char *end = NULL;
    unsigned long long n = strtoull(cl, &end, 10);
    if (end == cl || *end != '\0' || n == 0)
        return;
    (void)buf_reserve(&req->body, n < DP_BODY_RESERVE_MAX ? (size_t)n : DP_BODY_RESERVE_MAX);
}

int dp_request_append_body(struct dp_request *req, const char *data, size_t len)
{
    if (req->body.data == NULL)
        request_reserve_body(req);
    int rc = buf_append(&req->body, data, len);
    if (rc == -E2BIG) {
        req->body_too_large = true;
        return 0;
    }
    /* A form's fields are read from the chunk as it passes (form.h): the
     * body buffer stays the upload's only copy. */
    if (rc == 0 && req->shape == DP_BODY_FORM) {
        if (req->form == NULL && (req->form = dp_form_create(req->conn)) == NULL)
            return -ENOMEM;
        dp_form_feed(req->form, data, len);
    }
    return rc;
}

enum dp_body dp_request_shape(const struct dp_request *req)
{
    if (req->shape > DP_BODY_UNSET && req->shape < DP_BODY_COUNT)
        return (enum dp_body)req->shape;
    return dp_route_row(req->route)->body;
}

/* Appends to the routing text, growing it up to DP_ROUTING_TEXT_MAX; past
 * that (or without memory) the text is cut: routing degrades, the request
 * does not fail. */
static void text_add(struct dp_request *req, const char *s, size_t n)
{
    /* Only what fits, so the cap cuts the text instead of refusing the piece. */
    size_t room = buf_room(&req->routing_text);
    (void)buf_append(&req->routing_text, s, n < room ? n : room);
}

/* A string of the parsed skeleton: a long one's raw contents come from the
 * body (see json_skeleton.h), a short one is taken decoded. */
static void text_add_json_string(struct dp_request *req, const struct dp_skel *skel, json_t *s)
{
    const struct dp_skel_span *sp = dp_skel_span(skel, json_string_value(s), json_string_length(s));
    if (sp != NULL)
        text_add(req, req->body.data + sp->off, sp->len);
    else
        text_add(req, json_string_value(s), json_string_length(s));
}

/* A key of the parsed skeleton (a long one is a marker too). */
static void text_add_key(struct dp_request *req, const struct dp_skel *skel, const char *key)
{
    size_t len = strlen(key);
    const struct dp_skel_span *sp = dp_skel_span(skel, key, len);
    if (sp != NULL)
        text_add(req, req->body.data + sp->off, sp->len);
    else
        text_add(req, key, len);
}

#define DP_TEXT_JSON_DEPTH 16 /* deeper structure is not walked (routing degrades) */

/*
 * Any JSON value as routing text, compact and in document order, strings
 * as text_add_json_string takes them (never a marker: its nonce differs
 * per request). For what a chat template renders from structure: tool
 * definitions and tool calls.
 */
static void text_add_json(struct dp_request *req, const struct dp_skel *skel, json_t *v, int depth)
{
    if (depth > DP_TEXT_JSON_DEPTH)
        return;
    char num[48];
    int n = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        text_add(req, "{", 1);
        json_object_foreach(v, key, x)
        {
            text_add_key(req, skel, key);
            text_add(req, ":", 1);
            text_add_json(req, skel, x, depth + 1);
            text_add(req, ",", 1);
        }
        text_add(req, "}", 1);
        return;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        text_add(req, "[", 1);
        json_array_foreach(v, i, x)
        {
            text_add_json(req, skel, x, depth + 1);
            text_add(req, ",", 1);
        }
        text_add(req, "]", 1);
        return;
    }
    case JSON_STRING:
        text_add(req, "\"", 1);
        text_add_json_string(req, skel, v);
        text_add(req, "\"", 1);
        return;
    case JSON_INTEGER:
        n = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        n = snprintf(num, sizeof(num), "%.17g", json_real_value(v));
        break;
    case JSON_TRUE:
        n = snprintf(num, sizeof(num), "true");
        break;
    case JSON_FALSE:
        n = snprintf(num, sizeof(num), "false");
        break;
    default:
        n = snprintf(num, sizeof(num), "null");
        break;
    }
    if (n > 0 && (size_t)n < sizeof(num))
        text_add(req, num, (size_t)n);
}

/*
 * An image part ({"type":"image_url","image_url":{"url":...}}, or the URL
 * as a plain string) by its URL; a data URL by a hash of its contents, so
 * different images key differently without the routing text carrying
 * megabytes of base64.
 */
static void text_add_image(struct dp_request *req, const struct dp_skel *skel, json_t *image)
{
    json_t *url = json_is_object(image) ? json_object_get(image, "url") : image;
    if (!json_is_string(url))
        return;
    const char *s = json_string_value(url);
    size_t len = json_string_length(url);
    const struct dp_skel_span *sp = dp_skel_span(skel, s, len);
    if (sp != NULL) {
        s = req->body.data + sp->off;
        len = sp->len;
    }
    text_add(req, "[image ", 7);
    if (len >= 5 && strncmp(s, "data:", 5) == 0) {
        char hex[32];
        int n = snprintf(hex, sizeof(hex), "data:%016llx", (unsigned long long)XXH3_64bits(s, len));
        text_add(req, hex, (size_t)n);
    } else {
        text_add(req, s, len);
    }
    text_add(req, "]", 1);
}

/* A chat message's content: a string, or an array of parts whose "text"
 * parts count, and image parts by their URL (text_add_image); other parts
 * (audio, files) are not keyed. */
static void text_add_content(struct dp_request *req, const struct dp_skel *skel, json_t *content)
{
    if (json_is_string(content)) {
        text_add_json_string(req, skel, content);
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *text = json_object_get(part, "text");
        json_t *image = json_object_get(part, "image_url");
        if (json_is_string(text))
            text_add_json_string(req, skel, text);
        else if (image != NULL)
            text_add_image(req, skel, image);
    }
}

/* Token ids as 4 little-endian bytes each (the width the mock worker's
 * cost model gives an id), so a token prompt keys by its ids. */
static void text_add_token_ids(struct dp_request *req, json_t *ids)
{
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id)
    {
        if (!json_is_integer(id))
            continue;
        uint32_t v = (uint32_t)json_integer_value(id);
        unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                              (unsigned char)(v >> 24)};
        text_add(req, (const char *)b, sizeof(b));
    }
}

/* Routing text of a completion: the prompt, a string or an array of
 * strings; or token ids ([1,2,...]), or a batch of them ([[...],[...]]). */
static void text_add_prompt(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_string(prompt)) {
        text_add_json_string(req, skel, prompt);
        return;
    }
    if (json_is_integer(json_array_get(prompt, 0))) {
        text_add_token_ids(req, prompt);
        return;
    }
    size_t i;
    json_t *p;
    json_array_foreach(prompt, i, p)
    {
        if (json_is_string(p))
            text_add_json_string(req, skel, p);
        else if (json_is_array(p))
            text_add_token_ids(req, p);
    }
}

/*
 * Routing text of a chat: the request's tool definitions first (chat
 * templates render them ahead of the conversation), then the messages in
 * order, each as role, newline, content, newline — so every turn of a
 * conversation extends the previous turn's text, and cache_aware sees the
 * shared prefix. An assistant message's tool calls follow its content and
 * a tool result names the call it answers: agent conversations that
 * differ only there do not share a key.
 */
static void text_add_messages(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    json_t *tools = json_object_get(root, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) {
        text_add(req, "tools\n", 6);
        text_add_json(req, skel, tools, 0);
        text_add(req, "\n", 1);
    }
    json_t *messages = json_object_get(root, "messages");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        json_t *role = json_object_get(m, "role");
        if (json_is_string(role))
            text_add_json_string(req, skel, role);
        text_add(req, "\n", 1);
        json_t *call_id = json_object_get(m, "tool_call_id");
        if (json_is_string(call_id)) {
            text_add_json_string(req, skel, call_id);
            text_add(req, "\n", 1);
        }
        text_add_content(req, skel, json_object_get(m, "content"));
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls) && json_array_size(calls) > 0)
            text_add_json(req, skel, calls, 0);
        text_add(req, "\n", 1);
    }
}

/* Tool definitions first, as a chat template renders them. */
static void text_add_tools(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    json_t *tools = json_object_get(root, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) {
        text_add(req, "tools\n", 6);
        text_add_json(req, skel, tools, 0);
        text_add(req, "\n", 1);
    }
}

/*
 * A content block list of the Responses or Messages API: text blocks by
 * their text ("text" in both, input_text/output_text in Responses), image
 * blocks by their URL, anything else (tool use, tool results, function
 * calls) as compact JSON, so turns that differ there key differently.
 */
static void text_add_blocks(struct dp_request *req, const struct dp_skel *skel, json_t *content)
{
    if (json_is_string(content)) {
        text_add_json_string(req, skel, content);
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *text = json_object_get(part, "text");
        json_t *image = json_object_get(part, "image_url");
        if (json_is_string(text))
            text_add_json_string(req, skel, text);
        else if (image != NULL)
            text_add_image(req, skel, image);
        else
            text_add_json(req, skel, part, 0);
    }
}

/* Messages or Responses items in order: role, newline, content, newline;
 * an item without a role (function_call, function_call_output, reasoning)
 * as compact JSON. */
static void text_add_items(struct dp_request *req, const struct dp_skel *skel, json_t *items)
{
    size_t i;
    json_t *m;
    json_array_foreach(items, i, m)
    {
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            text_add_json(req, skel, m, 0);
            text_add(req, "\n", 1);
            continue;
        }
        text_add_json_string(req, skel, role);
        text_add(req, "\n", 1);
        text_add_blocks(req, skel, json_object_get(m, "content"));
        text_add(req, "\n", 1);
    }
}

/*
 * Routing text of a Responses request: tools, instructions (the system
 * prompt vLLM renders first), then input, a string or a list of items.
 * A previous_response_id is kept for the response affinity
 * (resp_affinity.h): what the worker prefills then starts with the stored
 * conversation, which only that worker has.
 */
static void text_add_responses(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    text_add_tools(req, skel, root);
    json_t *instructions = json_object_get(root, "instructions");
    if (json_is_string(instructions)) {
        text_add(req, "system\n", 7);
        text_add_json_string(req, skel, instructions);
        text_add(req, "\n", 1);
    }
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        text_add(req, "user\n", 5);
        text_add_json_string(req, skel, input);
        text_add(req, "\n", 1);
    } else if (json_is_array(input)) {
        text_add_items(req, skel, input);
    }
    json_t *prev = json_object_get(root, "previous_response_id");
    if (json_is_string(prev) && json_string_length(prev) < sizeof(req->resp_id) &&
        dp_skel_span(skel, json_string_value(prev), json_string_length(prev)) == NULL)
        memcpy(req->resp_id, json_string_value(prev), json_string_length(prev) + 1);
}

/* Routing text of an Anthropic Messages request: tools, system (a string
 * or text blocks), then the messages. */
static void text_add_anthropic(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    text_add_tools(req, skel, root);
    json_t *system = json_object_get(root, "system");
    if (json_is_string(system) || json_is_array(system)) {
        text_add(req, "system\n", 7);
        text_add_blocks(req, skel, system);
        text_add(req, "\n", 1);
    }
    json_t *messages = json_object_get(root, "messages");
    if (json_is_array(messages))
        text_add_items(req, skel, messages);
}

/* Routing text of a token-in request (/inference/v1/generate): its
 * token_ids, keyed as a completion's token-id prompt is. */
static void text_add_generate(struct dp_request *req, const struct dp_skel *skel, json_t *root)
{
    (void)skel;
    json_t *ids = json_object_get(root, "token_ids");
    if (json_is_array(ids))
        text_add_token_ids(req, ids);
}

/*
 * The shape of an /invocations body. vLLM validates it against its request
 * types in order and serves the first that fits (sagemaker/api_router.py;
 * chat and completion first, vllm/entrypoints/openai/generate/factories.py,
 * then the pooling types): a chat request needs messages, a completion a
 * prompt. The rest (embeddings' input, rerank's query, score's text_1...)
 * are pooling requests: routed by load, whatever their fields.
 */
static enum dp_body invocations_shape(json_t *root)
{
    if (json_is_array(json_object_get(root, "messages")))
        return DP_BODY_CHAT;
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_string(prompt) || json_is_array(prompt))
        return DP_BODY_COMPLETION;
    return DP_BODY_BY_LOAD;
}

/* The routing text's parser of each body shape (routes.h); NULL: none. */
typedef void (*text_parser_fn)(struct dp_request *req, const struct dp_skel *skel, json_t *root);
static const text_parser_fn dp_text_parsers[DP_BODY_COUNT] = {
    [DP_BODY_CHAT] = text_add_messages,       [DP_BODY_COMPLETION] = text_add_prompt,
    [DP_BODY_EMBEDDINGS] = text_add_messages, [DP_BODY_RESPONSES] = text_add_responses,
    [DP_BODY_MESSAGES] = text_add_anthropic,  [DP_BODY_GENERATE] = text_add_generate,
};

/* A form's fields (form.h): model and stream, nothing to route by. */
static enum dp_parse_result parse_form(struct dp_request *req)
{
    const char *why = NULL;
    if (dp_form_result(req->form, req->model, &req->stream, &why) != 0) {
        snprintf(req->parse_error, sizeof(req->parse_error), "%s", why);
        return DP_PARSE_BAD_JSON;
    }
    return req->model[0] != '\0' ? DP_PARSE_OK : DP_PARSE_NO_MODEL;
}

/*
 * Where jansson stopped, for the client's 400. jansson parsed the skeleton
 * (long strings set aside as markers), whose lines are the body's (a JSON
 * string holds no raw newline) but whose columns and text are not: only the
 * line is given, and jansson's "near '...'" is cut, since it may quote a
 * marker and its nonce.
 */
static void parse_error_of(struct dp_request *req, const json_error_t *jerr)
{
    char what[96]; /* jansson's messages are short; a longer one is cut */
    snprintf(what, sizeof(what), "%.95s", jerr->text);
    char *near = strstr(what, " near ");
    if (near != NULL)
        *near = '\0';
    if (jerr->line > 0)
        snprintf(req->parse_error, sizeof(req->parse_error),
                 "the request body is not valid JSON: %s (line %d)", what, jerr->line);
    else
        snprintf(req->parse_error, sizeof(req->parse_error),
                 "the request body is not valid JSON: %s", what);
}

enum dp_parse_result dp_request_parse(struct dp_request *req)
{
    enum dp_body shape = dp_request_shape(req);
    if (shape <= DP_BODY_NONE || shape == DP_BODY_ID || shape >= DP_BODY_COUNT)
        return DP_PARSE_OK;
    if (shape == DP_BODY_FORM)
        return parse_form(req);
    /* The body is complete: give back the growth slack, which a held stream
     * would otherwise keep for its whole life. */
    buf_shrink(&req->body);
    /* jansson parses only the structure; long strings stay in the body. */
    struct dp_skel skel;
    if (dp_skel_build(&skel, req->body.data != NULL ? req->body.data : "", req->body.len,
                      DP_SKEL_MIN_STRING, rng_secret64()) != 0)
        return DP_PARSE_NO_MEMORY;
    json_error_t jerr;
    /* The tree lives only in this function: its allocations come from the
     * thread's arena (json_arena.h) and are dropped at once at the end. */
    dp_json_arena_begin();
    /* "\u0000" is valid JSON and vLLM's parser takes it: so do we (every
     * string below is used with its length, or refused when it holds one). */
    json_t *root = json_loadb(skel.text, skel.len, JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        dp_json_arena_end();
        dp_skel_fini(&skel);
        parse_error_of(req, &jerr);
        return DP_PARSE_BAD_JSON;
    }
    enum dp_parse_result res = DP_PARSE_OK;
    if (!json_is_object(root)) {
        snprintf(req->parse_error, sizeof(req->parse_error),
                 "the request body is JSON but not an object");
        res = DP_PARSE_BAD_JSON;
        goto out_decref;
    }
    if (shape == DP_BODY_INVOCATIONS) {
        shape = invocations_shape(root);
        req->shape = shape;
    }
    json_t *stream = json_object_get(root, "stream");
    if (stream != NULL && !json_is_boolean(stream) && !json_is_null(stream)) {
        res = DP_PARSE_BAD_FIELD;
        goto out_decref;
    }
    req->stream = json_is_true(stream);
    json_t *model = json_object_get(root, "model");
    if (model == NULL || json_is_null(model)) {
        res = DP_PARSE_NO_MODEL;
    } else if (!json_is_string(model) || json_string_length(model) == 0 ||
               json_string_length(model) >= sizeof(req->model) ||
               strlen(json_string_value(model)) != json_string_length(model)) {
        res = DP_PARSE_BAD_FIELD;
        goto out_decref;
    } else if (dp_skel_span(&skel, json_string_value(model), json_string_length(model)) != NULL) {
        /* A model of DP_SKEL_MIN_STRING bytes or more was set aside as a
         * marker, which is short: it is too long, and the marker (with its
         * nonce) must never reach a message or a worker. */
        res = DP_PARSE_BAD_FIELD;
        goto out_decref;
    } else {
        strcpy(req->model, json_string_value(model));
    }
    if (dp_text_parsers[shape] != NULL) {
        /* The routing text is the body's text with a few bytes per
         * message added: one allocation of about the body's size, not a
         * doubling chain of copies (it grows past it as usual). */
        size_t hint = req->body.len + DP_ROUTING_TEXT_SLACK;
        (void)buf_reserve(&req->routing_text,
                          hint < DP_ROUTING_TEXT_MAX ? hint : DP_ROUTING_TEXT_MAX);
        dp_text_parsers[shape](req, &skel, root);
    }
    /* The output cap, for admission's token estimate (admission.h): chat's
     * max_completion_tokens or max_tokens, the Responses API's
     * max_output_tokens, and n choices of it each. */
    json_t *max_tokens = json_object_get(root, "max_completion_tokens");
    if (!json_is_integer(max_tokens))
        max_tokens = json_object_get(root, "max_tokens");
    if (!json_is_integer(max_tokens))
        max_tokens = json_object_get(root, "max_output_tokens");
    if (!json_is_integer(max_tokens)) /* a token-in request's */
        max_tokens = json_object_get(json_object_get(root, "sampling_params"), "max_tokens");
    req->adm.max_tokens = json_is_integer(max_tokens) ? json_integer_value(max_tokens) : -1;
    json_t *n = json_object_get(root, "n");
    req->adm.choices = json_is_integer(n) && json_integer_value(n) > 1 &&
                               json_integer_value(n) <= DP_ADM_CHOICES_MAX
                           ? (uint32_t)json_integer_value(n)
                           : 1;
    json_t *user = json_object_get(root, "user");
    if (json_is_string(user))
        snprintf(req->user, sizeof(req->user), "%s", json_string_value(user));
    /* The salt the worker will key this prompt's blocks with routes it too
     * (token_chain.h); anything but a non-empty string is vLLM's to refuse. */
    json_t *salt = json_object_get(root, "cache_salt");
    if (json_is_string(salt)) {
        json_t *v = dp_skel_string(&skel, req->body.data, salt);
        if (v != NULL && json_string_length(v) > 0) {
            req->salted = true;
            req->salt_hash = tkc_salt_hash(json_string_value(v), json_string_length(v));
        }
        json_decref(v);
    }
out_decref:
    json_decref(root);
    dp_json_arena_end();
    dp_skel_fini(&skel);
    return res;
}

bool dp_header_is_hop_by_hop(const char *name, size_t len)
{
    /* With their lengths: a header is compared only with names as long as
     * it (strlen of every name for every header was most of this). */
#define DP_HOP(s)                                                                                  \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
    static const struct {
        const char *name;
        size_t len;
    } names[] = {
        DP_HOP("connection"),
        DP_HOP("keep-alive"),
        DP_HOP("proxy-authenticate"),
        DP_HOP("proxy-authorization"),
        DP_HOP("proxy-connection"),
        DP_HOP("te"),
        DP_HOP("trailer"),
        DP_HOP("trailers"),
        DP_HOP("transfer-encoding"),
        DP_HOP("upgrade"),
        DP_HOP("host"),
        DP_HOP("content-length"),
        DP_HOP("expect"),
        DP_HOP("x-request-id"),
        DP_HOP("date"),
    };
#undef DP_HOP
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].len == len && strncasecmp(names[i].name, name, len) == 0)
            return true;
    return false;
}

struct hdr_ctx {
    struct curl_slist *list;
    const char *connection;           /* the client's Connection header, or NULL */
    const struct cfg_str_list *strip; /* dataplane.strip_headers */
    bool failed;
    bool replace_trace;   /* trace context headers are the journal's (journal.h) */
    bool keep_tracestate; /* ... the client's tracestate goes on */
};

static enum MHD_Result add_client_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                         const char *value)
{
    (void)kind;
    struct hdr_ctx *c = cls;
    if (key == NULL)
        return MHD_YES;
    /* The listener refused names that are not tokens; trim anyway, so a
     * name with white space can never slip past the hop-by-hop filter. */
    while (*key == ' ' || *key == '\t')
        key++;
    size_t len = strlen(key);
    while (len > 0 && (key[len - 1] == ' ' || key[len - 1] == '\t'))
        len--;
    if (dp_header_is_hop_by_hop(key, len))
        return MHD_YES;
    /* Headers the client's Connection header names are hop-by-hop too. */
    if (c->connection != NULL && dp_hdr_connection_lists(c->connection, key, len))
        return MHD_YES;
    if (c->replace_trace && dp_trace_header_is_replaced(key, len, c->keep_tracestate))
        return MHD_YES;
    for (size_t i = 0; i < c->strip->n; i++)
        if (strlen(c->strip->item[i]) == len && strncasecmp(c->strip->item[i], key, len) == 0)
            return MHD_YES;
    /* "name: value" by hand: snprintf's format parsing was a third of
     * building a small request's header list. */
    char line[8192];
    size_t vlen = value != NULL ? strlen(value) : 0;
    if (len + 2 + vlen >= sizeof(line))
        return MHD_YES; /* a header this long is not worth forwarding */
    memcpy(line, key, len);
    line[len] = ':';
    line[len + 1] = ' ';
    if (vlen > 0)
        memcpy(line + len + 2, value, vlen);
    line[len + 2 + vlen] = '\0';
    struct curl_slist *nl = curl_slist_append(c->list, line);
    if (nl == NULL) {
        c->failed = true;
        return MHD_NO;
    }
    c->list = nl;
    return MHD_YES;
}

static bool request_id_is_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= DP_REQUEST_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (id[i] < 0x21 || id[i] > 0x7e)
            return false;
    return true;
}

static void new_request_id(char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (int half = 0; half < 2; half++) {
        uint64_t r = rng_secret64();
        for (int i = 0; i < 16; i++)
            out[half * 16 + i] = hex[(r >> (4 * i)) & 0xf];
    }
    out[32] = '\0';
}

int dp_request_prepare_upstream(struct dp_request *req)
{
    const char *id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Request-Id");
    if (id != NULL && request_id_is_valid(id))
        strcpy(req->request_id, id);
    else
        new_request_id(req->request_id);
    struct hdr_ctx c = {.strip = &req->loop->sh->cfg->dataplane.strip_headers};
    c.connection = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Connection");
    dp_journal_trace_begin(req, &c.replace_trace, &c.keep_tracestate);
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, add_client_header, &c);
    if (!c.failed && c.replace_trace && dp_journal_trace_header(req, &c.list) != 0)
        c.failed = true;
    char line[DP_REQUEST_ID_MAX + 32];
    static const char id_name[] = "X-Request-Id: ";
    memcpy(line, id_name, sizeof(id_name) - 1);
    str_copy(line + sizeof(id_name) - 1, sizeof(line) - (sizeof(id_name) - 1), req->request_id);
    struct curl_slist *nl = c.failed ? NULL : curl_slist_append(c.list, line);
    if (nl != NULL) {
        c.list = nl;
        nl = curl_slist_append(c.list, "Expect:");
    }
    if (nl == NULL) {
        curl_slist_free_all(c.list);
        return -ENOMEM;
    }
    req->up_headers = nl;
    return 0;
}
