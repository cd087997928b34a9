/*
 * Unit tests of the /metrics reader (controlplane/probes/load_report_parse.c):
 * vLLM's own page (HELP/TYPE, labels, "3.0" spellings, other families) is
 * read exactly; engines (data-parallel ranks) are summed, KV usage
 * averaged; the model_name filter; garbage, NUL bytes, truncated lines,
 * NaN/negative values, unterminated quotes and a huge page never crash,
 * never read past len, and yield -ENODATA when nothing usable is there.
 * vllm:lora_requests_info: the newest label set wins (old ones stay on
 * vLLM's page), per engine when series carry one (the engines' running
 * sets united), an empty running label is an empty set, a tie unites, a
 * value cut by the buffer loses only its partial last name.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "controlplane/probes/load_report_parse.c"

static const char vllm_page[] =
    "# HELP python_gc_objects_collected_total Objects collected during gc\n"
    "# TYPE python_gc_objects_collected_total counter\n"
    "python_gc_objects_collected_total{generation=\"0\"} 1234.0\n"
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"meta/llama\"} 3.0\n"
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"meta/llama\"} 7.0\n"
    "# HELP vllm:num_requests_waiting_by_reason Waiting requests by reason.\n"
    "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
    "vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"meta/llama\",reason="
    "\"capacity\"} 5.0\n"
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta/llama\"} 0.4375\n"
    "# TYPE vllm:prefix_cache_hits counter\n"
    "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"meta/llama\"} 99.0\n";

static void test_vllm_page(void **state)
{
    (void)state;
    struct lrp_report r;
    assert_int_equal(lrp_parse(vllm_page, strlen(vllm_page), NULL, &r), 0);
    assert_int_equal(r.running, 3);
    assert_int_equal(r.waiting, 7); /* not the _by_reason family */
    assert_true(r.has_kv);
    assert_true(r.kv_cache_usage > 0.4374 && r.kv_cache_usage < 0.4376);
    assert_int_equal(r.engines, 1);
    assert_int_equal(r.bad_lines, 0);
    /* The filter: the same model counts, another does not. */
    assert_int_equal(lrp_parse(vllm_page, strlen(vllm_page), "meta/llama", &r), 0);
    assert_int_equal(r.running, 3);
    assert_int_equal(lrp_parse(vllm_page, strlen(vllm_page), "other", &r), -ENODATA);
    assert_int_equal(r.running, 0);
}

static void test_engines_summed_kv_averaged(void **state)
{
    (void)state;
    static const char page[] = "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 2\n"
                               "vllm:num_requests_running{model_name=\"m\",engine=\"1\"} 5.0\n"
                               "vllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 1e1\n"
                               "vllm:num_requests_waiting{model_name=\"m\",engine=\"1\"} 0\n"
                               "vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.8\n"
                               "vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"1\"} 0.4\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), "m", &r), 0);
    assert_int_equal(r.running, 7);
    assert_int_equal(r.waiting, 10);
    assert_int_equal(r.engines, 2);
    assert_true(r.kv_cache_usage > 0.599 && r.kv_cache_usage < 0.601);
}

static void test_labels_escapes_timestamps_blanks(void **state)
{
    (void)state;
    static const char page[] =
        "  vllm:num_requests_running { model_name = \"a\\\"b\\\\c\\nd\" , engine=\"0\" , } 4.0 "
        "1712345678901\r\n"
        "vllm:num_requests_waiting 2\n"                 /* no labels at all */
        "vllm:kv_cache_usage_perc{engine=\"0\"} 1.7\n"; /* clamped to 1 */
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), "a\"b\\c\nd", &r), 0);
    assert_int_equal(r.running, 4);
    assert_int_equal(r.waiting, 2);
    assert_true(r.kv_cache_usage == 1.0);
}

static void test_garbage(void **state)
{
    (void)state;
    static const char *const pages[] = {
        "",
        "\n\n\n",
        "<html><body>Not Found</body></html>",
        "{\"error\": \"oops\"}",
        "vllm:num_requests_running",
        "vllm:num_requests_running{",
        "vllm:num_requests_running{engine=\"0",
        "vllm:num_requests_running{engine=\"0\"",
        "vllm:num_requests_running{engine=0} 3",
        "vllm:num_requests_running{engine=\"0\"} ",
        "vllm:num_requests_running{engine=\"0\"} NaN",
        "vllm:num_requests_running{engine=\"0\"} +Inf",
        "vllm:num_requests_running{engine=\"0\"} -3",
        "vllm:num_requests_running{engine=\"0\"} 3abc",
        "vllm:num_requests_running{engine=\"0\\",
        "# vllm:num_requests_running 3",
        "vllm:num_requests_running_total 3", /* a longer name is another family */
        "vllm:num_requests_running "
        "12345678901234567890123456789012345678901234567890123456789012345",
    };
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        struct lrp_report r;
        if (lrp_parse(pages[i], strlen(pages[i]), NULL, &r) != -ENODATA)
            fail_msg("page %zu was read as a report", i);
    }
    struct lrp_report r;
    assert_int_equal(lrp_parse(NULL, 0, NULL, &r), -ENODATA);
    /* A bad line does not cost the good ones around it. */
    static const char mixed[] = "vllm:num_requests_running{engine=\"0\"} x\n"
                                "\x01\x02\xff garbage\n"
                                "vllm:num_requests_running{engine=\"1\"} 6\n";
    assert_int_equal(lrp_parse(mixed, strlen(mixed), NULL, &r), 0);
    assert_int_equal(r.running, 6);
    assert_int_equal(r.bad_lines, 1);
}

/* The parser stops at len: the bytes after it are never looked at. */
static void test_bounded_by_len(void **state)
{
    (void)state;
    static const char page[] = "vllm:num_requests_running 3\nvllm:num_requests_waiting 4\n";
    size_t cut = strlen("vllm:num_requests_running 3\nvllm:num_requests_wai");
    char *copy = malloc(cut);
    assert_non_null(copy);
    memcpy(copy, page, cut); /* no terminator: ASan catches any read past cut */
    struct lrp_report r;
    assert_int_equal(lrp_parse(copy, cut, NULL, &r), 0);
    assert_int_equal(r.running, 3);
    assert_false(r.has_waiting);
    /* Cut inside the value: "3" of "3.5" is read as 3, no crash. */
    assert_int_equal(lrp_parse(copy, strlen("vllm:num_requests_running 3"), NULL, &r), 0);
    free(copy);
    /* NUL bytes inside a page are just garbage. */
    static const char nul[] = "vllm:num_requests_running\0 9\nvllm:num_requests_waiting 1\n";
    assert_int_equal(lrp_parse(nul, sizeof(nul) - 1, NULL, &r), 0);
    assert_false(r.has_running);
    assert_int_equal(r.waiting, 1);
}

/* A huge page: only the first LRP_INPUT_MAX bytes count. */
static void test_huge_page(void **state)
{
    (void)state;
    size_t len = LRP_INPUT_MAX + 4096;
    char *page = malloc(len);
    assert_non_null(page);
    memset(page, 'x', len);
    page[0] = '\n';
    static const char tail[] = "\nvllm:num_requests_running 5\n";
    memcpy(page + len - sizeof(tail) + 1, tail, sizeof(tail) - 1);
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, len, NULL, &r), -ENODATA);
    static const char head[] = "vllm:num_requests_waiting 8\n";
    memcpy(page, head, sizeof(head) - 1);
    assert_int_equal(lrp_parse(page, len, NULL, &r), 0);
    assert_int_equal(r.waiting, 8);
    assert_false(r.has_running);
    free(page);
}

static bool lora_has(const struct lrp_report *r, const char *name)
{
    return shm_adapter_set_may_have(&r->lora_running, shm_adapter_hash(name, strlen(name)));
}

/* vLLM's page: every label set the gauge had, the newest is the state. */
static void test_lora_newest_sample_wins(void **state)
{
    (void)state;
    static const char page[] =
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n"
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old1,old2\","
        "waiting_lora_adapters=\"\"} 1.764619930123e+09\n"
        "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"sql,chat\","
        "waiting_lora_adapters=\"old1\"} 1.764619936123456e+09\n"
        "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old3\","
        "waiting_lora_adapters=\"\"} 1764619935.9\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), "m", &r), 0);
    assert_true(r.has_lora);
    assert_true(lora_has(&r, "sql"));
    assert_true(lora_has(&r, "chat"));
    assert_false(lora_has(&r, "old1")); /* waiting is not running */
    assert_false(lora_has(&r, "old2"));
    assert_false(lora_has(&r, "old3"));
    assert_int_equal(r.running, 1);
    assert_int_equal(r.bad_lines, 0);
    /* A page without the family: no LoRA state, an empty set. */
    static const char plain[] = "vllm:num_requests_running 1\n";
    assert_int_equal(lrp_parse(plain, strlen(plain), NULL, &r), 0);
    assert_false(r.has_lora);
    assert_true(shm_adapter_set_is_empty(&r.lora_running));
}

/* The newest state runs nothing: an empty label is an empty set. */
static void test_lora_empty_labels(void **state)
{
    (void)state;
    static const char page[] =
        "vllm:num_requests_running 0\n"
        "vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"sql\","
        "waiting_lora_adapters=\"\"} 100.0\n"
        "vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"\","
        "waiting_lora_adapters=\"\"} 200.0\n"
        "vllm:lora_requests_info{max_lora=\"1\"} 50.0\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), NULL, &r), 0);
    assert_true(r.has_lora);
    assert_true(shm_adapter_set_is_empty(&r.lora_running));
    /* A tie between two label sets: both may be current, both count. */
    static const char tie[] = "vllm:num_requests_running 0\n"
                              "vllm:lora_requests_info{running_lora_adapters=\"a\"} 300\n"
                              "vllm:lora_requests_info{running_lora_adapters=\"b\"} 300\n"
                              "vllm:lora_requests_info{running_lora_adapters=\"c\"} 299\n"
                              "vllm:lora_requests_info{running_lora_adapters=\"d\"} NaN\n";
    assert_int_equal(lrp_parse(tie, strlen(tie), NULL, &r), 0);
    assert_true(lora_has(&r, "a") && lora_has(&r, "b"));
    assert_false(lora_has(&r, "c"));
    assert_false(lora_has(&r, "d"));
    assert_int_equal(r.bad_lines, 1);
}

/* Series per engine (data-parallel ranks): newest per engine, united. */
static void test_lora_multi_engine(void **state)
{
    (void)state;
    static const char page[] =
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n"
        "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n"
        "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"e0old\","
        "waiting_lora_adapters=\"\"} 10.0\n"
        "vllm:lora_requests_info{engine=\"1\",max_lora=\"2\",running_lora_adapters=\"e1new\","
        "waiting_lora_adapters=\"\"} 12.0\n"
        "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"e0new\","
        "waiting_lora_adapters=\"\"} 11.0\n"
        "vllm:lora_requests_info{engine=\"1\",max_lora=\"2\",running_lora_adapters=\"e1old\","
        "waiting_lora_adapters=\"\"} 9.0\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), "m", &r), 0);
    assert_int_equal(r.running, 3);
    assert_int_equal(r.engines, 2);
    /* Engine 0's newest (11) is older than engine 1's (12): it still counts. */
    assert_true(lora_has(&r, "e0new"));
    assert_true(lora_has(&r, "e1new"));
    assert_false(lora_has(&r, "e0old"));
    assert_false(lora_has(&r, "e1old"));
    /* More engines than LRP_LORA_ENGINES: no crash, the newest still counts. */
    char big[8192];
    size_t at = (size_t)snprintf(big, sizeof(big), "vllm:num_requests_running 1\n");
    for (int e = 0; e < 20; e++)
        at += (size_t)snprintf(big + at, sizeof(big) - at,
                               "vllm:lora_requests_info{engine=\"%d\",running_lora_adapters="
                               "\"x%d\"} %d\n",
                               e, e, 100 + e);
    assert_int_equal(lrp_parse(big, at, NULL, &r), 0);
    assert_true(lora_has(&r, "x19"));
}

/* A running list longer than the buffer keeps its whole names only. */
static void test_lora_long_list(void **state)
{
    (void)state;
    static char page[LRP_LORA_LIST_MAX * 2 + 256];
    size_t at = (size_t)snprintf(page, sizeof(page),
                                 "vllm:num_requests_running 1\n"
                                 "vllm:lora_requests_info{running_lora_adapters=\"first");
    while (at < LRP_LORA_LIST_MAX + 100)
        at += (size_t)snprintf(page + at, sizeof(page) - at, ",%s", "abcdefghij");
    at += (size_t)snprintf(page + at, sizeof(page) - at, ",last\"} 5\n");
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, at, NULL, &r), 0);
    assert_true(r.has_lora);
    assert_true(lora_has(&r, "first"));
    assert_true(lora_has(&r, "abcdefghij"));
    assert_false(lora_has(&r, "last")); /* past the buffer */
    assert_int_equal(r.bad_lines, 0);
}

/* vllm:cache_config_info: the block_size label of its (info, value 1)
 * series, as vLLM writes it; absent or unreadable, 0. */
static void test_cache_config_block_size(void **state)
{
    (void)state;
    static const char page[] =
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        "vllm:cache_config_info{block_size=\"32\",cache_dtype=\"auto\",enable_prefix_caching="
        "\"True\",num_gpu_blocks=\"2048\",num_cpu_blocks=\"None\",engine=\"0\"} 1.0\n"
        "vllm:cache_config_info{block_size=\"32\",engine=\"1\"} 1.0\n"
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2.0\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(page, strlen(page), NULL, &r), 0);
    assert_int_equal(r.block_size, 32);
    assert_int_equal(r.running, 2);
    assert_int_equal(r.bad_lines, 0);
    assert_int_equal(lrp_parse(vllm_page, strlen(vllm_page), NULL, &r), 0);
    assert_int_equal(r.block_size, 0);
    static const char bad[] = "vllm:cache_config_info{block_size=\"16x\"} 1.0\n"
                              "vllm:num_requests_running 1\n";
    assert_int_equal(lrp_parse(bad, strlen(bad), NULL, &r), 0);
    assert_int_equal(r.block_size, 0);
}

/* vllm:engine_sleep_state as vLLM writes it: awake 1 / 0, the level in
 * weights_offloaded or discard_all; one engine asleep is enough. */
static void test_engine_sleep_state(void **state)
{
    (void)state;
    static const char awake[] =
        "# TYPE vllm:engine_sleep_state gauge\n"
        "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 1.0\n"
        "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"} "
        "0.0\n"
        "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"discard_all\"} 0.0\n"
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n";
    struct lrp_report r;
    assert_int_equal(lrp_parse(awake, strlen(awake), NULL, &r), 0);
    assert_true(r.has_sleep_state);
    assert_false(r.sleeping);
    assert_int_equal(r.sleep_level, 0);
    static const char level2[] =
        "vllm:engine_sleep_state{model_name=\"m\",engine=\"0\",sleep_state=\"awake\"} 1.0\n"
        "vllm:engine_sleep_state{model_name=\"m\",engine=\"1\",sleep_state=\"awake\"} 0.0\n"
        "vllm:engine_sleep_state{model_name=\"m\",engine=\"1\",sleep_state=\"weights_offloaded\"} "
        "0.0\n"
        "vllm:engine_sleep_state{model_name=\"m\",engine=\"1\",sleep_state=\"discard_all\"} 1.0\n"
        "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 3.0\n";
    assert_int_equal(lrp_parse(level2, strlen(level2), NULL, &r), 0);
    assert_true(r.sleeping);
    assert_int_equal(r.sleep_level, 2);
    assert_int_equal(r.waiting, 3);
    /* Without the gauge (an older vLLM): not sleeping, and not said. */
    assert_int_equal(lrp_parse(vllm_page, strlen(vllm_page), NULL, &r), 0);
    assert_false(r.has_sleep_state);
    assert_false(r.sleeping);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_page),
        cmocka_unit_test(test_engines_summed_kv_averaged),
        cmocka_unit_test(test_labels_escapes_timestamps_blanks),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_bounded_by_len),
        cmocka_unit_test(test_huge_page),
        cmocka_unit_test(test_lora_newest_sample_wins),
        cmocka_unit_test(test_lora_empty_labels),
        cmocka_unit_test(test_lora_multi_engine),
        cmocka_unit_test(test_lora_long_list),
        cmocka_unit_test(test_cache_config_block_size),
        cmocka_unit_test(test_engine_sleep_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
