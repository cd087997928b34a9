/*
 * Unit tests of the loop's table of parsed worker URLs (upstream_url.c):
 * one parse per distinct URL, the same handle for the same URL, a handle
 * that says what it was given, and a bounded table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "dataplane/core/upstream_url.h"

static void url_of(char *buf, size_t len, unsigned i, const char *path)
{
    snprintf(buf, len, "http://10.0.%u.%u:%u%s", (i >> 8) & 0xff, i & 0xff, 8000 + i % 1000, path);
}

static void assert_parsed_is(CURLU *u, const char *want)
{
    char *got = NULL;
    assert_int_equal(curl_url_get(u, CURLUPART_URL, &got, 0), CURLUE_OK);
    assert_string_equal(got, want);
    curl_free(got);
}

static void test_same_url_same_handle(void **state)
{
    (void)state;
    struct dp_up_urls loop;
    memset(&loop, 0, sizeof(loop));
    char a[128], b[128];
    url_of(a, sizeof(a), 1, "/v1/chat/completions");
    url_of(b, sizeof(b), 1, "/v1/completions");
    CURLU *ua = dp_up_url_parsed(&loop, a);
    CURLU *ub = dp_up_url_parsed(&loop, b);
    assert_non_null(ua);
    assert_non_null(ub);
    assert_ptr_not_equal(ua, ub);
    assert_ptr_equal(dp_up_url_parsed(&loop, a), ua);
    assert_ptr_equal(dp_up_url_parsed(&loop, b), ub);
    assert_int_equal(loop.n_urls, 2);
    assert_parsed_is(ua, a);
    assert_parsed_is(ub, b);
    dp_up_urls_fini(&loop);
    assert_null(loop.urls);
    assert_int_equal(loop.n_urls, 0);
}

/* Growing the table keeps every entry findable; past 4,096 URLs new ones
 * are not parsed (the caller passes the string) and old ones still are. */
static void test_many_urls_and_the_bound(void **state)
{
    (void)state;
    struct dp_up_urls loop;
    memset(&loop, 0, sizeof(loop));
    enum { N = 4096 };
    CURLU **seen = calloc(N, sizeof(*seen));
    assert_non_null(seen);
    char u[128];
    for (unsigned i = 0; i < N; i++) {
        url_of(u, sizeof(u), i, "/v1/embeddings");
        seen[i] = dp_up_url_parsed(&loop, u);
        assert_non_null(seen[i]);
    }
    assert_int_equal(loop.n_urls, N);
    for (unsigned i = 0; i < N; i += 7) {
        url_of(u, sizeof(u), i, "/v1/embeddings");
        assert_ptr_equal(dp_up_url_parsed(&loop, u), seen[i]);
        assert_parsed_is(seen[i], u);
    }
    url_of(u, sizeof(u), N + 1, "/v1/embeddings");
    assert_null(dp_up_url_parsed(&loop, u));
    assert_int_equal(loop.n_urls, N);
    free(seen);
    dp_up_urls_fini(&loop);
}

/* A string curl cannot parse is not kept: the caller passes it as is and
 * the transfer fails with curl's own error. */
static void test_unparsable_url_is_not_kept(void **state)
{
    (void)state;
    struct dp_up_urls loop;
    memset(&loop, 0, sizeof(loop));
    assert_null(dp_up_url_parsed(&loop, "http://[::1"));
    assert_int_equal(loop.n_urls, 0);
    dp_up_urls_fini(&loop);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_url_same_handle),
        cmocka_unit_test(test_many_urls_and_the_bound),
        cmocka_unit_test(test_unparsable_url_is_not_kept),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
