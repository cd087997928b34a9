/*
 * End-to-end tests of how the control plane takes changes while it runs:
 *  - workers added at run time start "unknown" (controlplane.health.initial):
 *    not routed until their first successful probe, one success being
 *    enough; a first failure makes them unhealthy; health.initial: healthy
 *    routes them at once;
 *  - the control-plane reload (SIGHUP, POST /reload, switchyard-ctl reload):
 *    the static workers re-synced with unchanged ones keeping slot and
 *    generation, health settings applied, and a change that needs a restart
 *    refused as a whole, naming the keys.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS 10000

/* ---- admin API helpers ------------------------------------------------------ */

static uint16_t g_admin_port;

/* One admin request; returns the status and, when out is not NULL, the body as JSON. */
static long admin(const char *method, const char *path, const char *body, json_t **out)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)g_admin_port, path);
    struct h_req req = {.method = method, .url = url, .body = body};
    struct h_resp resp = {0};
    long status = h_http(&req, &resp) == 0 ? resp.status : -1;
    if (out != NULL)
        *out = h_resp_json(&resp);
    h_resp_fini(&resp);
    return status;
}

/* The worker's "health" field ("healthy", "unhealthy", "unknown"), or "absent". */
static void worker_health(const char *id, char *buf, size_t len)
{
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s", id);
    json_t *j = NULL;
    long st = admin("GET", path, NULL, &j);
    const char *h = json_string_value(json_object_get(j, "health"));
    snprintf(buf, len, "%s", st == 200 && h != NULL ? h : "absent");
    json_decref(j);
}

struct health_is {
    const char *id;
    const char *want;
};

static bool health_reaches(void *arg)
{
    const struct health_is *c = arg;
    char h[32];
    worker_health(c->id, h, sizeof(h));
    return strcmp(h, c->want) == 0;
}

/* The value of the admin /metrics line that starts with prefix, or -1. */
static long long admin_metric(const char *prefix)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", (unsigned)g_admin_port);
    struct h_resp resp;
    long long v = -1;
    if (h_http_get(url, &resp) == 0 && resp.status == 200) {
        const char *p = strstr(resp.body, prefix);
        if (p != NULL)
            v = strtoll(p + strlen(prefix), NULL, 10);
    }
    h_resp_fini(&resp);
    return v;
}

static void start_cp(struct h_config *cfg, struct h_proc **cp)
{
    assert_int_equal(h_config_write(cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(cfg->path, cp), 0);
    g_admin_port = cfg->admin_port;
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), cfg->admin_port, "/status"), 0);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
}

/* ---- health.initial ------------------------------------------------------------ */

/*
 * A worker added through the API is not healthy in its 201 answer ("unknown"),
 * and becomes healthy on its first successful probe although
 * success_threshold is 5: an unknown worker has nothing to recover from.
 */
static void test_api_worker_starts_unknown(void **state)
{
    (void)state;
    struct h_mock m1, m2;
    assert_int_equal(h_mock_start(&m1, "--model", "m", NULL), 0);
    assert_int_equal(h_mock_start(&m2, "--model", "m", NULL), 0);
    struct h_config cfg = {.health_interval = "200ms", .health_extra = "success_threshold: 5\n"};
    assert_int_equal(h_config_add_worker(&cfg, m1.url, "w1", "m", NULL), 0);
    struct h_proc *cp;
    start_cp(&cfg, &cp);
    /* A worker of the config present at start is healthy from the start. */
    char h[32];
    worker_health("w1", h, sizeof(h));
    assert_string_equal(h, "healthy");

    char body[256];
    snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"w2\",\"model\":\"m\"}", m2.url);
    json_t *j = NULL;
    assert_int_equal(admin("POST", "/workers", body, &j), 201);
    assert_false(json_is_true(json_object_get(j, "healthy")));
    assert_string_equal(json_string_value(json_object_get(j, "health")), "unknown");
    json_decref(j);

    struct health_is c = {.id = "w2", .want = "healthy"};
    assert_int_equal(h_wait_until(health_reaches, &c, WAIT_MS), 0);
    long long ok = admin_metric("switchyard_health_checks_total{worker=\"w2\",result=\"success\"} ");
    assert_true(ok >= 1);
    assert_true(ok < 5);
}

/*
 * Traffic: a worker added through the API whose health check fails takes no
 * request, neither before its first probe nor after (when it is unhealthy);
 * the configured worker takes them all.
 */
static void test_unknown_worker_takes_no_traffic(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .policy = "round_robin",
                                             .health_interval = "300ms"});
    g_admin_port = f.cfg.admin_port;
    struct h_mock bad;
    assert_int_equal(h_mock_start(&bad, "--model", H_FLEET_MODEL, NULL), 0);
    assert_int_equal(h_mock_faults(bad.url, "{\"health_status\":503}"), 0);
    char body[256];
    snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"w2\",\"model\":\"%s\"}", bad.url,
             H_FLEET_MODEL);
    assert_int_equal(admin("POST", "/workers", body, NULL), 201);
    /* Right away, before any probe could judge it (round robin would give it half). */
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    const char *req = "{\"model\":\"" H_FLEET_MODEL "\",\"prompt\":\"hi\",\"max_tokens\":1}";
    for (int i = 0; i < 20; i++) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, req, &resp), 0);
        assert_int_equal(resp.status, 200);
        h_resp_fini(&resp);
    }
    struct health_is c = {.id = "w2", .want = "unhealthy"};
    assert_int_equal(h_wait_until(health_reaches, &c, WAIT_MS), 0);
    for (int i = 0; i < 5; i++) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, req, &resp), 0);
        assert_int_equal(resp.status, 200);
        h_resp_fini(&resp);
    }
    long long n = -1;
    assert_int_equal(h_mock_stat_int(bad.url, "requests_total", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 25);
    h_fleet_stop(&f);
}

/* health.initial: healthy keeps the old behaviour: routed at once. */
static void test_initial_healthy_routes_at_once(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h", .health_extra = "initial: healthy\n"};
    struct h_proc *cp;
    start_cp(&cfg, &cp);
    json_t *j = NULL;
    assert_int_equal(admin("POST", "/workers", "{\"url\":\"http://127.0.0.1:9\",\"id\":\"w9\"}", &j),
                     201);
    assert_true(json_is_true(json_object_get(j, "healthy")));
    assert_string_equal(json_string_value(json_object_get(j, "health")), "healthy");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_api_worker_starts_unknown),
        H_TEST(test_unknown_worker_takes_no_traffic),
        H_TEST(test_initial_healthy_routes_at_once),
    };
    return cmocka_run_group_tests_name("reload", tests, NULL, NULL);
}
