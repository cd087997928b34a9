/*
 * End-to-end: the Responses API's ids under attack (docs/security.md,
 * security review II, findings 12, 13 and 21), each replayed through the
 * real binaries against mock workers:
 *
 *  - 12: tenant B names tenant A's response id. GET, DELETE, cancel and
 *    previous_response_id all get exactly what an id that does not exist
 *    gets (vLLM's 404, byte for byte), while A still reads and continues
 *    its conversation. Before the fix B read A's response and continued
 *    A's conversation on A's worker.
 *  - 13: a worker answers an unrelated request with a live id another
 *    worker made (the mock's response_id fault). The id stays with its
 *    holder, the refused rebind is counted and logged, and the victim's
 *    next turn still reaches the holder. Before the fix the id moved to
 *    the liar and the victim's next turn went there.
 *  - 21: an id route whose id is not vLLM's alphabet ("%2E%2E", which the
 *    worker's URL resolved to POST /v1/cancel; "%3F", which started a
 *    query) or too long is answered 400 invalid_response_id and no worker
 *    sees a request.
 *
 * Mutation-verified: tests/mutants/sec12-response-other-tenant-served,
 * sec13-response-id-rebound and sec21-response-id-dotdot each fail one
 * test here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"

#define WAIT_MS    10000
#define UNKNOWN_ID "resp_0123456789abcdef0123456789abcdef"

struct answer {
    long status;
    char *body; /* owned */
    char worker[64];
    char decision[64];
    char id[192]; /* the id of a 200 answer of POST /v1/responses */
};

static void answer_fini(struct answer *a)
{
    free(a->body);
    memset(a, 0, sizeof(*a));
}

/* One request through the router; key NULL = no Authorization. */
static void call(const char *method, const char *url, const char *body, const char *key,
                 struct answer *out)
{
    char auth[128];
    const char *headers[3] = {"Content-Type: application/json", NULL, NULL};
    if (key != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        headers[1] = auth;
    }
    struct h_req q = {.method = method, .url = url, .body = body, .headers = headers};
    struct h_resp r = {0};
    memset(out, 0, sizeof(*out));
    assert_int_equal(h_http(&q, &r), 0);
    out->status = r.status;
    out->body = strdup(r.body);
    assert_non_null(out->body);
    (void)h_resp_header(&r, "x-switchyard-worker", out->worker, sizeof(out->worker));
    (void)h_resp_header(&r, "x-switchyard-decision", out->decision, sizeof(out->decision));
    h_resp_fini(&r);
}

/* POST /v1/responses (prev NULL = a new conversation). */
static void create(const char *base, const char *prev, const char *key, struct answer *out)
{
    json_t *b = json_pack("{s:s, s:s, s:i}", "model", H_FLEET_MODEL, "input", "hello there",
                          "max_output_tokens", 2);
    if (prev != NULL)
        json_object_set_new(b, "previous_response_id", json_string(prev));
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/responses", base);
    call("POST", url, text, key, out);
    free(text);
    if (out->status != 200)
        return;
    json_t *j = json_loads(out->body, 0, NULL);
    assert_non_null(j);
    snprintf(out->id, sizeof(out->id), "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
}

/* vLLM's answer for an id it does not hold (the mock writes it the same). */
static void not_found_body(const char *id, char *out, size_t cap)
{
    snprintf(out, cap,
             "{\"error\":{\"message\":\"Response with id '%s' not found.\",\"type\":"
             "\"invalid_request_error\",\"param\":\"response_id\",\"code\":404}}",
             id);
}

static void sha_hex(const char *key, char out[65])
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "printf %%s '%s' | sha256sum", key);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(out, 65, p));
    pclose(p);
    out[64] = '\0';
}

/* ---- 12: ids are the tenant's ------------------------------------------------------ */

/* B's request by A's id and by an id nobody made: the same status, and the
 * same body but for the id itself. */
static void expect_as_unknown(const char *method, const char *base, const char *suffix,
                              const char *a_id, const char *key)
{
    char url[512], want[512];
    struct answer theirs, unknown;
    snprintf(url, sizeof(url), "%s/v1/responses/%s%s", base, a_id, suffix);
    call(method, url, NULL, key, &theirs);
    snprintf(url, sizeof(url), "%s/v1/responses/%s%s", base, UNKNOWN_ID, suffix);
    call(method, url, NULL, key, &unknown);
    if (theirs.status != unknown.status)
        fprintf(stderr, "%s ...%s: %ld %s\n", method, suffix, theirs.status, theirs.body);
    assert_int_equal(theirs.status, unknown.status);
    if (unknown.status == 404) {
        not_found_body(UNKNOWN_ID, want, sizeof(want));
        assert_string_equal(unknown.body, want); /* the worker's own 404 */
        not_found_body(a_id, want, sizeof(want));
        assert_string_equal(theirs.body, want);
    } else {
        assert_string_equal(theirs.body, unknown.body);
    }
    answer_fini(&theirs);
    answer_fini(&unknown);
}

static void test_other_tenant_gets_not_found(void **state)
{
    (void)state;
    char hex_a[65], hex_b[65], text[512], keys[H_PATH_MAX], dp_extra[H_PATH_MAX + 64];
    sha_hex("key-a", hex_a);
    sha_hex("key-b", hex_b);
    snprintf(text, sizeof(text),
             "tenants:\n  - name: team-a\n    key_sha256: %s\n"
             "  - name: team-b\n    key_sha256: %s\n",
             hex_a, hex_b);
    assert_int_equal(h_write_file("keys.yaml", text, keys, sizeof(keys)), 0);
    snprintf(dp_extra, sizeof(dp_extra), "api_keys_file: %s\ndebug_headers: true\n", keys);
    /* One worker: whatever routes B's request, it reaches A's worker. */
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = dp_extra});

    struct answer a0;
    create(f.base, NULL, "key-a", &a0);
    assert_int_equal(a0.status, 200);
    assert_true(a0.id[0] != '\0');

    expect_as_unknown("GET", f.base, "", a0.id, "key-b");
    expect_as_unknown("POST", f.base, "/cancel", a0.id, "key-b");
    expect_as_unknown("DELETE", f.base, "", a0.id, "key-b");

    /* B continuing A's conversation: vLLM's 404 for an unknown previous
     * id, and the worker never sees the request. */
    long long before = h_fleet_mock_stat(&f, 0, "requests_total");
    struct answer b1;
    create(f.base, a0.id, "key-b", &b1);
    char want[512];
    not_found_body(a0.id, want, sizeof(want));
    if (b1.status != 404)
        fprintf(stderr, "B's turn on A's id: %ld %s\n", b1.status, b1.body);
    assert_int_equal(b1.status, 404);
    assert_string_equal(b1.body, want);
    assert_string_not_equal(b1.decision, "response_affinity");
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), before);
    struct answer bu;
    create(f.base, UNKNOWN_ID, "key-b", &bu);
    not_found_body(UNKNOWN_ID, want, sizeof(want));
    assert_int_equal(bu.status, 404);
    assert_string_equal(bu.body, want);

    /* A's own: read and continued as before. */
    char url[512];
    struct answer ag, a1;
    snprintf(url, sizeof(url), "%s/v1/responses/%s", f.base, a0.id);
    call("GET", url, NULL, "key-a", &ag);
    assert_int_equal(ag.status, 200);
    assert_string_equal(ag.decision, "response_affinity");
    create(f.base, a0.id, "key-a", &a1);
    assert_int_equal(a1.status, 200);
    assert_string_equal(a1.decision, "response_affinity");
    /* B's own ids are B's. */
    struct answer b2, bg;
    create(f.base, NULL, "key-b", &b2);
    assert_int_equal(b2.status, 200);
    snprintf(url, sizeof(url), "%s/v1/responses/%s", f.base, b2.id);
    call("GET", url, NULL, "key-b", &bg);
    assert_int_equal(bg.status, 200);
    answer_fini(&ag);
    call("GET", url, NULL, "key-a", &ag);
    assert_int_equal(ag.status, 404);
    answer_fini(&a0);
    answer_fini(&a1);
    answer_fini(&ag);
    answer_fini(&b1);
    answer_fini(&b2);
    answer_fini(&bg);
    answer_fini(&bu);
    answer_fini(&b2);
    answer_fini(&bg);
    h_fleet_stop(&f);
}

/* ---- 13: a live id stays with its holder ------------------------------------------- */

struct metric_cond {
    const struct h_fleet *f;
    const char *sample;
    long long want;
};

static bool metric_reaches(void *arg)
{
    const struct metric_cond *c = arg;
    return h_fleet_dp_metric(c->f, c->sample) >= c->want;
}

static void test_worker_cannot_rebind_live_id(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 2,
                                             .policy = "round_robin",
                                             .dataplane_extra = "debug_headers: true\n"});
    struct answer v0;
    create(f.base, NULL, NULL, &v0);
    assert_int_equal(v0.status, 200);
    size_t holder = strcmp(v0.worker, "w1") == 0 ? 0 : 1;
    size_t liar = 1 - holder;
    char fault[256];
    snprintf(fault, sizeof(fault), "{\"response_id\":\"%s\"}", v0.id);
    assert_int_equal(h_mock_faults(f.mock[liar].url, fault), 0);

    /* Unrelated conversations until one lands on the liar (round robin:
     * the next or the one after), which answers with the victim's id. */
    char liar_id[8];
    snprintf(liar_id, sizeof(liar_id), "w%zu", liar + 1);
    bool lied = false;
    for (int i = 0; i < 4 && !lied; i++) {
        struct answer o;
        create(f.base, NULL, NULL, &o);
        assert_int_equal(o.status, 200);
        lied = strcmp(o.worker, liar_id) == 0;
        if (lied)
            assert_string_equal(o.id, v0.id);
        answer_fini(&o);
    }
    assert_true(lied);
    /* The victim's next turns, and a GET, still reach the holder. */
    for (int i = 0; i < 3; i++) {
        struct answer v1;
        create(f.base, v0.id, NULL, &v1);
        assert_int_equal(v1.status, 200);
        assert_string_equal(v1.worker, v0.worker);
        assert_string_equal(v1.decision, "response_affinity");
        answer_fini(&v1);
    }
    char url[512];
    struct answer g;
    snprintf(url, sizeof(url), "%s/v1/responses/%s", f.base, v0.id);
    call("GET", url, NULL, NULL, &g);
    assert_int_equal(g.status, 200);
    assert_string_equal(g.worker, v0.worker);
    answer_fini(&g);
    /* The refused rebind is counted and logged, naming the liar. */
    struct metric_cond mc = {&f, "switchyard_response_id_conflicts_total", 1};
    assert_int_equal(h_wait_until(metric_reaches, &mc, WAIT_MS), 0);
    assert_true(h_proc_log_contains(f.dp, "answered with response id"));
    char named[32];
    snprintf(named, sizeof(named), "worker %s answered", liar_id);
    assert_true(h_proc_log_contains(f.dp, named));
    answer_fini(&v0);
    h_fleet_stop(&f);
}

/* ---- 21: ids are vLLM's alphabet ---------------------------------------------------- */

static void expect_invalid_id(const char *method, const char *base, const char *path)
{
    char url[1024];
    snprintf(url, sizeof(url), "%s%s", base, path);
    struct answer a;
    call(method, url, method[0] == 'P' ? "" : NULL, NULL, &a);
    if (a.status != 400)
        fprintf(stderr, "%s %s: %ld %s\n", method, path, a.status, a.body);
    assert_int_equal(a.status, 400);
    json_t *j = json_loads(a.body, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "invalid_response_id");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_true(json_is_string(json_object_get(err, "message")));
    json_decref(j);
    answer_fini(&a);
}

static void test_id_outside_alphabet_refused(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    long long before = h_fleet_mock_stat(&f, 0, "requests_total");
    assert_true(before >= 0);
    expect_invalid_id("POST", f.base, "/v1/responses/%2E%2E/cancel");
    expect_invalid_id("GET", f.base, "/v1/responses/%2E%2E");
    expect_invalid_id("GET", f.base, "/v1/responses/resp_a%3Fstream=true");
    expect_invalid_id("GET", f.base, "/v1/responses/resp_a%23frag");
    expect_invalid_id("GET", f.base, "/v1/responses/resp%20a");
    char path[512];
    int n = snprintf(path, sizeof(path), "/v1/responses/");
    memset(path + n, 'a', 160);
    path[n + 160] = '\0';
    expect_invalid_id("GET", f.base, path);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), before);

    /* vLLM's own shape passes (the mock answers: not found), and so does
     * the longest id that is kept. */
    struct answer a;
    char url[1024];
    snprintf(url, sizeof(url), "%s/v1/responses/resp_Ab-9_z", f.base);
    call("GET", url, NULL, NULL, &a);
    assert_int_equal(a.status, 404);
    assert_non_null(strstr(a.body, "Response with id 'resp_Ab-9_z' not found."));
    answer_fini(&a);
    path[n + 159] = '\0';
    snprintf(url, sizeof(url), "%s%s", f.base, path);
    call("GET", url, NULL, NULL, &a);
    assert_int_equal(a.status, 404);
    answer_fini(&a);
    assert_int_equal(h_fleet_mock_stat(&f, 0, "requests_total"), before + 2);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_other_tenant_gets_not_found),
        H_TEST(test_worker_cannot_rebind_live_id),
        H_TEST(test_id_outside_alphabet_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
