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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
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

/* One sample of the admin /metrics of the current control plane, or -1. */
static long long admin_metric(const char *sample)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", (unsigned)g_admin_port);
    return h_metric_at(url, sample);
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
    long long ok = admin_metric("switchyard_health_checks_total{worker=\"w2\",result=\"success\"}");
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
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 1, .policy = "round_robin", .health_interval = "300ms"});
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
    assert_int_equal(
        admin("POST", "/workers", "{\"url\":\"http://127.0.0.1:9\",\"id\":\"w9\"}", &j), 201);
    assert_true(json_is_true(json_object_get(j, "healthy")));
    assert_string_equal(json_string_value(json_object_get(j, "health")), "healthy");
    json_decref(j);
}

/* ---- reload ----------------------------------------------------------------------- */

/* slot and generation of a worker from GET /workers/{id}; false when absent. */
static bool worker_place(const char *id, long long *slot, long long *gen, bool *draining)
{
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s", id);
    json_t *j = NULL;
    long st = admin("GET", path, NULL, &j);
    bool found = st == 200 && j != NULL;
    if (found) {
        *slot = json_integer_value(json_object_get(j, "slot"));
        *gen = json_integer_value(json_object_get(j, "generation"));
        if (draining != NULL)
            *draining = json_is_true(json_object_get(j, "draining"));
    }
    json_decref(j);
    return found;
}

static bool worker_absent(void *arg)
{
    long long s, g;
    return !worker_place(arg, &s, &g, NULL);
}

static bool worker_present(void *arg)
{
    return !worker_absent(arg);
}

/* Runs switchyard-ctl --config path reload; returns its exit code, stderr in err. */
static int ctl_reload(const char *config, char *err, size_t err_len)
{
    char bin[H_PATH_MAX], err_path[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-ctl", bin, sizeof(bin)), 0);
    assert_int_equal(h_tmp_path("ctl-reload.err", err_path, sizeof(err_path)), 0);
    char cmd[3 * H_PATH_MAX];
    snprintf(cmd, sizeof(cmd), "'%s' --config '%s' reload >/dev/null 2>'%s'", bin, config,
             err_path);
    int st = system(cmd);
    FILE *f = fopen(err_path, "r");
    size_t n = f != NULL ? fread(err, 1, err_len - 1, f) : 0;
    err[n] = '\0';
    if (f != NULL)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void set_workers(struct h_config *cfg, const char *const *ids, const char *const *urls,
                        size_t n)
{
    cfg->n_workers = 0;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(h_config_add_worker(cfg, urls[i], ids[i], "m", NULL), 0);
}

/*
 * SIGHUP re-syncs the configured workers: an unchanged one keeps its slot,
 * generation and drain; a removed one goes; a new one arrives unknown and
 * turns healthy; an API-added worker is left alone. A dataplane-only key
 * changes too: accepted, and the answer says when it takes effect.
 */
static void test_sighup_resyncs_static_workers(void **state)
{
    (void)state;
    struct h_mock m1, m2, m3;
    assert_int_equal(h_mock_start(&m1, "--model", "m", NULL), 0);
    assert_int_equal(h_mock_start(&m2, "--model", "m", NULL), 0);
    assert_int_equal(h_mock_start(&m3, "--model", "m", NULL), 0);
    struct h_config cfg = {.health_interval = "200ms"};
    set_workers(&cfg, (const char *const[]){"w1", "w2"}, (const char *const[]){m1.url, m2.url}, 2);
    struct h_proc *cp;
    start_cp(&cfg, &cp);
    long long s1, g1, s, g;
    bool draining = false;
    assert_true(worker_place("w1", &s1, &g1, NULL));
    assert_int_equal(admin("POST", "/workers/w1/drain", "{\"draining\":true}", NULL), 200);
    assert_int_equal(
        admin("POST", "/workers", "{\"url\":\"http://127.0.0.1:9\",\"id\":\"api1\"}", NULL), 201);

    set_workers(&cfg, (const char *const[]){"w1", "w3"}, (const char *const[]){m1.url, m3.url}, 2);
    cfg.dataplane_extra = "retry:\n  max_attempts: 2\n";
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    assert_int_equal(kill(cp->pid, SIGHUP), 0);
    assert_int_equal(h_wait_until(worker_absent, "w2", WAIT_MS), 0);
    assert_int_equal(h_wait_until(worker_present, "w3", WAIT_MS), 0);
    assert_true(worker_place("w1", &s, &g, &draining));
    assert_int_equal(s, s1);
    assert_int_equal(g, g1);
    assert_true(draining);
    assert_true(worker_place("api1", &s, &g, NULL));
    struct health_is c = {.id = "w3", .want = "healthy"};
    assert_int_equal(h_wait_until(health_reaches, &c, WAIT_MS), 0);
    assert_true(h_proc_log_contains(cp, "workers: 1 added, 1 removed, 0 changed, 1 unchanged"));
    assert_true(h_proc_log_contains(cp, "dataplane.retry.max_attempts changed: the data planes "
                                        "apply them at their next hot restart"));
    assert_true(h_proc_is_running(cp));
}

/*
 * POST /reload (through switchyard-ctl) applies health settings: a new
 * health.path that the workers answer 404 makes them unhealthy.
 */
static void test_reload_applies_health_settings(void **state)
{
    (void)state;
    struct h_mock m1;
    assert_int_equal(h_mock_start(&m1, "--model", "m", NULL), 0);
    struct h_config cfg = {.health_interval = "100ms"};
    set_workers(&cfg, (const char *const[]){"w1"}, (const char *const[]){m1.url}, 1);
    struct h_proc *cp;
    start_cp(&cfg, &cp);
    char err[1024];
    assert_int_equal(ctl_reload(cfg.path, err, sizeof(err)), 0);
    char h[32];
    worker_health("w1", h, sizeof(h));
    assert_string_equal(h, "healthy");

    cfg.health_extra = "path: /no-such-health\nfailure_threshold: 2\n";
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    json_t *j = NULL;
    assert_int_equal(admin("POST", "/reload", NULL, &j), 200);
    const char *msg = json_string_value(json_object_get(j, "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "health settings applied"));
    json_decref(j);
    struct health_is c = {.id = "w1", .want = "unhealthy"};
    assert_int_equal(h_wait_until(health_reaches, &c, WAIT_MS), 0);
    assert_int_equal(admin("GET", "/reload", NULL, NULL), 405);
}

/*
 * A reload that changes a key needing a restart, or whose file is broken,
 * or whose workers clash with the API's, is refused as a whole: nothing of
 * it applies (the new worker in the same file does not appear) and the
 * message names the keys.
 */
static void test_reload_refuses_restart_keys_as_a_whole(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h"};
    set_workers(&cfg, (const char *const[]){"w1"}, (const char *const[]){"http://127.0.0.1:7"}, 1);
    struct h_proc *cp;
    start_cp(&cfg, &cp);
    assert_int_equal(
        admin("POST", "/workers", "{\"url\":\"http://127.0.0.1:9\",\"id\":\"api1\"}", NULL), 201);

    set_workers(&cfg, (const char *const[]){"w1", "w4"},
                (const char *const[]){"http://127.0.0.1:7", "http://127.0.0.1:8"}, 2);
    cfg.shm_extra = "max_workers: 64\n";
    cfg.controlplane_extra = "admin_insecure: true\n";
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    char err[1024];
    assert_int_equal(ctl_reload(cfg.path, err, sizeof(err)), 6);
    assert_non_null(strstr(err, "reload refused, the running config stays: changing "
                                "shm.max_workers, controlplane.admin_insecure needs a restart"));
    assert_true(worker_absent("w4"));
    /* SIGHUP: the same refusal in the log, and the control plane keeps running. */
    assert_int_equal(kill(cp->pid, SIGHUP), 0);
    int64_t deadline = h_now_ms() + WAIT_MS;
    while (!h_proc_log_contains(cp, "received SIGHUP") ||
           !h_proc_log_contains(cp, "needs a restart of the control plane"))
        assert_true(h_now_ms() < deadline && (usleep(10000), true));
    assert_true(h_proc_is_running(cp));
    assert_true(worker_absent("w4"));

    /* A worker whose id the admin API already uses. */
    cfg.shm_extra = NULL;
    cfg.controlplane_extra = NULL;
    set_workers(&cfg, (const char *const[]){"w1", "api1"},
                (const char *const[]){"http://127.0.0.1:7", "http://127.0.0.1:6"}, 2);
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    assert_int_equal(ctl_reload(cfg.path, err, sizeof(err)), 6);
    assert_non_null(strstr(err, "already used by a worker of the admin API"));

    /* A file that does not load: the loader's own message. */
    assert_int_equal(h_write_file("config.yaml", "shm: [\n", NULL, 0), 0);
    json_t *j = NULL;
    assert_int_equal(admin("POST", "/reload", NULL, &j), 400);
    const char *e = json_string_value(json_object_get(j, "error"));
    assert_non_null(e);
    assert_non_null(strstr(e, "config.yaml:"));
    json_decref(j);
    assert_true(worker_place("api1", &(long long){0}, &(long long){0}, NULL));
    assert_true(h_proc_is_running(cp));
}

/* POST /reload on the fleet's control plane: its status, the message in msg. */
static long fleet_reload(const struct h_fleet *f, char *msg, size_t len)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/reload", (unsigned)f->cfg.admin_port);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    struct h_req req = {.method = "POST", .url = url, .headers = hdrs};
    struct h_resp r = {0};
    assert_int_equal(h_http(&req, &r), 0);
    json_t *j = h_resp_json(&r);
    const char *m = json_string_value(json_object_get(j, "message"));
    snprintf(msg, len, "%s", m != NULL ? m : "");
    json_decref(j);
    long status = r.status;
    h_resp_fini(&r);
    return status;
}

static bool dataplane_gone(void *arg)
{
    return !h_proc_is_running(arg);
}

/* The control plane dates a data plane by its start in clock ticks: one
 * started in the reload's own tick counts as older than the reload. */
static bool boot_tick_passed(void *arg)
{
    return proc_boot_ticks_now() > *(uint64_t *)arg + 1;
}

/*
 * A data-plane key changed by one reload stays pending in the next
 * reload's message until a hot restart happened (issue 42 item 4): the
 * second reload used to compare only with the first and said nothing.
 */
static void test_pending_dataplane_change_is_reported_until_hot_restart(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char msg[1024];
    static const char retry_pending[] = "dataplane.retry.max_attempts changed: the data planes "
                                        "apply them at their next hot restart";
    f.cfg.dataplane_extra = "retry:\n  max_attempts: 2\n";
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    assert_int_equal(fleet_reload(&f, msg, sizeof(msg)), 200);
    assert_non_null(strstr(msg, retry_pending));
    /* An unrelated second reload: the change still waits. */
    f.cfg.health_interval = "150ms";
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    assert_int_equal(fleet_reload(&f, msg, sizeof(msg)), 200);
    if (strstr(msg, retry_pending) == NULL)
        fail_msg("the pending change dropped out: %s", msg);

    /* A hot restart applies it: the next reload has nothing pending. */
    uint64_t reloaded_at = proc_boot_ticks_now();
    assert_int_equal(h_wait_until(boot_tick_passed, &reloaded_at, WAIT_MS), 0);
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-dataplane", bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", f.cfg.path, "--hot-restart", NULL};
    struct h_proc *next = NULL;
    assert_int_equal(h_spawn("dataplane", argv, &next), 0);
    f.dp->expected = true;
    assert_int_equal(h_wait_until(dataplane_gone, f.dp, WAIT_MS), 0);
    f.dp = next;
    f.cfg.health_interval = "120ms";
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    assert_int_equal(fleet_reload(&f, msg, sizeof(msg)), 200);
    if (strstr(msg, "retry.max_attempts") != NULL)
        fail_msg("applied by the hot restart, still reported: %s", msg);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_api_worker_starts_unknown),
        H_TEST(test_unknown_worker_takes_no_traffic),
        H_TEST(test_initial_healthy_routes_at_once),
        H_TEST(test_sighup_resyncs_static_workers),
        H_TEST(test_reload_applies_health_settings),
        H_TEST(test_reload_refuses_restart_keys_as_a_whole),
        H_TEST(test_pending_dataplane_change_is_reported_until_hot_restart),
    };
    return cmocka_run_group_tests_name("reload", tests, NULL, NULL);
}
