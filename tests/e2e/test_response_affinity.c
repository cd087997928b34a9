/*
 * End-to-end: Responses stickiness (docs/api.md). A 10-turn conversation,
 * each turn naming the previous one's id, alternates between two data
 * planes of one node, one of which is hot-restarted in the middle: every
 * turn reaches the worker holding its previous response (the mock answers
 * 404 anywhere else) and succeeds, streamed and not, while round_robin
 * would spread the turns. The worker holding a response is drained: the
 * next turn gets 503 previous_response_unavailable, not another worker's
 * answer; a removed holder gives 404; an id the node never made goes by
 * the policy. A reset_load of the holder is not seen: the turn waits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_holder.h"
#include "shm/registry.h"

#define WAIT_MS 15000

struct turn {
    long status;
    char id[192];
    char worker[64];
    char decision[64];
    char code[64]; /* error.code of an error answer */
};

/* The id of a stream's response.completed event. */
static void stream_id(const char *body, char *out, size_t cap)
{
    const char *ev = strstr(body, "event: response.completed\ndata: ");
    assert_non_null(ev);
    json_t *j =
        json_loads(ev + strlen("event: response.completed\ndata: "), JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(j);
    snprintf(out, cap, "%s",
             json_string_value(json_object_get(json_object_get(j, "response"), "id")));
    json_decref(j);
}

static void take_turn(const char *base, const char *prev, bool stream, int n, struct turn *t)
{
    json_t *body = json_pack("{s:s, s:s+, s:i, s:b}", "model", H_FLEET_MODEL, "input", "turn ",
                             n == 0 ? "zero" : "next", "max_output_tokens", 2, "stream", stream);
    if (prev != NULL)
        json_object_set_new(body, "previous_response_id", json_string(prev));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/responses", base);
    struct h_resp r = {0};
    assert_int_equal(h_http_post_json(url, text, &r), 0);
    free(text);
    memset(t, 0, sizeof(*t));
    t->status = r.status;
    h_resp_header(&r, "x-switchyard-worker", t->worker, sizeof(t->worker));
    h_resp_header(&r, "x-switchyard-decision", t->decision, sizeof(t->decision));
    if (r.status == 200 && stream) {
        assert_null(strstr(r.body, "[DONE]"));
        stream_id(r.body, t->id, sizeof(t->id));
    } else {
        json_t *j = h_resp_json(&r);
        assert_non_null(j);
        if (r.status == 200)
            snprintf(t->id, sizeof(t->id), "%s", json_string_value(json_object_get(j, "id")));
        json_t *code = json_object_get(json_object_get(j, "error"), "code");
        if (json_is_string(code))
            snprintf(t->code, sizeof(t->code), "%s", json_string_value(code));
        json_decref(j);
    }
    if (r.status != 200 && r.status != 503 && r.status != 404)
        fprintf(stderr, "turn %d: %ld %s\n", n, r.status, r.body);
    h_resp_fini(&r);
}

static struct h_proc *start_hot_restart(const char *config_path)
{
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path("switchyard-dataplane", bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", config_path, "--hot-restart", NULL};
    struct h_proc *p = NULL;
    assert_int_equal(h_spawn("dataplane", argv, &p), 0);
    return p;
}

struct log_cond {
    const struct h_proc *p;
    const char *needle;
};

static bool log_cond_holds(void *arg)
{
    const struct log_cond *c = arg;
    return h_proc_log_contains(c->p, c->needle);
}

static void run_conversation(bool stream)
{
    struct h_fleet f;
    struct h_fleet_opts o = {
        .n = 3, .policy = "round_robin", .dataplane_extra = "debug_headers: true\n"};
    h_fleet_start(&f, &o);
    /* A second data plane of the node: same segment, its own port. */
    struct h_config cfg2 = f.cfg;
    cfg2.dataplane_port = 0;
    cfg2.path[0] = '\0';
    assert_int_equal(h_config_write(&cfg2, "dp2.yaml"), 0);
    struct h_proc *dp2 = NULL;
    assert_int_equal(h_start_dataplane(cfg2.path, &dp2), 0);
    char base2[64], health[96];
    assert_int_equal(h_url(base2, sizeof(base2), cfg2.dataplane_port, NULL), 0);
    snprintf(health, sizeof(health), "%s/health", base2);
    assert_int_equal(h_wait_http_ok(health, WAIT_MS), 0);

    char prev[192] = "";
    char holder[64] = "";
    for (int n = 0; n < 10; n++) {
        if (n == 5) {
            /* Hot restart of the first data plane, mid-conversation. */
            struct h_proc *old = f.dp;
            struct h_proc *next = start_hot_restart(f.cfg.path);
            struct log_cond lc = {.p = next, .needle = "hot restart: serving"};
            assert_int_equal(h_wait_until(log_cond_holds, &lc, WAIT_MS), 0);
            old->expected = true;
            assert_int_equal(h_proc_wait(old, WAIT_MS, NULL), 0);
            f.dp = next;
        }
        struct turn t;
        take_turn(n % 2 == 0 ? f.base : base2, n == 0 ? NULL : prev, stream, n, &t);
        assert_int_equal(t.status, 200);
        assert_true(t.id[0] != '\0');
        if (n == 0) {
            snprintf(holder, sizeof(holder), "%s", t.worker);
        } else {
            /* Every turn on the worker holding the conversation. */
            assert_string_equal(t.worker, holder);
            assert_string_equal(t.decision, "response_affinity");
        }
        snprintf(prev, sizeof(prev), "%s", t.id);
    }
    /* GET and cancel by id go there too (a finished response: 400). */
    char url[512];
    snprintf(url, sizeof(url), "%s/v1/responses/%s", base2, prev);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 200);
    char w[64];
    assert_int_equal(h_resp_header(&r, "x-switchyard-worker", w, sizeof(w)), 0);
    assert_string_equal(w, holder);
    h_resp_fini(&r);
    snprintf(url, sizeof(url), "%s/v1/responses/%s/cancel", f.base, prev);
    assert_int_equal(h_http_post_json(url, "", &r), 0);
    assert_int_equal(r.status, 400);
    h_resp_fini(&r);
    h_fleet_stop(&f);
}

static void test_conversation_sticks(void **state)
{
    (void)state;
    run_conversation(false);
}

static void test_streamed_conversation_sticks(void **state)
{
    (void)state;
    run_conversation(true);
}

static int admin(const struct h_fleet *f, const char *method, const char *path, const char *body)
{
    char url[256];
    h_url(url, sizeof(url), f->cfg.admin_port, path);
    const char *const hdrs[] = {"Content-Type: application/json", NULL};
    struct h_req q = {.method = method, .url = url, .body = body, .headers = hdrs};
    struct h_resp r = {0};
    int rc = h_http(&q, &r);
    long st = r.status;
    if (rc == 0 && (st < 200 || st > 299))
        fprintf(stderr, "admin %s %s: %ld %s\n", method, path, st, r.body);
    h_resp_fini(&r);
    return rc == 0 && st >= 200 && st <= 299 ? 0 : -1;
}

struct status_cond {
    const char *base;
    const char *prev;
    long want;
    struct turn t;
};

static bool turn_answers(void *arg)
{
    struct status_cond *c = arg;
    take_turn(c->base, c->prev, false, 1, &c->t);
    return c->t.status == c->want;
}

struct reset_cond {
    struct shm_segment *seg;
    const char *id;
};

static bool reset_drains(void *arg)
{
    struct reset_cond *c = arg;
    struct shm_worker_info w;
    return shm_registry_find(c->seg, c->id, &w) == 0 && w.draining && w.resetting;
}

/* Two workers, round_robin, and a first turn: its worker and response id. */
static void start_conversation(struct h_fleet *f, const char *health_interval, char holder[64],
                               char id[192])
{
    struct h_fleet_opts o = {.n = 2,
                             .policy = "round_robin",
                             .dataplane_extra = "debug_headers: true\n",
                             .health_interval = health_interval};
    h_fleet_start(f, &o);
    struct turn t;
    take_turn(f->base, NULL, false, 0, &t);
    assert_int_equal(t.status, 200);
    snprintf(holder, 64, "%s", t.worker);
    snprintf(id, 192, "%s", t.id);
}

static void test_unavailable_holder(void **state)
{
    (void)state;
    struct h_fleet f;
    struct turn t;
    char holder[64], id[192];
    start_conversation(&f, "100ms", holder, id);
    /* Drained: 503 previous_response_unavailable, never another worker's 200. */
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s/drain", holder);
    assert_int_equal(admin(&f, "POST", path, "{\"draining\":true}"), 0);
    struct status_cond c = {.base = f.base, .prev = id, .want = 503};
    assert_int_equal(h_wait_until(turn_answers, &c, WAIT_MS), 0);
    assert_string_equal(c.t.code, "previous_response_unavailable");
    char url[512];
    snprintf(url, sizeof(url), "%s/v1/responses/%s", f.base, id);
    struct h_resp r = {0};
    assert_int_equal(h_http_get(url, &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "previous_response_unavailable"));
    /* When to ask again, and no worker id (the log has it). */
    char ra[16];
    assert_int_equal(h_resp_header(&r, "Retry-After", ra, sizeof(ra)), 0);
    assert_string_equal(ra, "1");
    assert_null(strstr(r.body, holder));
    h_resp_fini(&r);
    /* Back in service: the conversation goes on there. */
    assert_int_equal(admin(&f, "POST", path, "{\"draining\":false}"), 0);
    c.want = 200;
    assert_int_equal(h_wait_until(turn_answers, &c, WAIT_MS), 0);
    assert_string_equal(c.t.worker, holder);
    /* An id this node never made: the policy's worker answers (its own 404). */
    take_turn(f.base, "resp_made_elsewhere", false, 1, &t);
    assert_int_equal(t.status, 404);
    assert_string_not_equal(t.decision, "response_affinity");
    h_fleet_stop(&f);
}

/* A holder removed from the fleet: 404 previous_response_unavailable. */
static void test_removed_holder(void **state)
{
    (void)state;
    struct h_fleet f;
    struct h_fleet_opts o = {.n = 1, .dataplane_extra = "debug_headers: true\n"};
    h_fleet_start(&f, &o);
    struct h_mock extra;
    assert_int_equal(h_mock_start(&extra, "--model", H_FLEET_MODEL, NULL), 0);
    char body[256];
    snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"w9\",\"model\":\"%s\"}", extra.url,
             H_FLEET_MODEL);
    assert_int_equal(admin(&f, "POST", "/workers", body), 0);
    assert_int_equal(admin(&f, "POST", "/workers/w1/drain", "{\"draining\":true}"), 0);
    struct status_cond c = {.base = f.base, .prev = NULL, .want = 200};
    /* Wait until the new worker takes the turns. */
    int64_t deadline = h_now_ms() + WAIT_MS;
    for (;;) {
        take_turn(f.base, NULL, false, 0, &c.t);
        if ((c.t.status == 200 && strcmp(c.t.worker, "w9") == 0) || h_now_ms() > deadline)
            break;
    }
    assert_string_equal(c.t.worker, "w9");
    char id[192];
    snprintf(id, sizeof(id), "%s", c.t.id);
    assert_int_equal(admin(&f, "POST", "/workers/w1/drain", "{\"draining\":false}"), 0);
    assert_int_equal(admin(&f, "DELETE", "/workers/w9", NULL), 0);
    c.prev = id;
    c.want = 404;
    assert_int_equal(h_wait_until(turn_answers, &c, WAIT_MS), 0);
    assert_string_equal(c.t.code, "previous_response_unavailable");
    h_fleet_stop(&f);
}

/*
 * A reset_load of the holder is invisible to the conversation: the reset
 * drains the holder while it asks the data planes, and a turn that arrives
 * meanwhile waits for it instead of getting 503. A lease holder that is on
 * the admin channel but stopped keeps the reset open for its timeout.
 */
static void test_holder_reset_is_invisible(void **state)
{
    (void)state;
    struct h_fleet f;
    struct turn t;
    char holder[64], id[192];
    start_conversation(&f, "1h", holder, id);
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&f.seg, holder, &w), 0);
    struct h_holder stuck;
    struct h_holder_spec hs = {.shm = f.cfg.shm_name,
                               .socket = f.cfg.admin_socket,
                               .slot = w.slot,
                               .generation = w.generation};
    h_holder_start(&stuck, &hs);
    kill(stuck.pid, SIGSTOP);
    char url[256], path[128];
    snprintf(path, sizeof(path), "/workers/%s/reset_load", holder);
    h_url(url, sizeof(url), f.cfg.admin_port, path);
    struct h_async_opts ao = {.method = "POST"};
    struct h_async *reset;
    assert_int_equal(h_async_start(url, "", &ao, &reset), 0);
    struct reset_cond rc = {.seg = &f.seg, .id = holder};
    assert_int_equal(h_wait_until(reset_drains, &rc, WAIT_MS), 0);
    /* Mid-reset: the turn waits for the holder, then goes there. */
    take_turn(f.base, id, false, 1, &t);
    assert_int_equal(t.status, 200);
    assert_string_equal(t.worker, holder);
    assert_string_equal(t.decision, "response_affinity");
    /* It was answered after the reset ended (409: the stopped holder never
     * answered), not by a worker taken from under the reset. */
    assert_int_equal(h_async_wait(reset, WAIT_MS), 0);
    struct h_resp resp;
    assert_int_equal(h_async_take_resp(reset, &resp), 0);
    assert_int_equal(resp.status, 409);
    h_resp_fini(&resp);
    h_async_destroy(reset);
    assert_int_equal(shm_registry_find(&f.seg, holder, &w), 0);
    assert_false(w.draining);
    kill(stuck.pid, SIGCONT);
    h_holder_finish(&stuck);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_conversation_sticks),       H_TEST(test_streamed_conversation_sticks),
        H_TEST(test_unavailable_holder),        H_TEST(test_removed_holder),
        H_TEST(test_holder_reset_is_invisible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
