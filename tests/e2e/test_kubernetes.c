/*
 * End-to-end tests of Kubernetes discovery: the real control plane and
 * dataplane, switchyard-fakekube as the API server and mock workers as the
 * pods' containers. Every pod runs on 127.0.0.1 with its own container port
 * (named "http", which the config picks with port_name), so each pod is one
 * mock worker.
 *
 * Each test maps to a "must show" of the discovery contract: routed within
 * 1 s of Ready, out of rotation within 1 s of NotReady, a deleted pod's
 * stream completes before its worker goes with load 0; expiry re-lists with
 * no failed request; a dropped DELETED is healed by the resync; severed and
 * silent watches are re-established; an API server failing or refusing
 * leaves the registry as it is and recovers; token rotation; a control-plane
 * restart keeps slots, generations and load; the admin API's view; a
 * pod's drain made during a reset_load outlives the reset; and a deleted
 * pod's busy worker whose load ends while the API server fails stays until
 * the server answers again (a stale source removes nothing).
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

#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_holder.h"
#include "tests/e2e/harness_load.h"

#define NS       "default"
#define MAX_PODS 4

/* Everything one test started; lives in the test's stack frame. */
struct env {
    uint16_t fk_port;
    char fk[64]; /* http://127.0.0.1:PORT of the fake API server */
    struct h_proc *fk_proc, *cp, *dp;
    struct h_mock mock[MAX_PODS];
    size_t n_mocks;
    struct h_config cfg;
    char token_path[H_PATH_MAX];
    struct shm_segment seg;
    bool attached;
    char admin[64];
    char dp_url[64];
};

static const char *const MOCK_ARGS[] = {"--tpot-ms", "5", NULL};

/* ---- processes ---------------------------------------------------------------- */

static bool fake_answers(void *arg)
{
    struct env *e = arg;
    char url[128];
    snprintf(url, sizeof(url), "%s/api/v1/namespaces/" NS "/pods", e->fk);
    struct h_resp r;
    struct h_req q = {.url = url, .timeout_ms = 500};
    int rc = h_http(&q, &r);
    bool ok = rc == 0 && r.status != 0;
    h_resp_fini(&r);
    return ok;
}

static void start_fake(struct env *e)
{
    char bin[H_PATH_MAX], listen[32];
    assert_int_equal(h_bin_path("switchyard-fakekube", bin, sizeof(bin)), 0);
    if (e->fk_port == 0)
        assert_int_equal(h_free_port(&e->fk_port), 0);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)e->fk_port);
    snprintf(e->fk, sizeof(e->fk), "http://%s", listen);
    const char *argv[] = {bin, "--listen", listen, "--bookmark-interval", "300", NULL};
    assert_int_equal(h_spawn("fakekube", argv, &e->fk_proc), 0);
    assert_int_equal(h_wait_until(fake_answers, e, H_READY_TIMEOUT_MS), 0);
}

static bool attach(void *arg)
{
    struct env *e = arg;
    char err[256];
    return shm_segment_attach(&e->seg, e->cfg.shm_name, err, sizeof(err)) == 0;
}

/* The label selector write_config uses (a reload test changes it). */
static const char *selector = "app=vllm,tier!=canary";

static void write_config(struct env *e, const char *resync, const char *watch_timeout)
{
    static char yaml[1024];
    if (e->token_path[0] == '\0')
        assert_int_equal(h_write_file("token", "t1\n", e->token_path, sizeof(e->token_path)), 0);
    if (e->fk_port == 0)
        assert_int_equal(h_free_port(&e->fk_port), 0);
    snprintf(yaml, sizeof(yaml),
             "discovery:\n"
             "  kubernetes:\n"
             "    api_server: http://127.0.0.1:%u\n"
             "    insecure_http: true\n"
             "    namespace: " NS "\n"
             "    label_selector: %s\n"
             "    port_name: http\n"
             "    token_file: %s\n"
             "    ca_file: \"\"\n"
             "    resync: %s\n"
             "    watch_timeout: %s\n",
             (unsigned)e->fk_port, selector, e->token_path, resync, watch_timeout);
    e->cfg.extra_yaml = yaml;
    e->cfg.dataplane_extra = "debug_headers: true\n";
    e->cfg.health_interval = "200ms";
    e->cfg.policy = "round_robin"; /* cache affinity would keep "hi" on one pod */
    assert_int_equal(h_config_write(&e->cfg, NULL), 0);
    snprintf(e->admin, sizeof(e->admin), "http://127.0.0.1:%u", (unsigned)e->cfg.admin_port);
    snprintf(e->dp_url, sizeof(e->dp_url), "http://127.0.0.1:%u", (unsigned)e->cfg.dataplane_port);
}

static void start_cp(struct env *e)
{
    assert_int_equal(h_start_controlplane(e->cfg.path, &e->cp), 0);
    if (!e->attached) {
        assert_int_equal(h_wait_until(attach, e, H_READY_TIMEOUT_MS), 0);
        e->attached = true;
    }
    char url[96];
    snprintf(url, sizeof(url), "%s/status", e->admin);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

static void start_dp(struct env *e)
{
    assert_int_equal(h_start_dataplane(e->cfg.path, &e->dp), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", e->dp_url);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

/* Fake, n mock workers, control plane, dataplane. */
static void start_all(struct env *e, size_t n_mocks, const char *resync, const char *watch_timeout)
{
    memset(e, 0, sizeof(*e));
    start_fake(e);
    for (size_t i = 0; i < n_mocks; i++)
        assert_int_equal(h_mock_startv(&e->mock[i], MOCK_ARGS), 0);
    e->n_mocks = n_mocks;
    write_config(e, resync, watch_timeout);
    start_cp(e);
    start_dp(e);
}

static void stop_all(struct env *e)
{
    if (e->attached)
        shm_segment_close(&e->seg);
    e->attached = false;
}

/* ---- the fake's control API --------------------------------------------------- */

enum pod_state { POD_READY = 1, POD_NOT_READY, POD_TERMINATING };

/* PUT a pod for mock i (127.0.0.1, its port named http). */
/* labels: the members of metadata.labels, as JSON. */
static void put_pod_labels(struct env *e, const char *name, size_t mock, enum pod_state st,
                           const char *labels)
{
    char url[192], body[1024];
    snprintf(url, sizeof(url), "%s/fake/namespaces/" NS "/pods/%s", e->fk, name);
    snprintf(body, sizeof(body),
             "{\"metadata\":{\"labels\":{%s}%s},"
             "\"spec\":{\"containers\":[{\"name\":\"vllm\",\"ports\":[{\"name\":\"http\","
             "\"containerPort\":%u}]}]},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\",\"conditions\":[{\"type\":"
             "\"Ready\",\"status\":\"%s\"}]}}",
             labels, st == POD_TERMINATING ? ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"" : "",
             (unsigned)e->mock[mock].port, st == POD_READY ? "True" : "False");
    struct h_req q = {.method = "PUT", .url = url, .body = body};
    struct h_resp r;
    assert_int_equal(h_http(&q, &r), 0);
    assert_true(r.status == 200 || r.status == 201);
    h_resp_fini(&r);
}

static void put_pod(struct env *e, const char *name, size_t mock, enum pod_state st)
{
    put_pod_labels(e, name, mock, st, "\"app\":\"vllm\",\"switchyard.io/model\":\"mock\"");
}

static void delete_pod(struct env *e, const char *name)
{
    char url[192];
    snprintf(url, sizeof(url), "%s/fake/namespaces/" NS "/pods/%s", e->fk, name);
    struct h_req q = {.method = "DELETE", .url = url};
    struct h_resp r;
    assert_int_equal(h_http(&q, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
}

static void fault(struct env *e, const char *json)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/fake/faults", e->fk);
    struct h_resp r;
    assert_int_equal(h_http_post_json(url, json, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
}

/* ---- what the router shows ---------------------------------------------------- */

static bool find(struct env *e, const char *id, struct shm_worker_info *w)
{
    return shm_registry_find(&e->seg, id, w) == 0;
}

struct cond {
    struct env *e;
    const char *id;
    bool want;
};

static bool cond_present(void *arg)
{
    struct cond *c = arg;
    struct shm_worker_info w;
    return find(c->e, c->id, &w) == c->want;
}

static bool cond_draining(void *arg)
{
    struct cond *c = arg;
    struct shm_worker_info w;
    return find(c->e, c->id, &w) && w.draining == c->want;
}

/* One small chat request through the dataplane; the worker that served it
 * (x-switchyard-worker) into who. Returns the HTTP status. */
static long chat(struct env *e, char *who, size_t who_len)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", e->dp_url);
    struct h_resp r;
    struct h_req q = {.url = url,
                      .body = "{\"model\":\"mock\",\"max_tokens\":2,\"messages\":[{\"role\":"
                              "\"user\",\"content\":\"hi\"}]}",
                      .timeout_ms = 5000};
    if (h_http(&q, &r) != 0)
        return 0;
    long st = r.status;
    if (who != NULL && h_resp_header(&r, "x-switchyard-worker", who, who_len) != 0)
        who[0] = '\0';
    h_resp_fini(&r);
    return st;
}

static bool cond_routed_to(void *arg)
{
    struct cond *c = arg;
    char who[64];
    return chat(c->e, who, sizeof(who)) == 200 && strcmp(who, c->id) == 0;
}

/* Every one of n requests is answered 200 by worker id. */
static void assert_all_served_by(struct env *e, const char *id, int n)
{
    for (int i = 0; i < n; i++) {
        char who[64] = "";
        assert_int_equal(chat(e, who, sizeof(who)), 200);
        assert_string_equal(who, id);
    }
}

/* One sample of the control plane's /metrics, or -1. */
static long long metric(struct env *e, const char *sample)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", e->admin);
    return h_metric_at(url, sample);
}

struct metric_cond {
    struct env *e;
    const char *line;
    long long at_least;
};

static bool cond_metric(void *arg)
{
    struct metric_cond *m = arg;
    return metric(m->e, m->line) >= m->at_least;
}

static bool cond_metric_zero(void *arg)
{
    struct metric_cond *m = arg;
    return metric(m->e, m->line) == 0;
}

#define STALE   "switchyard_discovery_stale{source=\"kubernetes\"}"
#define RELISTS "switchyard_discovery_relists_total{source=\"kubernetes\"}"

static void wait_present(struct env *e, const char *id, bool want, int ms)
{
    struct cond c = {e, id, want};
    assert_int_equal(h_wait_until(cond_present, &c, ms), 0);
}

static void wait_routed(struct env *e, const char *id, int ms)
{
    struct cond c = {e, id, true};
    assert_int_equal(h_wait_until(cond_routed_to, &c, ms), 0);
}

/* Two mocks, a Ready pod on each, both routed. */
static void start_two_ready_pods(struct env *e)
{
    start_all(e, 2, "30s", "30s");
    put_pod(e, "pod-a", 0, POD_READY);
    put_pod(e, "pod-b", 1, POD_READY);
    wait_routed(e, "pod-a", 3000);
    wait_routed(e, "pod-b", 3000);
}

/* ---- tests -------------------------------------------------------------------- */

/* Ready -> routed within 1 s; NotReady -> out of rotation within 1 s (and
 * back when Ready); deleted mid-stream -> the stream completes, then the
 * worker is gone with load 0. Also: the label selector is the server's. */
static void test_pod_lifecycle(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 2, "30s", "30s");

    int64_t t0 = h_now_ms();
    put_pod(&e, "pod-a", 0, POD_READY);
    wait_routed(&e, "pod-a", 1000);
    print_message("pod-a routable %lld ms after its event\n", (long long)(h_now_ms() - t0));

    /* Not selected (tier=canary would be refused by app, so: another app). */
    put_pod_labels(&e, "other", 1, POD_READY, "\"app\":\"web\"");
    t0 = h_now_ms();
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_routed(&e, "pod-b", 1000);
    struct shm_worker_info w;
    assert_false(find(&e, "other", &w));

    /* NotReady: draining within 1 s, every request on pod-a. */
    put_pod(&e, "pod-b", 1, POD_NOT_READY);
    struct cond drain = {&e, "pod-b", true};
    assert_int_equal(h_wait_until(cond_draining, &drain, 1000), 0);
    struct shm_worker_info b_before;
    assert_true(find(&e, "pod-b", &b_before));
    assert_all_served_by(&e, "pod-a", 10);
    /* Ready again: same slot and generation, back in rotation. */
    put_pod(&e, "pod-b", 1, POD_READY);
    drain.want = false;
    assert_int_equal(h_wait_until(cond_draining, &drain, 1000), 0);
    assert_true(find(&e, "pod-b", &w));
    assert_int_equal(w.generation, b_before.generation);
    assert_int_equal(w.slot, b_before.slot);

    /* Only pod-b routable, a long stream on it, then its pod goes. */
    put_pod(&e, "pod-a", 0, POD_NOT_READY);
    drain = (struct cond){&e, "pod-a", true};
    assert_int_equal(h_wait_until(cond_draining, &drain, 1000), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", e.dp_url);
    struct h_async *a;
    assert_int_equal(h_async_start(url,
                                   "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":300,"
                                   "\"messages\":[{\"role\":\"user\",\"content\":\"long\"}]}",
                                   &(struct h_async_opts){0}, &a),
                     0);
    assert_int_equal(h_async_wait_body(a, 1, 5000), 0);
    assert_true(find(&e, "pod-b", &b_before));
    assert_int_equal(shm_load_of(&e.seg, b_before.slot, b_before.generation), 1);
    put_pod(&e, "pod-b", 1, POD_TERMINATING);
    drain = (struct cond){&e, "pod-b", true};
    assert_int_equal(h_wait_until(cond_draining, &drain, 1000), 0);
    delete_pod(&e, "pod-b");
    /* Gone from Kubernetes, still busy: it stays (draining) until idle. */
    usleep(300 * 1000);
    assert_true(find(&e, "pod-b", &w));
    assert_int_equal(h_async_wait(a, 10000), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_int_equal(st.status, 200);
    assert_int_equal(st.curl_code, 0);
    h_async_destroy(a);
    wait_present(&e, "pod-b", false, 3000);
    assert_int_equal(shm_load_of(&e.seg, b_before.slot, b_before.generation), 0);
    stop_all(&e);
}

static bool cond_drained_for_good(void *arg)
{
    struct cond *c = arg;
    struct shm_worker_info w;
    return find(c->e, c->id, &w) && w.draining && !w.resetting;
}

/* A pod that turns NotReady while a reset_load has its worker drained is
 * drained by discovery for good: the reset's end does not put it back in
 * rotation. The test plays the reset's part on the registry itself (its
 * drain as the control plane's reset_load sets and ends it), so that the
 * reset is open exactly as long as the test needs. */
static void test_pod_drain_outlives_a_reset(void **state)
{
    (void)state;
    struct env e;
    start_two_ready_pods(&e);
    struct shm_worker_info w;
    assert_true(find(&e, "pod-b", &w));
    uint32_t slot = w.slot;
    assert_int_equal(shm_registry_set_reset_drain(&e.seg, slot, true), 0);
    assert_true(find(&e, "pod-b", &w));
    assert_true(w.draining && w.resetting);

    put_pod(&e, "pod-b", 1, POD_NOT_READY);
    struct cond c = {&e, "pod-b", true};
    assert_int_equal(h_wait_until(cond_drained_for_good, &c, 1000), 0);
    /* The reset ends; pod-b stays out of rotation. */
    assert_int_equal(shm_registry_set_reset_drain(&e.seg, slot, false), 0);
    assert_true(find(&e, "pod-b", &w));
    assert_true(w.draining);
    assert_all_served_by(&e, "pod-a", 5);

    /* Ready again: discovery lifts the drain it made. */
    put_pod(&e, "pod-b", 1, POD_READY);
    c.want = false;
    assert_int_equal(h_wait_until(cond_draining, &c, 1000), 0);
    stop_all(&e);
}

/* expire: the watch's ERROR 410 leads to a re-list that drops nobody:
 * traffic keeps flowing with no failed request, slots and generations stay. */
static void test_expire_relists_without_drop(void **state)
{
    (void)state;
    struct env e;
    start_two_ready_pods(&e);
    struct shm_worker_info a0, b0, w;
    assert_true(find(&e, "pod-a", &a0));
    assert_true(find(&e, "pod-b", &b0));
    long long relists = metric(&e, RELISTS);
    assert_true(relists >= 1);

    struct h_load *load;
    struct h_load_opts lo = {.base = e.dp_url,
                             .model = "mock",
                             .concurrency = 4,
                             .stream_percent = 50,
                             .max_tokens = 8,
                             .seed = 3};
    assert_int_equal(h_load_start(&lo, &load), 0);
    usleep(300 * 1000);
    fault(&e, "{\"expire\": true}");
    struct metric_cond m = {&e, RELISTS, relists + 1};
    assert_int_equal(h_wait_until(cond_metric, &m, 3000), 0);
    /* The watch after the re-list sees new events. */
    assert_int_equal(h_mock_startv(&e.mock[2], MOCK_ARGS), 0);
    put_pod(&e, "pod-c", 2, POD_READY);
    wait_present(&e, "pod-c", true, 2000);
    usleep(300 * 1000);
    struct h_load_result res;
    h_load_stop(load, false, &res);
    print_message("load: %ld ok, %ld http errors, %ld transport\n", res.ok, res.http_error,
                  res.transport);
    assert_true(res.ok > 0);
    assert_int_equal(res.http_error, 0);
    assert_int_equal(res.transport, 0);
    assert_int_equal(res.truncated, 0);
    assert_true(find(&e, "pod-a", &w));
    assert_int_equal(w.generation, a0.generation);
    assert_true(find(&e, "pod-b", &w));
    assert_int_equal(w.generation, b0.generation);
    stop_all(&e);
}

/* A DELETED event lost on the way is healed by the periodic re-list. */
static void test_dropped_delete_healed_by_resync(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 2, "2s", "30s");
    put_pod(&e, "pod-a", 0, POD_READY);
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_present(&e, "pod-a", true, 3000);
    wait_present(&e, "pod-b", true, 3000);
    fault(&e, "{\"drop_next_event\": true}");
    int64_t t0 = h_now_ms();
    delete_pod(&e, "pod-b");
    /* The watch never tells: only the re-list (every 2 s) can. */
    wait_present(&e, "pod-b", false, 2000 + 2000);
    print_message("dropped DELETED healed after %lld ms\n", (long long)(h_now_ms() - t0));
    struct shm_worker_info w;
    assert_true(find(&e, "pod-a", &w));
    stop_all(&e);
}

/* A severed watch and a silent one are both re-established, and the
 * events after them are seen. The resync is long so only the re-watch can
 * bring them. */
static void test_sever_and_silence_rewatch(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 3, "120s", "2s");
    put_pod(&e, "pod-a", 0, POD_READY);
    wait_routed(&e, "pod-a", 3000);

    fault(&e, "{\"sever_watches\": true}");
    usleep(100 * 1000);
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_routed(&e, "pod-b", 2000);

    fault(&e, "{\"silence_watches\": true}");
    usleep(100 * 1000);
    int64_t t0 = h_now_ms();
    put_pod(&e, "pod-c", 2, POD_READY);
    /* Silence is noticed past the 2 s watch timeout plus its grace (3 s). */
    wait_present(&e, "pod-c", true, 6000);
    print_message("event after a silent watch seen after %lld ms\n", (long long)(h_now_ms() - t0));
    assert_int_equal(metric(&e, RELISTS), 1);
    stop_all(&e);
}

/* An API server that refuses connections (not started yet) and later fails
 * with 500s: the registry stays exactly as it is, the gauge says stale, and
 * the source recovers by itself. */
static void test_api_server_down(void **state)
{
    (void)state;
    struct env e;
    memset(&e, 0, sizeof(e));
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(h_mock_startv(&e.mock[i], MOCK_ARGS), 0);
    e.n_mocks = 2;
    write_config(&e, "30s", "30s");
    /* Refused: nothing listens on the API server's port yet. */
    start_cp(&e);
    struct metric_cond m = {&e, STALE, 1};
    assert_int_equal(h_wait_until(cond_metric, &m, 3000), 0);
    start_fake(&e);
    put_pod(&e, "pod-a", 0, POD_READY);
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_present(&e, "pod-a", true, 8000);
    wait_present(&e, "pod-b", true, 3000);
    assert_int_equal(h_wait_until(cond_metric_zero, &m, 3000), 0);
    start_dp(&e);
    struct shm_worker_info a0, b0, w;
    assert_true(find(&e, "pod-a", &a0));
    assert_true(find(&e, "pod-b", &b0));

    /* Failing: 500s and the open watch cut. */
    fault(&e, "{\"fail_status\": 500, \"sever_watches\": true}");
    assert_int_equal(h_wait_until(cond_metric, &m, 3000), 0);
    /* While it fails the truth changes; nothing of it may reach the registry. */
    delete_pod(&e, "pod-b");
    int64_t until = h_now_ms() + 1500;
    while (h_now_ms() < until) {
        assert_true(find(&e, "pod-a", &w));
        assert_int_equal(w.generation, a0.generation);
        assert_true(find(&e, "pod-b", &w));
        assert_int_equal(w.generation, b0.generation);
        assert_false(w.draining);
        char who[64];
        assert_int_equal(chat(&e, who, sizeof(who)), 200);
        usleep(50 * 1000);
    }
    /* Recovery: the re-list applies what changed meanwhile. */
    fault(&e, "{\"fail_status\": 0}");
    m.at_least = 0;
    assert_int_equal(h_wait_until(cond_metric_zero, &m, 8000), 0);
    wait_present(&e, "pod-b", false, 3000);
    assert_true(find(&e, "pod-a", &w));
    assert_int_equal(w.generation, a0.generation);
    stop_all(&e);
}

/* The fake starts requiring a new token and the token file changes: the
 * next request's 401 re-reads the file and discovery goes on. */
static void test_token_rotation(void **state)
{
    (void)state;
    struct env e;
    memset(&e, 0, sizeof(e));
    start_fake(&e);
    fault(&e, "{\"require_token\": \"t1\"}");
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(h_mock_startv(&e.mock[i], MOCK_ARGS), 0);
    e.n_mocks = 2;
    write_config(&e, "120s", "30s");
    start_cp(&e);
    start_dp(&e);
    put_pod(&e, "pod-a", 0, POD_READY);
    wait_routed(&e, "pod-a", 3000);

    fault(&e, "{\"require_token\": \"t2\"}");
    char path[H_PATH_MAX];
    assert_int_equal(h_write_file("token", "t2\n", path, sizeof(path)), 0);
    /* A new watch must be opened with the new token. */
    fault(&e, "{\"sever_watches\": true}");
    usleep(100 * 1000);
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_routed(&e, "pod-b", 3000);
    assert_int_equal(metric(&e, STALE), 0);
    stop_all(&e);
}

/* A control-plane restart with discovered workers: same slots and
 * generations, and the in-flight load is not reset. */
static void test_restart_keeps_slots(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 2, "30s", "30s");
    put_pod(&e, "pod-a", 0, POD_READY);
    put_pod(&e, "pod-b", 1, POD_NOT_READY);
    wait_routed(&e, "pod-a", 3000);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", e.dp_url);
    struct h_async *a;
    assert_int_equal(h_async_start(url,
                                   "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":400,"
                                   "\"messages\":[{\"role\":\"user\",\"content\":\"long\"}]}",
                                   &(struct h_async_opts){0}, &a),
                     0);
    assert_int_equal(h_async_wait_body(a, 1, 5000), 0);
    put_pod(&e, "pod-b", 1, POD_READY);
    wait_present(&e, "pod-b", true, 3000);
    struct shm_worker_info a0, b0, w;
    assert_true(find(&e, "pod-a", &a0));
    assert_true(find(&e, "pod-b", &b0));
    assert_int_equal(shm_load_of(&e.seg, a0.slot, a0.generation), 1);

    assert_int_equal(h_proc_signal(e.cp, SIGKILL), 0);
    int status;
    assert_int_equal(h_proc_wait(e.cp, 5000, &status), 0);
    /* Changes while no control plane runs are picked up by its first list. */
    assert_int_equal(h_mock_startv(&e.mock[2], MOCK_ARGS), 0);
    put_pod(&e, "pod-c", 2, POD_READY);
    start_cp(&e);
    wait_present(&e, "pod-c", true, 5000);
    assert_true(find(&e, "pod-a", &w));
    assert_int_equal(w.slot, a0.slot);
    assert_int_equal(w.generation, a0.generation);
    assert_true(find(&e, "pod-b", &w));
    assert_int_equal(w.slot, b0.slot);
    assert_int_equal(w.generation, b0.generation);
    assert_int_equal(shm_load_of(&e.seg, a0.slot, a0.generation), 1);
    assert_int_equal(h_async_wait(a, 15000), 0);
    struct h_async_state st;
    h_async_get_state(a, &st);
    assert_int_equal(st.status, 200);
    assert_int_equal(st.curl_code, 0);
    h_async_destroy(a);
    assert_int_equal(shm_load_of(&e.seg, a0.slot, a0.generation), 0);
    stop_all(&e);
}

/* GET /workers shows the source and the pod; DELETE is refused, drain is
 * allowed; a pod re-created under its name is a new worker (generation). */
static void test_admin_view_and_recreation(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 1, "30s", "30s");
    put_pod(&e, "pod-a", 0, POD_READY);
    wait_present(&e, "pod-a", true, 3000);
    char url[128];
    snprintf(url, sizeof(url), "%s/workers/pod-a", e.admin);
    struct h_resp r;
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "source")), "kubernetes");
    json_t *pod = json_object_get(j, "pod");
    assert_string_equal(json_string_value(json_object_get(pod, "namespace")), NS);
    assert_string_equal(json_string_value(json_object_get(pod, "name")), "pod-a");
    char uid1[64];
    snprintf(uid1, sizeof(uid1), "%s", json_string_value(json_object_get(pod, "uid")));
    assert_true(strlen(uid1) > 8);
    json_decref(j);
    h_resp_fini(&r);

    struct h_req del = {.method = "DELETE", .url = url};
    assert_int_equal(h_http(&del, &r), 0);
    assert_int_equal(r.status, 409);
    assert_non_null(strstr(r.body, "discovered from Kubernetes"));
    h_resp_fini(&r);
    char drain_url[160];
    snprintf(drain_url, sizeof(drain_url), "%s/drain", url);
    assert_int_equal(h_http_post_json(drain_url, "{\"draining\": true}", &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    struct shm_worker_info w0, w;
    assert_true(find(&e, "pod-a", &w0));
    assert_true(w0.draining);
    /* The operator's drain holds while the pod stays Ready. */
    put_pod(&e, "pod-a", 0, POD_READY);
    usleep(300 * 1000);
    assert_true(find(&e, "pod-a", &w));
    assert_true(w.draining);
    assert_int_equal(h_http_post_json(drain_url, "{\"draining\": false}", &r), 0);
    h_resp_fini(&r);

    /* Same name, same address, new uid: a new worker, also when the
     * DELETED in between is lost and only the new uid tells. */
    fault(&e, "{\"drop_next_event\": true}");
    delete_pod(&e, "pod-a");
    put_pod(&e, "pod-a", 0, POD_READY);
    struct cond c = {&e, "pod-a", true};
    int64_t deadline = h_now_ms() + 3000;
    while (h_now_ms() < deadline &&
           !(find(&e, "pod-a", &w) && w.generation != w0.generation && !w.draining))
        usleep(20 * 1000);
    assert_true(find(&e, "pod-a", &w));
    assert_int_not_equal(w.generation, w0.generation);
    assert_int_equal(h_wait_until(cond_routed_to, &c, 2000), 0);
    assert_int_equal(h_http_get(url, &r), 0);
    j = h_resp_json(&r);
    assert_string_not_equal(json_string_value(json_object_get(json_object_get(j, "pod"), "uid")),
                            uid1);
    json_decref(j);
    h_resp_fini(&r);
    stop_all(&e);
}

struct model_cond {
    struct env *e;
    const char *id;
    const char *model;
};

static bool cond_model(void *arg)
{
    struct model_cond *c = arg;
    struct shm_worker_info w;
    return find(c->e, c->id, &w) && strcmp(w.model, c->model) == 0;
}

/* Model and role come from the pod's labels; without a model label the
 * model is learned from the pod's /v1/models. A canary (tier=canary) is
 * left out by the server-side selector. */
static void test_model_and_role_from_pod(void **state)
{
    (void)state;
    struct env e;
    memset(&e, 0, sizeof(e));
    start_fake(&e);
    const char *const learned[] = {"--model", "learned-model", "--tpot-ms", "5", NULL};
    assert_int_equal(h_mock_startv(&e.mock[0], learned), 0);
    assert_int_equal(h_mock_startv(&e.mock[1], MOCK_ARGS), 0);
    assert_int_equal(h_mock_startv(&e.mock[2], MOCK_ARGS), 0);
    e.n_mocks = 3;
    write_config(&e, "30s", "30s");
    start_cp(&e);
    put_pod_labels(&e, "pod-l", 0, POD_READY, "\"app\":\"vllm\",\"switchyard.io/role\":\"decode\"");
    put_pod_labels(&e, "pod-p", 1, POD_READY,
                   "\"app\":\"vllm\",\"switchyard.io/model\":\"mock\",\"switchyard.io/role\":"
                   "\"prefill\"");
    put_pod_labels(&e, "pod-c", 2, POD_READY,
                   "\"app\":\"vllm\",\"tier\":\"canary\",\"switchyard.io/model\":\"mock\"");
    struct model_cond mc = {&e, "pod-l", "learned-model"};
    assert_int_equal(h_wait_until(cond_model, &mc, 5000), 0);
    struct shm_worker_info w;
    assert_true(find(&e, "pod-l", &w));
    assert_int_equal(w.role, CFG_ROLE_DECODE);
    /* Its event may be handled after pod-l's model was learned. */
    wait_present(&e, "pod-p", true, H_READY_TIMEOUT_MS);
    assert_true(find(&e, "pod-p", &w));
    assert_string_equal(w.model, "mock");
    assert_int_equal(w.role, CFG_ROLE_PREFILL);
    assert_false(find(&e, "pod-c", &w));
    stop_all(&e);
}

/* A control-plane reload applies discovery settings: with a new label
 * selector the source starts over, the pod that no longer matches leaves,
 * the one that now matches arrives, and nothing else is disturbed. */
static void test_reload_applies_discovery(void **state)
{
    (void)state;
    struct env e;
    selector = "app=vllm,tier!=canary";
    start_all(&e, 2, "30s", "30s");
    put_pod(&e, "pod-a", 0, POD_READY);
    put_pod_labels(&e, "pod-web", 1, POD_READY, "\"app\":\"web\",\"switchyard.io/model\":\"mock\"");
    wait_routed(&e, "pod-a", 2000);
    struct shm_worker_info w;
    assert_false(find(&e, "pod-web", &w));

    selector = "app=web";
    write_config(&e, "30s", "30s");
    selector = "app=vllm,tier!=canary";
    assert_int_equal(h_proc_signal(e.cp, SIGHUP), 0);
    wait_routed(&e, "pod-web", H_READY_TIMEOUT_MS);
    wait_present(&e, "pod-a", false, H_READY_TIMEOUT_MS);
    assert_true(h_proc_log_contains(e.cp, "discovery settings applied"));
    /* The source still watches: a new pod of the new selector is seen. */
    put_pod_labels(&e, "pod-web2", 0, POD_READY,
                   "\"app\":\"web\",\"switchyard.io/model\":\"mock\"");
    wait_present(&e, "pod-web2", true, H_READY_TIMEOUT_MS);
    stop_all(&e);
}

/* discovery.kubernetes of GET /status (a new reference), or NULL. */
static json_t *kube_status(struct env *e)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/status", e->admin);
    struct h_resp r;
    json_t *j = NULL;
    if (h_http_get(url, &r) == 0 && r.status == 200)
        j = h_resp_json(&r);
    h_resp_fini(&r);
    json_t *k = json_object_get(json_object_get(j, "discovery"), "kubernetes");
    json_incref(k);
    json_decref(j);
    return k;
}

/* The leaving worker must stay while the control plane's loop demonstrably
 * runs past the point where a sweep would have removed it. */
struct kept_cond {
    struct env *e;
    const char *id;
    const char *probes_line; /* switchyard_health_checks_total of the worker */
    long long probes_want;   /* health probes, each one a pass of the loop */
    int64_t not_before_ms;   /* two sweep intervals after its load went to 0 */
    bool gone;
};

static bool cond_loop_ran_with_worker_kept(void *arg)
{
    struct kept_cond *c = arg;
    struct shm_worker_info w;
    if (!find(c->e, c->id, &w)) {
        c->gone = true;
        return true; /* what must not happen: stop waiting, the caller fails */
    }
    return h_now_ms() >= c->not_before_ms && metric(c->e, c->probes_line) >= c->probes_want;
}

/* A pod deleted while its worker holds load keeps its worker (draining)
 * until the load ends. When the load ends while the API server fails, the
 * source is stale and must not act on its view (invariant 12): the worker
 * stays, draining, same slot and generation, for as long as the server
 * fails, and goes once a list answers again. */
static void test_stale_source_keeps_leaving_worker(void **state)
{
    (void)state;
    struct env e;
    start_all(&e, 1, "30s", "30s");
    put_pod(&e, "pod-a", 0, POD_READY);
    wait_present(&e, "pod-a", true, 3000);
    struct shm_worker_info a0, w;
    assert_true(find(&e, "pod-a", &a0));

    /* Two requests' worth of load held by a lease of its own. */
    struct h_holder h;
    struct h_holder_spec hs = {
        .shm = e.cfg.shm_name, .slot = a0.slot, .generation = a0.generation, .guards = 2};
    h_holder_start(&h, &hs);
    assert_int_equal(shm_load_of(&e.seg, a0.slot, a0.generation), 2);

    /* Deleted while busy: draining, kept for its load. Seeing the drain
     * proves the DELETED event was applied before the server fails. */
    delete_pod(&e, "pod-a");
    struct cond drain = {&e, "pod-a", true};
    assert_int_equal(h_wait_until(cond_draining, &drain, 2000), 0);

    /* The API server fails: 500s, and the open watch cut. */
    fault(&e, "{\"fail_status\": 500, \"sever_watches\": true}");
    struct metric_cond m = {&e, STALE, 1};
    assert_int_equal(h_wait_until(cond_metric, &m, 3000), 0);
    assert_true(find(&e, "pod-a", &w));
    assert_true(w.draining);

    /* The load ends while the source is stale. */
    const char *probes = "switchyard_health_checks_total{worker=\"pod-a\",result=\"success\"}";
    long long p0 = metric(&e, probes);
    assert_true(p0 >= 0);
    h_holder_finish(&h);
    assert_int_equal(shm_load_of(&e.seg, a0.slot, a0.generation), 0);
    /* A source that syncs while stale removes an idle leaving worker at its
     * next sweep (every 500 ms; the loop wakes at least every 200 ms for
     * health probes). Wait until two sweep intervals have passed and the
     * loop has run five more health probes (five more passes, 1 s at the
     * 200 ms interval) with the worker present at every look. */
    struct kept_cond kc = {.e = &e,
                           .id = "pod-a",
                           .probes_line = probes,
                           .probes_want = p0 + 5,
                           .not_before_ms = h_now_ms() + 1000};
    assert_int_equal(h_wait_until(cond_loop_ran_with_worker_kept, &kc, 6000), 0);
    if (kc.gone)
        fail_msg("the worker of a deleted pod was removed while the source was stale");
    assert_true(find(&e, "pod-a", &w));
    assert_int_equal(w.slot, a0.slot);
    assert_int_equal(w.generation, a0.generation);
    assert_true(w.draining);
    /* Still stale all along: the server never answered in that time. */
    assert_int_equal(metric(&e, STALE), 1);
    json_t *ks = kube_status(&e);
    assert_non_null(ks);
    assert_true(json_is_true(json_object_get(ks, "stale")));
    assert_int_equal(json_integer_value(json_object_get(ks, "workers")), 1);
    json_decref(ks);

    /* The server answers: the first list applies the deletion, and the
     * idle worker goes. */
    fault(&e, "{\"fail_status\": 0}");
    assert_int_equal(h_wait_until(cond_metric_zero, &m, 8000), 0);
    wait_present(&e, "pod-a", false, 3000);
    assert_int_equal(shm_load_underflows(&e.seg), 0);
    stop_all(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_pod_lifecycle),
        H_TEST(test_pod_drain_outlives_a_reset),
        H_TEST(test_expire_relists_without_drop),
        H_TEST(test_dropped_delete_healed_by_resync),
        H_TEST(test_sever_and_silence_rewatch),
        H_TEST(test_api_server_down),
        H_TEST(test_token_rotation),
        H_TEST(test_restart_keeps_slots),
        H_TEST(test_admin_view_and_recreation),
        H_TEST(test_model_and_role_from_pod),
        H_TEST(test_reload_applies_discovery),
        H_TEST(test_stale_source_keeps_leaving_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
