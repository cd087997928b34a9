/*
 * End-to-end tests of the dataplane's hot restart (`--hot-restart`, issue
 * #8): under continuous load (64 concurrent clients on keep-alive
 * connections, streaming and not, against mock workers with realistic
 * latency) five consecutive hot restarts fail or truncate no request, keep
 * the registry (API-added worker included) exactly as it was, leave every
 * load at 0, and leave no old process or lease behind; a stream that
 * outlives drain_timeout ends with an SSE error event and its load
 * released; a hot restart with a broken config is refused while the old
 * process serves on without a failed request; a second hot restart while
 * one is in progress is refused; with the old process gone the new one
 * binds by itself; a draining process closes idle keep-alive connections
 * long before it exits; and a second SIGTERM under load (the drain's stop
 * path at its harshest) exits cleanly.
 *
 * The load runs in one background thread driving a curl multi handle (64
 * transfers, each restarted as soon as it ends), so 64 clients cost one
 * thread on these 2-core machines; it only counts and records, and the
 * test's main thread asserts.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
/* This test forges and inspects the segment's bytes. */
#include "shm/layout_private.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_load.h"

#define N_CLIENTS  64
#define N_RESTARTS 5
#define WAIT_MS    20000

/* Mock workers with a realistic shape: a few ms of prefill, 2 ms per token. */
static const char *const MOCK_ARGS[] = {
    "--prefill-base-us", "3000", "--prefill-us-per-token", "20", "--tpot-ms", "2", NULL};

/* ---- the load: 64 clients, half of them streaming (harness_load.h) -------------- */

static struct h_load *load_start(const struct h_fleet *f)
{
    struct h_load *l = NULL;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f->base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = N_CLIENTS,
                                                        .stream_percent = 50,
                                                        .max_tokens = 16,
                                                        .request_timeout_ms = 15000,
                                                        .seed = 8},
                                  &l),
                     0);
    return l;
}

/* Requests that did not get a whole answer (aborts are not used here). */
static long load_failed(const struct h_load_result *r)
{
    return r->http_error + r->truncated + r->transport;
}

struct ok_cond {
    struct h_load *l;
    long want;
};

static bool load_ok_reached(void *arg)
{
    struct ok_cond *c = arg;
    struct h_load_result r;
    h_load_peek(c->l, &r);
    return r.ok >= c->want;
}

/* Waits until `more` further requests succeeded. */
static void load_wait_more(struct h_load *l, long more)
{
    struct h_load_result r;
    h_load_peek(l, &r);
    struct ok_cond c = {.l = l, .want = r.ok + more};
    assert_int_equal(h_wait_until(load_ok_reached, &c, WAIT_MS), 0);
}

/* Stops the clients (each finishes its request); the final counts in *r
 * (may be NULL), the first failure printed for the test's message. */
static void load_stop(struct h_load *l, struct h_load_result *r)
{
    struct h_load_result mine;
    h_load_stop(l, false, &mine);
    if (mine.first_failure[0] != '\0')
        fprintf(stderr, "load: first failure: %s\n", mine.first_failure);
    if (r != NULL)
        *r = mine;
}

/* ---- processes and the segment --------------------------------------------------- */

static struct h_proc *start_hot_restart(const char *config_path)
{
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-dataplane", bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", config_path, "--hot-restart", NULL};
    struct h_proc *p = NULL;
    assert_int_equal(h_spawn("dataplane", argv, &p), 0);
    return p;
}

/* Waits for p, which the test expects to exit by itself, and returns its status. */
static int wait_exit(struct h_proc *p, int timeout_ms)
{
    p->expected = true;
    int st = 0;
    assert_int_equal(h_proc_wait(p, timeout_ms, &st), 0);
    return st;
}

static bool log_has(const struct h_proc *p, const char *needle)
{
    FILE *f = fopen(p->log_path, "r");
    if (f == NULL)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

struct log_cond {
    const struct h_proc *p;
    const char *needle;
};

static bool log_cond(void *arg)
{
    struct log_cond *c = arg;
    return log_has(c->p, c->needle);
}

static unsigned active_leases(const struct h_fleet *f)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < f->seg.max_dataplanes; i++)
        n += shm_lease_is_active(&f->seg, i) ? 1u : 0u;
    return n;
}

static bool one_lease(void *arg)
{
    return active_leases(arg) == 1;
}

static long long load_of(struct h_fleet *f, const char *id)
{
    struct shm_worker_info w;
    if (shm_registry_find(&f->seg, id, &w) != 0)
        return -1;
    return (long long)shm_load_of(&f->seg, w.slot, w.generation);
}

struct idle_cond {
    struct h_fleet *f;
    const char *const *ids;
    const char *const *urls;
    size_t n;
};

/* Every worker's load is 0 and no mock has a request in flight. */
static bool all_idle(void *arg)
{
    struct idle_cond *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        long long inflight = -1;
        if (load_of(c->f, c->ids[i]) != 0 ||
            h_mock_stat_int(c->urls[i], "inflight", &inflight) != 0 || inflight != 0)
            return false;
    }
    return true;
}

static size_t registry_snapshot(struct h_fleet *f, struct shm_worker_info *w, size_t cap)
{
    size_t n = shm_registry_snapshot(&f->seg, w, cap);
    assert_true(n <= cap);
    return n;
}

struct find_cond {
    struct h_fleet *f;
    const char *id;
};

static bool worker_known(void *arg)
{
    struct find_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(&c->f->seg, c->id, &w) == 0;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_five_hot_restarts_under_load(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .mock_args = MOCK_ARGS,
                                             .policy = "least_load",
                                             .dataplane_extra = "drain_timeout: 20s"});
    /* A third worker added through the admin API must survive too. */
    struct h_mock m3;
    assert_int_equal(h_mock_start(&m3, "--model", H_FLEET_MODEL, "--seed", "7", "--prefill-base-us",
                                  "3000", "--tpot-ms", "2", NULL),
                     0);
    char admin[96], body[256];
    assert_int_equal(h_url(admin, sizeof(admin), f.cfg.admin_port, "/workers"), 0);
    snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"w3\",\"model\":\"%s\"}", m3.url,
             H_FLEET_MODEL);
    struct h_resp r;
    assert_int_equal(h_http_post_json(admin, body, &r), 0);
    assert_int_equal(r.status, 201);
    h_resp_fini(&r);
    struct find_cond fc = {.f = &f, .id = "w3"};
    assert_int_equal(h_wait_until(worker_known, &fc, WAIT_MS), 0);
    struct shm_worker_info before[8], after[8];
    size_t n_before = registry_snapshot(&f, before, 8);
    assert_int_equal(n_before, 3);

    struct h_load *l = load_start(&f);
    load_wait_more(l, 200);
    struct h_proc *old = f.dp;
    for (int i = 0; i < N_RESTARTS; i++) {
        struct h_proc *next = start_hot_restart(f.cfg.path);
        /* The old one drains and exits by itself, cleanly. */
        int st = wait_exit(old, WAIT_MS);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        assert_true(h_proc_is_running(next));
        assert_true(log_has(next, "hot restart: received"));
        /* The new one really serves the load before the next restart. */
        load_wait_more(l, 150);
        old = next;
    }
    f.dp = old;
    load_wait_more(l, 150);
    struct h_load_result lr;
    load_stop(l, &lr);
    long ok = lr.ok, failed = load_failed(&lr);
    fprintf(stderr, "hot restarts under load: %ld requests ok, %ld failed\n", ok, failed);
    assert_int_equal(failed, 0);
    assert_true(ok >= 200 + N_RESTARTS * 150);

    /* Registry unchanged: same workers, same slots and generations. */
    size_t n_after = registry_snapshot(&f, after, 8);
    assert_int_equal(n_after, n_before);
    for (size_t i = 0; i < n_before; i++) {
        assert_int_equal(after[i].slot, before[i].slot);
        assert_int_equal(after[i].generation, before[i].generation);
        assert_string_equal(after[i].id, before[i].id);
        assert_string_equal(after[i].url, before[i].url);
        assert_int_equal(after[i].from_api, before[i].from_api);
    }
    /* Every load back to 0, and the workers agree nothing is in flight. */
    const char *ids[] = {"w1", "w2", "w3"};
    const char *urls[] = {f.mock[0].url, f.mock[1].url, m3.url};
    struct idle_cond ic = {.f = &f, .ids = ids, .urls = urls, .n = 3};
    assert_int_equal(h_wait_until(all_idle, &ic, WAIT_MS), 0);
    /* The old processes are gone (waited above) and only one lease is held. */
    assert_int_equal(h_wait_until(one_lease, &f, WAIT_MS), 0);
    h_fleet_stop(&f);
}

static void test_stream_outliving_drain_timeout_is_cut(void **state)
{
    (void)state;
    static const char *const slow[] = {"--tpot-ms", "20", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .mock_args = slow, .dataplane_extra = "drain_timeout: 1s"});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    /* 1000 tokens at 20 ms: 20 s, far beyond drain_timeout. */
    static const char *const long_stream =
        "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":1000,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct h_async *a = NULL;
    assert_int_equal(h_async_start(url, long_stream, NULL, &a), 0);
    assert_int_equal(h_async_wait_headers(a, WAIT_MS), 0);
    const char *ids[] = {"w1"};
    const char *urls[] = {f.mock[0].url};
    assert_int_equal(load_of(&f, "w1"), 1);

    int64_t t0 = h_now_ms();
    struct h_proc *old = f.dp;
    struct h_proc *next = start_hot_restart(f.cfg.path);
    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    int64_t cut_after = h_now_ms() - t0;
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    /* The stream ends with an error event, not [DONE], once drain_timeout passed. */
    assert_null(strstr(r.body, "[DONE]"));
    const char *ev = strstr(r.body, "data: {\"error\"");
    assert_non_null(ev);
    assert_non_null(strstr(ev, "shutting_down"));
    assert_true(cut_after >= 1000);
    assert_true(cut_after < 10000);
    h_resp_fini(&r);
    h_async_destroy(a);
    /* Its load is released and the worker saw the cancel. */
    struct idle_cond ic = {.f = &f, .ids = ids, .urls = urls, .n = 1};
    assert_int_equal(h_wait_until(all_idle, &ic, WAIT_MS), 0);
    int st = wait_exit(old, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    f.dp = next;
    /* The successor serves. */
    static const char *const short_plain = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
                                           "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(h_http_post_json(url, short_plain, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    assert_int_equal(h_wait_until(one_lease, &f, WAIT_MS), 0);
    h_fleet_stop(&f);
}

static void test_broken_config_is_refused_old_keeps_serving(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2, .mock_args = MOCK_ARGS});
    struct h_load *l = load_start(&f);
    load_wait_more(l, 100);

    /* An unknown key: the new process names the file and exits 2. */
    char broken[H_PATH_MAX];
    assert_int_equal(
        h_write_file("broken.yaml", "dataplane:\n  lisen: 127.0.0.1:1\n", broken, sizeof(broken)),
        0);
    struct h_proc *bad = start_hot_restart(broken);
    int st = wait_exit(bad, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 2);
    assert_true(log_has(bad, "broken.yaml:2:3"));

    /* A layout the segment does not have: the new process attaches to a
     * segment of another layout version and gives up at once. */
    char shm_bad[H_NAME_MAX];
    assert_int_equal(h_shm_name(shm_bad, sizeof(shm_bad)), 0);
    struct shm_segment fake;
    char err[256];
    enum shm_open_outcome outcome;
    assert_int_equal(shm_segment_open_owner(&fake, shm_bad, 8, 4, &outcome, err, sizeof(err)), 0);
    fake.hdr->layout_version = SHM_LAYOUT_VERSION + 1;
    char text[1024];
    snprintf(text, sizeof(text),
             "shm:\n  name: %s\ncontrolplane:\n  admin_socket: %s\ndataplane:\n"
             "  listen: 127.0.0.1:%u\n",
             shm_bad, f.cfg.admin_socket, (unsigned)f.cfg.dataplane_port);
    char layout_cfg[H_PATH_MAX];
    assert_int_equal(h_write_file("layout.yaml", text, layout_cfg, sizeof(layout_cfg)), 0);
    struct h_proc *bad2 = start_hot_restart(layout_cfg);
    st = wait_exit(bad2, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_not_equal(WEXITSTATUS(st), 0);
    assert_true(log_has(bad2, "layout version"));
    shm_segment_close(&fake);

    /* The old one never noticed: it serves on, nothing failed. */
    load_wait_more(l, 100);
    assert_true(h_proc_is_running(f.dp));
    struct h_load_result lr;
    load_stop(l, &lr);
    long failed = load_failed(&lr);
    assert_int_equal(failed, 0);
    assert_int_equal(active_leases(&f), 1);
    h_fleet_stop(&f);
}

static void test_second_hot_restart_refused_and_crashed_predecessor(void **state)
{
    (void)state;
    static const char *const slow[] = {"--tpot-ms", "10", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .mock_args = slow, .dataplane_extra = "drain_timeout: 30s"});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    /* A stream of ~2 s keeps the old process draining. */
    static const char *const stream =
        "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":200,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct h_async *a = NULL;
    assert_int_equal(h_async_start(url, stream, NULL, &a), 0);
    assert_int_equal(h_async_wait_headers(a, WAIT_MS), 0);

    struct h_proc *old = f.dp;
    struct h_proc *next = start_hot_restart(f.cfg.path);
    struct log_cond lc = {.p = next, .needle = "hot restart: serving"};
    assert_int_equal(h_wait_until(log_cond, &lc, WAIT_MS), 0);
    assert_true(h_proc_is_running(old)); /* still draining its stream */

    /* A second one now is refused; nothing changes. */
    struct h_proc *third = start_hot_restart(f.cfg.path);
    int st = wait_exit(third, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_true(log_has(third, "in progress"));

    /* The draining stream completes untouched; then the old one exits. */
    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_fini(&r);
    h_async_destroy(a);
    st = wait_exit(old, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);

    /* The serving dataplane crashes: a hot restart then binds by itself. */
    assert_int_equal(h_proc_signal(next, SIGKILL), 0);
    wait_exit(next, WAIT_MS);
    struct h_proc *fresh = start_hot_restart(f.cfg.path);
    f.dp = fresh;
    char health[128];
    snprintf(health, sizeof(health), "%s/health", f.base);
    assert_int_equal(h_wait_http_ok(health, WAIT_MS), 0);
    assert_true(log_has(fresh, "starting normally"));
    static const char *const plain = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
                                     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(h_http_post_json(url, plain, &r), 0);
    assert_int_equal(r.status, 200);
    h_resp_fini(&r);
    /* The crashed one's lease is reaped; only the fresh one holds one. */
    assert_int_equal(h_wait_until(one_lease, &f, WAIT_MS), 0);
    h_fleet_stop(&f);
}

/* A raw keep-alive connection to the dataplane that answered one GET. */
static int idle_connection(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    static const char req[] = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    char buf[4096];
    size_t len = 0;
    /* /health is small: read until the headers and their Content-Length body are in. */
    for (;;) {
        assert_true(h_fd_read_more(fd, buf, sizeof(buf), &len, WAIT_MS) > 0);
        const char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "content-length:");
        if (end != NULL && cl != NULL &&
            len - (size_t)(end + 4 - buf) >= strtoul(cl + 15, NULL, 10))
            break;
    }
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_null(strcasestr(buf, "connection: close"));
    return fd;
}

/* Draining, the old process closes idle keep-alive connections itself
 * (its clients reconnect to the new one) long before it exits. */
static void test_drain_closes_idle_keepalive_connections(void **state)
{
    (void)state;
    static const char *const slow[] = {"--tpot-ms", "10", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .mock_args = slow, .dataplane_extra = "drain_timeout: 30s"});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    /* A stream of ~5 s keeps the old process draining meanwhile. */
    static const char *const stream =
        "{\"model\":\"" H_FLEET_MODEL "\",\"stream\":true,\"max_tokens\":500,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct h_async *a = NULL;
    assert_int_equal(h_async_start(url, stream, NULL, &a), 0);
    assert_int_equal(h_async_wait_headers(a, WAIT_MS), 0);
    int idle = idle_connection(f.cfg.dataplane_port);

    struct h_proc *old = f.dp;
    int64_t t0 = h_now_ms();
    f.dp = start_hot_restart(f.cfg.path);
    struct pollfd pfd = {.fd = idle, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
    char c;
    assert_int_equal(read(idle, &c, 1), 0); /* a clean FIN, no stray bytes */
    int64_t closed_after = h_now_ms() - t0;
    assert_true(h_proc_is_running(old)); /* closed by the drain, not by the exit */
    close(idle);
    assert_true(closed_after < 4000);

    assert_int_equal(h_async_wait(a, WAIT_MS), 0);
    struct h_resp r;
    assert_int_equal(h_async_take_resp(a, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_fini(&r);
    h_async_destroy(a);
    int st = wait_exit(old, WAIT_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    h_fleet_stop(&f);
}

/* Every drain ends in the loops' stop path, which must not leave a
 * connection suspended when MHD stops (MHD aborts the process then). The
 * harshest way in: a second SIGTERM (stop now) while the first one's drain
 * still serves requests arriving on the 64 clients' keep-alive
 * connections. The dataplane must exit 0, not die of SIGABRT, and leave no
 * load behind. The bug this guards against is a race (a request arriving
 * in the few MHD passes of the stop), so the test runs STOP_ROUNDS rounds;
 * before the fix about one round in three hit it. */
#define STOP_ROUNDS 4
static void test_second_sigterm_under_load_exits_cleanly(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2, .mock_args = MOCK_ARGS});
    char health[128];
    snprintf(health, sizeof(health), "%s/health", f.base);
    for (int round = 0; round < STOP_ROUNDS; round++) {
        if (round > 0) {
            assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
            assert_int_equal(h_wait_http_ok(health, WAIT_MS), 0);
        }
        struct h_load *l = load_start(&f);
        load_wait_more(l, 100);
        assert_int_equal(h_proc_signal(f.dp, SIGTERM), 0);
        struct log_cond lc = {.p = f.dp, .needle = "draining"};
        assert_int_equal(h_wait_until(log_cond, &lc, WAIT_MS), 0);
        assert_int_equal(h_proc_signal(f.dp, SIGTERM), 0);
        int st = wait_exit(f.dp, WAIT_MS);
        load_stop(l, NULL);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    const char *ids[] = {"w1", "w2"};
    const char *urls[] = {f.mock[0].url, f.mock[1].url};
    struct idle_cond ic = {.f = &f, .ids = ids, .urls = urls, .n = 2};
    assert_int_equal(h_wait_until(all_idle, &ic, WAIT_MS), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_five_hot_restarts_under_load),
        H_TEST(test_stream_outliving_drain_timeout_is_cut),
        H_TEST(test_broken_config_is_refused_old_keeps_serving),
        H_TEST(test_second_hot_restart_refused_and_crashed_predecessor),
        H_TEST(test_drain_closes_idle_keepalive_connections),
        H_TEST(test_second_sigterm_under_load_exits_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
