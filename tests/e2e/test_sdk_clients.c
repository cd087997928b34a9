/*
 * End-to-end: the official client libraries work through the router
 * unchanged — the `openai` npm package's Responses API (plain, continued,
 * streamed, retrieved) and the `@anthropic-ai/sdk` package's Messages API
 * (plain, streamed, count_tokens, an error), driven by
 * tests/e2e/clients/sdk_clients.mjs under node, over plain HTTP and over
 * HTTPS (the data plane's TLS listener; node trusts the test CA).
 *
 * The test installs what it needs itself: the two packages, at pinned
 * versions, with npm into "$SWITCHYARD_BUILD_DIR/npm-clients" (kept, so
 * later runs reuse it). Without node and npm (deploy/install-deps.sh does
 * not install them) or without a reachable npm registry, the test is
 * skipped, saying why.
 */
#include <setjmp.h>
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

#define OPENAI_PKG    "openai@7.59.0"
#define ANTHROPIC_PKG "@anthropic-ai/sdk@1.15.0"

static int run(const char *cmd)
{
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The packages' directory, installed when needed; NULL (with why) if not possible. */
static const char *clients_dir(char *dir, size_t cap, char *why, size_t why_cap)
{
    if (run("node --version >/dev/null 2>&1") != 0 || run("npm --version >/dev/null 2>&1") != 0) {
        snprintf(why, why_cap, "node and npm are not installed");
        return NULL;
    }
    const char *build = getenv("SWITCHYARD_BUILD_DIR");
    char abs[H_PATH_MAX];
    if (realpath(build != NULL ? build : "build", abs) == NULL) {
        snprintf(why, why_cap, "no build directory");
        return NULL;
    }
    if ((size_t)snprintf(dir, cap, "%.200s/npm-clients", abs) >= cap) {
        snprintf(why, why_cap, "build directory path too long");
        return NULL;
    }
    char probe[H_PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s/node_modules/@anthropic-ai/sdk/package.json", dir);
    struct stat st;
    if (stat(probe, &st) == 0)
        return dir;
    mkdir(dir, 0755);
    char cmd[H_PATH_MAX * 2 + 256];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && (test -f package.json || echo '{\"private\":true}' > package.json) && "
             "timeout 240 npm install --no-audit --no-fund --silent " OPENAI_PKG " " ANTHROPIC_PKG
             " >npm-install.log 2>&1",
             dir);
    if (run(cmd) != 0 || stat(probe, &st) != 0) {
        snprintf(why, why_cap, "npm install failed (registry unreachable?): see %s/npm-install.log",
                 dir);
        return NULL;
    }
    return dir;
}

/* Runs the clients' script against f's data plane (under env_var=value
 * when env_var is set, e.g. the CA node must trust) and asserts it passed. */
static void run_clients(struct h_fleet *f, const char *env)
{
    char dir[H_PATH_MAX], why[H_PATH_MAX + 96];
    /* (the directory's path is at most 200 + 12 bytes) */
    if (clients_dir(dir, sizeof(dir), why, sizeof(why)) == NULL) {
        fprintf(stderr, "test_sdk_clients skipped: %s\n", why);
        h_fleet_stop(f);
        skip();
    }
    /* The script next to its node_modules, so its imports resolve. */
    char script[H_PATH_MAX + 64], src[H_PATH_MAX], cmd[3 * H_PATH_MAX];
    snprintf(script, sizeof(script), "%s/sdk_clients-%d.mjs", dir, (int)getpid());
    assert_non_null(realpath("tests/e2e/clients/sdk_clients.mjs", src));
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, script);
    assert_int_equal(run(cmd), 0);
    const char *with_env[] = {"/usr/bin/env", env, "node", script, f->base, H_FLEET_MODEL, NULL};
    const char *plain[] = {"/usr/bin/env", "node", script, f->base, H_FLEET_MODEL, NULL};
    struct h_proc *p = NULL;
    assert_int_equal(h_spawn("node", env != NULL ? with_env : plain, &p), 0);
    p->expected = true;
    int st = 0;
    assert_int_equal(h_proc_wait(p, 60000, &st), 0);
    unlink(script);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        h_proc_print_log(p, 40);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(h_proc_log_contains(p, "ok"));
}

static void test_sdk_clients(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2});
    run_clients(&f, NULL);
    h_fleet_stop(&f);
}

/* The same clients over HTTPS: the data plane's TLS listener, node trusting
 * the test CA (NODE_EXTRA_CA_CERTS), nothing else changed. */
static void test_sdk_clients_https(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    char extra[3 * H_PATH_MAX], env[H_PATH_MAX + 32];
    snprintf(extra, sizeof(extra), "tls:\n  cert_file: %s\n  key_file: %s\n", c.server,
             c.server_key);
    snprintf(env, sizeof(env), "NODE_EXTRA_CA_CERTS=%s", c.ca);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2, .dataplane_extra = extra, .https = true});
    assert_non_null(strstr(f.base, "https://"));
    run_clients(&f, env);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_sdk_clients),
        H_TEST(test_sdk_clients_https),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
