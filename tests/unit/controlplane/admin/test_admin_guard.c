/*
 * Unit tests of the admin API's browser guard (controlplane/admin/
 * admin_guard.c): the Host names it takes (IP literals, localhost, the
 * configured names) and the ones a rebinding page would send, the Origin
 * of this API against every other origin (another port of the same host
 * included), Sec-Fetch-Site, and the Content-Type a state-changing request
 * must carry.
 */
#include "controlplane/admin/admin_guard.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static struct cfg_str_list allowed = {.item = {"router.internal", "Admin.Example"}, .n = 2};

static struct adm_guard guard(void)
{
    struct adm_guard g;
    assert_int_equal(adm_guard_init(&g, "127.0.0.1:8081", &allowed), 0);
    return g;
}

static unsigned check(const char *method, const char *host, const char *origin,
                      const char *content_type)
{
    struct adm_guard g = guard();
    struct adm_guard_request r = {
        .method = method, .host = host, .origin = origin, .content_type = content_type};
    char why[256] = "";
    unsigned st = adm_guard_check(&g, &r, why, sizeof(why));
    assert_true((st == 0) == (why[0] == '\0'));
    return st;
}

static void test_hosts(void **state)
{
    (void)state;
    struct adm_guard g = guard();
    const char *ours[] = {"127.0.0.1:8081", "127.0.0.1",       "localhost:8081",
                          "LOCALHOST",      "[::1]:8081",      "[::1]",
                          "10.1.2.3:8081",  "router.internal", "admin.example:8081"};
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
        assert_true(adm_guard_host_is_ours(&g, ours[i]));
    const char *theirs[] = {"attacker.example",
                            "attacker.example:8081",
                            "localhost.attacker.example",
                            "127.0.0.1.nip.io:8081",
                            "",
                            "router.internal.evil",
                            "a b",
                            "evil/x",
                            "user@127.0.0.1"};
    for (size_t i = 0; i < sizeof(theirs) / sizeof(theirs[0]); i++)
        assert_false(adm_guard_host_is_ours(&g, theirs[i]));
    assert_false(adm_guard_host_is_ours(&g, NULL));
}

static void test_rebinding_host_refused(void **state)
{
    (void)state;
    assert_int_equal(check("GET", "attacker.example:8081", NULL, NULL), 403);
    assert_int_equal(check("POST", "attacker.example:8081", NULL, "application/json"), 403);
    /* No Host at all (HTTP/1.0 tools): not a browser. */
    assert_int_equal(check("GET", NULL, NULL, NULL), 0);
}

static void test_origins(void **state)
{
    (void)state;
    const char *json = "application/json";
    assert_int_equal(check("POST", "127.0.0.1:8081", "http://127.0.0.1:8081", json), 0);
    assert_int_equal(check("POST", "localhost:8081", "http://localhost:8081", json), 0);
    assert_int_equal(check("POST", "router.internal:8081", "https://router.internal:8081", json),
                     0);
    /* Another site, another port of this host, an opaque origin. */
    assert_int_equal(check("POST", "127.0.0.1:8081", "http://evil.example", json), 403);
    assert_int_equal(check("POST", "127.0.0.1:8081", "http://127.0.0.1:3000", json), 403);
    assert_int_equal(check("POST", "127.0.0.1:8081", "http://localhost", json), 403);
    assert_int_equal(check("POST", "127.0.0.1:8081", "null", json), 403);
    assert_int_equal(check("POST", "127.0.0.1:8081", "file://", json), 403);
    assert_int_equal(check("POST", "127.0.0.1:8081", "http://127.0.0.1:8081/x", json), 403);
    /* A read is refused too: a foreign page may not read the fleet either. */
    assert_int_equal(check("GET", "127.0.0.1:8081", "http://evil.example", NULL), 403);
}

static void test_sec_fetch_site(void **state)
{
    (void)state;
    struct adm_guard g = guard();
    char why[256];
    struct adm_guard_request r = {
        .method = "GET", .host = "127.0.0.1:8081", .sec_fetch_site = "cross-site"};
    assert_int_equal(adm_guard_check(&g, &r, why, sizeof(why)), 403);
    r.sec_fetch_site = "same-origin";
    assert_int_equal(adm_guard_check(&g, &r, why, sizeof(why)), 0);
    r.sec_fetch_site = "none"; /* typed in the address bar */
    assert_int_equal(adm_guard_check(&g, &r, why, sizeof(why)), 0);
}

static void test_content_type(void **state)
{
    (void)state;
    const char *host = "127.0.0.1:8081";
    assert_int_equal(check("POST", host, NULL, "application/json"), 0);
    assert_int_equal(check("POST", host, NULL, "application/json; charset=utf-8"), 0);
    assert_int_equal(check("POST", host, NULL, "Application/JSON"), 0);
    /* The three types a browser sends cross-origin without asking first. */
    assert_int_equal(check("POST", host, NULL, "text/plain"), 415);
    assert_int_equal(check("POST", host, NULL, "application/x-www-form-urlencoded"), 415);
    assert_int_equal(check("POST", host, NULL, "multipart/form-data; boundary=x"), 415);
    assert_int_equal(check("POST", host, NULL, NULL), 415);
    assert_int_equal(check("POST", host, NULL, "application/jsonx"), 415);
    assert_int_equal(check("PUT", host, NULL, NULL), 415);
    /* Reads and DELETE (never sent cross-origin without a preflight). */
    assert_int_equal(check("GET", host, NULL, NULL), 0);
    assert_int_equal(check("DELETE", host, NULL, NULL), 0);
}

static void test_init(void **state)
{
    (void)state;
    struct adm_guard g = {0};
    assert_int_equal(adm_guard_init(&g, "[::1]:9090", NULL), 0);
    assert_int_equal(g.port, 9090);
    assert_int_equal(g.allowed_hosts.n, 0);
    assert_true(adm_guard_host_is_ours(&g, "[::1]:9090"));
    assert_false(adm_guard_host_is_ours(&g, "router.internal"));
    assert_int_equal(adm_guard_init(&g, "nonsense", NULL), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hosts),        cmocka_unit_test(test_rebinding_host_refused),
        cmocka_unit_test(test_origins),      cmocka_unit_test(test_sec_fetch_site),
        cmocka_unit_test(test_content_type), cmocka_unit_test(test_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
