/*
 * End-to-end: the official client libraries work through the router
 * unchanged — the `openai` npm package's Responses API (plain, continued,
 * streamed, retrieved) and the `@anthropic-ai/sdk` package's Messages API
 * (plain, streamed, count_tokens, an error), driven by
 * tests/e2e/clients/sdk_clients.mjs under node.
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

static void test_sdk_clients(void **state)
{
    (void)state;
    char dir[H_PATH_MAX], why[H_PATH_MAX + 96];
    /* (the directory's path is at most 200 + 12 bytes) */
    if (clients_dir(dir, sizeof(dir), why, sizeof(why)) == NULL) {
        fprintf(stderr, "test_sdk_clients skipped: %s\n", why);
        skip();
    }
    /* The script next to its node_modules, so its imports resolve. */
    char script[H_PATH_MAX + 64], src[H_PATH_MAX], cmd[3 * H_PATH_MAX];
    snprintf(script, sizeof(script), "%s/sdk_clients-%d.mjs", dir, (int)getpid());
    assert_non_null(realpath("tests/e2e/clients/sdk_clients.mjs", src));
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, script);
    assert_int_equal(run(cmd), 0);

    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2});
    const char *argv[] = {"/usr/bin/env", "node", script, f.base, H_FLEET_MODEL, NULL};
    struct h_proc *p = NULL;
    assert_int_equal(h_spawn("node", argv, &p), 0);
    p->expected = true;
    int st = 0;
    assert_int_equal(h_proc_wait(p, 60000, &st), 0);
    unlink(script);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        h_proc_print_log(p, 40);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(h_proc_log_contains(p, "ok"));
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_sdk_clients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
