/*
 * Requests whose routing an end-to-end test reads back (see
 * harness_routed.h). The text is a xorshift stream from the seed: the
 * same seed gives the same prompt again, another seed a different one from
 * its first bytes on, so that prompts share a prefix only when a test
 * builds them to.
 */
#include "tests/e2e/harness_routed.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"

char *h_routed_text(unsigned seed, size_t len)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    unsigned long long x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[k] = (char)('a' + x % 26);
    }
    t[len] = '\0';
    return t;
}

void h_routed_post(const char *base, const char *path, const char *json, char *worker, size_t wlen,
                   char *decision, size_t dlen)
{
    char url[128];
    snprintf(url, sizeof(url), "%s%s", base, path);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, json, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(h_resp_header(&resp, "x-switchyard-worker", worker, wlen), 0);
    if (decision != NULL)
        assert_int_equal(h_resp_header(&resp, "x-switchyard-decision", decision, dlen), 0);
    h_resp_fini(&resp);
}
