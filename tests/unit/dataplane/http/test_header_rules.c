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

/* Framing from a list of "name", "value" pairs, NULL-terminated. */
static const char *framing_of(const char *const *pairs)
{
    struct dp_hdr_framing f = {0};
    for (size_t i = 0; pairs[i] != NULL; i += 2)
        dp_hdr_framing_note(&f, pairs[i], strlen(pairs[i]), pairs[i + 1], strlen(pairs[i + 1]));
    return dp_hdr_framing_problem(&f);
}

static void test_framing(void **state)
{
    (void)state;
    assert_null(framing_of((const char *const[]){"Content-Length", "12", NULL}));
    assert_null(framing_of((const char *const[]){"transfer-encoding", "Chunked", NULL}));
    assert_null(framing_of((const char *const[]){"X-Length", "1", "Content-Type", "a", NULL}));
    assert_non_null(
        framing_of((const char *const[]){"Content-Length", "7", "content-length", "7", NULL}));
    assert_non_null(framing_of(
        (const char *const[]){"Transfer-Encoding", "chunked", "Content-Length", "7", NULL}));
    assert_non_null(framing_of((const char *const[]){"Transfer-Encoding", "gzip, chunked", NULL}));
    assert_non_null(framing_of((const char *const[]){"Transfer-Encoding", "chunked",
                                                     "Transfer-Encoding", "chunked", NULL}));
    assert_non_null(framing_of((const char *const[]){"Content-Length", "+7", NULL}));
    assert_non_null(framing_of((const char *const[]){"Content-Length", "7, 7", NULL}));
    assert_non_null(framing_of((const char *const[]){"Content-Length", "", NULL}));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_connection_lists),
        cmocka_unit_test(test_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
