/*
 * Unit tests of the /metrics reader (controlplane/load_report_parse.c):
 * vLLM's own page (HELP/TYPE, labels, "3.0" spellings, other families) is
 * read exactly; engines (data-parallel ranks) are summed, KV usage
 * averaged; the model_name filter; garbage, NUL bytes, truncated lines,
 * NaN/negative values, unterminated quotes and a huge page never crash,
 * never read past len, and yield -ENODATA when nothing usable is there.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "controlplane/load_report_parse.c"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_page),
        cmocka_unit_test(test_engines_summed_kv_averaged),
        cmocka_unit_test(test_labels_escapes_timestamps_blanks),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_bounded_by_len),
        cmocka_unit_test(test_huge_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
