/*
 * Unit tests of the PodList scanner (controlplane/sources/source_kubernetes_list.h),
 * the reader that keeps a hostile API server's list from being held whole:
 * items handed up one at a time, whatever the cuts between reads; the
 * members the source reads kept, the others skipped; brackets and quotes
 * inside strings not taken for structure; an item refused stops the scan;
 * an item over the bound, a body cut short or of another shape fails it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "controlplane/sources/source_kubernetes_list.h"

/* What the scanner handed up: each item's compact dump, joined by '|'. */
struct seen {
    char text[4096];
    size_t n;
    size_t refuse_at; /* refuse the item of this number (1-based); 0 = none */
};

static bool on_item(void *user, const json_t *item)
{
    struct seen *s = user;
    s->n++;
    char *d = json_dumps(item, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    assert_non_null(d);
    size_t used = strlen(s->text);
    assert_true(used + strlen(d) + 2 < sizeof(s->text));
    snprintf(s->text + used, sizeof(s->text) - used, "%s|", d);
    free(d);
    return s->n != s->refuse_at;
}

static const char LIST[] =
    "{\"kind\" : \"PodList\",\"apiVersion\":\"v1\",\n"
    " \"metadata\":{\"resourceVersion\":\"42\",\"continue\":\"c:{[\\\"]}\"},\n"
    " \"skipped\":{\"items\":[1,2,{\"a\":\"]}\"}]},\"n\":-1.5e3,\"t\":true,\"z\":null,\n"
    " \"items\":[ {\"metadata\":{\"name\":\"a\\\"}]\",\"uid\":\"u1\"}} , {},[1],\"s\",7 ,\n"
    "   {\"metadata\":{\"name\":\"b\",\"labels\":{\"x\":\"{\"}}}]}\n";

static const char ITEMS[] = "{\"metadata\":{\"name\":\"a\\\"}]\",\"uid\":\"u1\"}}|{}|[1]|\"s\"|7|"
                            "{\"metadata\":{\"labels\":{\"x\":\"{\"},\"name\":\"b\"}}|";

static void check_rest(json_t *rest)
{
    assert_non_null(rest);
    char *d = json_dumps(rest, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(d, "{\"apiVersion\":\"v1\",\"items\":[],\"kind\":\"PodList\",\"metadata\":{"
                           "\"continue\":\"c:{[\\\"]}\",\"resourceVersion\":\"42\"}}");
    free(d);
    json_decref(rest);
}

/* Every way of cutting the body in two reads gives the same items. */
static void test_every_split_point(void **state)
{
    (void)state;
    size_t len = strlen(LIST);
    struct kube_list_scan ls;
    struct seen s;
    kube_ls_init(&ls, 1024, on_item, &s);
    for (size_t cut = 0; cut <= len; cut++) {
        memset(&s, 0, sizeof(s));
        kube_ls_reset(&ls);
        assert_true(kube_ls_feed(&ls, LIST, cut));
        assert_true(kube_ls_feed(&ls, LIST + cut, len - cut));
        check_rest(kube_ls_finish(&ls));
        assert_string_equal(s.text, ITEMS);
        assert_int_equal(ls.items, 6);
    }
    /* A byte at a time. */
    memset(&s, 0, sizeof(s));
    kube_ls_reset(&ls);
    for (size_t i = 0; i < len; i++)
        assert_true(kube_ls_feed(&ls, LIST + i, 1));
    check_rest(kube_ls_finish(&ls));
    assert_string_equal(s.text, ITEMS);
    kube_ls_fini(&ls);
}

/* A refused item stops the scan there: nothing after it is handed up. */
static void test_refusal_stops_the_scan(void **state)
{
    (void)state;
    struct kube_list_scan ls;
    struct seen s = {.refuse_at = 2};
    kube_ls_init(&ls, 1024, on_item, &s);
    assert_false(kube_ls_feed(&ls, LIST, strlen(LIST)));
    assert_int_equal(s.n, 2);
    assert_true(ls.failed);
    assert_string_equal(ls.why, "refused");
    assert_false(kube_ls_feed(&ls, "]}", 2));
    assert_null(kube_ls_finish(&ls));
    kube_ls_fini(&ls);
}

/* A million tiny items cost one item of memory, never the list. */
static void test_many_items_one_at_a_time(void **state)
{
    (void)state;
    struct kube_list_scan ls;
    kube_ls_init(&ls, 64, NULL, NULL);
    assert_true(kube_ls_feed(&ls, "{\"items\":[", 10));
    for (int i = 0; i < 1000000; i++)
        assert_true(kube_ls_feed(&ls, i == 0 ? "{}" : ",{}", i == 0 ? 2 : 3));
    assert_true(kube_ls_feed(&ls, "]}", 2));
    json_t *rest = kube_ls_finish(&ls);
    assert_non_null(rest);
    json_decref(rest);
    assert_int_equal(ls.items, 1000000);
    assert_true(ls.cap <= 4096);
    kube_ls_fini(&ls);
}

static void expect_failure(const char *body, size_t max, const char *why_part)
{
    struct kube_list_scan ls;
    kube_ls_init(&ls, max, NULL, NULL);
    bool fed = kube_ls_feed(&ls, body, strlen(body));
    json_t *rest = kube_ls_finish(&ls);
    if (rest != NULL || (fed && !ls.failed))
        fail_msg("'%s' was accepted", body);
    if (strstr(ls.why, why_part) == NULL)
        fail_msg("'%s': '%s' does not say '%s'", body, ls.why, why_part);
    kube_ls_fini(&ls);
}

static void test_bad_bodies_fail(void **state)
{
    (void)state;
    expect_failure("", 64, "empty");
    expect_failure("[]", 64, "no JSON object");
    expect_failure("{\"items\":[{}", 64, "cut short");
    expect_failure("{\"items\":[{\"a\":1} {}]}", 64, "no JSON array");
    expect_failure("{\"items\":[{\"a\":\""
                   "0123456789012345678901234567890123456789"
                   "\"}]}",
                   32, "more than 32 bytes");
    expect_failure("{\"items\":[{\"a\":}]}", 64, "malformed list item");
    expect_failure("{\"items\":[]} x", 64, "bytes after");
    expect_failure("{\"metadata\" 1}", 64, "expected shape");
    /* An escaped or long key names no member the source reads. */
    struct kube_list_scan ls;
    kube_ls_init(&ls, 64, NULL, NULL);
    const char *b = "{\"\\u0069tems\":[1],\"metadataXXXXXXXXXXXXXXXX\":{}}";
    assert_true(kube_ls_feed(&ls, b, strlen(b)));
    json_t *rest = kube_ls_finish(&ls);
    assert_non_null(rest);
    assert_int_equal(json_object_size(rest), 0); /* no items array: the source refuses it */
    json_decref(rest);
    kube_ls_fini(&ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_refusal_stops_the_scan),
        cmocka_unit_test(test_many_items_one_at_a_time),
        cmocka_unit_test(test_bad_bodies_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
