/*
 * Unit tests of the prefill/decode body rewriting (dataplane/forward/pd.h,
 * docs/pd.md): the prefill leg's fields, what is left alone, the decode
 * leg's kv_transfer_params taken verbatim from the prefill answer, and
 * every kind of unusable prefill answer refused with a message.
 */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/forward/pd.h"
#include "dataplane/forward/pd_body.h"
#include "dataplane/forward/pd_usage_filter.h"
#include "dataplane/types/request_types.h"

static json_t *prefill_of(const char *body)
{
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(dp_pd_prefill_body(body, strlen(body), &out, &len), 0);
    assert_int_equal(strlen(out), len);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    free(out);
    return j;
}

static void assert_prefill_params(json_t *j)
{
    json_t *kv = json_object_get(j, "kv_transfer_params");
    assert_true(json_is_object(kv));
    assert_int_equal(json_object_size(kv), 6);
    assert_true(json_is_true(json_object_get(kv, "do_remote_decode")));
    assert_true(json_is_false(json_object_get(kv, "do_remote_prefill")));
    assert_true(json_is_null(json_object_get(kv, "remote_engine_id")));
    assert_true(json_is_null(json_object_get(kv, "remote_block_ids")));
    assert_true(json_is_null(json_object_get(kv, "remote_host")));
    assert_true(json_is_null(json_object_get(kv, "remote_port")));
}

static void test_prefill_chat_stream(void **state)
{
    (void)state;
    json_t *j = prefill_of("{\"model\":\"m\",\"stream\":true,\"stream_options\":"
                           "{\"include_usage\":true},\"max_tokens\":50,"
                           "\"max_completion_tokens\":40,\"temperature\":0.25,\"user\":\"u\","
                           "\"min_tokens\":4,\"min_completion_tokens\":3,"
                           "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "max_completion_tokens")), 1);
    assert_true(json_is_false(json_object_get(j, "stream")));
    assert_null(json_object_get(j, "stream_options"));
    /* vLLM rejects min_tokens > max_tokens: the prefill leg drops both. */
    assert_null(json_object_get(j, "min_tokens"));
    assert_null(json_object_get(j, "min_completion_tokens"));
    assert_prefill_params(j);
    /* Everything else unchanged. */
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    assert_string_equal(json_string_value(json_object_get(j, "user")), "u");
    assert_true(json_real_value(json_object_get(j, "temperature")) == 0.25);
    assert_int_equal(json_array_size(json_object_get(j, "messages")), 1);
    /* Keys keep the client's order; the new ones come last. */
    const char *order[] = {"model",       "stream", "max_tokens", "max_completion_tokens",
                           "temperature", "user",   "messages",   "kv_transfer_params"};
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        assert_true(i < 8);
        assert_string_equal(k, order[i]);
        i++;
    }
    assert_int_equal(i, 8);
    json_decref(j);
}

static void test_prefill_completions_minimal(void **state)
{
    (void)state;
    /* No max_tokens: added. No max_completion_tokens: not added. No stream: false. */
    json_t *j = prefill_of("{\"prompt\":\"once\"}");
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 1);
    assert_null(json_object_get(j, "max_completion_tokens"));
    assert_true(json_is_false(json_object_get(j, "stream")));
    assert_prefill_params(j);
    json_decref(j);
}

static void test_prefill_replaces_client_params(void **state)
{
    (void)state;
    json_t *j = prefill_of("{\"prompt\":\"x\",\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                           "\"remote_engine_id\":\"evil\"},\"stream\":null}");
    assert_prefill_params(j);
    assert_true(json_is_false(json_object_get(j, "stream")));
    json_decref(j);
}

static void test_prefill_rejects_non_objects(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(dp_pd_prefill_body("[1]", 3, &out, &len), -EINVAL);
    assert_int_equal(dp_pd_prefill_body("{bad", 4, &out, &len), -EINVAL);
    assert_int_equal(dp_pd_prefill_body(NULL, 0, &out, &len), -EINVAL);
    assert_null(out);
}

/* Several prompts are not disaggregated; one prompt, in any form, is. */
static void test_prefill_refuses_prompt_batches(void **state)
{
    (void)state;
    const char *batches[] = {"{\"prompt\":[\"a\",\"b\"]}", "{\"prompt\":[[1,2],[3]]}"};
    for (size_t i = 0; i < 2; i++) {
        char *out = NULL;
        size_t len = 0;
        assert_int_equal(dp_pd_prefill_body(batches[i], strlen(batches[i]), &out, &len), -EDOM);
        assert_null(out);
    }
    const char *single[] = {"{\"prompt\":[\"a\"]}", "{\"prompt\":[1,2,3]}", "{\"prompt\":[[1,2]]}",
                            "{\"prompt\":\"a\"}"};
    for (size_t i = 0; i < 4; i++)
        json_decref(prefill_of(single[i]));
}

static const char *const GOOD_RESP =
    "{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"a\"}],\"kv_transfer_params\":{"
    "\"do_remote_prefill\":true,\"do_remote_decode\":false,\"remote_engine_id\":\"e1\","
    "\"remote_block_ids\":[3,2,1],\"remote_host\":\"10.0.0.7\",\"remote_port\":5600,"
    "\"tp_size\":2}}";

static void test_decode_body_adds_params_verbatim(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":"
                       "true},\"max_tokens\":50,\"messages\":[]}";
    char *out = NULL;
    size_t len = 0;
    char err[128] = "";
    assert_int_equal(dp_pd_decode_body(body, strlen(body), GOOD_RESP, strlen(GOOD_RESP), &out, &len,
                                       err, sizeof(err)),
                     0);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(j);
    /* The client's body as it was... */
    assert_true(json_is_true(json_object_get(j, "stream")));
    assert_true(json_is_object(json_object_get(j, "stream_options")));
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 50);
    /* ...plus exactly the prefill's params, unknown fields included. */
    json_t *resp = json_loads(GOOD_RESP, 0, NULL);
    assert_non_null(resp);
    assert_true(json_equal(json_object_get(j, "kv_transfer_params"),
                           json_object_get(resp, "kv_transfer_params")));
    json_decref(resp);
    json_decref(j);
}

static void test_decode_body_replaces_client_params(void **state)
{
    (void)state;
    const char *body = "{\"prompt\":\"p\",\"kv_transfer_params\":{\"x\":1}}";
    char *out = NULL;
    size_t len = 0;
    char err[128];
    assert_int_equal(dp_pd_decode_body(body, strlen(body), GOOD_RESP, strlen(GOOD_RESP), &out, &len,
                                       err, sizeof(err)),
                     0);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    json_t *kv = json_object_get(j, "kv_transfer_params");
    assert_null(json_object_get(kv, "x"));
    assert_string_equal(json_string_value(json_object_get(kv, "remote_engine_id")), "e1");
    json_decref(j);
}

static void expect_unusable(const char *resp, const char *words)
{
    const char *body = "{\"prompt\":\"p\"}";
    char *out = NULL;
    size_t len = 0;
    char err[160] = "";
    assert_int_equal(
        dp_pd_decode_body(body, strlen(body), resp, strlen(resp), &out, &len, err, sizeof(err)),
        -EPROTO);
    assert_null(out);
    if (strstr(err, words) == NULL)
        fail_msg("'%s' does not say '%s'", err, words);
}

static void test_decode_refuses_unusable_params(void **state)
{
    (void)state;
    expect_unusable("not json", "not a JSON object");
    expect_unusable("{\"id\":\"x\"}", "no kv_transfer_params");
    expect_unusable("{\"kv_transfer_params\":null}", "no kv_transfer_params");
    expect_unusable("{\"kv_transfer_params\":[1]}", "not an object");
    expect_unusable("{\"kv_transfer_params\":{\"do_remote_prefill\":false,\"remote_engine_id\":"
                    "\"e\",\"remote_block_ids\":[],\"remote_host\":\"h\",\"remote_port\":1}}",
                    "do_remote_prefill");
    /* Push mode: the decode would have to run alongside the prefill. */
    expect_unusable("{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_engine_id\":"
                    "\"e\",\"remote_block_ids\":null,\"remote_host\":\"h\",\"remote_port\":1}}",
                    "push mode");
    expect_unusable("{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_engine_id\":"
                    "\"e\",\"remote_host\":\"h\",\"remote_port\":1}}",
                    "push mode");
    expect_unusable("{\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                    "\"remote_block_ids\":[[1]],\"transfer_mode\":\"push\"}}",
                    "push mode");
}

/* The decode body for params of any shape the router does not know:
 * only do_remote_prefill is checked, the rest goes through verbatim. */
static void expect_passed_through(const char *resp)
{
    const char *body = "{\"prompt\":\"p\"}";
    char *out = NULL;
    size_t len = 0;
    char err[160] = "";
    assert_int_equal(
        dp_pd_decode_body(body, strlen(body), resp, strlen(resp), &out, &len, err, sizeof(err)), 0);
    json_t *j = json_loads(out, 0, NULL);
    json_t *r = json_loads(resp, 0, NULL);
    assert_non_null(j);
    assert_non_null(r);
    assert_true(json_equal(json_object_get(j, "kv_transfer_params"),
                           json_object_get(r, "kv_transfer_params")));
    json_decref(r);
    json_decref(j);
    free(out);
}

static void test_decode_passes_any_params_shape(void **state)
{
    (void)state;
    /* vLLM since March 2026: one list of block ids per KV-cache group. */
    expect_passed_through(
        "{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"do_remote_decode\":false,"
        "\"remote_engine_id\":\"e\",\"remote_block_ids\":[[4,5,6],[7]],\"remote_host\":\"h\","
        "\"remote_port\":1,\"tp_size\":1,\"remote_request_id\":\"r1\","
        "\"remote_num_tokens\":40,\"transfer_mode\":\"pull\"}}");
    /* Fields the router once checked, in shapes it never saw. */
    expect_passed_through("{\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                          "\"remote_block_ids\":[1,\"2\"],\"remote_port\":\"1\"}}");
    expect_passed_through("{\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                          "\"remote_block_ids\":[]}}");
}

/* ---- usage under P/D ---------------------------------------------------------------- */

static const char *const PREFILL_ANSWER =
    "{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"x\",\"prompt_logprobs\":[null,{\"7\":"
    "{\"logprob\":-1.5}}]}],\"prompt_logprobs\":[null],\"usage\":{\"prompt_tokens\":40,"
    "\"total_tokens\":41,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":"
    "16}},\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":[[1]]}}";

static void test_usage_taken_from_prefill(void **state)
{
    (void)state;
    struct dp_pd_usage u;
    dp_pd_prefill_usage(PREFILL_ANSWER, strlen(PREFILL_ANSWER), &u);
    assert_true(u.known && u.cached_known);
    assert_int_equal(u.prompt_tokens, 40);
    assert_int_equal(u.cached_tokens, 16);
    /* The decode answer counted the pulled KV as cached; no prompt logprobs of its own. */
    const char *decode = "{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"abc\","
                         "\"prompt_logprobs\":null}],\"prompt_logprobs\":null,\"usage\":{"
                         "\"prompt_tokens\":40,\"total_tokens\":48,\"completion_tokens\":8,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":40}}}";
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(dp_pd_merge_answer(decode, strlen(decode), &u, NULL, 0, &out, &len), 0);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    json_t *usage = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")), 40);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 8);
    assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), 48);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(usage, "prompt_tokens_details"), "cached_tokens")),
                     16);
    assert_true(json_is_null(json_object_get(j, "prompt_logprobs")));
    json_decref(j);
    /* prompt_logprobs asked for: the prefill's, top level and per choice. */
    assert_int_equal(dp_pd_merge_answer(decode, strlen(decode), &u, PREFILL_ANSWER,
                                        strlen(PREFILL_ANSWER), &out, &len),
                     0);
    j = json_loads(out, 0, NULL);
    free(out);
    assert_int_equal(json_array_size(json_object_get(j, "prompt_logprobs")), 1);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_array_size(json_object_get(c0, "prompt_logprobs")), 2);
    assert_string_equal(json_string_value(json_object_get(c0, "text")), "abc");
    json_decref(j);
    /* No usage in the prefill answer: nothing to change. */
    struct dp_pd_usage none;
    dp_pd_prefill_usage("{\"id\":1}", 8, &none);
    assert_false(none.known);
    assert_int_equal(dp_pd_merge_answer(decode, strlen(decode), &none, NULL, 0, &out, &len),
                     -ENOENT);
}

static void test_usage_line_rewritten(void **state)
{
    (void)state;
    struct dp_pd_usage u = {
        .known = true, .cached_known = true, .prompt_tokens = 7, .cached_tokens = 0};
    const char *line = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
                       "\"total_tokens\":13,\"completion_tokens\":6,\"prompt_tokens_details\":{"
                       "\"cached_tokens\":7}}}";
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(dp_pd_merge_line(line, strlen(line), &u, &out, &len), 0);
    assert_int_equal(strlen(out), len);
    assert_memory_equal(out, "data: {", 7);
    json_t *j = json_loads(out + 6, 0, NULL);
    free(out);
    json_t *usage = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), 13);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(usage, "prompt_tokens_details"), "cached_tokens")),
                     0);
    json_decref(j);
    assert_int_equal(dp_pd_merge_line("data: [DONE]", 12, &u, &out, &len), -EINVAL);
    const char *no_usage = "data: {\"choices\":[],\"usage\":null}";
    assert_int_equal(dp_pd_merge_line(no_usage, strlen(no_usage), &u, &out, &len), -ENOENT);
}

/* Runs a stream through the decode leg's filter in chunks of `step` bytes; every other chunk is
 * first refused by the relay (offered again, as curl does after a pause). Returns the relayed
 * bytes, the held tail flushed at the end (malloc'd). */
static char *filter_stream(const char *stream, size_t step, size_t *out_len)
{
    struct dp_pd_state pd;
    memset(&pd, 0, sizeof(pd));
    dp_pd_filter_init(&pd);
    pd.usage = (struct dp_pd_usage){.known = true, .cached_known = true, .prompt_tokens = 7};
    size_t len = strlen(stream), n = 0;
    char *got = malloc(4 * len + 64);
    assert_non_null(got);
    for (size_t off = 0, k = 0; off < len; off += step, k++) {
        size_t c = len - off < step ? len - off : step;
        const char *out = NULL;
        size_t ol = 0;
        if (k % 2 == 1)
            dp_pd_filter(&pd, true, stream + off, c, &out, &ol); /* refused: no commit */
        dp_pd_filter(&pd, true, stream + off, c, &out, &ol);
        memcpy(got + n, out, ol);
        n += ol;
        dp_pd_filter_commit(&pd, true, stream + off, c);
    }
    if (pd.line.len > 0)
        memcpy(got + n, pd.line.data, pd.line.len);
    n += pd.line.len;
    got[n] = '\0';
    dp_pd_filter_fini(&pd);
    *out_len = n;
    return got;
}

static void test_stream_usage_rewritten_across_chunks(void **state)
{
    (void)state;
    const char *stream =
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n"
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"total_tokens\":13,"
        "\"completion_tokens\":6,\"prompt_tokens_details\":{\"cached_tokens\":7}}}\n\n"
        "data: [DONE]\n\n";
    size_t ref_len = 0;
    char *ref = filter_stream(stream, strlen(stream), &ref_len);
    assert_non_null(strstr(ref, "\"cached_tokens\":0"));
    assert_null(strstr(ref, "\"cached_tokens\":7"));
    assert_non_null(strstr(ref, "data: {\"id\":\"c\",\"choices\":[{"));
    assert_true(ref_len >= 16 && memcmp(ref + ref_len - 16, "\n\ndata: [DONE]\n\n", 16) == 0);
    for (size_t step = 1; step < strlen(stream); step++) {
        size_t n = 0;
        char *got = filter_stream(stream, step, &n);
        assert_int_equal(n, ref_len);
        assert_memory_equal(got, ref, n);
        free(got);
    }
    free(ref);
    /* Not a stream, or no prefill usage: every byte as it came. */
    struct dp_pd_state pd;
    memset(&pd, 0, sizeof(pd));
    const char *out = NULL;
    size_t ol = 0;
    dp_pd_filter(&pd, true, stream, strlen(stream), &out, &ol);
    assert_ptr_equal(out, stream);
    assert_int_equal(ol, strlen(stream));
    pd.usage.known = true;
    dp_pd_filter(&pd, false, stream, strlen(stream), &out, &ol);
    assert_ptr_equal(out, stream);
    dp_pd_filter_fini(&pd);
}

/* A long prompt reaches both legs byte for byte, escapes included: the
 * rewrite never decodes it (dataplane/http/json_skeleton.h). */
static void test_long_prompt_kept_byte_for_byte(void **state)
{
    (void)state;
    size_t n = 300 * 1024;
    char *prompt = malloc(n + 1);
    /* Whole units of raw JSON text: letters, an escaped newline, an escaped e-acute, escaped
     * quotes. */
    size_t k = 0;
    static const char unit[] = "ab\\n\\u00e9 \\\"q\\\" ";
    while (k + sizeof(unit) - 1 <= n) {
        memcpy(prompt + k, unit, sizeof(unit) - 1);
        k += sizeof(unit) - 1;
    }
    prompt[k] = '\0';
    size_t cap = k + 256;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"model\":\"m\",\"prompt\":\"%s\",\"max_tokens\":50}", prompt);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(dp_pd_prefill_body(body, strlen(body), &out, &len), 0);
    assert_non_null(memmem(out, len, prompt, k));
    char *dec = NULL;
    size_t dec_len = 0;
    char err[256];
    assert_int_equal(dp_pd_decode_body(body, strlen(body), GOOD_RESP, strlen(GOOD_RESP), &dec,
                                       &dec_len, err, sizeof(err)),
                     0);
    assert_non_null(memmem(dec, dec_len, prompt, k));
    json_t *j = json_loadb(out, len, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 1);
    json_decref(j);
    free(dec);
    free(out);
    free(body);
    free(prompt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_chat_stream),
        cmocka_unit_test(test_long_prompt_kept_byte_for_byte),
        cmocka_unit_test(test_prefill_completions_minimal),
        cmocka_unit_test(test_prefill_replaces_client_params),
        cmocka_unit_test(test_prefill_rejects_non_objects),
        cmocka_unit_test(test_prefill_refuses_prompt_batches),
        cmocka_unit_test(test_decode_body_adds_params_verbatim),
        cmocka_unit_test(test_decode_body_replaces_client_params),
        cmocka_unit_test(test_decode_refuses_unusable_params),
        cmocka_unit_test(test_decode_passes_any_params_shape),
        cmocka_unit_test(test_usage_taken_from_prefill),
        cmocka_unit_test(test_usage_line_rewritten),
        cmocka_unit_test(test_stream_usage_rewritten_across_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
