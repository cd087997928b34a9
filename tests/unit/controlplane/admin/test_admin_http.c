/*
 * Unit tests of the admin API's pure parts: bearer-token comparison (exact
 * match only, whatever the lengths), route matching for metrics labels and
 * the per-route status counters. Includes the .c files to reach statics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "controlplane/admin/admin_http.c"

static void test_token_compare(void **state)
{
    (void)state;
    char token[] = "s3cret";
    struct adm_http h = {.token = token, .token_len = 6};
    assert_true(adm_token_matches(&h, "s3cret"));
    assert_false(adm_token_matches(&h, "s3cre"));
    assert_false(adm_token_matches(&h, "s3cret "));
    assert_false(adm_token_matches(&h, "s3cret-and-more"));
    assert_false(adm_token_matches(&h, ""));
    assert_false(adm_token_matches(&h, "S3CRET"));
    assert_false(adm_token_matches(&h, "x3cret"));
}

static void test_route_match(void **state)
{
    (void)state;
    assert_int_equal(adm_route_match("/workers"), ADM_ROUTE_WORKERS);
    assert_int_equal(adm_route_match("/workers/w1"), ADM_ROUTE_WORKER);
    assert_int_equal(adm_route_match("/workers/10.0.0.1:80/drain"), ADM_ROUTE_DRAIN);
    assert_int_equal(adm_route_match("/workers/w1/reset_load"), ADM_ROUTE_RESET_LOAD);
    assert_int_equal(adm_route_match("/workers/w1/other"), ADM_ROUTE_OTHER);
    assert_int_equal(adm_route_match("/workers//drain"), ADM_ROUTE_OTHER);
    assert_int_equal(adm_route_match("/status"), ADM_ROUTE_STATUS);
    assert_int_equal(adm_route_match("/metrics"), ADM_ROUTE_METRICS);
    assert_int_equal(adm_route_match("/reload"), ADM_ROUTE_RELOAD);
    assert_int_equal(adm_route_match("/decisions"), ADM_ROUTE_DECISIONS);
    assert_int_equal(adm_route_match("/decisions/history"), ADM_ROUTE_DECISIONS_HISTORY);
    assert_int_equal(adm_route_match("/"), ADM_ROUTE_PAGE);
    assert_int_equal(adm_route_match("/index.html"), ADM_ROUTE_OTHER);
    char longid[200];
    memset(longid, 'a', sizeof(longid));
    memcpy(longid, "/workers/", 9);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(adm_route_match(longid), ADM_ROUTE_OTHER);
}

static void test_request_counters(void **state)
{
    (void)state;
    static struct adm_http h;
    adm_count(&h, ADM_ROUTE_WORKERS, 200);
    adm_count(&h, ADM_ROUTE_WORKERS, 200);
    adm_count(&h, ADM_ROUTE_WORKERS, 404);
    struct buf page;
    buf_init(&page, 64 * 1024);
    struct prom_writer w;
    prom_init(&w, &page);
    adm_http_write_metrics(&h, &w);
    assert_int_equal(prom_error(&w), 0);
    char *buf = page.data;
    assert_non_null(
        strstr(buf, "switchyard_admin_requests_total{route=\"/workers\",code=\"200\"} 2\n"));
    assert_non_null(
        strstr(buf, "switchyard_admin_requests_total{route=\"/workers\",code=\"404\"} 1\n"));
    buf_fini(&page);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_compare),
        cmocka_unit_test(test_route_match),
        cmocka_unit_test(test_request_counters),
    };
    return cmocka_run_group_tests_name("cp_admin_http", tests, NULL, NULL);
}
