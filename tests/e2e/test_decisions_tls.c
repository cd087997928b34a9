/*
 * End-to-end tests of GET /decisions (the status page's routing decisions,
 * controlplane/admin/decisions.h) when the data plane's client listener is
 * HTTPS (dataplane.tls): the control plane reads the data plane's /metrics
 * where it is served — dataplane.metrics_listen, else plain_listen, else
 * https://listen verified against the data plane's own certificate — and
 * answers 200 with the decisions; when it cannot (the certificate on disk
 * is not the one served, the listener wants client certificates) it
 * answers 502 with a sentence that says why and what to set. The samples
 * it keeps for GET /decisions/history are checked too.
 *
 * Certificates are made per test in its temporary directory
 * (harness_tls.h). Every wait has a deadline.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

#define WAIT_MS 15000

static const char *const CHAT = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":4,"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* A fleet of one worker whose data plane serves HTTPS with c's server
 * certificate, more (may be NULL) appended to its dataplane section. */
static void tls_fleet(struct h_fleet *f, const struct h_tls_certs *c, const char *more)
{
    static char extra[2048];
    snprintf(extra, sizeof(extra), "tls:\n  cert_file: %s\n  key_file: %s\n%s", c->server,
             c->server_key, more != NULL ? more : "");
    h_tls_client_use(c->ca, NULL, NULL);
    h_fleet_start(f, &(struct h_fleet_opts){
                         .n = 1, .policy = "least_load", .dataplane_extra = extra, .https = true});
}

static void chat(const struct h_fleet *f)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp r;
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = CHAT}, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
}

/* GET path on the admin listener: the status, and the body's JSON in *out. */
static long admin_get(const struct h_fleet *f, const char *path, json_t **out)
{
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), f->cfg.admin_port, path), 0);
    struct h_resp r;
    long st = h_http_get(url, &r) == 0 ? r.status : -1;
    *out = h_resp_json(&r);
    h_resp_fini(&r);
    return st;
}

/* 200 from /decisions, its source starting with want_source, and a
 * least_load row counting at least one request. */
static void expect_decisions(const struct h_fleet *f, const char *want_source)
{
    json_t *j = NULL;
    long st = admin_get(f, "/decisions", &j);
    if (st != 200)
        fail_msg("GET /decisions answered %ld: %s", st,
                 json_string_value(json_object_get(j, "error")));
    const char *source = json_string_value(json_object_get(j, "source"));
    assert_non_null(source);
    if (strncmp(source, want_source, strlen(want_source)) != 0)
        fail_msg("source %s, expected %s...", source, want_source);
    json_t *row = json_array_get(json_object_get(j, "decisions"), 0);
    assert_non_null(row);
    assert_string_equal(json_string_value(json_object_get(row, "decision")), "least_load");
    assert_true(json_integer_value(json_object_get(row, "count")) >= 1);
    json_decref(j);
}

/* 502 from /decisions whose error holds every needle. */
static void expect_cannot_read(const struct h_fleet *f, const char *const needles[])
{
    json_t *j = NULL;
    long st = admin_get(f, "/decisions", &j);
    const char *why = json_string_value(json_object_get(j, "error"));
    print_message("GET /decisions: %ld %s\n", st, why != NULL ? why : "(no error)");
    assert_int_equal(st, 502);
    assert_non_null(why);
    for (size_t i = 0; needles[i] != NULL; i++)
        if (strstr(why, needles[i]) == NULL)
            fail_msg("the reason lacks \"%s\": %s", needles[i], why);
    json_decref(j);
}

/* An ok sample with a decision row in /decisions/history. */
static bool history_has_rows(void *arg)
{
    json_t *j = NULL;
    bool ok = false;
    if (admin_get(arg, "/decisions/history", &j) == 200) {
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(j, "samples"), i, s)
        {
            if (json_array_size(json_object_get(s, "decisions")) > 0 &&
                json_is_integer(json_object_get(s, "age_ms")))
                ok = true;
        }
    }
    json_decref(j);
    return ok;
}

static bool decisions_answer(void *arg)
{
    json_t *j = NULL;
    long st = admin_get(arg, "/decisions", &j);
    json_decref(j);
    return st == 200;
}

/* TLS on dataplane.listen and nothing else: the metrics are read over
 * HTTPS, verified against the data plane's own certificate. Before this
 * was fixed the control plane spoke plain HTTP to the TLS port: 502
 * "Failure when receiving data". */
static void test_decisions_over_https(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    struct h_fleet f;
    tls_fleet(&f, &c, NULL);
    chat(&f);
    char want[64];
    snprintf(want, sizeof(want), "https://127.0.0.1:%u/metrics", (unsigned)f.cfg.dataplane_port);
    expect_decisions(&f, want);
    /* The answer just fetched is a sample of the history (the one before
     * it, at start, found no data plane). */
    assert_int_equal(h_wait_until(history_has_rows, &f, WAIT_MS), 0);
    json_t *j = NULL;
    assert_int_equal(admin_get(&f, "/decisions/history", &j), 200);
    assert_int_equal(json_integer_value(json_object_get(j, "interval_ms")), 10000);
    json_decref(j);
    h_fleet_stop(&f);
}

/* The certificate file changed on disk but the data plane still serves the
 * old one (no SIGHUP yet): the one it serves is not trusted, and the page
 * is told why. After the SIGHUP both agree again. */
static void test_decisions_refuse_a_certificate_not_configured(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    /* Same CA, same IP SAN: only the pin on the configured leaf refuses it. */
    char other[H_PATH_MAX], other_key[H_PATH_MAX];
    assert_int_equal(h_tls_make_leaf("other", c.ca, c.ca_key, false, other, other_key, H_PATH_MAX),
                     0);
    struct h_fleet f;
    tls_fleet(&f, &c, NULL);
    chat(&f);
    assert_int_equal(rename(other, c.server), 0);
    assert_int_equal(rename(other_key, c.server_key), 0);
    expect_cannot_read(&f, (const char *const[]){"https://127.0.0.1:", "SSL certificate problem",
                                                 "dataplane.tls.cert_file", NULL});
    assert_int_equal(kill(f.dp->pid, SIGHUP), 0);
    char want[64];
    snprintf(want, sizeof(want), "https://127.0.0.1:%u/metrics", (unsigned)f.cfg.dataplane_port);
    assert_int_equal(h_wait_until(decisions_answer, &f, WAIT_MS), 0);
    expect_decisions(&f, want);
    h_fleet_stop(&f);
}

/* plain_listen beside the HTTPS listener: read there, in plain HTTP. */
static void test_decisions_from_plain_listen(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0);
    char more[64], want[64];
    snprintf(more, sizeof(more), "plain_listen: 127.0.0.1:%u\n", (unsigned)port);
    snprintf(want, sizeof(want), "http://127.0.0.1:%u/metrics", (unsigned)port);
    struct h_fleet f;
    tls_fleet(&f, &c, more);
    chat(&f);
    expect_decisions(&f, want);
    h_fleet_stop(&f);
}

/* metrics_listen wins over both (the others answer 404 for /metrics). */
static void test_decisions_from_metrics_listen(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    uint16_t port, plain;
    assert_int_equal(h_free_port(&port), 0);
    assert_int_equal(h_free_port(&plain), 0);
    char more[128], want[64];
    snprintf(more, sizeof(more), "metrics_listen: 127.0.0.1:%u\nplain_listen: 127.0.0.1:%u\n",
             (unsigned)port, (unsigned)plain);
    snprintf(want, sizeof(want), "http://127.0.0.1:%u/metrics", (unsigned)port);
    struct h_fleet f;
    tls_fleet(&f, &c, more);
    chat(&f);
    expect_decisions(&f, want);
    h_fleet_stop(&f);
}

/* mTLS on the only listener that serves /metrics: the control plane has no
 * client certificate, so it says so (and what to set) without trying. */
static void test_decisions_behind_mtls_say_why(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char more[H_PATH_MAX + 64];
    snprintf(more, sizeof(more), "  client_ca_file: %s\n", c.ca);
    /* tls_fleet's tls: block is open: the line above belongs to it. */
    struct h_fleet f;
    static char extra[2048];
    snprintf(extra, sizeof(extra), "tls:\n  cert_file: %s\n  key_file: %s\n%s", c.server,
             c.server_key, more);
    h_tls_client_use(c.ca, c.client, c.client_key);
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .policy = "least_load", .dataplane_extra = extra, .https = true});
    expect_cannot_read(&f, (const char *const[]){"dataplane.tls.client_ca_file",
                                                 "dataplane.metrics_listen", NULL});
    h_tls_client_use(NULL, NULL, NULL);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_decisions_over_https),
        H_TEST(test_decisions_refuse_a_certificate_not_configured),
        H_TEST(test_decisions_from_plain_listen),
        H_TEST(test_decisions_from_metrics_listen),
        H_TEST(test_decisions_behind_mtls_say_why),
    };
    return cmocka_run_group_tests_name("decisions_tls", tests, NULL, NULL);
}
