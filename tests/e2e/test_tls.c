/*
 * End-to-end tests of TLS towards workers (dataplane.upstream_tls): an
 * HTTPS mock worker whose certificate the configured CA signed answers
 * through the router, over a kept-alive connection; one whose certificate
 * another CA signed is an upstream error counted as kind "tls" (502 to the
 * client, nothing sent to the worker in the clear); a worker that requires
 * client certificates (mTLS) is reached with the configured one and not
 * without it.
 *
 * Certificates are made per test in its temporary directory
 * (harness_tls.h). Every wait has a deadline.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

static const char *const CHAT_PLAIN = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":8,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char *const CHAT_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":8,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* dataplane_extra for upstream_tls (and one loop, so one connection per worker). */
static void upstream_tls_yaml(char *buf, size_t len, const char *ca, const char *cert,
                              const char *key)
{
    int n = snprintf(buf, len,
                     "threads: 1\nretry:\n  backoff: 10ms\nupstream_tls:\n  ca_file: %s\n", ca);
    if (cert != NULL)
        snprintf(buf + n, len - (size_t)n, "  client_cert_file: %s\n  client_key_file: %s\n", cert,
                 key);
}

static void post_chat(struct h_fleet *f, const char *body, struct h_resp *r)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = body}, r) == 0 || r->status != 0,
                     1);
}

/* switchyard_health_checks_total{worker="w1",result=RESULT} from the
 * control plane's /metrics, or -1. */
static long long probes_of(struct h_fleet *f, const char *result)
{
    char url[128], sample[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", (unsigned)f->cfg.admin_port);
    snprintf(sample, sizeof(sample), "switchyard_health_checks_total{worker=\"w1\",result=\"%s\"}",
             result);
    return h_metric_at(url, sample);
}

struct probe_wait {
    struct h_fleet *f;
    const char *result;
    long long at_least;
};

static bool probes_reached(void *arg)
{
    struct probe_wait *w = arg;
    return probes_of(w->f, w->result) >= w->at_least;
}

static bool w1_unhealthy(void *arg)
{
    struct shm_worker_info w;
    return shm_registry_find(&((struct h_fleet *)arg)->seg, "w1", &w) == 0 && !w.healthy;
}

static void test_https_worker_verified_and_reused(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    const char *mock_args[] = {"--tls-cert", c.server, "--tls-key", c.server_key, NULL};
    char extra[1024];
    upstream_tls_yaml(extra, sizeof(extra), c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f,
                  &(struct h_fleet_opts){.n = 1, .mock_args = mock_args, .dataplane_extra = extra});
    assert_non_null(strstr(f.mock[0].url, "https://"));

    struct h_resp r;
    post_chat(&f, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"chat.completion\""));
    h_resp_fini(&r);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_sse sse;
    assert_int_equal(h_http_stream(url, CHAT_STREAM, &sse), 0);
    assert_int_equal(sse.resp.status, 200);
    assert_true(sse.saw_done);
    assert_false(sse.malformed);
    h_sse_fini(&sse);

    /* Keep-alive over TLS: more requests open no new connection to the
     * worker (the probes keep theirs too). */
    long long before = h_fleet_mock_stat(&f, 0, "tls_connections");
    assert_true(before >= 1);
    for (int i = 0; i < 10; i++) {
        post_chat(&f, CHAT_PLAIN, &r);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    /* + 1: this reading of /mock/stats (the harness never reuses). */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "tls_connections"), before + 1);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 12);

    assert_int_equal(h_fleet_dp_metric_checked(
                         &f, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"tls\"}"),
                     0);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static void test_https_worker_unverified_is_an_upstream_error(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    const char *mock_args[] = {"--tls-cert", c.server, "--tls-key", c.server_key, NULL};
    char extra[1024];
    /* The router trusts another CA than the one that signed the worker's. */
    upstream_tls_yaml(extra, sizeof(extra), c.wrong_ca, NULL, NULL);
    struct h_fleet f;
    /* Probes every hour: the worker stays routable (healthy until probes
     * fail three times), so the request itself meets the certificate. */
    h_fleet_start(
        &f, &(struct h_fleet_opts){
                .n = 1, .mock_args = mock_args, .dataplane_extra = extra, .health_interval = "1h"});
    struct h_resp r;
    post_chat(&f, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 502);
    assert_non_null(strstr(r.body, "upstream_error"));
    /* The cause is the operator's (docs/security.md row 24): in the log. */
    assert_null(strstr(r.body, "w1"));
    assert_true(h_proc_log_contains(f.dp, "certificate"));
    h_resp_fini(&r);
    /* Never a downgrade: nothing reached the worker. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    assert_true(h_fleet_dp_metric_checked(
                    &f, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"tls\"}") > 0);
    assert_int_equal(h_fleet_dp_metric_checked(
                         &f, "switchyard_upstream_errors_total{worker=\"w1\",kind=\"transfer\"}"),
                     0);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static void test_mtls_worker(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    /* The harness itself needs a client certificate to read the mock. */
    h_tls_client_use(c.ca, c.client, c.client_key);
    const char *mock_args[] = {"--tls-cert",      c.server, "--tls-key", c.server_key,
                               "--tls-client-ca", c.ca,     NULL};
    char extra[2048];
    upstream_tls_yaml(extra, sizeof(extra), c.ca, c.client, c.client_key);
    struct h_fleet f;
    h_fleet_start(&f,
                  &(struct h_fleet_opts){.n = 1, .mock_args = mock_args, .dataplane_extra = extra});
    struct h_resp r;
    post_chat(&f, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 1);
    h_fleet_stop(&f);

    /* The same worker, a router with a certificate of another CA. */
    struct h_fleet g;
    upstream_tls_yaml(extra, sizeof(extra), c.ca, c.wrong_client, c.wrong_client_key);
    h_fleet_start(
        &g, &(struct h_fleet_opts){
                .n = 1, .mock_args = mock_args, .dataplane_extra = extra, .health_interval = "1h"});
    post_chat(&g, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 502);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&g, 0, "requests_total"), 0);
    h_fleet_stop(&g);
    h_tls_client_use(NULL, NULL, NULL);
}

/* The control plane's probes reach https:// workers with the same
 * settings: they pass with the right CA and fail (worker unhealthy) with
 * another. */
static void test_probes_use_upstream_tls(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    const char *mock_args[] = {"--tls-cert", c.server, "--tls-key", c.server_key, NULL};
    char extra[1024];
    upstream_tls_yaml(extra, sizeof(extra), c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args,
                                             .dataplane_extra = extra,
                                             .health_interval = "100ms"});
    struct probe_wait ok = {&f, "success", 3};
    assert_int_equal(h_wait_until(probes_reached, &ok, 10000), 0);
    assert_int_equal(probes_of(&f, "failure"), 0);
    h_fleet_stop(&f);

    upstream_tls_yaml(extra, sizeof(extra), c.wrong_ca, NULL, NULL);
    struct h_fleet g;
    h_fleet_start(&g, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args,
                                             .dataplane_extra = extra,
                                             .health_interval = "100ms"});
    assert_int_equal(h_wait_until(w1_unhealthy, &g, 10000), 0);
    assert_int_equal(probes_of(&g, "success"), 0);
    h_fleet_stop(&g);
    h_tls_client_use(NULL, NULL, NULL);
}

/* w2 is in the registry and healthy: a worker added at run time takes
 * traffic only after its first good probe (health.initial: unknown). */
static bool w2_registered(void *arg)
{
    struct shm_worker_info w;
    return shm_registry_find(&((struct h_fleet *)arg)->seg, "w2", &w) == 0 && w.healthy;
}

/* An https:// worker added through the admin API is routed to like one
 * from the config. */
static void test_https_worker_from_the_admin_api(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    const char *mock_args[] = {"--model",   H_FLEET_MODEL, "--tls-cert", c.server,
                               "--tls-key", c.server_key,  NULL};
    char extra[1024];
    upstream_tls_yaml(extra, sizeof(extra), c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1,
                                             .mock_args = mock_args + 2,
                                             .dataplane_extra = extra,
                                             .policy = "round_robin"});
    struct h_mock m2;
    assert_int_equal(h_mock_startv(&m2, mock_args), 0);
    assert_non_null(strstr(m2.url, "https://"));
    char url[128], body[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/workers", (unsigned)f.cfg.admin_port);
    snprintf(body, sizeof(body), "{\"url\": \"%s\", \"id\": \"w2\", \"model\": \"%s\"}", m2.url,
             H_FLEET_MODEL);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, body, &r), 0);
    assert_int_equal(r.status, 201);
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(w2_registered, &f, H_READY_TIMEOUT_MS), 0);
    long long before = 0;
    assert_int_equal(h_mock_stat_int(m2.url, "requests_total", &before), 0);
    for (int i = 0; i < 6; i++) {
        post_chat(&f, CHAT_PLAIN, &r);
        assert_int_equal(r.status, 200);
        h_resp_fini(&r);
    }
    long long after = 0;
    assert_int_equal(h_mock_stat_int(m2.url, "requests_total", &after), 0);
    assert_true(after - before >= 1);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

struct aborted_cond {
    struct h_fleet *f;
};

static bool stream_abort_seen(void *arg)
{
    struct h_fleet *f = ((struct aborted_cond *)arg)->f;
    return h_fleet_mock_stat(f, 0, "client_aborts") == 1 &&
           h_fleet_mock_stat(f, 0, "inflight") == 0;
}

/* A new connection to a worker resumes the TLS session of an earlier one
 * (the worker issues tickets, as uvicorn does): no full handshake. The
 * router's connection is closed by cancelling a stream mid-body, which is
 * how the worker learns of a cancel. */
static void test_new_upstream_connection_resumes(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    const char *mock_args[] = {"--tls-cert", c.server, "--tls-key", c.server_key,
                               "--tpot-ms",  "50",     NULL};
    char extra[1024];
    upstream_tls_yaml(extra, sizeof(extra), c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f,
                  &(struct h_fleet_opts){.n = 1, .mock_args = mock_args, .dataplane_extra = extra});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_resp r;
    post_chat(&f, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "tls_resumed"), 0);

    struct h_async *a = NULL;
    assert_int_equal(
        h_async_start(url, CHAT_STREAM,
                      &(struct h_async_opts){.abort_at = H_ABORT_AFTER_BYTES, .bytes = 1}, &a),
        0);
    assert_int_equal(h_async_wait(a, 10000), 0);
    h_async_destroy(a);
    struct aborted_cond ac = {&f};
    assert_int_equal(h_wait_until(stream_abort_seen, &ac, 5000), 0);

    /* The kept-alive connection is gone with the cancelled stream: this
     * request opens one, resuming. */
    post_chat(&f, CHAT_PLAIN, &r);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_true(h_fleet_mock_stat(&f, 0, "tls_resumed") >= 1);
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_https_worker_verified_and_reused),
        H_TEST(test_https_worker_unverified_is_an_upstream_error),
        H_TEST(test_mtls_worker),
        H_TEST(test_probes_use_upstream_tls),
        H_TEST(test_https_worker_from_the_admin_api),
        H_TEST(test_new_upstream_connection_resumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
