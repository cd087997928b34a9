/*
 * Unit tests of dataplane/http/id_route.c: an id in the path is vLLM's
 * alphabet (letters, digits, '_', '-') and at most DP_ID_ROUTE_ID_MAX
 * bytes, and no worker URL is built from anything else (docs/security.md,
 * finding 21: "%2E%2E" arrived decoded and the worker's URL resolved it).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/types/request_types.h"
#include "dataplane/http/id_route.h"

static void test_alphabet(void **state)
{
    (void)state;
    assert_true(dp_id_route_id_is_valid("resp_0123abcdefABCDEF"));
    assert_true(dp_id_route_id_is_valid("a-b_c-9"));
    static const char *const bad[] = {"",    "..",   ".",    "resp.1",   "a/b", "a?b", "a#b",
                                      "a b", "a%2e", "a\tb", "\xc3\xa9", "a;b", "a\\b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(dp_id_route_id_is_valid(bad[i]));
    char id[DP_ID_ROUTE_ID_MAX + 2];
    memset(id, 'a', sizeof(id));
    id[DP_ID_ROUTE_ID_MAX] = '\0';
    assert_true(dp_id_route_id_is_valid(id));
    id[DP_ID_ROUTE_ID_MAX] = 'a';
    id[DP_ID_ROUTE_ID_MAX + 1] = '\0';
    assert_false(dp_id_route_id_is_valid(id));
}

static void test_url_refuses_bad_ids(void **state)
{
    (void)state;
    struct dp_request req;
    memset(&req, 0, sizeof(req));
    req.route = DP_ROUTE_RESPONSES_CANCEL;
    char url[512];
    snprintf(req.resp_id, sizeof(req.resp_id), "resp_1");
    assert_int_equal(dp_id_route_url(&req, "http://w:1", url, sizeof(url)), 0);
    assert_string_equal(url, "http://w:1/v1/responses/resp_1/cancel");
    snprintf(req.resp_id, sizeof(req.resp_id), "..");
    assert_int_equal(dp_id_route_url(&req, "http://w:1", url, sizeof(url)), -EINVAL);
    req.resp_id[0] = '\0';
    assert_int_equal(dp_id_route_url(&req, "http://w:1", url, sizeof(url)), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alphabet),
        cmocka_unit_test(test_url_refuses_bad_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
