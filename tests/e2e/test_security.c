/*
 * End-to-end tests of the attacks docs/security.md lists, each against the
 * real daemons: every one reproduces what a hostile local user or client
 * did and asserts that the daemons now refuse it.
 *
 * Header injection: libmicrohttpd accepts malformed headers (a bare CR in
 * a value, white space before the colon); the data plane must answer 400
 * to them, never forward them, and must strip the headers that the
 * client's Connection header names. Sent over a raw socket, since curl
 * would not send such bytes.
 *
 * Segment squatting: another user creates the segment's name in /dev/shm
 * before the router starts, as a valid, published segment (made with our
 * own shm code, as that user) opened to everyone. A router that adopted it
 * would route by URLs that user can rewrite. The tests run as root, so the
 * squatter is a forked child that drops to uid/gid 65534 (nobody).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"
#include "dataplane/lifecycle/hot_restart.h"
#include "proto/frame.h"
#include "shm/lease.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_raw.h"

#define NOBODY 65534

/* Creates a published segment `name` as uid/gid `uid`, with `mode`. 0 or -1. */
static int squat_segment(const char *name, uid_t uid, mode_t mode)
{
    pid_t child = fork();
    if (child < 0)
        return -1;
    if (child == 0) {
        if (uid != geteuid() && (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0))
            _exit(10);
        struct shm_segment seg;
        enum shm_open_outcome outcome;
        char err[256];
        if (shm_segment_open_owner(&seg, name, 1024, 8, &outcome, err, sizeof(err)) != 0)
            _exit(11);
        char path[128];
        snprintf(path, sizeof(path), "/dev/shm%s", name);
        if (chmod(path, mode) != 0)
            _exit(12);
        _exit(0); /* exiting drops the owner lock, as a dead control plane would */
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return 0;
}

static void write_config(struct h_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    assert_int_equal(h_config_add_worker(cfg, "http://127.0.0.1:9", "w1", "mock", NULL), 0);
    assert_int_equal(h_config_write(cfg, NULL), 0);
}

/* The daemon started by start() must exit non-zero, naming the owner. */
static void assert_refuses(int (*start)(const char *, struct h_proc **), const char *config,
                           const char *want)
{
    struct h_proc *p = NULL;
    assert_int_equal(start(config, &p), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(p, 10000, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
    if (!h_proc_log_contains(p, want)) {
        h_proc_print_log(p, 20);
        fail_msg("log of %s lacks \"%s\"", p->name, want);
    }
}

static void test_segment_of_another_user_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* becoming another user takes root; CI runs as root */
    struct h_config cfg;
    write_config(&cfg);
    assert_int_equal(squat_segment(cfg.shm_name, NOBODY, 0666), 0);
    assert_refuses(h_start_controlplane, cfg.path, "is owned by uid 65534 with mode 0666");
    assert_refuses(h_start_dataplane, cfg.path, "is owned by uid 65534 with mode 0666");

    /* Owned by another user even with a private mode: still not ours. */
    struct h_config cfg2;
    write_config(&cfg2);
    assert_int_equal(squat_segment(cfg2.shm_name, NOBODY, 0600), 0);
    assert_refuses(h_start_controlplane, cfg2.path, "is owned by uid 65534 with mode 0600");
}

static void test_segment_open_to_others_is_refused(void **state)
{
    (void)state;
    /* Our own uid, but group and other may write it: anyone could have
     * rewritten it, so it is refused as well. */
    struct h_config cfg;
    write_config(&cfg);
    assert_int_equal(squat_segment(cfg.shm_name, geteuid(), 0666), 0);
    char want[96];
    snprintf(want, sizeof(want), "is owned by uid %u with mode 0666", (unsigned)geteuid());
    assert_refuses(h_start_controlplane, cfg.path, want);
    assert_refuses(h_start_dataplane, cfg.path, want);
}

/* Sends raw request bytes to the fleet's data plane; returns the response
 * as read until the peer closes or the headers and a short body are in. */
static void raw_exchange(struct h_fleet *f, const char *head, char *out, size_t cap)
{
    static const char body[] = "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
                               "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     head, sizeof(body) - 1, body);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    int fd = h_raw_connect(f->cfg.dataplane_port);
    assert_int_equal(write(fd, req, (size_t)n), n);
    out[0] = '\0';
    size_t len = 0;
    while (h_fd_read_more(fd, out, cap, &len, H_READY_TIMEOUT_MS) > 0)
        ;
    close(fd);
}

static void test_malformed_headers_are_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    static const char *const heads[] = {
        "X-A: foo\rX-Injected: 1\r\n",     /* bare CR: a second header upstream */
        "Transfer-Encoding : chunked\r\n", /* white space before the colon */
        "Content-Length\t: 5\r\n",
        "Host : evil\r\n",
        "X-B: a\x01b\r\n", /* a control byte */
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        char resp[8192];
        raw_exchange(&f, heads[i], resp, sizeof(resp));
        if (strncmp(resp, "HTTP/1.1 400", 12) != 0 && strncmp(resp, "HTTP/1.0 400", 12) != 0)
            fail_msg("case %zu: expected 400, got: %.200s", i, resp);
    }
    /* None of them reached the worker. */
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);

    /* A clean request still goes through on the same router. */
    char resp[8192];
    raw_exchange(&f, "X-Fine: yes\r\n", resp, sizeof(resp));
    assert_int_equal(strncmp(resp, "HTTP/1.1 200", 12), 0);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 1);
    h_fleet_stop(&f);
}

static void test_connection_named_headers_are_stripped(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char resp[8192];
    raw_exchange(&f, "Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nX-Kept: 2\r\n", resp,
                 sizeof(resp));
    assert_int_equal(strncmp(resp, "HTTP/1.1 200", 12), 0);
    json_t *stats = h_mock_stats(f.mock[0].url);
    assert_non_null(stats);
    json_t *hdrs = json_object_get(stats, "last_request_headers");
    assert_true(json_is_object(hdrs));
    assert_null(json_object_get(hdrs, "x-secret"));
    assert_non_null(json_object_get(hdrs, "x-kept"));
    json_decref(stats);
    h_fleet_stop(&f);
}

static bool dataplane_exited(void *arg)
{
    struct h_fleet *f = arg;
    return !h_proc_is_running(f->dp);
}

/*
 * A control plane at a low descriptor limit with the admin port held by
 * idle clients: it must keep judging the data plane's lease alive (a /proc
 * read that fails with EMFILE proves nothing) and cap its admin
 * connections, so the data plane keeps serving.
 */
static void test_descriptor_exhaustion_does_not_reap_a_live_dataplane(void **state)
{
    (void)state;
    enum { IDLE = 60 };
    struct h_fleet f;
    memset(&f, 0, sizeof(f));
    f.n = 1;
    assert_int_equal(h_mock_start(&f.mock[0], "--model", H_FLEET_MODEL, NULL), 0);
    assert_int_equal(h_config_add_worker(&f.cfg, f.mock[0].url, "w1", H_FLEET_MODEL, NULL), 0);
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-controlplane", bin, sizeof(bin)), 0);
    /* Soft and hard limit: the daemon cannot raise itself out of it. */
    const char *argv[] = {"/usr/bin/prlimit", "--nofile=40:40", bin, "--config", f.cfg.path, NULL};
    assert_int_equal(h_spawn("controlplane", argv, &f.cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, &f, H_READY_TIMEOUT_MS), 0);
    f.attached = true;
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    assert_int_equal(h_url(f.base, sizeof(f.base), f.cfg.dataplane_port, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/health", f.base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);

    int fds[IDLE];
    for (int i = 0; i < IDLE; i++)
        fds[i] = h_raw_connect(f.cfg.admin_port);
    /* The control plane judges leases every 100 ms; the reviewer saw the
     * lease reaped and the data plane gone within 3 s. */
    int waited = h_wait_until(dataplane_exited, &f, 4000);
    for (int i = 0; i < IDLE; i++)
        close(fds[i]);
    assert_int_equal(waited, -ETIMEDOUT);
    assert_true(h_proc_is_running(f.cp));

    struct h_resp resp = {0};
    char chat[128];
    snprintf(chat, sizeof(chat), "%s/v1/chat/completions", f.base);
    assert_int_equal(h_http_post_json(chat,
                                      "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":2,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                                      &resp),
                     0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    h_fleet_stop(&f);
}

/* h_wait_until condition: worker w1's healthy (or draining) flag is want. */
struct w1_cond {
    struct h_fleet *f;
    bool draining; /* which flag: draining, else healthy */
    bool want;
};

static bool w1_flag_is(void *arg)
{
    struct w1_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(&c->f->seg, "w1", &w) == 0 &&
           (c->draining ? w.draining : w.healthy) == c->want;
}

/*
 * The control plane runs with http_proxy pointing at a port where nothing
 * listens. Probes must still reach the worker directly, as the data
 * plane's requests do: a worker that failed and recovered turns healthy
 * again. A prober that honoured the variable would never see it recover.
 */
static void test_probes_ignore_proxy_variables(void **state)
{
    (void)state;
    uint16_t dead = 0;
    assert_int_equal(h_free_port(&dead), 0);
    char proxy[64];
    snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%u", (unsigned)dead);
    setenv("http_proxy", proxy, 1);
    setenv("HTTP_PROXY", proxy, 1);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .health_interval = "100ms"});
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");

    struct w1_cond c = {.f = &f, .want = false};
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"health_status\":503}"), 0);
    assert_int_equal(h_wait_until(w1_flag_is, &c, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"health_status\":200}"), 0);
    c.want = true;
    assert_int_equal(h_wait_until(w1_flag_is, &c, H_READY_TIMEOUT_MS), 0);
    h_fleet_stop(&f);
}

static bool log_has_insecure_warning(void *arg)
{
    return h_proc_log_contains(arg, "without a token (admin_insecure: true)");
}

static bool log_has_token_line(void *arg)
{
    return h_proc_log_contains(arg, "(bearer token required)");
}

/* A control-plane config with admin_listen on `listen_host` and the lines
 * in extra under controlplane:. Returns its path in path. */
static void write_admin_config(const char *listen_host, const char *extra, char *path, size_t len)
{
    char shm[H_NAME_MAX], sock[H_PATH_MAX];
    uint16_t admin = 0, dp = 0;
    assert_int_equal(h_shm_name(shm, sizeof(shm)), 0);
    assert_int_equal(h_tmp_path("admin.sock", sock, sizeof(sock)), 0);
    assert_int_equal(h_free_port(&admin), 0);
    assert_int_equal(h_free_port(&dp), 0);
    char text[2048];
    snprintf(text, sizeof(text),
             "shm:\n  name: %s\ncontrolplane:\n  admin_listen: \"%s:%u\"\n  admin_socket: %s\n%s"
             "dataplane:\n  listen: 127.0.0.1:%u\nworkers:\n  - url: http://127.0.0.1:9\n"
             "    model: m\n",
             shm, listen_host, (unsigned)admin, sock, extra, (unsigned)dp);
    assert_int_equal(h_write_file("admin.yaml", text, path, len), 0);
}

static void test_admin_api_without_token_stays_on_loopback(void **state)
{
    (void)state;
    char path[H_PATH_MAX];
    write_admin_config("0.0.0.0", "", path, sizeof(path));
    assert_refuses(h_start_controlplane, path,
                   "is not a loopback address and admin_token_file "
                   "is empty");

    /* The operator may insist; then it starts and says so. */
    write_admin_config("0.0.0.0", "  admin_insecure: true\n", path, sizeof(path));
    struct h_proc *cp = NULL;
    assert_int_equal(h_start_controlplane(path, &cp), 0);
    assert_int_equal(h_wait_until(log_has_insecure_warning, cp, H_READY_TIMEOUT_MS), 0);
    assert_true(h_proc_is_running(cp));
    assert_int_equal(h_proc_stop(cp, H_STOP_TIMEOUT_MS), 0);
}

static void test_token_file_open_to_others_is_refused(void **state)
{
    (void)state;
    char token[H_PATH_MAX], extra[H_PATH_MAX + 64], path[H_PATH_MAX];
    assert_int_equal(h_write_file("token", "s3cret\n", token, sizeof(token)), 0);
    snprintf(extra, sizeof(extra), "  admin_token_file: \"%s\"\n", token);

    assert_int_equal(chmod(token, 0644), 0);
    write_admin_config("127.0.0.1", extra, path, sizeof(path));
    assert_refuses(h_start_controlplane, path, "is open to other users (mode 0644");

    /* Group-readable is refused too when the group is not ours. */
    if (geteuid() == 0) {
        assert_int_equal(chown(token, 0, NOBODY), 0);
        assert_int_equal(chmod(token, 0640), 0);
        write_admin_config("127.0.0.1", extra, path, sizeof(path));
        assert_refuses(h_start_controlplane, path, "is open to other users (mode 0640");
    }

    /* Private to us: it starts. */
    assert_int_equal(chown(token, geteuid(), getegid()), 0);
    assert_int_equal(chmod(token, 0600), 0);
    write_admin_config("127.0.0.1", extra, path, sizeof(path));
    struct h_proc *cp = NULL;
    assert_int_equal(h_start_controlplane(path, &cp), 0);
    assert_int_equal(h_wait_until(log_has_token_line, cp, H_READY_TIMEOUT_MS), 0);
    assert_true(h_proc_is_running(cp));
    assert_int_equal(h_proc_stop(cp, H_STOP_TIMEOUT_MS), 0);
}

static bool log_has_refused_impostor(void *arg)
{
    return h_proc_log_contains(arg, "hello refused: peer pid");
}

/* GET /status's dataplanes[0].admin_channel (-1 when unreadable). */
static int admin_channel_connected(const struct h_fleet *f)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/status", (unsigned)f->cfg.admin_port);
    struct h_resp resp = {0};
    if (h_http_get(url, &resp) != 0 || resp.status != 200) {
        h_resp_fini(&resp);
        return -1;
    }
    json_t *j = h_resp_json(&resp);
    json_t *dp = json_array_get(json_object_get(j, "dataplanes"), 0);
    json_t *ch = json_object_get(dp, "admin_channel");
    int v = json_is_boolean(ch) ? json_is_true(ch) : -1;
    json_decref(j);
    h_resp_fini(&resp);
    return v;
}

static bool channel_connected(void *arg)
{
    return admin_channel_connected(arg) == 1;
}

/*
 * A same-uid process replays the data plane's lease index and nonce (both
 * shown by GET /status) in a Hello of its own. The control plane must
 * refuse it by the peer's credentials and keep the real data plane's
 * connection; before, the impostor replaced it.
 */
static void test_admin_channel_impostor_is_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_wait_until(channel_connected, &f, H_READY_TIMEOUT_MS), 0);
    struct shm_lease_info lease = {0};
    for (uint32_t i = 0; i < f.seg.max_dataplanes && !lease.active; i++)
        shm_lease_snapshot(&f.seg, i, &lease);
    assert_true(lease.active);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(f.cfg.admin_socket) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, f.cfg.admin_socket, strlen(f.cfg.admin_socket) + 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    Switchyard__Admin__Hello hello = SWITCHYARD__ADMIN__HELLO__INIT;
    hello.protocol_version = ADMIN_PROTOCOL_VERSION;
    hello.lease_index = lease.index;
    hello.lease_nonce = lease.nonce;
    hello.pid = lease.pid;
    Switchyard__Admin__AdminMessage m = SWITCHYARD__ADMIN__ADMIN_MESSAGE__INIT;
    m.body_case = SWITCHYARD__ADMIN__ADMIN_MESSAGE__BODY_HELLO;
    m.hello = &hello;
    uint8_t buf[256];
    long n = frame_encode(&m, buf, sizeof(buf));
    assert_true(n > 0);
    assert_int_equal(write(fd, buf, (size_t)n), n);

    /* Refused: the control plane closes the impostor's connection. */
    char rd[64];
    size_t len = 0;
    while (h_fd_read_more(fd, rd, sizeof(rd), &len, H_READY_TIMEOUT_MS) > 0)
        len = 0;
    close(fd);
    assert_int_equal(h_wait_until(log_has_refused_impostor, f.cp, H_READY_TIMEOUT_MS), 0);
    assert_false(h_proc_log_contains(f.cp, "replaced by a new connection for the same lease"));
    assert_int_equal(admin_channel_connected(&f), 1);
    h_fleet_stop(&f);
}

static bool log_has_hello_deadline(void *arg)
{
    return h_proc_log_contains(arg, "no hello within 2 s");
}

/* Silent peers are dropped after the hello deadline instead of holding a
 * slot of the channel's table forever. */
static void test_admin_channel_silent_peer_is_dropped(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(f.cfg.admin_socket) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, f.cfg.admin_socket, strlen(f.cfg.admin_socket) + 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char rd[64];
    size_t len = 0;
    int64_t start = h_now_ms();
    while (h_fd_read_more(fd, rd, sizeof(rd), &len, H_READY_TIMEOUT_MS) > 0)
        len = 0;
    int64_t closed_after = h_now_ms() - start;
    close(fd);
    assert_true(closed_after < H_READY_TIMEOUT_MS);
    assert_int_equal(h_wait_until(log_has_hello_deadline, f.cp, H_READY_TIMEOUT_MS), 0);
    h_fleet_stop(&f);
}

static bool log_has_reset_start(void *arg)
{
    return h_proc_log_contains(arg, "reset_load: worker w1 (slot");
}

static long admin_post(const struct h_fleet *f, const char *path, const char *body)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)f->cfg.admin_port, path);
    struct h_resp resp = {0};
    int rc = h_http_post_json(url, body, &resp);
    long status = rc == 0 ? resp.status : -1;
    h_resp_fini(&resp);
    return status;
}

/*
 * One order of a drain change racing reset_load: the worker starts with
 * `initially` draining; a reset is held open by a stopped data plane (it
 * cannot answer); the operator asks for the opposite meanwhile. That must
 * be refused (409), and the reset must end with the worker as the
 * operator last left it. Before, the drain answered 200 and the reset then
 * restored the state it saw at its start. The reset waits up to 60 s, so
 * no scheduling delay of a loaded machine can end it early; the data plane
 * is woken once the drain was refused, answers 0 in flight, and the reset
 * ends with 200.
 */
static void drain_during_reset_case(bool initially)
{
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 1, .controlplane_extra = "reset_load_timeout: 60s\n"});
    if (initially)
        assert_int_equal(admin_post(&f, "/workers/w1/drain", "{\"draining\":true}"), 200);
    /* The reset asks the data plane over the admin channel: a data plane not
     * connected yet would make it end at once, with 409. */
    assert_int_equal(h_wait_until(channel_connected, &f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_proc_signal(f.dp, SIGSTOP), 0);
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/workers/w1/reset_load",
             (unsigned)f.cfg.admin_port);
    struct h_async *reset = NULL;
    assert_int_equal(h_async_start(url, "{}", NULL, &reset), 0);
    /* The reset logs its start once it has marked the worker draining. */
    assert_int_equal(h_wait_until(log_has_reset_start, f.cp, H_READY_TIMEOUT_MS), 0);
    struct w1_cond c = {.f = &f, .draining = true, .want = true};
    assert_true(w1_flag_is(&c));
    char body[40];
    snprintf(body, sizeof(body), "{\"draining\":%s}", initially ? "false" : "true");
    long drain_status = admin_post(&f, "/workers/w1/drain", body);

    assert_int_equal(h_proc_signal(f.dp, SIGCONT), 0);
    assert_int_equal(h_async_wait(reset, H_READY_TIMEOUT_MS), 0);
    struct h_async_state st;
    h_async_get_state(reset, &st);
    assert_int_equal(st.status, 200); /* the woken data plane had nothing in flight */
    assert_int_equal(drain_status, 409);
    c.want = initially;
    assert_true(w1_flag_is(&c));
    h_fleet_stop(&f);
}

static void test_drain_during_reset_is_refused(void **state)
{
    (void)state;
    drain_during_reset_case(false);
}

static void test_undrain_during_reset_is_refused(void **state)
{
    (void)state;
    drain_during_reset_case(true);
}

/* ---- finding 8: request ids and skeleton markers --------------------------- */

/* The multiplicative inverse of odd a modulo 2^64 (Newton's iteration). */
static uint64_t inverse_mod_2_64(uint64_t a)
{
    uint64_t x = a;
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* Inverts z ^= z >> s for s >= 21 (two shifts cover 64 bits). */
static uint64_t unxorshift(uint64_t z, unsigned s)
{
    uint64_t x = z;
    for (unsigned k = s; k < 64; k += s)
        x = z ^ (x >> s);
    return x;
}

/* splitmix64's output function without the add, and its inverse. */
static uint64_t sm_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t sm_unmix(uint64_t z)
{
    z = unxorshift(z, 31);
    z *= inverse_mod_2_64(0x94d049bb133111ebull);
    z = unxorshift(z, 27);
    z *= inverse_mod_2_64(0xbf58476d1ce4e5b9ull);
    return unxorshift(z, 30);
}

/* The 64-bit value behind 16 hex digits written least significant first
 * (the data plane's id format), or 0 when it is not such text. */
static uint64_t id_half(const char *hex)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = hex[i];
        uint64_t d = c >= '0' && c <= '9'   ? (uint64_t)(c - '0')
                     : c >= 'a' && c <= 'f' ? (uint64_t)(c - 'a' + 10)
                                            : 99;
        if (d == 99)
            return 0;
        v |= d << (4 * i);
    }
    return v;
}

static void chat_request_id(const struct h_fleet *f, char *id, size_t len)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f->base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url,
                                      "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":1,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                                      &resp),
                     0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(h_resp_header(&resp, "x-request-id", id, len), 0);
    h_resp_fini(&resp);
    assert_int_equal(strlen(id), 32);
}

/*
 * From one X-Request-Id, predict the next: with a splitmix64 stream the
 * id's first half inverts to the generator's state, and the next ids are
 * the following outputs. The data plane runs one loop, so both requests
 * draw from one thread's stream. No prediction may come true.
 */
static void test_request_ids_are_unpredictable(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = "threads: 1\n"});
    char first[64], second[64];
    chat_request_id(&f, first, sizeof(first));
    chat_request_id(&f, second, sizeof(second));
    uint64_t sm_state = sm_unmix(id_half(first));
    /* The candidates: any two consecutive outputs after the first half. */
    uint64_t next[16];
    for (int k = 0; k < 16; k++)
        next[k] = sm_mix(sm_state + (uint64_t)(k + 1) * 0x9e3779b97f4a7c15ull);
    uint64_t a = id_half(second), b = id_half(second + 16);
    for (int k = 0; k + 1 < 16; k++)
        if (next[k] == a && next[k + 1] == b)
            fail_msg("request id %s was predicted from %s", second, first);
    h_fleet_stop(&f);
}

/* A model name long enough to be set aside as a skeleton marker is refused
 * as too long, and nothing of the marker comes back. */
static void test_long_model_is_refused_without_marker(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char body[1024];
    char model[301];
    memset(model, 'm', 300);
    model[300] = '\0';
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", model);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    struct h_resp resp = {0};
    assert_int_equal(h_http_post_json(url, body, &resp), 0);
    assert_int_equal(resp.status, 400);
    assert_null(strstr(resp.body, "\\u0001sy"));
    assert_null(strstr(resp.body, "\001sy"));
    h_resp_fini(&resp);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

/* ---- finding 10: /metrics off the client port -------------------------------- */

static void test_metrics_listen_moves_metrics_off_the_client_port(void **state)
{
    (void)state;
    uint16_t port = 0;
    assert_int_equal(h_free_port(&port), 0);
    char extra[64];
    snprintf(extra, sizeof(extra), "metrics_listen: 127.0.0.1:%u\n", (unsigned)port);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra});
    char url[128];
    struct h_resp resp = {0};
    snprintf(url, sizeof(url), "%s/metrics", f.base);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 404);
    h_resp_fini(&resp);

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", (unsigned)port);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_non_null(strstr(resp.body, "switchyard_worker_load{worker=\"w1\"}"));
    h_resp_fini(&resp);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/models", (unsigned)port);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 404);
    h_resp_fini(&resp);

    /* Client traffic is unaffected. */
    snprintf(url, sizeof(url), "%s/health", f.base);
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    h_fleet_stop(&f);
}

/* ---- finding 7: the hot-restart handover socket ------------------------------- */

static bool socket_exists(void *arg)
{
    struct stat st;
    return stat(arg, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* The fleet data plane's hot-restart socket, once it exists (the data plane
 * answers /health before it binds that socket). */
static void hot_socket_of(const struct h_fleet *f, char *path, size_t len)
{
    struct cfg cfg;
    cfg_init_defaults(&cfg);
    char err[512];
    assert_int_equal(cfg_load_file(&cfg, f->cfg.path, err, sizeof(err)), 0);
    assert_int_equal(hr_socket_path(&cfg, path, len), 0);
    cfg_fini(&cfg);
    assert_int_equal(h_wait_until(socket_exists, path, H_READY_TIMEOUT_MS), 0);
}

struct beat_cond {
    struct h_fleet *f;
    uint32_t lease;
    uint64_t want;
};

static bool heartbeat_reached(void *arg)
{
    struct beat_cond *c = arg;
    struct shm_lease_info l;
    shm_lease_snapshot(&c->f->seg, c->lease, &l);
    return l.heartbeat >= c->want;
}

static uint32_t active_lease(struct h_fleet *f, uint64_t *heartbeat)
{
    for (uint32_t i = 0; i < f->seg.max_dataplanes; i++) {
        struct shm_lease_info l;
        shm_lease_snapshot(&f->seg, i, &l);
        if (l.active) {
            *heartbeat = l.heartbeat;
            return i;
        }
    }
    fail_msg("no active lease");
    return 0;
}

/*
 * Silent peers on the handover socket: the data plane's main thread, which
 * beats the lease every 100 ms, must not wait for them (it used to block up
 * to 2 s per connection). Three connections that say nothing; the lease
 * must keep beating meanwhile, and they are closed after the deadline.
 */
static void test_silent_handover_peers_do_not_stall_the_main_thread(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char path[HR_PATH_MAX];
    hot_socket_of(&f, path, sizeof(path));
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, path, strlen(path) + 1);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
    }
    uint64_t beat = 0;
    struct beat_cond c = {.f = &f};
    c.lease = active_lease(&f, &beat);
    /* Five beats take 500 ms; a main thread stuck for 2 s per silent peer
     * makes none for 6 s. The 4 s allowed tells the two apart with room
     * for a loaded machine's scheduling delays. */
    c.want = beat + 5;
    int rc = h_wait_until(heartbeat_reached, &c, 4000);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    assert_int_equal(rc, 0);
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
}

/*
 * A same-uid process that does not hold a lease says HELLO as a successor
 * would: it must be refused (before, it received the listening sockets and
 * could make the data plane drain and exit by saying READY).
 */
static void test_handover_to_a_non_successor_is_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    char path[HR_PATH_MAX];
    hot_socket_of(&f, path, sizeof(path));
    uint64_t beat = 0;
    uint32_t lease = active_lease(&f, &beat);
    struct hr_takeover t = {.fd = -1};
    char err[512] = "";
    int rc = hr_takeover_begin(&t, path, lease, err, sizeof(err));
    if (rc == 0)
        hr_takeover_ready(&t); /* what an attacker would do next */
    hr_takeover_fini(&t, true);
    assert_int_equal(rc, -EBUSY);
    assert_non_null(strstr(err, "does not hold lease"));
    char url[128];
    snprintf(url, sizeof(url), "%s/health", f.base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
    assert_true(h_proc_is_running(f.dp));
    assert_false(h_proc_log_contains(f.dp, "draining"));
    h_fleet_stop(&f);
}

/* ---- finding 1, the sockets: only our own user's --------------------------- */

static void test_admin_socket_path_of_another_user_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* chown takes root */
    struct h_config cfg;
    write_config(&cfg);
    int fd = open(cfg.admin_socket, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(chown(cfg.admin_socket, NOBODY, NOBODY), 0);
    assert_refuses(h_start_controlplane, cfg.path, "is not a socket of this user (uid 65534");
    unlink(cfg.admin_socket);

    /* A socket, as a dead control plane would leave, but another user's:
     * not ours to remove either. */
    struct h_config cfg2;
    write_config(&cfg2);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(cfg2.admin_socket) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, cfg2.admin_socket, strlen(cfg2.admin_socket) + 1);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(s); /* the file stays behind */
    assert_int_equal(chown(cfg2.admin_socket, NOBODY, NOBODY), 0);
    assert_refuses(h_start_controlplane, cfg2.path, "is not a socket of this user (uid 65534");
    unlink(cfg2.admin_socket);
}

static bool log_has_foreign_cp(void *arg)
{
    return h_proc_log_contains(arg, "is served by uid 65534, not by this user");
}

/*
 * Another user serves the admin socket's path (bound there, then listening
 * as uid 65534): the data plane must not hello it, since whoever answers
 * there decides reset_load's outcome.
 */
static void test_dataplane_refuses_a_foreign_control_plane(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    struct h_config cfg;
    write_config(&cfg);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, cfg.admin_socket, strlen(cfg.admin_socket) + 1);
        if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0 ||
            listen(s, 8) != 0)
            _exit(1);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        for (;;) {
            int c = accept(s, NULL, NULL);
            if (c >= 0)
                close(c);
        }
    }
    close(ready[1]);
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    close(ready[0]);
    /* The segment exists without a control plane of ours: a squatter-free
     * one made by this test, so the data plane starts and tries the socket. */
    struct shm_segment seg;
    enum shm_open_outcome outcome;
    char err[256];
    assert_int_equal(
        shm_segment_open_owner(&seg, cfg.shm_name, 1024, 8, &outcome, err, sizeof(err)), 0);
    shm_registry_mark_synced(&seg);
    struct h_proc *dp = NULL;
    assert_int_equal(h_start_dataplane(cfg.path, &dp), 0);
    int rc = h_wait_until(log_has_foreign_cp, dp, H_READY_TIMEOUT_MS);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(rc, 0);
    assert_false(h_proc_log_contains(dp, "connected to the control plane"));
    assert_int_equal(h_proc_stop(dp, H_STOP_TIMEOUT_MS), 0);
    shm_segment_close(&seg);
}

/* ---- finding 4: slow and oversized uploads ----------------------------------- */

static const char slow_opts[] = "header_timeout: 1s\nupload_min_rate: 1KiB\n";

/* Headers begun and never finished: closed once header_timeout passed
 * (libmicrohttpd alone would wait for 300 s of silence). */
static void test_stalled_headers_are_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = slow_opts});
    int fd = h_raw_connect(f.cfg.dataplane_port);
    h_raw_send_text(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    /* One more header byte now and then resets an inactivity timer, not
     * this deadline. */
    char buf[4096];
    int64_t closed = -1;
    for (int i = 0; i < 8 && closed < 0; i++) {
        h_raw_send_text(fd, "X");
        closed = h_raw_ms_until_closed(fd, buf, sizeof(buf), 400);
    }
    close(fd);
    assert_true(closed >= 0);
    assert_true(h_fleet_dp_metric(&f, "switchyard_slow_clients_total{phase=\"headers\"}") >= 1);
    /* Meanwhile the router serves as usual. */
    char resp[8192];
    raw_exchange(&f, "", resp, sizeof(resp));
    assert_int_equal(strncmp(resp, "HTTP/1.1 200", 12), 0);
    h_fleet_stop(&f);
}

/* A body trickling in at a few bytes a second is cut after header_timeout. */
static void test_slow_upload_is_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = slow_opts});
    int fd = h_raw_connect(f.cfg.dataplane_port);
    h_raw_send_text(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{");
    char buf[4096];
    int64_t closed = -1;
    for (int i = 0; i < 10 && closed < 0; i++) {
        if (write(fd, " ", 1) != 1)
            break; /* already closed */
        closed = h_raw_ms_until_closed(fd, buf, sizeof(buf), 300);
    }
    close(fd);
    assert_true(closed >= 0);
    assert_int_equal(h_fleet_dp_metric(&f, "switchyard_slow_clients_total{phase=\"body\"}"), 1);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), 0);
    h_fleet_stop(&f);
}

/* An announced body over max_body is refused before a byte of it is read. */
static void test_oversized_content_length_is_refused_at_once(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = "max_body: 1MiB\n"});
    int fd = h_raw_connect(f.cfg.dataplane_port);
    h_raw_send_text(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n");
    char buf[4096] = "";
    size_t len = 0;
    while (strstr(buf, "\r\n\r\n") == NULL &&
           h_fd_read_more(fd, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS) > 0)
        ;
    close(fd);
    assert_int_equal(strncmp(buf, "HTTP/1.1 413", 12), 0);
    h_fleet_stop(&f);
}

/* dataplane.per_ip_connection_limit: the connection over the limit is
 * closed at once; the ones under it are served. */
static void test_per_ip_connection_limit(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = 1, .dataplane_extra = "threads: 1\nper_ip_connection_limit: 2\n"});
    int a = h_raw_connect(f.cfg.dataplane_port);
    int b = h_raw_connect(f.cfg.dataplane_port);
    int c = h_raw_connect(f.cfg.dataplane_port);
    char buf[4096];
    int64_t closed = h_raw_ms_until_closed(c, buf, sizeof(buf), H_READY_TIMEOUT_MS);
    close(c);
    assert_true(closed >= 0);
    h_raw_send_text(a, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    size_t len = 0;
    buf[0] = '\0';
    assert_true(h_fd_read_more(a, buf, sizeof(buf), &len, H_READY_TIMEOUT_MS) > 0);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200", 12), 0);
    close(a);
    close(b);
    h_fleet_stop(&f);
}

/* The admin API: a client that never completes its request headers is
 * shut down after the 10 s header deadline, whatever it trickles (MHD's
 * own timeout is 30 s of silence, so a byte every 2 s held it forever). */
static void test_admin_stalled_headers_are_closed(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    int fd = h_raw_connect(f.cfg.admin_port);
    h_raw_send_text(fd, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    char buf[4096];
    int64_t start = h_now_ms();
    int64_t closed = -1;
    for (int i = 0; i < 10 && closed < 0; i++) {
        if (write(fd, "X", 1) != 1)
            break;
        closed = h_raw_ms_until_closed(fd, buf, sizeof(buf), 2000);
    }
    int64_t took = h_now_ms() - start;
    close(fd);
    assert_true(closed >= 0);
    assert_true(took >= 9000); /* not before the deadline */
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_segment_of_another_user_is_refused),
        H_TEST(test_segment_open_to_others_is_refused),
        H_TEST(test_malformed_headers_are_refused),
        H_TEST(test_connection_named_headers_are_stripped),
        H_TEST(test_descriptor_exhaustion_does_not_reap_a_live_dataplane),
        H_TEST(test_probes_ignore_proxy_variables),
        H_TEST(test_admin_api_without_token_stays_on_loopback),
        H_TEST(test_token_file_open_to_others_is_refused),
        H_TEST(test_admin_channel_impostor_is_refused),
        H_TEST(test_admin_channel_silent_peer_is_dropped),
        H_TEST(test_drain_during_reset_is_refused),
        H_TEST(test_undrain_during_reset_is_refused),
        H_TEST(test_request_ids_are_unpredictable),
        H_TEST(test_long_model_is_refused_without_marker),
        H_TEST(test_metrics_listen_moves_metrics_off_the_client_port),
        H_TEST(test_silent_handover_peers_do_not_stall_the_main_thread),
        H_TEST(test_handover_to_a_non_successor_is_refused),
        H_TEST(test_admin_socket_path_of_another_user_is_refused),
        H_TEST(test_dataplane_refuses_a_foreign_control_plane),
        H_TEST(test_stalled_headers_are_closed),
        H_TEST(test_slow_upload_is_closed),
        H_TEST(test_oversized_content_length_is_refused_at_once),
        H_TEST(test_per_ip_connection_limit),
        H_TEST(test_admin_stalled_headers_are_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
