/*
 * End-to-end test of the status page (GET / on the admin listener) in
 * headless Chromium: a fleet of three workers — w1 healthy and holding two
 * requests, w2 unhealthy, w3 draining — behind a control plane that wants a
 * bearer token. Chromium opens /#token=..., the page fetches the admin API
 * with that token, and the DOM it renders is asserted: three rows, each
 * worker's health, drain and load. A screenshot is kept under the build
 * directory (status-page.png) as an artefact. Without the token the page
 * renders no worker and shows its token form.
 *
 * With the data plane's listener on HTTPS (dataplane.tls), the decisions
 * table still has its rows (the control plane reads the metrics over
 * HTTPS, controlplane/admin/decisions.h), the chart has its axes and starts
 * from the control plane's samples; behind mTLS the section says why it
 * cannot be read. Screenshots: status-page-tls.png, status-page-mtls.png.
 *
 * Chromium comes from deploy/install-deps.sh browser (Debian's chromium),
 * installed when missing like every other dependency; the test is skipped,
 * saying why, only when it cannot be installed.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

#define WAIT_MS    15000
#define TOKEN      "page-test-token"
#define CHROME_SEC 90

static char g_admin[64];

static bool have_chromium(void)
{
    return system("command -v chromium >/dev/null 2>&1") == 0;
}

/* Installs chromium when missing; false (with the reason printed) when it cannot be. */
static bool ensure_chromium(void)
{
    if (have_chromium())
        return true;
    fprintf(stderr, "status page test: chromium missing, running deploy/install-deps.sh browser\n");
    int st = system("deploy/install-deps.sh browser >&2");
    if (st == 0 && have_chromium())
        return true;
    fprintf(stderr, "status page test: SKIPPED: chromium is not installed and "
                    "deploy/install-deps.sh browser could not install it (needs root and the "
                    "Debian package archive)\n");
    return false;
}

/*
 * Runs headless Chromium on url with extra (e.g. --dump-dom, --screenshot=F)
 * and its stdout into out_path. Virtual time lets the page's fetches and
 * first renders finish before the dump. Returns the exit status.
 */
static int chromium(const char *url, const char *extra, const char *out_path)
{
    char profile[H_PATH_MAX], cmd[4096];
    assert_int_equal(h_tmp_path("chromium-profile", profile, sizeof(profile)), 0);
    snprintf(cmd, sizeof(cmd),
             "timeout %d chromium --headless --no-sandbox --disable-gpu --no-first-run "
             "--disable-extensions --disable-background-networking --disable-sync "
             "--disable-dev-shm-usage --user-data-dir='%s' --window-size=1280,720 "
             "--virtual-time-budget=4000 %s '%s' >'%s' 2>/dev/null",
             CHROME_SEC, profile, extra, url, out_path);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static long admin(const char *method, const char *path, const char *body, json_t **out)
{
    char url[160];
    snprintf(url, sizeof(url), "%s%s", g_admin, path);
    const char *headers[] = {"Authorization: Bearer " TOKEN, NULL};
    struct h_req req = {.method = method, .url = url, .body = body, .headers = headers};
    struct h_resp resp = {0};
    long st = h_http(&req, &resp) == 0 ? resp.status : -1;
    if (out != NULL)
        *out = h_resp_json(&resp);
    h_resp_fini(&resp);
    return st;
}

struct field_is {
    const char *id;
    const char *key;
    const char *want; /* string value, or the integer/boolean as text */
};

static bool worker_field_is(void *arg)
{
    const struct field_is *c = arg;
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s", c->id);
    json_t *j = NULL;
    bool ok = false;
    if (admin("GET", path, NULL, &j) == 200) {
        json_t *v = json_object_get(j, c->key);
        char text[64] = "";
        if (json_is_string(v))
            snprintf(text, sizeof(text), "%s", json_string_value(v));
        else if (json_is_integer(v))
            snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
        else if (json_is_boolean(v))
            snprintf(text, sizeof(text), "%s", json_is_true(v) ? "true" : "false");
        ok = strcmp(text, c->want) == 0;
    }
    json_decref(j);
    return ok;
}

static void wait_field(const char *id, const char *key, const char *want)
{
    struct field_is c = {id, key, want};
    if (h_wait_until(worker_field_is, &c, WAIT_MS) != 0)
        fail_msg("worker %s: %s never became %s", id, key, want);
}

static void expect_in(const char *dom, const char *needle)
{
    if (strstr(dom, needle) == NULL)
        fail_msg("the rendered page lacks %s", needle);
}

static void test_page_renders_the_fleet(void **state)
{
    (void)state;
    if (!ensure_chromium())
        skip();
    struct h_mock m[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_mock_start(&m[i], "--model", "mock-model", NULL), 0);
    assert_int_equal(h_mock_faults(m[1].url, "{\"health_status\":503}"), 0);
    char token_path[H_PATH_MAX], extra[H_PATH_MAX + 64];
    assert_int_equal(h_write_file("token", TOKEN "\n", token_path, sizeof(token_path)), 0);
    assert_int_equal(chmod(token_path, 0600), 0);
    snprintf(extra, sizeof(extra), "admin_token_file: \"%s\"\n", token_path);
    struct h_config cfg = {.health_interval = "100ms",
                           .health_extra = "failure_threshold: 1\n",
                           .controlplane_extra = extra,
                           .policy = "least_load"};
    const char *ids[] = {"w1", "w2", "w3"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_config_add_worker(&cfg, m[i].url, ids[i], "mock-model", NULL), 0);
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    struct h_proc *cp, *dp;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    snprintf(g_admin, sizeof(g_admin), "http://127.0.0.1:%u", (unsigned)cfg.admin_port);
    char url[256];
    assert_int_equal(h_url(url, sizeof(url), cfg.admin_port, "/"), 0);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0); /* the page itself needs no token */
    assert_int_equal(h_start_dataplane(cfg.path, &dp), 0);
    char base[64];
    assert_int_equal(h_url(base, sizeof(base), cfg.dataplane_port, NULL), 0);
    snprintf(url, sizeof(url), "%s/health", base);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);

    wait_field("w2", "health", "unhealthy");
    assert_int_equal(admin("POST", "/workers/w3/drain", "{\"draining\":true}", NULL), 200);
    /* Two requests held on w1, the only worker left to route to. */
    assert_int_equal(h_mock_faults(m[0].url, "{\"stall_before_headers_ms\":60000}"), 0);
    snprintf(url, sizeof(url), "%s/v1/completions", base);
    struct h_async *held[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(h_async_start(url,
                                       "{\"model\":\"mock-model\",\"prompt\":\"hi\","
                                       "\"max_tokens\":1}",
                                       &(struct h_async_opts){.timeout_ms = 60000}, &held[i]),
                         0);
    wait_field("w1", "load", "2");
    /* The model's routable workers: w1 only (w2 unhealthy, w3 draining). */
    struct h_resp mresp;
    snprintf(url, sizeof(url), "%s/metrics", g_admin);
    const char *auth[] = {"Authorization: Bearer " TOKEN, NULL};
    assert_int_equal(h_http(&(struct h_req){.url = url, .headers = auth}, &mresp), 0);
    assert_non_null(
        strstr(mresp.body, "\nswitchyard_model_healthy_workers{model=\"mock-model\"} 1\n"));
    h_resp_fini(&mresp);
    /* The data plane's two routing decisions, through the control plane. */
    json_t *dj = NULL;
    assert_int_equal(admin("GET", "/decisions", NULL, &dj), 200);
    json_t *first = json_array_get(json_object_get(dj, "decisions"), 0);
    assert_string_equal(json_string_value(json_object_get(first, "decision")), "least_load");
    assert_int_equal(json_integer_value(json_object_get(first, "count")), 2);
    json_decref(dj);

    char page[256], dom_path[H_PATH_MAX], shot[H_PATH_MAX + 32], build[H_PATH_MAX];
    snprintf(page, sizeof(page), "%s/#token=" TOKEN "&interval=300", g_admin);
    assert_int_equal(h_tmp_path("dom.html", dom_path, sizeof(dom_path)), 0);
    assert_int_equal(chromium(page, "--dump-dom", dom_path), 0);
    char *dom = slurp(dom_path);
    if (getenv("SWITCHYARD_TEST_LOGS") != NULL)
        fprintf(stderr, "%s\n", dom);
    expect_in(dom, "data-ready=\"true\"");
    expect_in(dom, "data-workers=\"3\" data-healthy=\"2\" data-draining=\"1\"");
    expect_in(dom, "<tr data-worker=\"w1\" data-health=\"healthy\" data-draining=\"false\" "
                   "data-load=\"2\" data-sleeping=\"false\">");
    expect_in(dom, "<tr data-worker=\"w2\" data-health=\"unhealthy\" data-draining=\"false\" "
                   "data-load=\"0\" data-sleeping=\"false\">");
    expect_in(dom, "<tr data-worker=\"w3\" data-health=\"healthy\" data-draining=\"true\" "
                   "data-load=\"0\" data-sleeping=\"false\">");
    expect_in(dom, "<tr data-decision=\"least_load\" data-count=\"2\">");
    /* Exactly three worker rows; each has its load chart. */
    int rows = 0, charts = 0;
    for (const char *p = dom; (p = strstr(p, "<tr data-worker=")) != NULL; p++)
        rows++;
    for (const char *p = dom; (p = strstr(p, "<svg class=\"spark\"")) != NULL; p++)
        charts++;
    assert_int_equal(rows, 3);
    assert_int_equal(charts, 3);
    free(dom);

    /* The artefact: build/status-page.png. */
    const char *b = getenv("SWITCHYARD_BUILD_DIR");
    snprintf(build, sizeof(build), "%s", b != NULL ? b : "build");
    snprintf(shot, sizeof(shot), "--screenshot=%s/status-page.png", build);
    char ignored[H_PATH_MAX];
    assert_int_equal(h_tmp_path("shot.out", ignored, sizeof(ignored)), 0);
    assert_int_equal(chromium(page, shot, ignored), 0);
    struct stat st;
    snprintf(shot, sizeof(shot), "%s/status-page.png", build);
    assert_int_equal(stat(shot, &st), 0);
    assert_true(st.st_size > 1000);

    /* Without the token: no worker, the token form instead. */
    snprintf(page, sizeof(page), "%s/", g_admin);
    assert_int_equal(chromium(page, "--dump-dom", dom_path), 0);
    dom = slurp(dom_path);
    assert_null(strstr(dom, "<tr data-worker="));
    expect_in(dom, "id=\"auth\" style=\"display: block;\"");
    free(dom);

    for (int i = 0; i < 2; i++)
        h_async_destroy(held[i]);
}

/* The artefact build/NAME of page (its directory from SWITCHYARD_BUILD_DIR). */
static void screenshot(const char *page, const char *name)
{
    char shot[H_PATH_MAX + 64], path[H_PATH_MAX + 32], ignored[H_PATH_MAX];
    const char *b = getenv("SWITCHYARD_BUILD_DIR");
    snprintf(path, sizeof(path), "%s/%s", b != NULL ? b : "build", name);
    snprintf(shot, sizeof(shot), "--screenshot=%s", path);
    assert_int_equal(h_tmp_path("shot.out", ignored, sizeof(ignored)), 0);
    assert_int_equal(chromium(page, shot, ignored), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 1000);
}

/* The DOM Chromium rendered of the fleet's status page (free() it). */
static char *render(const struct h_fleet *f)
{
    char page[128], dom_path[H_PATH_MAX];
    snprintf(page, sizeof(page), "http://127.0.0.1:%u/#interval=300", (unsigned)f->cfg.admin_port);
    assert_int_equal(h_tmp_path("dom.html", dom_path, sizeof(dom_path)), 0);
    assert_int_equal(chromium(page, "--dump-dom", dom_path), 0);
    char *dom = slurp(dom_path);
    if (getenv("SWITCHYARD_TEST_LOGS") != NULL)
        fprintf(stderr, "%s\n", dom);
    return dom;
}

static bool decisions_answer_200(void *arg)
{
    const struct h_fleet *f = arg;
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/decisions", (unsigned)f->cfg.admin_port);
    struct h_resp r;
    bool ok = h_http_get(url, &r) == 0 && r.status == 200;
    h_resp_fini(&r);
    return ok;
}

/* A fleet of one worker behind an HTTPS data plane (client_ca: mTLS, or NULL). */
static void tls_fleet(struct h_fleet *f, const struct h_tls_certs *c, const char *client_ca)
{
    static char extra[3 * H_PATH_MAX];
    int n = snprintf(extra, sizeof(extra), "tls:\n  cert_file: %s\n  key_file: %s\n", c->server,
                     c->server_key);
    if (client_ca != NULL)
        snprintf(extra + n, sizeof(extra) - (size_t)n, "  client_ca_file: %s\n", client_ca);
    h_fleet_start(f, &(struct h_fleet_opts){
                         .n = 1, .policy = "least_load", .dataplane_extra = extra, .https = true});
}

/* Client TLS on: the decisions table has its rows, under axes, from the
 * control plane's samples on (before the fix: "cannot be read", no row). */
static void test_page_shows_decisions_under_tls(void **state)
{
    (void)state;
    if (!ensure_chromium())
        skip();
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    struct h_fleet f;
    tls_fleet(&f, &c, NULL);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/completions", f.base);
    for (int i = 0; i < 3; i++) {
        struct h_resp r;
        assert_int_equal(h_http(&(struct h_req){.url = url,
                                                .body = "{\"model\":\"" H_FLEET_MODEL
                                                        "\",\"prompt\":\"hi\",\"max_tokens\":1}"},
                                &r),
                         0);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    /* A sample the page can start from. */
    assert_int_equal(h_wait_until(decisions_answer_200, &f, WAIT_MS), 0);
    char *dom = render(&f);
    expect_in(dom, "<tr data-decision=\"least_load\" data-count=\"3\">");
    expect_in(dom, "id=\"decisions-note\" class=\"\" data-state=\"ok\"");
    expect_in(dom, "From https://127.0.0.1:");
    /* Axes: a scale in decisions per second, time back from now. */
    expect_in(dom, ">decisions/s</text>");
    expect_in(dom, ">now</text>");
    expect_in(dom, "data-max=\"");
    const char *seeded = strstr(dom, "data-seeded=\"");
    assert_non_null(seeded);
    assert_true(atoi(seeded + strlen("data-seeded=\"")) >= 1);
    assert_non_null(strstr(dom, "<polyline points=\""));
    free(dom);
    char page[128];
    snprintf(page, sizeof(page), "http://127.0.0.1:%u/#interval=300", (unsigned)f.cfg.admin_port);
    screenshot(page, "status-page-tls.png");
    h_tls_client_use(NULL, NULL, NULL);
    h_fleet_stop(&f);
}

/* mTLS on the only listener with /metrics: the section says why it is empty. */
static void test_page_says_why_decisions_cannot_be_read(void **state)
{
    (void)state;
    if (!ensure_chromium())
        skip();
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, c.client, c.client_key);
    struct h_fleet f;
    tls_fleet(&f, &c, c.ca);
    char *dom = render(&f);
    expect_in(dom, "data-ready=\"true\"");
    expect_in(dom, "class=\"unreadable\" data-state=\"unreadable\">Routing decisions cannot be "
                   "read: the data plane serves its metrics only at https://127.0.0.1:");
    expect_in(dom, "dataplane.tls.client_ca_file");
    assert_null(strstr(dom, "<tr data-decision="));
    free(dom);
    char page[128];
    snprintf(page, sizeof(page), "http://127.0.0.1:%u/#interval=300", (unsigned)f.cfg.admin_port);
    screenshot(page, "status-page-mtls.png");
    h_tls_client_use(NULL, NULL, NULL);
    h_fleet_stop(&f);
}

/* The page is served as one self-contained document: no external resource. */
static void test_page_is_self_contained(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h"};
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    struct h_proc *cp;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), cfg.admin_port, "/"), 0);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    char v[512];
    assert_int_equal(h_resp_header(&resp, "Content-Type", v, sizeof(v)), 0);
    assert_string_equal(v, "text/html; charset=utf-8");
    assert_int_equal(h_resp_header(&resp, "Content-Security-Policy", v, sizeof(v)), 0);
    assert_non_null(strstr(v, "default-src 'none'"));
    assert_non_null(strstr(v, "connect-src 'self'"));
    assert_non_null(strstr(resp.body, "<title>switchyard</title>"));
    assert_null(strstr(resp.body, "src=\"http"));
    assert_null(strstr(resp.body, "href=\"http"));
    assert_null(strstr(resp.body, "@import"));
    assert_null(strstr(resp.body, "url(http"));
    h_resp_fini(&resp);
    /* No data plane: /decisions says it cannot read its metrics. */
    char durl[128];
    assert_int_equal(h_url(durl, sizeof(durl), cfg.admin_port, "/decisions"), 0);
    assert_int_equal(h_http_get(durl, &resp), 0);
    assert_int_equal(resp.status, 502);
    assert_non_null(strstr(resp.body, "did not answer"));
    h_resp_fini(&resp);
    struct h_req req = {.method = "POST", .url = url, .body = "{}"};
    assert_int_equal(h_http(&req, &resp), 0);
    assert_int_equal(resp.status, 405);
    h_resp_fini(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_page_is_self_contained),
        H_TEST(test_page_renders_the_fleet),
        H_TEST(test_page_shows_decisions_under_tls),
        H_TEST(test_page_says_why_decisions_cannot_be_read),
    };
    return cmocka_run_group_tests_name("status_page", tests, NULL, NULL);
}
