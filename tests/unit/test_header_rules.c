/*
 * Unit tests of the client header rules (dataplane/http/header_rules.c): the
 * exact inputs an attacker used to smuggle or inject headers through
 * libmicrohttpd's lenient parser must be refused, and ordinary headers
 * must pass.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/http/header_rules.h"

#define S(x) x, strlen(x)

static void test_names(void **state)
{
    (void)state;
    assert_true(dp_hdr_name_is_token(S("Content-Type")));
    assert_true(dp_hdr_name_is_token(S("X-Custom_1.2~!#$%&'*+^`|")));
    assert_false(dp_hdr_name_is_token(S("")));
    assert_false(dp_hdr_name_is_token(S("Transfer-Encoding "))); /* space before the colon */
    assert_false(dp_hdr_name_is_token(S("Content-Length\t")));
    assert_false(dp_hdr_name_is_token(S("Host ")));
    assert_false(dp_hdr_name_is_token(S("X(A)")));
    assert_false(dp_hdr_name_is_token(S("X:A")));
    assert_false(dp_hdr_name_is_token(S("X\"A")));
    assert_false(dp_hdr_name_is_token(S("X\xc3\xa9")));
}

static void test_values(void **state)
{
    (void)state;
    assert_true(dp_hdr_value_is_clean(S("application/json; charset=utf-8")));
    assert_true(dp_hdr_value_is_clean(S("a\tb")));
    assert_true(dp_hdr_value_is_clean(S("caf\xc3\xa9"))); /* obs-text */
    assert_true(dp_hdr_value_is_clean(S("")));
    assert_false(dp_hdr_value_is_clean(S("foo\rX-Injected: 1")));
    assert_false(dp_hdr_value_is_clean(S("foo\nX-Injected: 1")));
    assert_false(dp_hdr_value_is_clean("a\0b", 3));
    assert_false(dp_hdr_value_is_clean(S("a\x01")));
    assert_false(dp_hdr_value_is_clean(S("a\x7f")));
}

static void test_connection_lists(void **state)
{
    (void)state;
    assert_true(dp_hdr_connection_lists("keep-alive, X-Secret", S("x-secret")));
    assert_true(dp_hdr_connection_lists("X-Secret", S("X-Secret")));
    assert_true(dp_hdr_connection_lists(" ,X-A ,\tX-Secret\t, close", S("x-secret")));
    assert_false(dp_hdr_connection_lists("keep-alive, X-Secret", S("X-Secre")));
    assert_false(dp_hdr_connection_lists("keep-alive, X-Secretive", S("X-Secret")));
    assert_false(dp_hdr_connection_lists("", S("X-Secret")));
    assert_false(dp_hdr_connection_lists(", ,", S("")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_connection_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
