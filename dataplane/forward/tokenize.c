/*
 * The tokenize step of precise_cache_aware (see tokenize.h).
 *
 * The cache is set-associative (4 ways a set, the oldest way replaced), so
 * it needs no deletion and costs one short scan per lookup; its entries own
 * their chains, whose bytes are bounded per loop by DP_TOK_CACHE_BYTES (an
 * entry that would cross the bound is not kept).
 */
#include "dataplane/forward/tokenize.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <xxhash.h>

#include "common/buf.h"
#include "common/token_chain.h"
#include "dataplane/core/loop.h"
#include "dataplane/http/request.h"
#include "dataplane/core/routes.h"
#include "dataplane/policy/tokenize_stats.h"
#include "dataplane/forward/upstream.h"
#include "shm/prefix_index.h"

#define TOK_WAYS       4u
#define TOK_ANSWER_MAX (8u << 20) /* /tokenize's answer: ~1 Mi tokens at most */
#define TOK_MAX_BLOCKS PIX_MAX_BLOCKS

struct tok_entry {
    uint64_t key; /* 0 = empty */
    uint64_t *chain;
    size_t n;
    uint32_t stamp;
};

/* A loop's cache. Owned by the loop (dp_loop.tok), made at first use. */
struct dp_tok_loop {
    struct tok_entry *ways; /* n_sets * TOK_WAYS */
    size_t n_sets;          /* power of two; 0 = caching off */
    size_t bytes;
    uint32_t clock;
};

/* A request's tokenize state. Owned by the request (dp_request.tok). */
struct dp_tok_req {
    struct dp_up_side side;
    struct dp_request *req; /* while pending: holds a reference */
    dp_tok_resume_fn resume;
    struct buf answer;
    char *body;
    struct curl_slist *headers;
    uint64_t key;
    bool pending;
    enum pol_tokens status;
    uint64_t *chain; /* owned */
    size_t n_chain;
};

/* ---- the cache ---- */

static struct dp_tok_loop *tok_loop(struct dp_loop *loop)
{
    if (loop->tok != NULL)
        return loop->tok;
    struct dp_tok_loop *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    size_t want = loop->sh->cfg->policy.precise_cache_aware.tokenize_cache_entries;
    if (want > 0) {
        size_t sets = 1;
        while (sets * TOK_WAYS < want)
            sets <<= 1;
        c->ways = calloc(sets * TOK_WAYS, sizeof(*c->ways));
        c->n_sets = c->ways != NULL ? sets : 0;
    }
    loop->tok = c;
    return c;
}

static struct tok_entry *tok_set(struct dp_tok_loop *c, uint64_t key)
{
    return &c->ways[((key >> 7) & (c->n_sets - 1)) * TOK_WAYS];
}

static const struct tok_entry *tok_cache_get(struct dp_tok_loop *c, uint64_t key)
{
    if (c == NULL || c->n_sets == 0)
        return NULL;
    struct tok_entry *set = tok_set(c, key);
    for (unsigned w = 0; w < TOK_WAYS; w++)
        if (set[w].key == key) {
            set[w].stamp = ++c->clock;
            return &set[w];
        }
    return NULL;
}

static void tok_cache_put(struct dp_tok_loop *c, uint64_t key, const uint64_t *chain, size_t n)
{
    if (c == NULL || c->n_sets == 0)
        return;
    struct tok_entry *set = tok_set(c, key), *victim = &set[0];
    for (unsigned w = 0; w < TOK_WAYS; w++) {
        if (set[w].key == 0 || set[w].key == key) {
            victim = &set[w];
            break;
        }
        if ((uint32_t)(c->clock - set[w].stamp) > (uint32_t)(c->clock - victim->stamp))
            victim = &set[w];
    }
    c->bytes -= victim->n * sizeof(uint64_t);
    free(victim->chain);
    *victim = (struct tok_entry){0};
    size_t bytes = n * sizeof(uint64_t);
    if (c->bytes + bytes > DP_TOK_CACHE_BYTES)
        return;
    uint64_t *copy = n > 0 ? malloc(bytes) : NULL;
    if (n > 0 && copy == NULL)
        return;
    if (n > 0)
        memcpy(copy, chain, bytes);
    *victim = (struct tok_entry){.key = key, .chain = copy, .n = n, .stamp = ++c->clock};
    c->bytes += bytes;
}

void dp_tok_loop_fini(struct dp_loop *loop)
{
    struct dp_tok_loop *c = loop->tok;
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n_sets * TOK_WAYS; i++)
        free(c->ways[i].chain);
    free(c->ways);
    free(c);
    loop->tok = NULL;
}

/* ---- the tokenize body ---- */

/* Appends the chat messages of a Responses request (instructions, input). */
static void tok_responses_messages(json_t *root, json_t *msgs)
{
    json_t *instr = json_object_get(root, "instructions");
    if (json_is_string(instr))
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", instr));
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return;
    }
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item)
    {
        json_t *role = json_object_get(item, "role");
        json_t *content = json_object_get(item, "content");
        if (json_is_string(role) && content != NULL)
            json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", role, "content", content));
    }
}

/* Appends the chat messages of an Anthropic Messages request. */
static void tok_messages_messages(json_t *root, json_t *msgs)
{
    json_t *system = json_object_get(root, "system");
    if (json_is_string(system) || json_is_array(system))
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", system));
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "messages"), i, m) json_array_append(msgs, m);
}

/*
 * What else of a chat request changes its rendered prompt, onto the
 * /tokenize body tb. vLLM's chat endpoint renders with the request's
 * chat_template and tools and with chat_template_kwargs merged with
 * add_generation_prompt, continue_final_message, documents and
 * reasoning_effort (and enable_thinking when reasoning_effort is set and
 * the client's kwargs do not say; ChatCompletionRequest.build_chat_params);
 * /tokenize takes the first four as fields of its own and the rest only
 * inside chat_template_kwargs (TokenizeChatRequest), where they go.
 * 0 or -ENOMEM.
 */
static int tok_chat_extras(json_t *root, json_t *tb)
{
    static const char *const own[] = {"tools", "chat_template", "continue_final_message",
                                      "add_generation_prompt"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        json_t *v = json_object_get(root, own[i]);
        if (v != NULL && !json_is_null(v) && json_object_set(tb, own[i], v) != 0)
            return -ENOMEM;
    }
    json_t *client = json_object_get(root, "chat_template_kwargs");
    json_t *kwargs = json_is_object(client) ? json_deep_copy(client) : json_object();
    if (kwargs == NULL)
        return -ENOMEM;
    json_t *documents = json_object_get(root, "documents");
    json_t *effort = json_object_get(root, "reasoning_effort");
    int rc = 0;
    if (documents != NULL && !json_is_null(documents))
        rc |= json_object_set(kwargs, "documents", documents);
    if (effort != NULL && !json_is_null(effort)) {
        rc |= json_object_set(kwargs, "reasoning_effort", effort);
        if (json_object_get(kwargs, "enable_thinking") == NULL)
            rc |= json_object_set_new(
                kwargs, "enable_thinking",
                json_boolean(!json_is_string(effort) || strcmp(json_string_value(effort), "none")));
    }
    if (rc == 0 && json_object_size(kwargs) > 0)
        return json_object_set_new(tb, "chat_template_kwargs", kwargs) == 0 ? 0 : -ENOMEM;
    json_decref(kwargs);
    return rc == 0 ? 0 : -ENOMEM;
}

/*
 * The /tokenize body for req (malloc'd, into *out), or, for a completion
 * whose prompt is token ids, those ids (*direct, malloc'd, *n_direct).
 * 0, -ENOTSUP (a shape not tokenized) or -ENOMEM.
 */
static int tok_body(const struct dp_request *req, char **out, uint32_t **direct, size_t *n_direct)
{
    *out = NULL;
    *direct = NULL;
    *n_direct = 0;
    json_t *root = json_loadb(req->body.data != NULL ? req->body.data : "", req->body.len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return -ENOTSUP;
    }
    json_t *tb = json_object();
    json_object_set_new(tb, "model", json_string(req->model));
    int rc = 0;
    enum dp_body shape = dp_request_shape(req);
    if (shape == DP_BODY_COMPLETION || shape == DP_BODY_GENERATE) {
        /* A token-in request's ids are its prompt's tokens already. */
        json_t *prompt = shape == DP_BODY_GENERATE ? json_object_get(root, "token_ids")
                                                   : json_object_get(root, "prompt");
        if (json_is_array(prompt) && json_array_size(prompt) == 1)
            prompt = json_array_get(prompt, 0);
        if (json_is_string(prompt)) {
            json_object_set(tb, "prompt", prompt);
        } else if (json_is_array(prompt) && json_array_size(prompt) > 0 &&
                   json_is_integer(json_array_get(prompt, 0))) {
            size_t n = json_array_size(prompt);
            *direct = malloc(n * sizeof(**direct));
            if (*direct == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            for (size_t i = 0; i < n; i++)
                (*direct)[i] = (uint32_t)json_integer_value(json_array_get(prompt, i));
            *n_direct = n;
            goto out;
        } else {
            rc = -ENOTSUP;
            goto out;
        }
    } else {
        json_t *msgs = json_array();
        if (shape == DP_BODY_CHAT)
            json_array_extend(msgs, json_object_get(root, "messages"));
        else if (shape == DP_BODY_RESPONSES)
            tok_responses_messages(root, msgs);
        else if (shape == DP_BODY_MESSAGES)
            tok_messages_messages(root, msgs);
        if (json_array_size(msgs) == 0) {
            json_decref(msgs);
            rc = -ENOTSUP;
            goto out;
        }
        json_object_set_new(tb, "messages", msgs);
        json_object_set_new(tb, "add_generation_prompt", json_true());
        if (shape == DP_BODY_CHAT && tok_chat_extras(root, tb) != 0) {
            rc = -ENOMEM;
            goto out;
        }
    }
    *out = json_dumps(tb, JSON_COMPACT);
    if (*out == NULL)
        rc = -ENOMEM;
out:
    json_decref(tb);
    json_decref(root);
    return rc;
}

/* ---- the chain ---- */

static int tok_set_chain(const struct dp_request *req, struct dp_tok_req *t, const uint32_t *ids,
                         size_t n_ids)
{
    size_t bs = req->loop->sh->cfg->policy.precise_cache_aware.block_size;
    size_t blocks = n_ids / bs < TOK_MAX_BLOCKS ? n_ids / bs : TOK_MAX_BLOCKS;
    free(t->chain);
    t->chain = blocks > 0 ? malloc(blocks * sizeof(*t->chain)) : NULL;
    if (blocks > 0 && t->chain == NULL)
        return -ENOMEM;
    /* Salted as the worker keys its blocks (token_chain.h): a salted prompt
     * matches only blocks stored under the same salt. */
    uint64_t seed = tkc_seed(req->model);
    if (req->salted)
        seed = tkc_salt_seed(seed, req->salt_hash);
    t->n_chain = tkc_chain(seed, ids, n_ids, bs, t->chain, blocks);
    t->status = POL_TOKENS_OK;
    return 0;
}

/* Parses vLLM's {"count", "max_model_len", "tokens": [...]}. */
static int tok_parse_answer(const struct dp_request *req, struct dp_tok_req *t)
{
    json_t *root = json_loadb(t->answer.data != NULL ? t->answer.data : "", t->answer.len, 0, NULL);
    json_t *tokens = json_object_get(root, "tokens");
    int rc = -EPROTO;
    if (json_is_array(tokens)) {
        size_t n = json_array_size(tokens);
        uint32_t *ids = malloc((n > 0 ? n : 1) * sizeof(*ids));
        rc = ids != NULL ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            json_t *v = json_array_get(tokens, i);
            if (!json_is_integer(v))
                rc = -EPROTO;
            else
                ids[i] = (uint32_t)json_integer_value(v);
        }
        if (rc == 0)
            rc = tok_set_chain(req, t, ids, n);
        free(ids);
    }
    json_decref(root);
    return rc;
}

/* ---- the transfer ---- */

static size_t tok_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct dp_tok_req *t = userp;
    /* Past the cap: stop the transfer (an error, so a fallback). */
    return buf_append(&t->answer, data, size * nmemb) == 0 ? size * nmemb : 0;
}

static void tok_end_transfer(struct dp_loop *loop, struct dp_tok_req *t)
{
    dp_up_side_detach(loop, &t->side);
    curl_easy_cleanup(t->side.easy);
    t->side.easy = NULL;
    curl_slist_free_all(t->headers);
    t->headers = NULL;
    free(t->body);
    t->body = NULL;
    buf_fini(&t->answer);
    t->pending = false;
}

static void tok_on_done(struct dp_up_side *side, CURLcode result)
{
    struct dp_tok_req *t =
        (struct dp_tok_req *)(void *)((char *)side - offsetof(struct dp_tok_req, side));
    struct dp_request *req = t->req;
    long status = 0;
    curl_easy_getinfo(side->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t total_us = 0;
    if (curl_easy_getinfo(side->easy, CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK)
        dp_tok_observe_duration((double)total_us / 1e6);
    if (result == CURLE_OK && status == 200 && tok_parse_answer(req, t) == 0) {
        dp_tok_count_result(DP_TOK_RES_OK);
        tok_cache_put(req->loop->tok, t->key, t->chain, t->n_chain);
    } else {
        bool timeout = result == CURLE_OPERATION_TIMEDOUT;
        dp_tok_count_result(timeout ? DP_TOK_RES_TIMEOUT : DP_TOK_RES_ERROR);
        t->status = POL_TOKENS_FAILED;
        dp_tok_count_fallback(timeout ? DP_TOK_FB_TIMEOUT : DP_TOK_FB_ERROR);
    }
    tok_end_transfer(req->loop, t);
    t->req = NULL;
    if (!req->client_gone && req->conn != NULL && req->reply_status == 0)
        t->resume(req);
    dp_request_unref(req);
}

/* The least-loaded candidate's /tokenize, or the configured tokenizer. */
static void tok_url(const struct dp_request *req, const struct pol_candidate *cands, size_t n,
                    char *url, size_t len)
{
    const char *fixed = req->loop->sh->cfg->policy.precise_cache_aware.tokenizer_url;
    if (fixed[0] != '\0') {
        snprintf(url, len, "%s", fixed);
        return;
    }
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (cands[i].load < cands[best].load)
            best = i;
    snprintf(url, len, "%s/tokenize", cands[best].worker->url);
}

static int tok_start(struct dp_request *req, struct dp_tok_req *t,
                     const struct pol_candidate *cands, size_t n)
{
    struct dp_loop *loop = req->loop;
    char url[CFG_URL_MAX + 16];
    tok_url(req, cands, n, url, sizeof(url));
    t->side.on_done = tok_on_done;
    t->side.easy = dp_up_side_easy(loop);
    if (t->side.easy == NULL)
        return -ENOMEM;
    buf_init(&t->answer, TOK_ANSWER_MAX);
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_URL, url);
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_POST, 1L);
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_POSTFIELDS, t->body);
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(t->body));
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_HTTPHEADER, t->headers);
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_WRITEFUNCTION, tok_write_cb);
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_WRITEDATA, t);
    /* The whole budget, connecting included: never longer than this. */
    rc |= curl_easy_setopt(t->side.easy, CURLOPT_TIMEOUT_MS,
                           (long)loop->sh->cfg->policy.precise_cache_aware.tokenize_timeout_ms);
    if (rc != CURLE_OK || t->headers == NULL || dp_up_side_start(loop, &t->side) != 0) {
        tok_end_transfer(loop, t);
        return -ENOMEM;
    }
    t->pending = true;
    t->req = req;
    dp_request_ref(req);
    return 0;
}

bool dp_tok_prepare(struct dp_request *req, const struct pol_candidate *cands, size_t n,
                    dp_tok_resume_fn resume)
{
    struct dp_tok_req *t = req->tok;
    if (t != NULL)
        return t->pending; /* a retry or a requeue: the first answer stands */
    t = req->tok = calloc(1, sizeof(*t));
    if (t == NULL) {
        dp_tok_count_fallback(DP_TOK_FB_ERROR);
        return false;
    }
    t->status = POL_TOKENS_FAILED; /* until a chain is set */
    t->resume = resume;
    uint32_t *direct = NULL;
    size_t n_direct = 0;
    int rc = tok_body(req, &t->body, &direct, &n_direct);
    if (rc == 0 && direct != NULL) {
        rc = tok_set_chain(req, t, direct, n_direct);
        free(direct);
        if (rc != 0)
            dp_tok_count_fallback(DP_TOK_FB_ERROR);
        return false;
    }
    if (rc != 0) {
        dp_tok_count_fallback(rc == -ENOTSUP ? DP_TOK_FB_UNSUPPORTED : DP_TOK_FB_ERROR);
        return false;
    }
    /* The chain depends on the salt, the /tokenize body does not: the key
     * covers both (seed 0 is XXH3_64bits itself: unsalted keys as before). */
    t->key = XXH3_64bits_withSeed(t->body, strlen(t->body), req->salted ? req->salt_hash : 0) | 1u;
    const struct tok_entry *hit = tok_cache_get(tok_loop(req->loop), t->key);
    if (hit != NULL) {
        dp_tok_count_cache_hit();
        free(t->body);
        t->body = NULL;
        t->chain = hit->n > 0 ? malloc(hit->n * sizeof(*t->chain)) : NULL;
        if (hit->n > 0 && t->chain == NULL) {
            dp_tok_count_fallback(DP_TOK_FB_ERROR);
            return false;
        }
        if (hit->n > 0)
            memcpy(t->chain, hit->chain, hit->n * sizeof(*t->chain));
        t->n_chain = hit->n;
        t->status = POL_TOKENS_OK;
        return false;
    }
    if (tok_start(req, t, cands, n) != 0) {
        dp_tok_count_fallback(DP_TOK_FB_ERROR);
        return false;
    }
    return true;
}

void dp_tok_fill(const struct dp_request *req, struct pol_request *pr)
{
    const struct dp_tok_req *t = req->tok;
    if (t == NULL || t->pending) {
        pr->tokens = POL_TOKENS_NONE;
        return;
    }
    pr->tokens = t->status;
    pr->kv_chain = t->chain;
    pr->kv_chain_len = t->n_chain;
}

void dp_tok_cancel(struct dp_request *req)
{
    struct dp_tok_req *t = req->tok;
    if (t == NULL || !t->pending)
        return;
    tok_end_transfer(req->loop, t);
    t->req = NULL;
    dp_request_unref(req);
}

void dp_tok_release(struct dp_request *req)
{
    struct dp_tok_req *t = req->tok;
    if (t == NULL)
        return;
    /* Not pending: a pending transfer holds a reference. */
    free(t->chain);
    free(t->body);
    free(t);
    req->tok = NULL;
}
