/*
 * End-to-end: CORS (dataplane.cors, docs/api.md). Off by default: OPTIONS
 * is a 405 and no answer carries CORS headers. On: the router answers
 * preflights itself (200, or 400 for an origin, method or header it does
 * not allow), and every answer to an allowed origin carries
 * Access-Control-Allow-Origin: plain answers, streams, the router's own
 * errors and unknown paths alike.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define ORIGIN "https://app.example"
#define CHAT                                                                                       \
    "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\","          \
    "\"content\":\"hi\"}]}"

static long request(const struct h_fleet *f, const char *method, const char *path, const char *body,
                    const char *const *headers, struct h_resp *r)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    struct h_req q = {.method = method, .url = url, .body = body, .headers = headers};
    assert_int_equal(h_http(&q, r), 0);
    return r->status;
}

static bool header_is(const struct h_resp *r, const char *name, const char *want)
{
    char v[512];
    if (h_resp_header(r, name, v, sizeof(v)) != 0)
        return want == NULL;
    return want != NULL && strcmp(v, want) == 0;
}

static void test_cors_off_by_default(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    const char *const pre[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: POST", NULL};
    struct h_resp r = {0};
    assert_int_equal(request(&f, "OPTIONS", "/v1/chat/completions", NULL, pre, &r), 405);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", NULL));
    h_resp_fini(&r);
    const char *const hdrs[] = {"Origin: " ORIGIN, "Content-Type: application/json", NULL};
    assert_int_equal(request(&f, "POST", "/v1/chat/completions", CHAT, hdrs, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", NULL));
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

static void test_cors_on(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 1,
                                   .dataplane_extra =
                                       "cors:\n"
                                       "  allowed_origins: [\"" ORIGIN "\"]\n"
                                       "  allowed_headers: [\"Authorization\", \"X-Custom\"]\n"});
    struct h_resp r = {0};
    /* A preflight the router answers. */
    const char *const pre[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: POST",
                               "Access-Control-Request-Headers: authorization, content-type", NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/responses", NULL, pre, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    assert_true(header_is(&r, "Access-Control-Allow-Methods", "POST, OPTIONS"));
    assert_true(header_is(&r, "Access-Control-Allow-Headers", "Authorization, X-Custom"));
    assert_true(header_is(&r, "Access-Control-Max-Age", "600"));
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0); /* never forwarded */
    /* Refused preflights: origin, method, header. */
    const char *const bad_origin[] = {"Origin: https://evil.example",
                                      "Access-Control-Request-Method: POST", NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/chat/completions", NULL, bad_origin, &r), 400);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", NULL));
    h_resp_fini(&r);
    const char *const bad_method[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: GET",
                                      NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/chat/completions", NULL, bad_method, &r), 400);
    h_resp_fini(&r);
    const char *const bad_header[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: POST",
                                      "Access-Control-Request-Headers: x-other", NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/chat/completions", NULL, bad_header, &r), 400);
    h_resp_fini(&r);
    const char *const get_pre[] = {"Origin: " ORIGIN, "Access-Control-Request-Method: GET", NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/models", NULL, get_pre, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Methods", "GET, HEAD, OPTIONS"));
    h_resp_fini(&r);

    /* Every answer to the allowed origin carries the header. */
    const char *const hdrs[] = {"Origin: " ORIGIN, "Content-Type: application/json", NULL};
    assert_int_equal(request(&f, "POST", "/v1/chat/completions", CHAT, hdrs, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    assert_true(header_is(&r, "Vary", "Origin"));
    assert_true(header_is(&r, "Access-Control-Expose-Headers", "X-Request-Id"));
    h_resp_fini(&r);
    assert_int_equal(request(&f, "POST", "/v1/chat/completions",
                             "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":2,"
                             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                             hdrs, &r),
                     200);
    assert_non_null(strstr(r.body, "[DONE]"));
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    h_resp_fini(&r);
    assert_int_equal(request(&f, "POST", "/v1/messages", "{bad", hdrs, &r), 400);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    h_resp_fini(&r);
    assert_int_equal(request(&f, "GET", "/nowhere", NULL, hdrs, &r), 404);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    h_resp_fini(&r);
    assert_int_equal(request(&f, "GET", "/v1/chat/completions", NULL, hdrs, &r), 405);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", ORIGIN));
    h_resp_fini(&r);
    /* Another origin gets none. */
    const char *const other[] = {"Origin: https://evil.example", "Content-Type: application/json",
                                 NULL};
    assert_int_equal(request(&f, "POST", "/v1/chat/completions", CHAT, other, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", NULL));
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

/* "*": any origin, answered with "*"; "*" headers echo what was asked. */
static void test_cors_wildcard(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .dataplane_extra = "cors:\n"
                                                                "  allowed_origins: [\"*\"]\n"
                                                                "  allowed_headers: [\"*\"]\n"});
    struct h_resp r = {0};
    const char *const pre[] = {"Origin: https://any.example", "Access-Control-Request-Method: POST",
                               "Access-Control-Request-Headers: x-anything", NULL};
    assert_int_equal(request(&f, "OPTIONS", "/v1/chat/completions", NULL, pre, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", "*"));
    assert_true(header_is(&r, "Access-Control-Allow-Headers", "x-anything"));
    h_resp_fini(&r);
    const char *const hdrs[] = {"Origin: https://any.example", "Content-Type: application/json",
                                NULL};
    assert_int_equal(request(&f, "POST", "/v1/chat/completions", CHAT, hdrs, &r), 200);
    assert_true(header_is(&r, "Access-Control-Allow-Origin", "*"));
    assert_true(header_is(&r, "Vary", NULL));
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_cors_off_by_default),
        H_TEST(test_cors_on),
        H_TEST(test_cors_wildcard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
