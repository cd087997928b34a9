/*
 * End-to-end tests of the control plane's slow paths: the health prober
 * (invariant 3: health never touches load; probes run in parallel; models
 * are learned), the admin REST API (every route, every bad input, bearer
 * auth, API-added workers surviving a SIGKILLed control plane), the admin
 * channel (garbage and oversized frames, reconnects, a lost connection as a
 * liveness signal) and reset_load (invariant 4).
 *
 * Lease holders are forked children of the test that use the shm API
 * directly; a "fake dataplane" child also speaks the admin channel with the
 * real dataplane/lifecycle/admin_client.c and answers in-flight questions with a
 * number the test chose, which is how load drift is simulated.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "dataplane/lifecycle/admin_client.h"
#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_holder.h"

#define READY_MS 10000
#define MODEL    "mock-model"

/* ---- segment and admin API helpers -------------------------------------- */

struct seg_ctx {
    const char *name;
    struct shm_segment seg;
};

static bool segment_attachable(void *arg)
{
    struct seg_ctx *c = arg;
    char err[256];
    return shm_segment_attach(&c->seg, c->name, err, sizeof(err)) == 0;
}

static char g_admin[64];           /* "http://127.0.0.1:PORT" of the current control plane */
static const char *g_token_header; /* NULL or "Authorization: Bearer ..." */

static void start_cp(struct h_config *cfg, struct h_proc **cp, struct seg_ctx *sc)
{
    assert_int_equal(h_start_controlplane(cfg->path, cp), 0);
    snprintf(g_admin, sizeof(g_admin), "http://127.0.0.1:%u", (unsigned)cfg->admin_port);
    if (sc != NULL) {
        sc->name = cfg->shm_name;
        assert_int_equal(h_wait_until(segment_attachable, sc, READY_MS), 0);
    }
    char url[128];
    snprintf(url, sizeof(url), "%s/status", g_admin);
    if (g_token_header == NULL)
        assert_int_equal(h_wait_http_ok(url, READY_MS), 0);
}

/* One admin request; returns the status. body may be NULL. */
static long admin(const char *method, const char *path, const char *body, struct h_resp *resp)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", g_admin, path);
    const char *headers[3] = {"Content-Type: application/json", g_token_header, NULL};
    struct h_req req = {.method = method, .url = url, .body = body, .headers = headers};
    int rc = h_http(&req, resp);
    assert_int_equal(rc, 0);
    return resp->status;
}

/* Status of a request whose response is not needed. */
static long admin_status(const char *method, const char *path, const char *body)
{
    struct h_resp resp;
    long st = admin(method, path, body, &resp);
    h_resp_fini(&resp);
    return st;
}

/* One sample of the admin /metrics, "name{labels}" exactly, or -1: read
 * through admin() (which asserts the request is answered) so that it
 * carries the admin token when one is set. */
static long long metric(const char *sample)
{
    struct h_resp resp;
    long long v =
        admin("GET", "/metrics", NULL, &resp) == 200 ? h_metric_in(resp.body, sample) : -1;
    h_resp_fini(&resp);
    return v;
}

static void write_config(struct h_config *cfg)
{
    assert_int_equal(h_config_write(cfg, NULL), 0);
}

/* A control plane (probes every hour) with workers w1..wN on ports 19001..
 * (nothing listens there) and a segment attached; w1's slot in *w1 unless
 * NULL. */
static void start_cp_with_workers(struct h_config *cfg, int n_workers, struct h_proc **cp,
                                  struct seg_ctx *sc, struct shm_worker_info *w1)
{
    *cfg = (struct h_config){.health_interval = "1h"};
    for (int i = 1; i <= n_workers; i++) {
        char url[64], id[16];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", 19000 + i);
        snprintf(id, sizeof(id), "w%d", i);
        assert_int_equal(h_config_add_worker(cfg, url, id, "m", NULL), 0);
    }
    write_config(cfg);
    start_cp(cfg, cp, sc);
    if (w1 != NULL)
        assert_int_equal(shm_registry_find(&sc->seg, "w1", w1), 0);
}

/* ---- conditions ------------------------------------------------------------ */

struct worker_cond {
    struct shm_segment *seg;
    const char *id;
    bool healthy;
};

static bool worker_health_is(void *arg)
{
    struct worker_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(c->seg, c->id, &w) == 0 && w.healthy == c->healthy;
}

static uint64_t load_of(struct shm_segment *seg, const char *id)
{
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(seg, id, &w), 0);
    return shm_load_of(seg, w.slot, w.generation);
}

struct checks_cond {
    const char *line; /* metric line prefix */
    long long want;
    struct shm_segment *seg;
    const char *id;
    uint64_t load; /* must hold at every look */
    bool load_broken;
};

static bool checks_reach(void *arg)
{
    struct checks_cond *c = arg;
    if (load_of(c->seg, c->id) != c->load)
        c->load_broken = true;
    return metric(c->line) >= c->want;
}

/* ---- health prober ----------------------------------------------------------- */

/*
 * vllm-router #197, strengthened: a health cycle must not touch the load of
 * requests in flight, through 12+ cycles, failure and recovery.
 */
static void test_health_never_touches_load(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", MODEL, NULL), 0);
    struct h_config cfg = {.health_interval = "50ms"};
    assert_int_equal(h_config_add_worker(&cfg, m.url, "w1", MODEL, NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp(&cfg, &cp, &sc);
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);

    struct h_holder h;
    struct h_holder_spec hs = {
        .shm = cfg.shm_name, .slot = w.slot, .generation = w.generation, .guards = 5};
    h_holder_start(&h, &hs);
    assert_int_equal(load_of(&sc.seg, "w1"), 5);

    long long base = metric("switchyard_health_checks_total{worker=\"w1\",result=\"success\"}");
    struct checks_cond cc = {
        .line = "switchyard_health_checks_total{worker=\"w1\",result=\"success\"}",
        .want = base + 12,
        .seg = &sc.seg,
        .id = "w1",
        .load = 5,
    };
    assert_int_equal(h_wait_until(checks_reach, &cc, 5000), 0);
    assert_false(cc.load_broken);

    assert_int_equal(h_mock_faults(m.url, "{\"health_status\": 503}"), 0);
    struct worker_cond wc = {.seg = &sc.seg, .id = "w1", .healthy = false};
    assert_int_equal(h_wait_until(worker_health_is, &wc, 5000), 0);
    assert_int_equal(load_of(&sc.seg, "w1"), 5);
    assert_true(metric("switchyard_health_checks_total{worker=\"w1\",result=\"failure\"}") >= 3);
    assert_int_equal(metric("switchyard_worker_healthy{worker=\"w1\"}"), 0);

    assert_int_equal(h_mock_faults(m.url, "{\"health_status\": 200}"), 0);
    wc.healthy = true;
    assert_int_equal(h_wait_until(worker_health_is, &wc, 5000), 0);
    assert_int_equal(load_of(&sc.seg, "w1"), 5);
    assert_int_equal(metric("switchyard_worker_load{worker=\"w1\"}"), 5);

    h_holder_finish(&h);
    assert_int_equal(load_of(&sc.seg, "w1"), 0);
    assert_int_equal(shm_load_underflows(&sc.seg), 0);
    shm_segment_close(&sc.seg);
}

/* A listener that accepts nothing: connections complete (backlog) and the
 * request is never answered. */
static int stall_listener(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 16), 0);
    return fd;
}

static void test_stalled_probe_does_not_delay_others(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", MODEL, NULL), 0);
    uint16_t stall_port;
    assert_int_equal(h_free_port(&stall_port), 0);
    int lfd = stall_listener(stall_port);
    char stall_url[64];
    assert_int_equal(h_url(stall_url, sizeof(stall_url), stall_port, NULL), 0);

    struct h_config cfg = {.health_interval = "50ms", .health_extra = "timeout: 3s\n"};
    assert_int_equal(h_config_add_worker(&cfg, stall_url, "stuck", MODEL, NULL), 0);
    assert_int_equal(h_config_add_worker(&cfg, m.url, "ok", MODEL, NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp(&cfg, &cp, &sc);

    /* Fail the good worker while the stuck one's first probe hangs. */
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\": 503}"), 0);
    int64_t t0 = h_now_ms();
    struct worker_cond wc = {.seg = &sc.seg, .id = "ok", .healthy = false};
    assert_int_equal(h_wait_until(worker_health_is, &wc, 5000), 0);
    int64_t took = h_now_ms() - t0;
    print_message("healthy worker turned unhealthy after %lld ms beside a stalled one\n",
                  (long long)took);
    assert_true(took < 1500);
    /* The stuck worker's probe has not timed out yet: it is still healthy. */
    wc.id = "stuck";
    wc.healthy = true;
    assert_true(worker_health_is(&wc));
    assert_int_equal(h_mock_faults(m.url, "{\"health_status\": 200}"), 0);
    wc.id = "ok";
    assert_int_equal(h_wait_until(worker_health_is, &wc, 5000), 0);
    /* After 3 timeouts the stuck one goes unhealthy too. */
    wc.id = "stuck";
    wc.healthy = false;
    assert_int_equal(h_wait_until(worker_health_is, &wc, 15000), 0);
    close(lfd);
    shm_segment_close(&sc.seg);
}

struct model_cond {
    struct shm_segment *seg;
    const char *id;
    const char *model;
};

static bool model_is(void *arg)
{
    struct model_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(c->seg, c->id, &w) == 0 && strcmp(w.model, c->model) == 0;
}

static void test_model_learned_from_v1_models(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", "learned-model", NULL), 0);
    struct h_config cfg = {.health_interval = "50ms"};
    assert_int_equal(h_config_add_worker(&cfg, m.url, "w1", NULL, NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp(&cfg, &cp, &sc);
    struct model_cond mc = {.seg = &sc.seg, .id = "w1", .model = "learned-model"};
    assert_int_equal(h_wait_until(model_is, &mc, 5000), 0);
    /* And through the API: a worker added without a model learns it too. */
    struct h_mock m2;
    assert_int_equal(h_mock_start(&m2, "--model", "other-model", NULL), 0);
    char body[256];
    snprintf(body, sizeof(body), "{\"url\": \"%s\", \"id\": \"w2\"}", m2.url);
    assert_int_equal(admin_status("POST", "/workers", body), 201);
    mc.id = "w2";
    mc.model = "other-model";
    assert_int_equal(h_wait_until(model_is, &mc, 5000), 0);
    shm_segment_close(&sc.seg);
}

/* ---- admin REST API ---------------------------------------------------------- */

static json_t *admin_json(const char *method, const char *path, const char *body, long want)
{
    struct h_resp resp;
    long st = admin(method, path, body, &resp);
    if (st != want)
        print_message("%s %s -> %ld %s\n", method, path, st, resp.body);
    assert_int_equal(st, want);
    json_t *j = h_resp_json(&resp);
    h_resp_fini(&resp);
    assert_non_null(j);
    return j;
}

static void expect_error(const char *method, const char *path, const char *body, long want)
{
    json_t *j = admin_json(method, path, body, want);
    assert_true(json_is_string(json_object_get(j, "error")));
    json_decref(j);
}

static void test_admin_worker_routes(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h", .shm_extra = "max_workers: 3\n"};
    assert_int_equal(h_config_add_worker(&cfg, "http://127.0.0.1:19001", "w1", "m", NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp(&cfg, &cp, &sc);

    json_t *j = admin_json("GET", "/workers", NULL, 200);
    json_t *arr = json_object_get(j, "workers");
    assert_int_equal(json_array_size(arr), 1);
    json_t *w1 = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(w1, "id")), "w1");
    assert_string_equal(json_string_value(json_object_get(w1, "url")), "http://127.0.0.1:19001");
    assert_string_equal(json_string_value(json_object_get(w1, "model")), "m");
    assert_string_equal(json_string_value(json_object_get(w1, "role")), "regular");
    assert_true(json_is_true(json_object_get(w1, "healthy")));
    assert_true(json_is_false(json_object_get(w1, "draining")));
    assert_int_equal(json_integer_value(json_object_get(w1, "load")), 0);
    assert_true(json_is_object(json_object_get(w1, "inflight_by_dataplane")));
    json_decref(j);

    j = admin_json("GET", "/workers/w1", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "w1");
    json_decref(j);

    /* POST: canonical url, default id, role. */
    j = admin_json("POST", "/workers",
                   "{\"url\": \"HTTP://127.0.0.1:19002/\", \"role\": \"decode\"}", 201);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "127.0.0.1:19002");
    assert_string_equal(json_string_value(json_object_get(j, "url")), "http://127.0.0.1:19002");
    assert_string_equal(json_string_value(json_object_get(j, "role")), "decode");
    assert_true(json_is_true(json_object_get(j, "from_api")));
    json_decref(j);
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&sc.seg, "127.0.0.1:19002", &w), 0);
    assert_true(w.from_api);
    assert_int_equal(w.role, CFG_ROLE_DECODE);

    /* Bad input, each with its status. */
    expect_error("POST", "/workers", "{\"url\": \"http://127.0.0.1\"}", 400);      /* no port */
    expect_error("POST", "/workers", "{\"url\": \"ftp://127.0.0.1:21\"}", 400);    /* scheme */
    expect_error("POST", "/workers", "{\"url\": \"http://127.0.0.1:1/v1\"}", 400); /* path */
    expect_error("POST", "/workers", "{\"url\": \"http://h:1\", \"role\": \"x\"}", 400);
    expect_error("POST", "/workers", "{\"url\": \"http://h:1\", \"id\": \"a b\"}", 400);
    expect_error("POST", "/workers", "{\"url\": \"http://h:1\", \"id\": 7}", 400);
    expect_error("POST", "/workers", "{\"url\": \"http://h:1\", \"colour\": \"red\"}", 400);
    expect_error("POST", "/workers", "{\"id\": \"x\"}", 400);
    expect_error("POST", "/workers", "not json", 400);
    expect_error("POST", "/workers", "[1]", 400);
    expect_error("POST", "/workers", "{\"url\": \"http://127.0.0.1:19003\", \"id\": \"w1\"}",
                 409); /* duplicate id */
    expect_error("POST", "/workers", "{\"url\": \"http://127.0.0.1:19001/\", \"id\": \"w9\"}",
                 409); /* duplicate url, other spelling */
    j = admin_json("POST", "/workers", "{\"url\": \"http://127.0.0.1:19004\", \"id\": \"w3\"}",
                   201);
    json_decref(j);
    expect_error("POST", "/workers", "{\"url\": \"http://127.0.0.1:19005\", \"id\": \"w4\"}",
                 507); /* max_workers: 3 */

    /* Drain. */
    j = admin_json("POST", "/workers/w1/drain", "{\"draining\": true}", 200);
    assert_true(json_is_true(json_object_get(j, "draining")));
    json_decref(j);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_true(w.draining);
    j = admin_json("POST", "/workers/w1/drain", "{\"draining\": false}", 200);
    json_decref(j);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining);
    expect_error("POST", "/workers/w1/drain", "{\"draining\": 1}", 400);
    expect_error("POST", "/workers/w1/drain", "{}", 400);
    expect_error("POST", "/workers/nope/drain", "{\"draining\": true}", 404);

    /* Delete: gone at once, generation kept in the slot. */
    uint32_t slot = w.slot, gen = w.generation;
    j = admin_json("DELETE", "/workers/w1", NULL, 200);
    json_decref(j);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), -ENOENT);
    assert_int_equal(shm_registry_generation(&sc.seg, slot), gen);
    expect_error("GET", "/workers/w1", NULL, 404);
    expect_error("DELETE", "/workers/w1", NULL, 404);

    /* Routes and methods. */
    expect_error("GET", "/nope", NULL, 404);
    expect_error("GET", "/workers/w3/nope", NULL, 404);
    expect_error("PUT", "/workers", "{}", 405);
    expect_error("POST", "/status", "{}", 405);
    expect_error("DELETE", "/metrics", NULL, 405);
    expect_error("GET", "/workers/w3/drain", NULL, 405);
    expect_error("GET", "/workers/w3/reset_load", NULL, 405);
    expect_error("PATCH", "/workers/w3", "{}", 405);

    /* Bodies over 64 KiB are refused. */
    size_t big = 64 * 1024 + 10;
    char *body = malloc(big + 1);
    assert_non_null(body);
    memset(body, ' ', big);
    body[0] = '{';
    body[big - 1] = '}';
    body[big] = '\0';
    expect_error("POST", "/workers", body, 413);
    free(body);

    assert_true(metric("switchyard_admin_requests_total{route=\"/workers\",code=\"400\"}") >= 10);
    shm_segment_close(&sc.seg);
}

/* Invariant 6 through the API: guards of a deleted worker release against
 * its old generation and never touch the slot's next occupant. */
static void test_delete_then_reuse_slot_keeps_generations_apart(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h", .shm_extra = "max_workers: 1\n"};
    assert_int_equal(h_config_add_worker(&cfg, "http://127.0.0.1:19001", "w1", "m", NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp(&cfg, &cp, &sc);
    struct shm_worker_info old;
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &old), 0);
    struct h_holder h;
    struct h_holder_spec hs = {
        .shm = cfg.shm_name, .slot = old.slot, .generation = old.generation, .guards = 2};
    h_holder_start(&h, &hs);
    assert_int_equal(admin_status("DELETE", "/workers/w1", NULL), 200);
    json_t *j = admin_json("POST", "/workers",
                           "{\"url\": \"http://127.0.0.1:19002\", \"id\": \"w2\"}", 201);
    assert_int_equal(json_integer_value(json_object_get(j, "slot")), old.slot);
    assert_int_equal(json_integer_value(json_object_get(j, "generation")), old.generation + 1);
    assert_int_equal(json_integer_value(json_object_get(j, "load")), 0);
    json_decref(j);
    h_holder_finish(&h); /* releases against the old generation: no effect, no underflow */
    assert_int_equal(load_of(&sc.seg, "w2"), 0);
    assert_int_equal(shm_load_underflows(&sc.seg), 0);
    shm_segment_close(&sc.seg);
}

static void test_admin_token_required(void **state)
{
    (void)state;
    char token_path[H_PATH_MAX];
    assert_int_equal(h_write_file("token", "s3cret-token\n", token_path, sizeof(token_path)), 0);
    char extra[H_PATH_MAX + 32];
    snprintf(extra, sizeof(extra), "admin_token_file: \"%s\"\n", token_path);
    struct h_config cfg = {.health_interval = "1h", .controlplane_extra = extra};
    assert_int_equal(h_config_add_worker(&cfg, "http://127.0.0.1:19001", "w1", "m", NULL), 0);
    write_config(&cfg);
    struct h_proc *cp;
    g_token_header = NULL;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    snprintf(g_admin, sizeof(g_admin), "http://127.0.0.1:%u", (unsigned)cfg.admin_port);
    /* Wait until it answers at all (401 counts). */
    int64_t deadline = h_now_ms() + READY_MS;
    struct h_resp resp;
    char url[128];
    snprintf(url, sizeof(url), "%s/status", g_admin);
    for (;;) {
        h_http_get(url, &resp);
        long st = resp.status;
        h_resp_fini(&resp);
        if (st != 0 || h_now_ms() > deadline)
            break;
        usleep(10000);
    }
    const char *paths[] = {"/workers", "/workers/w1", "/status", "/metrics"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(admin_status("GET", paths[i], NULL), 401);
    assert_int_equal(admin_status("POST", "/workers", "{\"url\": \"http://h:1\"}"), 401);
    g_token_header = "Authorization: Bearer wrong-token!";
    assert_int_equal(admin_status("GET", "/workers", NULL), 401);
    g_token_header = "Authorization: Bearer s3cret-token";
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(admin_status("GET", paths[i], NULL), 200);
    assert_int_equal(admin_status("POST", "/workers", "{\"url\": \"http://h:1\"}"), 201);
    g_token_header = NULL;
}

static void test_admin_status_and_inflight_by_dataplane(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 1, &cp, &sc, &w);
    struct h_holder a, b;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 2};
    h_holder_start(&a, &hs);
    hs.socket = NULL;
    hs.guards = 3;
    h_holder_start(&b, &hs);

    json_t *j = admin_json("GET", "/workers/w1", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(j, "load")), 5);
    json_t *by = json_object_get(j, "inflight_by_dataplane");
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)a.pid);
    assert_int_equal(json_integer_value(json_object_get(by, pid)), 2);
    snprintf(pid, sizeof(pid), "%d", (int)b.pid);
    assert_int_equal(json_integer_value(json_object_get(by, pid)), 3);
    json_decref(j);

    j = admin_json("GET", "/status", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(j, "pid")), cp->pid);
    assert_true(json_integer_value(json_object_get(j, "epoch")) >= 1);
    json_t *segj = json_object_get(j, "segment");
    assert_string_equal(json_string_value(json_object_get(segj, "name")), cfg.shm_name);
    assert_int_equal(json_integer_value(json_object_get(segj, "layout_version")),
                     SHM_LAYOUT_VERSION);
    json_t *dps = json_object_get(j, "dataplanes");
    assert_int_equal(json_array_size(dps), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(dps, i);
        pid_t p = (pid_t)json_integer_value(json_object_get(d, "pid"));
        assert_true(p == a.pid || p == b.pid);
        assert_true(json_is_integer(json_object_get(d, "lease")));
        assert_true(json_is_integer(json_object_get(d, "uptime_ms")));
        assert_true(json_is_true(json_object_get(d, "admin_channel")) == (p == a.pid));
    }
    json_decref(j);

    assert_int_equal(metric("switchyard_dataplanes"), 2);
    assert_int_equal(metric("switchyard_worker_load{worker=\"w1\"}"), 5);
    assert_int_equal(metric("switchyard_worker_healthy{worker=\"w1\"}"), 1);
    h_holder_finish(&a);
    h_holder_finish(&b);
    shm_segment_close(&sc.seg);
}

static void test_api_workers_survive_controlplane_sigkill(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp_with_workers(&cfg, 1, &cp, &sc, NULL);
    json_t *j = admin_json("POST", "/workers",
                           "{\"url\": \"http://127.0.0.1:19002\", \"id\": \"api1\", \"model\": "
                           "\"m2\", \"role\": \"prefill\"}",
                           201);
    json_decref(j);
    struct shm_worker_info before;
    assert_int_equal(shm_registry_find(&sc.seg, "api1", &before), 0);

    assert_int_equal(h_proc_signal(cp, SIGKILL), 0);
    assert_int_equal(h_proc_wait(cp, 5000, NULL), 0);
    start_cp(&cfg, &cp, NULL);

    j = admin_json("GET", "/workers/api1", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m2");
    assert_string_equal(json_string_value(json_object_get(j, "role")), "prefill");
    json_decref(j);
    struct shm_worker_info after;
    assert_int_equal(shm_registry_find(&sc.seg, "api1", &after), 0);
    assert_int_equal(after.slot, before.slot);
    assert_int_equal(after.generation, before.generation);
    j = admin_json("GET", "/workers", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(j, "workers")), 2);
    json_decref(j);
    shm_segment_close(&sc.seg);
}

/* ---- admin channel ------------------------------------------------------------ */

static int unix_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* True when the peer closed fd within timeout_ms. */
static bool closed_by_peer(int fd, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - h_now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return false;
        char buf[256];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
    }
}

static void test_channel_closes_bad_frames_and_keeps_serving(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp_with_workers(&cfg, 1, &cp, &sc, NULL);
    struct stat st;
    assert_int_equal(stat(cfg.admin_socket, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* Garbage: a well-formed length, bytes that are no AdminMessage. */
    int fd = unix_connect(cfg.admin_socket);
    const uint8_t garbage[] = {0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(write(fd, garbage, sizeof(garbage)), sizeof(garbage));
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* Oversized: a 16 MiB length prefix is refused before any payload. */
    fd = unix_connect(cfg.admin_socket);
    const uint8_t huge[] = {0x01, 0, 0, 0, 1, 2, 3};
    assert_int_equal(write(fd, huge, sizeof(huge)), sizeof(huge));
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* An empty frame is a message with no body: unknown, closed. */
    fd = unix_connect(cfg.admin_socket);
    const uint8_t empty[] = {0, 0, 0, 0};
    assert_int_equal(write(fd, empty, sizeof(empty)), sizeof(empty));
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* Still serving: the REST API answers and a real client connects. */
    assert_int_equal(admin_status("GET", "/status", NULL), 200);
    assert_true(h_proc_is_running(cp));
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    struct h_holder h;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation};
    h_holder_start(&h, &hs);
    json_t *j = admin_json("GET", "/status", NULL, 200);
    json_t *d = json_array_get(json_object_get(j, "dataplanes"), 0);
    assert_true(json_is_true(json_object_get(d, "admin_channel")));
    json_decref(j);
    h_holder_finish(&h);
    shm_segment_close(&sc.seg);
}

struct channel_cond {
    pid_t pid;
    bool connected;
};

static bool channel_state_is(void *arg)
{
    struct channel_cond *c = arg;
    struct h_resp resp;
    if (admin("GET", "/status", NULL, &resp) != 200) {
        h_resp_fini(&resp);
        return false;
    }
    json_t *j = h_resp_json(&resp);
    h_resp_fini(&resp);
    bool ok = false;
    json_t *dps = json_object_get(j, "dataplanes");
    for (size_t i = 0; i < json_array_size(dps); i++) {
        json_t *d = json_array_get(dps, i);
        if (json_integer_value(json_object_get(d, "pid")) == c->pid)
            ok = json_is_true(json_object_get(d, "admin_channel")) == c->connected;
    }
    json_decref(j);
    return ok;
}

static void test_channel_reconnects_after_controlplane_restart(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 1, &cp, &sc, &w);
    struct h_holder h;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 1};
    h_holder_start(&h, &hs);
    assert_int_equal(h_proc_signal(cp, SIGKILL), 0);
    assert_int_equal(h_proc_wait(cp, 5000, NULL), 0);
    start_cp(&cfg, &cp, NULL);
    struct channel_cond cc = {.pid = h.pid, .connected = true};
    assert_int_equal(h_wait_until(channel_state_is, &cc, 5000), 0);
    assert_int_equal(load_of(&sc.seg, "w1"), 1);
    h_holder_finish(&h);
    shm_segment_close(&sc.seg);
}

struct reaped_cond {
    struct shm_segment *seg;
    uint32_t lease;
};

static bool lease_reaped(void *arg)
{
    struct reaped_cond *c = arg;
    return !shm_lease_is_active(c->seg, c->lease);
}

/* Connection lost + stale heartbeat reaps well before the 5 s heartbeat timeout. */
static void test_channel_loss_with_stale_heartbeat_reaps(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 1, &cp, &sc, &w);
    struct h_holder h;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 4};
    h_holder_start(&h, &hs);
    assert_int_equal(load_of(&sc.seg, "w1"), 4);
    int64_t t0 = h_now_ms();
    h_holder_command(&h, 'x'); /* drop the channel, stop beating, keep the lock */
    struct reaped_cond rc = {.seg = &sc.seg, .lease = h.lease};
    assert_int_equal(h_wait_until(lease_reaped, &rc, 4000), 0);
    int64_t took = h_now_ms() - t0;
    print_message("reaped %lld ms after the channel was lost\n", (long long)took);
    assert_true(took < SHM_HEARTBEAT_TIMEOUT_MS);
    assert_int_equal(load_of(&sc.seg, "w1"), 0);
    h_holder_kill(&h);
    shm_segment_close(&sc.seg);
}

/* ---- reset_load ----------------------------------------------------------------- */

static void test_reset_load_discards_drift_when_all_report_zero(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 1, &cp, &sc, &w);
    /* Drift: 4 counted in the segment, 0 really in flight. */
    struct h_holder h;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 4,
                               .answer = 0,
                               .leak = true};
    h_holder_start(&h, &hs);
    assert_int_equal(load_of(&sc.seg, "w1"), 4);
    json_t *j = admin_json("POST", "/workers/w1/reset_load", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(j, "discarded")), 4);
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)h.pid);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "inflight_by_dataplane"), pid)), 0);
    json_decref(j);
    assert_int_equal(load_of(&sc.seg, "w1"), 0);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining); /* restored */

    /* A worker that was draining stays draining. */
    assert_int_equal(admin_status("POST", "/workers/w1/drain", "{\"draining\": true}"), 200);
    assert_int_equal(admin_status("POST", "/workers/w1/reset_load", NULL), 200);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_true(w.draining);
    h_holder_finish(&h);
    assert_int_equal(shm_load_underflows(&sc.seg), 0);
    expect_error("POST", "/workers/nope/reset_load", NULL, 404);
    shm_segment_close(&sc.seg);
}

struct drain_cond {
    struct shm_segment *seg;
    const char *id;
    bool draining;
};

static bool draining_is(void *arg)
{
    struct drain_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(c->seg, c->id, &w) == 0 && w.draining == c->draining;
}

static void test_reset_load_refuses_when_work_in_flight(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 1, &cp, &sc, &w);
    struct h_holder busy, quiet;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 3,
                               .answer = 3};
    h_holder_start(&busy, &hs);
    hs.guards = 2;
    hs.answer = 0;
    h_holder_start(&quiet, &hs);
    assert_int_equal(load_of(&sc.seg, "w1"), 5);

    json_t *j = admin_json("POST", "/workers/w1/reset_load", NULL, 409);
    assert_true(json_is_string(json_object_get(j, "error")));
    json_t *by = json_object_get(j, "inflight_by_dataplane");
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)busy.pid);
    assert_int_equal(json_integer_value(json_object_get(by, pid)), 3);
    snprintf(pid, sizeof(pid), "%d", (int)quiet.pid);
    assert_int_equal(json_integer_value(json_object_get(by, pid)), 0);
    json_decref(j);
    assert_int_equal(load_of(&sc.seg, "w1"), 5); /* nothing changed */
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining);
    h_holder_finish(&busy);

    /* A live dataplane that is not on the channel cannot confirm: refused. */
    struct h_holder silent;
    hs.socket = NULL;
    hs.guards = 1;
    h_holder_start(&silent, &hs);
    j = admin_json("POST", "/workers/w1/reset_load", NULL, 409);
    snprintf(pid, sizeof(pid), "%d", (int)silent.pid);
    assert_true(json_is_null(json_object_get(json_object_get(j, "inflight_by_dataplane"), pid)));
    json_decref(j);
    assert_int_equal(load_of(&sc.seg, "w1"), 3);
    h_holder_finish(&silent);

    /* One that is connected but does not answer: refused after the timeout. */
    struct h_holder stuck;
    hs.socket = cfg.admin_socket;
    h_holder_start(&stuck, &hs);
    kill(stuck.pid, SIGSTOP);
    int64_t t0 = h_now_ms();
    char url[128];
    snprintf(url, sizeof(url), "%s/workers/w1/reset_load", g_admin);
    struct h_async_opts ao = {.method = "POST"};
    struct h_async *first;
    assert_int_equal(h_async_start(url, "", &ao, &first), 0);
    /* While it waits (the worker is draining meanwhile), a second one is refused. */
    struct drain_cond dc = {.seg = &sc.seg, .id = "w1", .draining = true};
    assert_int_equal(h_wait_until(draining_is, &dc, 2000), 0);
    expect_error("POST", "/workers/w1/reset_load", NULL, 409);
    assert_int_equal(h_async_wait(first, 10000), 0);
    int64_t took = h_now_ms() - t0;
    struct h_resp resp;
    assert_int_equal(h_async_take_resp(first, &resp), 0);
    assert_int_equal(resp.status, 409);
    h_resp_fini(&resp);
    h_async_destroy(first);
    assert_true(took >= 1500 && took < 5000);
    assert_int_equal(load_of(&sc.seg, "w1"), 3);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining);
    kill(stuck.pid, SIGCONT);
    h_holder_finish(&stuck);
    h_holder_finish(&quiet);
    assert_int_equal(load_of(&sc.seg, "w1"), 0);
    shm_segment_close(&sc.seg);
}

/*
 * A control plane killed mid-reset leaves the worker drained by the reset;
 * its successor ends that drain when it attaches (the reset had changed no
 * load), and leaves an operator's drain alone.
 */
static void test_reset_drain_ends_when_controlplane_dies_mid_reset(void **state)
{
    (void)state;
    struct h_config cfg;
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    struct shm_worker_info w;
    start_cp_with_workers(&cfg, 2, &cp, &sc, &w);
    struct h_holder stuck;
    struct h_holder_spec hs = {.shm = cfg.shm_name,
                               .socket = cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation,
                               .guards = 2,
                               .answer = 0};
    h_holder_start(&stuck, &hs);
    assert_int_equal(admin_status("POST", "/workers/w2/drain", "{\"draining\": true}"), 200);
    kill(stuck.pid, SIGSTOP); /* the reset waits for its answer */
    char url[128];
    snprintf(url, sizeof(url), "%s/workers/w1/reset_load", g_admin);
    struct h_async_opts ao = {.method = "POST"};
    struct h_async *reset;
    assert_int_equal(h_async_start(url, "", &ao, &reset), 0);
    struct drain_cond dc = {.seg = &sc.seg, .id = "w1", .draining = true};
    assert_int_equal(h_wait_until(draining_is, &dc, 2000), 0);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_true(w.resetting);
    assert_int_equal(h_proc_signal(cp, SIGKILL), 0);
    assert_int_equal(h_proc_wait(cp, 5000, NULL), 0);
    (void)h_async_wait(reset, 5000); /* its connection died with the process */
    h_async_destroy(reset);
    start_cp(&cfg, &cp, NULL);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining);
    assert_false(w.resetting);
    assert_int_equal(load_of(&sc.seg, "w1"), 2); /* nothing was reset */
    assert_int_equal(shm_registry_find(&sc.seg, "w2", &w), 0);
    assert_true(w.draining); /* the operator's drain stays */
    kill(stuck.pid, SIGCONT);
    h_holder_finish(&stuck);
    shm_segment_close(&sc.seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_health_never_touches_load),
        H_TEST(test_stalled_probe_does_not_delay_others),
        H_TEST(test_model_learned_from_v1_models),
        H_TEST(test_admin_worker_routes),
        H_TEST(test_delete_then_reuse_slot_keeps_generations_apart),
        H_TEST(test_admin_token_required),
        H_TEST(test_admin_status_and_inflight_by_dataplane),
        H_TEST(test_api_workers_survive_controlplane_sigkill),
        H_TEST(test_channel_closes_bad_frames_and_keeps_serving),
        H_TEST(test_channel_reconnects_after_controlplane_restart),
        H_TEST(test_channel_loss_with_stale_heartbeat_reaps),
        H_TEST(test_reset_load_discards_drift_when_all_report_zero),
        H_TEST(test_reset_load_refuses_when_work_in_flight),
        H_TEST(test_reset_drain_ends_when_controlplane_dies_mid_reset),
    };
    return cmocka_run_group_tests_name("controlplane", tests, NULL, NULL);
}
