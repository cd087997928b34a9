/*
 * End-to-end: the prefix index is the node's, not a process's, and
 * independent router nodes agree on new prefixes.
 *
 * - A hot restart, and a data-plane crash, in the middle of a conversation:
 *   the next turn is an `affinity` decision on the same worker (the index
 *   survived in its segment; a cold index would say `no_match`).
 * - A second data plane started on the same node routes a prefix the first
 *   one saw to its holder on its very first request.
 * - --fresh removes the index with the registry: the next turn is cold.
 * - Two independent router nodes (two control planes, two segments, the
 *   same three mock workers listed in opposite orders) send each new prompt
 *   to the same worker (the rendezvous ranking of the worker ids).
 *
 * Decisions and workers are read from the debug headers.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_routed.h"

#define WAIT_MS 20000

static const char *const DEBUG = "debug_headers: true\n";

/* POSTs body to base+path; the serving worker and the decision. */
static void post_routed(const char *base, const char *path, json_t *body, char *worker, size_t wlen,
                        char *decision, size_t dlen)
{
    char *text = json_dumps(body, JSON_COMPACT);
    h_routed_post(base, path, text, worker, wlen, decision, dlen);
    free(text);
}

static void chat_turn(const char *base, json_t *messages, char *worker, size_t wlen, char *decision,
                      size_t dlen)
{
    json_t *body =
        json_pack("{s:s, s:O, s:i}", "model", H_FLEET_MODEL, "messages", messages, "max_tokens", 4);
    post_routed(base, "/v1/chat/completions", body, worker, wlen, decision, dlen);
    json_decref(body);
}

static void add_message(json_t *messages, const char *role, unsigned seed, size_t len)
{
    char *content = h_routed_text(seed, len);
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", role, "content", content));
    free(content);
}

static struct h_proc *start_dataplane_hot(const char *config_path)
{
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-dataplane", bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", config_path, "--hot-restart", NULL};
    struct h_proc *p = NULL;
    assert_int_equal(h_spawn("dataplane", argv, &p), 0);
    return p;
}

static void wait_health(const char *base)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/health", base);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
}

static bool attached_index(void *arg)
{
    return h_proc_log_contains(arg, "prefix index: attached");
}

/* Starts a conversation on f: its first two turns, the second an affinity
 * decision. Returns the conversation (the caller adds the next turn) and
 * its worker in home. */
static json_t *start_conversation(const char *base, unsigned seed, char *home, size_t hlen)
{
    json_t *conv = json_array();
    add_message(conv, "system", seed, 1200);
    add_message(conv, "user", seed + 1, 300);
    char worker[64], decision[64];
    chat_turn(base, conv, home, hlen, decision, sizeof(decision));
    add_message(conv, "assistant", seed + 2, 200);
    add_message(conv, "user", seed + 3, 300);
    chat_turn(base, conv, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, home);
    assert_string_equal(decision, "affinity");
    add_message(conv, "assistant", seed + 4, 200);
    return conv;
}

/* The conversation's next turn through base must be affinity on home. */
static void next_turn_is_affinity(const char *base, json_t *conv, unsigned seed, const char *home)
{
    add_message(conv, "user", seed, 300);
    char worker[64], decision[64];
    chat_turn(base, conv, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "affinity");
    assert_string_equal(worker, home);
    add_message(conv, "assistant", seed + 1, 200);
}

static void test_hot_restart_and_crash_keep_affinity(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 3, .policy = "cache_aware", .dataplane_extra = DEBUG});
    assert_true(h_proc_log_contains(f.dp, "prefix index: attached"));
    char home[64];
    json_t *conv = start_conversation(f.base, 10, home, sizeof(home));

    /* Hot restart: the successor takes the sockets, the old one exits. */
    struct h_proc *old = f.dp;
    f.dp = start_dataplane_hot(f.cfg.path);
    old->expected = true;
    int st = 0;
    assert_int_equal(h_proc_wait(old, WAIT_MS, &st), 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(h_wait_until(attached_index, f.dp, WAIT_MS), 0);
    wait_health(f.base);
    next_turn_is_affinity(f.base, conv, 20, home);

    /* A crash (SIGKILL: nothing released) and a plain start. */
    assert_int_equal(h_proc_signal(f.dp, SIGKILL), 0);
    assert_int_equal(h_proc_wait(f.dp, WAIT_MS, NULL), 0);
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    wait_health(f.base);
    next_turn_is_affinity(f.base, conv, 30, home);
    json_decref(conv);
    h_fleet_stop(&f);
}

static void test_second_dataplane_knows_the_prefix(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 3, .policy = "cache_aware", .dataplane_extra = DEBUG});
    char home[64];
    json_t *conv = start_conversation(f.base, 40, home, sizeof(home));

    /* The same node (segment, admin socket), another listen port. */
    struct h_config c2;
    memset(&c2, 0, sizeof(c2));
    snprintf(c2.shm_name, sizeof(c2.shm_name), "%s", f.cfg.shm_name);
    snprintf(c2.admin_socket, sizeof(c2.admin_socket), "%s", f.cfg.admin_socket);
    c2.admin_port = f.cfg.admin_port;
    c2.policy = "cache_aware";
    c2.dataplane_extra = DEBUG;
    for (size_t i = 0; i < f.cfg.n_workers; i++)
        assert_int_equal(h_config_add_worker(&c2, f.cfg.workers[i].url, f.cfg.workers[i].id,
                                             f.cfg.workers[i].model, NULL),
                         0);
    assert_int_equal(h_config_write(&c2, "second.yaml"), 0);
    struct h_proc *dp2 = NULL;
    assert_int_equal(h_start_dataplane(c2.path, &dp2), 0);
    char base2[64];
    assert_int_equal(h_url(base2, sizeof(base2), c2.dataplane_port, NULL), 0);
    wait_health(base2);
    assert_true(h_proc_log_contains(dp2, "prefix index: attached"));
    /* Its first request. */
    next_turn_is_affinity(base2, conv, 50, home);
    /* And what it records, the first one sees. */
    next_turn_is_affinity(f.base, conv, 60, home);
    json_decref(conv);
    h_fleet_stop(&f);
}

static int start_cp_fresh(const char *config, struct h_proc **out)
{
    char bin[H_PATH_MAX];
    int rc = h_bin_path("switchyard-controlplane", bin, sizeof(bin));
    if (rc != 0)
        return rc;
    const char *argv[] = {bin, "--config", config, "--fresh", NULL};
    return h_spawn("controlplane", argv, out);
}

static bool cp_ready(void *arg)
{
    return h_proc_log_contains(arg, "control plane ready");
}

static void test_fresh_removes_the_index(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(
        &f, &(struct h_fleet_opts){.n = 3, .policy = "cache_aware", .dataplane_extra = DEBUG});
    char home[64];
    json_t *conv = start_conversation(f.base, 70, home, sizeof(home));
    h_fleet_stop(&f);
    assert_int_equal(h_proc_stop(f.dp, H_STOP_TIMEOUT_MS), 0);
    assert_int_equal(h_proc_stop(f.cp, H_STOP_TIMEOUT_MS), 0);
    /* A plain restart keeps it... */
    assert_int_equal(h_start_controlplane(f.cfg.path, &f.cp), 0);
    assert_int_equal(h_wait_until(cp_ready, f.cp, WAIT_MS), 0);
    assert_true(h_proc_log_contains(f.cp, "re-attached prefix index segment"));
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    wait_health(f.base);
    next_turn_is_affinity(f.base, conv, 80, home);
    assert_int_equal(h_proc_stop(f.dp, H_STOP_TIMEOUT_MS), 0);
    assert_int_equal(h_proc_stop(f.cp, H_STOP_TIMEOUT_MS), 0);
    /* ...--fresh does not. */
    assert_int_equal(start_cp_fresh(f.cfg.path, &f.cp), 0);
    assert_int_equal(h_wait_until(cp_ready, f.cp, WAIT_MS), 0);
    assert_true(h_proc_log_contains(f.cp, "created prefix index segment"));
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    wait_health(f.base);
    add_message(conv, "user", 90, 300);
    char worker[64], decision[64];
    chat_turn(f.base, conv, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(decision, "no_match");
    json_decref(conv);
}

/* One router node over the given mocks, listed in `order`. */
static void start_node(struct h_config *c, const char *name, const struct h_mock *mocks,
                       const int order[3], struct h_proc **cp, struct h_proc **dp, char *base,
                       size_t blen)
{
    memset(c, 0, sizeof(*c));
    c->policy = "cache_aware";
    c->dataplane_extra = DEBUG;
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof(id), "w%d", order[i] + 1);
        assert_int_equal(h_config_add_worker(c, mocks[order[i]].url, id, H_FLEET_MODEL, NULL), 0);
    }
    assert_int_equal(h_config_write(c, name), 0);
    assert_int_equal(h_start_controlplane(c->path, cp), 0);
    assert_int_equal(h_wait_until(cp_ready, *cp, WAIT_MS), 0);
    assert_int_equal(h_start_dataplane(c->path, dp), 0);
    assert_int_equal(h_url(base, blen, c->dataplane_port, NULL), 0);
    wait_health(base);
}

static void completion(const char *base, const char *prompt, char *worker, size_t wlen,
                       char *decision, size_t dlen)
{
    json_t *body =
        json_pack("{s:s, s:s, s:i}", "model", H_FLEET_MODEL, "prompt", prompt, "max_tokens", 1);
    post_routed(base, "/v1/completions", body, worker, wlen, decision, dlen);
    json_decref(body);
}

static void test_independent_nodes_agree_on_new_prefixes(void **state)
{
    (void)state;
    struct h_mock mocks[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_mock_start(&mocks[i], "--model", H_FLEET_MODEL, "--seed", "7", NULL), 0);
    struct h_config ca, cb;
    struct h_proc *cp_a, *dp_a, *cp_b, *dp_b;
    char base_a[64], base_b[64];
    /* Opposite orders: other slots, other candidate orders. */
    start_node(&ca, "node-a.yaml", mocks, (const int[3]){0, 1, 2}, &cp_a, &dp_a, base_a,
               sizeof(base_a));
    start_node(&cb, "node-b.yaml", mocks, (const int[3]){2, 1, 0}, &cp_b, &dp_b, base_b,
               sizeof(base_b));
    assert_string_not_equal(ca.shm_name, cb.shm_name);

    unsigned used = 0;
    for (unsigned k = 0; k < 9; k++) {
        char *prompt = h_routed_text(1000 + k, 1500);
        char wa[64], wb[64], da[64], db[64];
        /* Alternate which node sees it first. */
        const char *first = k % 2 == 0 ? base_a : base_b;
        const char *second = k % 2 == 0 ? base_b : base_a;
        completion(first, prompt, wa, sizeof(wa), da, sizeof(da));
        completion(second, prompt, wb, sizeof(wb), db, sizeof(db));
        assert_string_equal(da, "no_match");
        assert_string_equal(db, "no_match"); /* the other node never saw it */
        assert_string_equal(wa, wb);
        used |= 1u << (wa[strlen(wa) - 1] - '1');
        /* Its next request on the first node: affinity there. */
        completion(first, prompt, wb, sizeof(wb), db, sizeof(db));
        assert_string_equal(db, "affinity");
        assert_string_equal(wa, wb);
        free(prompt);
    }
    /* The prompts spread: more than one worker took new ones. */
    assert_true(used != 1u && used != 2u && used != 4u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_hot_restart_and_crash_keep_affinity),
        H_TEST(test_second_dataplane_knows_the_prefix),
        H_TEST(test_fresh_removes_the_index),
        H_TEST(test_independent_nodes_agree_on_new_prefixes),
    };
    return cmocka_run_group_tests_name("shared_index", tests, NULL, NULL);
}
