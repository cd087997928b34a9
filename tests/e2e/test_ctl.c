/*
 * End-to-end tests of switchyard-ctl against a real control plane: every
 * command with its output and exit code, the --config defaults (admin
 * address and token file taken from the daemons' config), bad arguments
 * (exit 1 before anything is sent), an unreachable admin API (exit 4) and a
 * wrong or missing token (exit 3 and the server's message). The exit codes
 * are the contract scripts rely on, so every assertion checks the code and
 * the words of the message a person reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
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

#define READY_MS 10000
#define CTL_MS   20000

extern char **environ;

/* What one run of switchyard-ctl printed and returned. */
struct ctl_run {
    int code; /* exit code; -1 when it did not exit normally */
    char out[16384];
    char err[4096];
};

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs switchyard-ctl with args (NULL-terminated) and waits up to CTL_MS. */
static void ctl(struct ctl_run *r, ...)
{
    const char *argv[32];
    char bin[H_PATH_MAX], out_path[H_PATH_MAX], err_path[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-ctl", bin, sizeof(bin)), 0);
    assert_int_equal(h_tmp_path("ctl.out", out_path, sizeof(out_path)), 0);
    assert_int_equal(h_tmp_path("ctl.err", err_path, sizeof(err_path)), 0);
    size_t n = 0;
    argv[n++] = bin;
    va_list ap;
    va_start(ap, r);
    for (const char *s = va_arg(ap, const char *); s != NULL; s = va_arg(ap, const char *)) {
        assert_true(n < 31);
        argv[n++] = s;
    }
    va_end(ap);
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int status = 0;
    int64_t deadline = h_now_ms() + CTL_MS;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (h_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("switchyard-ctl did not exit within %d ms", CTL_MS);
        }
        usleep(5000);
    }
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    slurp(out_path, r->out, sizeof(r->out));
    slurp(err_path, r->err, sizeof(r->err));
    if (getenv("SWITCHYARD_TEST_LOGS") != NULL)
        fprintf(stderr, "ctl %s -> %d\nstdout: %sstderr: %s", argv[1], r->code, r->out, r->err);
}

/* Asserts the exit code and that stream holds needle, printing both on failure. */
static void expect(const struct ctl_run *r, int code, const char *stream, const char *needle)
{
    if (r->code != code || (needle != NULL && strstr(stream, needle) == NULL))
        fail_msg("exit %d (want %d), want '%s' in output\nstdout: %s\nstderr: %s", r->code, code,
                 needle != NULL ? needle : "", r->out, r->err);
}

static char g_admin[64];

static void start_cp(struct h_config *cfg, bool wait_ok)
{
    struct h_proc *cp;
    assert_int_equal(h_config_write(cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(cfg->path, &cp), 0);
    snprintf(g_admin, sizeof(g_admin), "http://127.0.0.1:%u", (unsigned)cfg->admin_port);
    char url[128];
    snprintf(url, sizeof(url), "%s/status", g_admin);
    if (wait_ok) {
        assert_int_equal(h_wait_http_ok(url, READY_MS), 0);
        return;
    }
    /* With a token: wait until it answers at all (401 counts). */
    int64_t deadline = h_now_ms() + READY_MS;
    for (;;) {
        struct h_resp resp;
        h_http_get(url, &resp);
        long st = resp.status;
        h_resp_fini(&resp);
        if (st != 0)
            break;
        assert_true(h_now_ms() < deadline);
        usleep(10000);
    }
}

/* The worker object GET /workers/{id} returns (a new reference), or NULL on 404. */
static json_t *worker(const char *id)
{
    char url[160];
    snprintf(url, sizeof(url), "%s/workers/%s", g_admin, id);
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    json_t *j = resp.status == 200 ? h_resp_json(&resp) : NULL;
    h_resp_fini(&resp);
    return j;
}

static bool worker_is_draining(const char *id)
{
    json_t *j = worker(id);
    bool d = json_is_true(json_object_get(j, "draining"));
    json_decref(j);
    return d;
}

static void test_every_command(void **state)
{
    (void)state;
    struct h_mock m;
    assert_int_equal(h_mock_start(&m, "--model", "mock-model", NULL), 0);
    struct h_config cfg = {.health_interval = "100ms"};
    assert_int_equal(h_config_add_worker(&cfg, m.url, "w1", "mock-model", NULL), 0);
    start_cp(&cfg, true);
    struct ctl_run r;

    ctl(&r, "--admin", g_admin, "workers", NULL);
    expect(&r, 0, r.out, "ID");
    expect(&r, 0, r.out, "w1");
    expect(&r, 0, r.out, m.url);
    expect(&r, 0, r.out, "static");
    assert_string_equal(r.err, "");

    /* The address comes from the config when --admin is not given. */
    ctl(&r, "--config", cfg.path, "--json", "workers", NULL);
    expect(&r, 0, r.out, "\"workers\"");
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "workers")), 1);
    json_decref(j);

    ctl(&r, "--admin", g_admin, "drain", "w1", NULL);
    expect(&r, 0, r.out, "w1: draining");
    assert_true(worker_is_draining("w1"));
    ctl(&r, "--admin", g_admin, "workers", NULL);
    expect(&r, 0, r.out, "yes");
    ctl(&r, "--admin", g_admin, "undrain", "w1", NULL);
    expect(&r, 0, r.out, "w1: not draining");
    assert_false(worker_is_draining("w1"));

    ctl(&r, "--admin", g_admin, "add", "http://127.0.0.1:1", "--model", "m2", "--role", "decode",
        "--id", "w2", NULL);
    expect(&r, 0, r.out, "w2: added (http://127.0.0.1:1");
    j = worker("w2");
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "role")), "decode");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m2");
    json_decref(j);
    ctl(&r, "--admin", g_admin, "workers", NULL);
    expect(&r, 0, r.out, "api");
    /* The same url again: refused by the server, its reason shown. */
    ctl(&r, "--admin", g_admin, "add", "http://127.0.0.1:1", "--id", "w3", NULL);
    expect(&r, 6, r.err, "already exists (HTTP 409)");
    assert_null(worker("w3"));
    /* A url the server rejects. */
    ctl(&r, "--admin", g_admin, "add", "http://127.0.0.1", NULL);
    expect(&r, 6, r.err, "invalid url");
    /* --json on success: the worker object. */
    ctl(&r, "--admin", g_admin, "--json", "add", "http://127.0.0.1:2", NULL);
    expect(&r, 0, r.out, "\"id\":\"127.0.0.1:2\"");

    ctl(&r, "--admin", g_admin, "remove", "w2", NULL);
    expect(&r, 0, r.out, "w2: removed");
    assert_null(worker("w2"));
    ctl(&r, "--admin", g_admin, "remove", "w2", NULL);
    expect(&r, 2, r.err, "no worker with id 'w2' (HTTP 404)");
    ctl(&r, "--admin", g_admin, "drain", "nosuch", NULL);
    expect(&r, 2, r.err, "no worker with id 'nosuch'");
    ctl(&r, "--admin", g_admin, "reset-load", "nosuch", NULL);
    expect(&r, 2, r.err, "no worker with id 'nosuch'");

    /* No data plane holds a lease: every (zero) holder agrees, the reset runs. */
    ctl(&r, "--admin", g_admin, "reset-load", "w1", NULL);
    expect(&r, 0, r.out, "w1: load reset (0 discarded)");
    ctl(&r, "--admin", g_admin, "--json", "reset-load", "w1", NULL);
    expect(&r, 0, r.out, "\"discarded\":0");

    ctl(&r, "--admin", g_admin, "status", NULL);
    expect(&r, 0, r.out, "control plane  pid");
    expect(&r, 0, r.out, cfg.shm_name);
    ctl(&r, "--admin", g_admin, "--json", "status", NULL);
    expect(&r, 0, r.out, "\"epoch\"");

    /* reload: the file is unchanged, so nothing changes. */
    ctl(&r, "--config", cfg.path, "reload", NULL);
    expect(&r, 0, r.out, "reloaded");
    expect(&r, 0, r.out, "workers: 0 added, 0 removed, 0 changed, 1 unchanged");
    ctl(&r, "--config", cfg.path, "--json", "reload", NULL);
    expect(&r, 0, r.out, "\"message\"");
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct ctl_run r;
    ctl(&r, NULL);
    expect(&r, 1, r.err, "no command given");
    ctl(&r, "frobnicate", NULL);
    expect(&r, 1, r.err, "unknown command 'frobnicate'");
    ctl(&r, "drain", NULL);
    expect(&r, 1, r.err, "drain takes one argument, the worker's id");
    ctl(&r, "add", NULL);
    expect(&r, 1, r.err, "add takes one argument, the worker's URL");
    ctl(&r, "workers", "extra", NULL);
    expect(&r, 1, r.err, "workers takes no argument");
    ctl(&r, "drain", "w1", "--model", "m", NULL);
    expect(&r, 1, r.err, "go with add only");
    ctl(&r, "add", "http://127.0.0.1:9", "--role", "boss", NULL);
    expect(&r, 1, r.err, "--role must be regular, prefill or decode");
    ctl(&r, "remove", "bad/id", NULL);
    expect(&r, 1, r.err, "invalid worker id 'bad/id'");
    ctl(&r, "--timeout", "soon", "workers", NULL);
    expect(&r, 1, r.err, "--timeout takes seconds");
    ctl(&r, "--bogus", "workers", NULL);
    expect(&r, 1, r.err, "unknown option '--bogus'");
    ctl(&r, "workers", "--admin", NULL);
    expect(&r, 1, r.err, "needs a value");
    char missing[H_PATH_MAX];
    assert_int_equal(h_tmp_path("no-such.yaml", missing, sizeof(missing)), 0);
    ctl(&r, "--config", missing, "workers", NULL);
    expect(&r, 1, r.err, "no-such.yaml");
    ctl(&r, "--admin", "http://127.0.0.1:9", "--token-file", missing, "workers", NULL);
    expect(&r, 1, r.err, "token file");
    /* reload of a file that does not load is a refusal (6), said as one. */
    char broken[H_PATH_MAX];
    assert_int_equal(
        h_write_file("broken.yaml", "dataplane:\n  lisen: 1\n", broken, sizeof(broken)), 0);
    ctl(&r, "--config", broken, "reload", NULL);
    expect(&r, 6, r.err, "reload refused, the running config stays: ");
    expect(&r, 6, r.err, "broken.yaml:2:3: dataplane.lisen: unknown key");
    ctl(&r, "--config", broken, "workers", NULL);
    expect(&r, 1, r.err, "broken.yaml:2:3");
    ctl(&r, "--help", NULL);
    expect(&r, 0, r.out, "EXIT STATUS");

    /* Nothing listens on a reserved free port: unreachable. */
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0);
    char admin[64];
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", (unsigned)port);
    ctl(&r, "--admin", admin, "workers", NULL);
    expect(&r, 4, r.err, "cannot reach the admin API");
}

static void test_wrong_token(void **state)
{
    (void)state;
    char token_path[H_PATH_MAX], wrong_path[H_PATH_MAX];
    assert_int_equal(h_write_file("token", "s3cret-token\n", token_path, sizeof(token_path)), 0);
    assert_int_equal(chmod(token_path, 0600), 0);
    assert_int_equal(h_write_file("wrong", "not-the-token\n", wrong_path, sizeof(wrong_path)), 0);
    char extra[H_PATH_MAX + 32];
    snprintf(extra, sizeof(extra), "admin_token_file: \"%s\"\n", token_path);
    struct h_config cfg = {.health_interval = "1h", .controlplane_extra = extra};
    assert_int_equal(h_config_add_worker(&cfg, "http://127.0.0.1:19001", "w1", "m", NULL), 0);
    start_cp(&cfg, false);
    struct ctl_run r;

    ctl(&r, "--admin", g_admin, "workers", NULL);
    expect(&r, 3, r.err, "missing or wrong bearer token (HTTP 401)");
    expect(&r, 3, r.err, "--token-file");
    ctl(&r, "--admin", g_admin, "--token-file", wrong_path, "drain", "w1", NULL);
    expect(&r, 3, r.err, "missing or wrong bearer token");
    /* A wrong --token-file wins over the config's right one. */
    ctl(&r, "--config", cfg.path, "--token-file", wrong_path, "status", NULL);
    expect(&r, 3, r.err, "HTTP 401");
    /* The config's token file and address. */
    ctl(&r, "--config", cfg.path, "workers", NULL);
    expect(&r, 0, r.out, "w1");
    ctl(&r, "--admin", g_admin, "--token-file", token_path, "drain", "w1", NULL);
    expect(&r, 0, r.out, "w1: draining");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_every_command),
        H_TEST(test_bad_arguments),
        H_TEST(test_wrong_token),
    };
    return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
