/*
 * End-to-end tests of the admin API against a web page in the operator's
 * browser (security review II, finding 1; controlplane/admin/admin_guard.h).
 * The attacks are replayed as a browser sends them, on the default
 * configuration (loopback, no token):
 *   - CSRF: a "simple" cross-origin POST (Content-Type text/plain, or none)
 *     adding a worker that points at the attacker, draining a real one,
 *     loading an attacker-named LoRA adapter, reloading;
 *   - the same with an Origin of another site, or of another port of this
 *     very host;
 *   - DNS rebinding: the page's own name resolved to 127.0.0.1, so Host
 *     carries that name.
 * Each must be refused before anything changes (the registry is read back),
 * while tools (no Origin, JSON), the API's own origin and the names of
 * controlplane.admin_allowed_hosts keep working.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

static long admin_req(const struct h_fleet *f, const char *method, const char *path,
                      const char *body, const char *const *headers)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)f->cfg.admin_port, path);
    struct h_req req = {.method = method, .url = url, .body = body, .headers = headers};
    struct h_resp resp;
    long status = h_http(&req, &resp) == 0 ? resp.status : -1;
    h_resp_fini(&resp);
    return status;
}

/* How many workers GET /workers lists (-1 on failure). */
static long workers_listed(const struct h_fleet *f)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/workers", (unsigned)f->cfg.admin_port);
    struct h_resp resp;
    long n = -1;
    if (h_http_get(url, &resp) == 0 && resp.status == 200) {
        json_t *j = h_resp_json(&resp);
        json_t *arr = json_is_array(j) ? j : json_object_get(j, "workers");
        if (json_is_array(arr))
            n = (long)json_array_size(arr);
        json_decref(j);
    }
    h_resp_fini(&resp);
    return n;
}

static bool worker_draining(const struct h_fleet *f, const char *id)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/workers/%s", (unsigned)f->cfg.admin_port, id);
    struct h_resp resp;
    bool draining = false;
    if (h_http_get(url, &resp) == 0 && resp.status == 200) {
        json_t *j = h_resp_json(&resp);
        draining = json_is_true(json_object_get(j, "draining"));
        json_decref(j);
    }
    h_resp_fini(&resp);
    return draining;
}

static const char ATTACKER_WORKER[] = "{\"url\":\"http://127.0.0.1:9\",\"id\":\"evil\"}";

static void start(struct h_fleet *f)
{
    h_fleet_start(f, &(struct h_fleet_opts){
                         .n = 1, .controlplane_extra = "admin_allowed_hosts: [router.internal]\n"});
    assert_int_equal(workers_listed(f), 1);
}

static void test_simple_cross_origin_posts_are_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f);
    const char *const text_plain[] = {"Content-Type: text/plain", NULL};
    const char *const form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, text_plain), 415);
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, form), 415);
    assert_int_equal(admin_req(&f, "POST", "/workers/w1/drain", "{\"draining\":true}", text_plain),
                     415);
    assert_int_equal(admin_req(&f, "POST", "/adapters",
                               "{\"lora_name\":\"evil\",\"lora_path\":\"/tmp/evil\"}", text_plain),
                     415);
    assert_int_equal(admin_req(&f, "POST", "/reload", "", text_plain), 415);
    assert_int_equal(workers_listed(&f), 1);
    assert_false(worker_draining(&f, "w1"));
    h_fleet_stop(&f);
}

static void test_foreign_origins_are_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f);
    char other_port[96], own[96];
    snprintf(other_port, sizeof(other_port), "Origin: http://127.0.0.1:%u",
             (unsigned)f.cfg.admin_port + 1u);
    snprintf(own, sizeof(own), "Origin: http://127.0.0.1:%u", (unsigned)f.cfg.admin_port);
    const char *const evil[] = {"Origin: http://evil.example", NULL};
    const char *const sibling[] = {other_port, NULL};
    const char *const opaque[] = {"Origin: null", NULL};
    const char *const cross[] = {"Sec-Fetch-Site: cross-site", NULL};
    /* JSON does not help a foreign page (it would need a preflight, which
     * a tool could forge without a browser's Origin anyway). */
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, evil), 403);
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, sibling), 403);
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, opaque), 403);
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, cross), 403);
    assert_int_equal(admin_req(&f, "GET", "/workers", NULL, evil), 403);
    assert_int_equal(workers_listed(&f), 1);
    /* The API's own origin (its status page) is served. */
    const char *const ours[] = {own, NULL};
    assert_int_equal(admin_req(&f, "GET", "/workers", NULL, ours), 200);
    h_fleet_stop(&f);
}

static void test_rebinding_host_is_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f);
    char rebound[96], named[96], local[96];
    snprintf(rebound, sizeof(rebound), "Host: attacker.example:%u", (unsigned)f.cfg.admin_port);
    snprintf(named, sizeof(named), "Host: router.internal:%u", (unsigned)f.cfg.admin_port);
    snprintf(local, sizeof(local), "Host: localhost:%u", (unsigned)f.cfg.admin_port);
    const char *const attacker[] = {rebound, NULL};
    assert_int_equal(admin_req(&f, "GET", "/workers", NULL, attacker), 403);
    assert_int_equal(admin_req(&f, "GET", "/", NULL, attacker), 403);
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, attacker), 403);
    assert_int_equal(workers_listed(&f), 1);
    const char *const configured[] = {named, NULL};
    const char *const localhost[] = {local, NULL};
    assert_int_equal(admin_req(&f, "GET", "/workers", NULL, configured), 200);
    assert_int_equal(admin_req(&f, "GET", "/workers", NULL, localhost), 200);
    h_fleet_stop(&f);
}

static void test_tools_keep_working(void **state)
{
    (void)state;
    struct h_fleet f;
    start(&f);
    /* A tool's JSON POST, and a bodyless one that says JSON (as
     * switchyard-ctl sends reload and reset_load). */
    assert_int_equal(admin_req(&f, "POST", "/workers", ATTACKER_WORKER, NULL), 201);
    assert_int_equal(workers_listed(&f), 2);
    assert_int_equal(admin_req(&f, "DELETE", "/workers/evil", NULL, NULL), 200);
    assert_int_equal(admin_req(&f, "POST", "/workers/w1/reset_load", NULL, NULL), 200);
    /* A bodyless POST without a type is what a page's fetch() sends. */
    const char *const none[] = {"Content-Type:", NULL};
    assert_int_equal(admin_req(&f, "POST", "/workers/w1/reset_load", NULL, none), 415);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_simple_cross_origin_posts_are_refused),
        H_TEST(test_foreign_origins_are_refused),
        H_TEST(test_rebinding_host_is_refused),
        H_TEST(test_tools_keep_working),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
