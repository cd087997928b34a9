/*
 * The P/D bodies and answers (see pd_body.h and docs/pd.md). Keys keep
 * their order (jansson objects preserve insertion order) and values their
 * meaning; only the spelling of numbers, short strings and whitespace may
 * differ from the client's bytes.
 */
#include "dataplane/forward/pd_body.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/http/json_skeleton.h"

/* ---- bodies ------------------------------------------------------------------ */

static json_t *pd_load_object(const char *body, size_t len)
{
    json_error_t jerr;
    /* As the request parser: an escaped NUL is valid JSON (and is dumped
     * back escaped). */
    json_t *root = json_loadb(body != NULL ? body : "", len, JSON_ALLOW_NUL, &jerr);
    if (root != NULL && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

bool dp_pd_is_error_answer(const char *resp, size_t len)
{
    json_t *answer = pd_load_object(resp, len);
    bool openai = json_is_object(json_object_get(answer, "error"));
    json_decref(answer);
    return openai;
}

/*
 * Several prompts in one completions request (["a","b"], or token-id
 * batches [[1,2],[3]]): vLLM answers with the first prompt's params only, so
 * such a request cannot be disaggregated. One string, one token-id list or
 * a list of one prompt is a single prompt.
 */
static bool pd_is_batch(const json_t *root)
{
    const json_t *prompt = json_object_get(root, "prompt");
    if (!json_is_array(prompt) || json_array_size(prompt) < 2)
        return false;
    const json_t *first = json_array_get(prompt, 0);
    return json_is_string(first) || json_is_array(first);
}

int dp_pd_prefill_body(const char *body, size_t len, char **out, size_t *out_len)
{
    struct dp_skel_doc b;
    int rc = dp_skel_doc_open(&b, body, len);
    if (rc != 0)
        return rc;
    json_t *root = b.root;
    if (pd_is_batch(root)) {
        rc = -EDOM;
        goto out_decref;
    }
    rc = -ENOMEM;
    json_t *kv =
        json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1, "do_remote_prefill", 0,
                  "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
    /* set_new takes kv even when it fails: nothing to free on the error path. */
    if (kv == NULL || json_object_set_new(root, "kv_transfer_params", kv) != 0)
        goto out_decref;
    if (json_object_set_new(root, "max_tokens", json_integer(1)) != 0 ||
        (json_object_get(root, "max_completion_tokens") != NULL &&
         json_object_set_new(root, "max_completion_tokens", json_integer(1)) != 0) ||
        json_object_set_new(root, "stream", json_false()) != 0)
        goto out_decref;
    json_object_del(root, "stream_options");
    /* vLLM rejects min_tokens > max_tokens, and the prefill's max_tokens is 1. */
    json_object_del(root, "min_tokens");
    json_object_del(root, "min_completion_tokens");
    return dp_skel_doc_close(&b, out, out_len);
out_decref:
    dp_skel_doc_close(&b, NULL, NULL);
    return rc;
}

__attribute__((format(printf, 3, 4))) static int pd_bad(char *err, size_t err_len, const char *fmt,
                                                        ...)
{
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -EPROTO;
}

/*
 * The only facts the router needs of the prefill answer's params: an object
 * saying do_remote_prefill. Everything else (remote_block_ids, flat before
 * vLLM's March 2026 release and one list per KV-cache group since, engine,
 * host, port, request id, tp_size, fields a newer vLLM adds) is the two
 * workers' business and passes through verbatim. Push mode is the one shape
 * refused: its decode must run concurrently with the prefill, which this
 * two-leg plan cannot do (docs/pd.md).
 */
static int pd_check_params(const json_t *kv, char *err, size_t err_len)
{
    if (kv == NULL || json_is_null(kv))
        return pd_bad(err, err_len, "the prefill response has no kv_transfer_params");
    if (!json_is_object(kv))
        return pd_bad(err, err_len, "the prefill response's kv_transfer_params is not an object");
    if (!json_is_true(json_object_get(kv, "do_remote_prefill")))
        return pd_bad(err, err_len, "kv_transfer_params.do_remote_prefill is not true");
    const json_t *mode = json_object_get(kv, "transfer_mode");
    if (json_is_string(mode) && strcmp(json_string_value(mode), "push") == 0)
        return pd_bad(err, err_len,
                      "kv_transfer_params asks for push mode, which is not supported");
    const json_t *ids = json_object_get(kv, "remote_block_ids");
    if (ids == NULL || json_is_null(ids))
        return pd_bad(err, err_len,
                      "kv_transfer_params has no remote_block_ids (push mode is not supported)");
    return 0;
}

int dp_pd_decode_body(const char *body, size_t len, const char *resp, size_t resp_len, char **out,
                      size_t *out_len, char *err, size_t err_len)
{
    json_t *answer = pd_load_object(resp, resp_len);
    if (answer == NULL)
        return pd_bad(err, err_len, "the prefill response is not a JSON object");
    json_t *kv = json_object_get(answer, "kv_transfer_params");
    int rc = pd_check_params(kv, err, err_len);
    if (rc != 0)
        goto out_answer;
    struct dp_skel_doc b;
    rc = dp_skel_doc_open(&b, body, len);
    if (rc != 0)
        goto out_answer;
    if (json_object_set(b.root, "kv_transfer_params", kv) == 0) {
        rc = dp_skel_doc_close(&b, out, out_len);
    } else {
        dp_skel_doc_close(&b, NULL, NULL);
        rc = -ENOMEM;
    }
out_answer:
    json_decref(answer);
    return rc;
}

/* ---- usage -------------------------------------------------------------------- */

void dp_pd_prefill_usage(const char *resp, size_t len, struct dp_pd_usage *u)
{
    memset(u, 0, sizeof(*u));
    json_t *answer = pd_load_object(resp, len);
    json_t *usage = json_object_get(answer, "usage");
    json_t *prompt = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(prompt)) {
        u->known = true;
        u->prompt_tokens = json_integer_value(prompt);
        json_t *cached =
            json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(cached)) {
            u->cached_known = true;
            u->cached_tokens = json_integer_value(cached);
        }
    }
    json_decref(answer);
}

/* Rewrites a usage object from the prefill's. True when it changed. */
static bool pd_fix_usage(json_t *usage, const struct dp_pd_usage *u)
{
    if (!json_is_object(usage) || !u->known)
        return false;
    json_t *completion = json_object_get(usage, "completion_tokens");
    json_int_t c = json_is_integer(completion) ? json_integer_value(completion) : 0;
    json_object_set_new(usage, "prompt_tokens", json_integer(u->prompt_tokens));
    json_object_set_new(usage, "total_tokens", json_integer(u->prompt_tokens + c));
    json_t *details = json_object_get(usage, "prompt_tokens_details");
    if (u->cached_known) {
        if (!json_is_object(details)) {
            details = json_object();
            json_object_set_new(usage, "prompt_tokens_details", details);
        }
        json_object_set_new(details, "cached_tokens", json_integer(u->cached_tokens));
    } else if (json_is_object(details)) {
        /* The decode's count is the pulled KV, not a cache hit: say nothing. */
        json_object_set_new(usage, "prompt_tokens_details", json_null());
    }
    return true;
}

/* Copies prompt_logprobs of from into to where to has none. True when it changed. */
static bool pd_take_logprobs(json_t *to, const json_t *from)
{
    bool changed = false;
    json_t *top = json_object_get(from, "prompt_logprobs");
    json_t *mine = json_object_get(to, "prompt_logprobs");
    if (top != NULL && !json_is_null(top) && (mine == NULL || json_is_null(mine))) {
        json_object_set(to, "prompt_logprobs", top);
        changed = true;
    }
    json_t *tc = json_object_get(to, "choices"), *fc = json_object_get(from, "choices");
    for (size_t i = 0; i < json_array_size(tc) && i < json_array_size(fc); i++) {
        json_t *t = json_array_get(tc, i);
        json_t *f = json_object_get(json_array_get(fc, i), "prompt_logprobs");
        json_t *m = json_object_get(t, "prompt_logprobs");
        if (json_is_object(t) && f != NULL && !json_is_null(f) && (m == NULL || json_is_null(m))) {
            json_object_set(t, "prompt_logprobs", f);
            changed = true;
        }
    }
    return changed;
}

static int pd_dump(json_t *root, char **out, size_t *out_len)
{
    char *text = json_dumps(root, JSON_COMPACT);
    if (text == NULL)
        return -ENOMEM;
    *out = text;
    *out_len = strlen(text);
    return 0;
}

int dp_pd_merge_answer(const char *body, size_t len, const struct dp_pd_usage *u,
                       const char *prefill, size_t prefill_len, char **out, size_t *out_len)
{
    json_t *root = pd_load_object(body, len);
    if (root == NULL)
        return -EINVAL;
    bool changed = pd_fix_usage(json_object_get(root, "usage"), u);
    if (prefill != NULL) {
        json_t *from = pd_load_object(prefill, prefill_len);
        if (from != NULL)
            changed = pd_take_logprobs(root, from) || changed;
        json_decref(from);
    }
    int rc = changed ? pd_dump(root, out, out_len) : -ENOENT;
    json_decref(root);
    return rc;
}

int dp_pd_merge_line(const char *line, size_t len, const struct dp_pd_usage *u, char **out,
                     size_t *out_len)
{
    static const char prefix[] = "data: ";
    if (len < sizeof(prefix) - 1 || memcmp(line, prefix, sizeof(prefix) - 1) != 0)
        return -EINVAL;
    json_t *root = pd_load_object(line + sizeof(prefix) - 1, len - (sizeof(prefix) - 1));
    if (root == NULL)
        return -EINVAL;
    int rc = -ENOENT;
    if (pd_fix_usage(json_object_get(root, "usage"), u)) {
        char *text = json_dumps(root, JSON_COMPACT);
        size_t n = text != NULL ? strlen(text) : 0;
        *out = text != NULL ? malloc(sizeof(prefix) - 1 + n + 1) : NULL;
        if (*out != NULL) {
            memcpy(*out, prefix, sizeof(prefix) - 1);
            memcpy(*out + sizeof(prefix) - 1, text, n + 1);
            *out_len = sizeof(prefix) - 1 + n;
            rc = 0;
        } else {
            rc = -ENOMEM;
        }
        free(text);
    }
    json_decref(root);
    return rc;
}
