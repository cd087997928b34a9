/*
 * End-to-end tests of the access log (dataplane.access_log): the real
 * data plane in front of mock workers writes one JSON line per request,
 * and each test reads the file back and checks the fields of the requests
 * it sent: a success, a retry (first attempt answered 503, second on the
 * other worker), an in-band stream error, a client that left mid-stream, a
 * first-byte timeout, a prefill/decode request, and hostile strings (a
 * model name and a request id full of quotes, backslashes and control
 * characters) that must still give valid JSON. Log rotation: the file is
 * renamed and SIGUSR1 sent while traffic flows, and every request's line is
 * found in one of the two files. A log that cannot be written (a pipe
 * nobody reads) never slows requests: lines are dropped and counted.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_load.h"

#define WAIT_MS 10000

static const char *const CHAT =
    "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":4,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hello access log\"}]}";
static const char *const CHAT_STREAM =
    "{\"model\":\"" H_FLEET_MODEL "\",\"max_tokens\":6,\"stream\":true,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"stream for the access log\"}]}";

/* ---- reading the log ----------------------------------------------------------- */

/* Every line of path parsed (a JSON array, new reference); a line that is
 * not a JSON object fails the test. Missing file: an empty array. */
static json_t *read_lines(const char *path)
{
    json_t *all = json_array();
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return all;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, fp)) > 0) {
        /* A line the writer is still writing is not read yet: only the
         * last one may lack its newline (every line is one write). */
        if (line[n - 1] != '\n') {
            assert_true(getline(&line, &cap, fp) <= 0);
            break;
        }
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)n, 0, &err);
        if (o == NULL || !json_is_object(o))
            fail_msg("not a JSON object: %s (%s)", line, err.text);
        json_array_append_new(all, o);
    }
    free(line);
    fclose(fp);
    return all;
}

struct find {
    const char *path;
    const char *key; /* a string field */
    const char *value;
    json_t *found; /* a new reference once found */
};

static bool line_found(void *arg)
{
    struct find *c = arg;
    json_t *all = read_lines(c->path);
    size_t i;
    json_t *o;
    json_array_foreach(all, i, o)
    {
        json_t *v = json_object_get(o, c->key);
        if (json_is_string(v) && strcmp(json_string_value(v), c->value) == 0) {
            c->found = json_incref(o);
            break;
        }
    }
    json_decref(all);
    return c->found != NULL;
}

/* The line whose field key is value (waits for the writer); new reference. */
static json_t *wait_line(const char *path, const char *key, const char *value)
{
    struct find c = {.path = path, .key = key, .value = value};
    if (h_wait_until(line_found, &c, WAIT_MS) != 0)
        fail_msg("no access-log line with %s=%s in %s", key, value, path);
    return c.found;
}

static const char *str_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        fail_msg("field %s is not a string", key);
    return json_string_value(v);
}

static long long int_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("field %s is not an integer", key);
    return (long long)json_integer_value(v);
}

static void assert_null_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_non_null(v); /* present */
    assert_true(json_is_null(v));
}

/* Sends body to path with X-Request-Id id; returns the status. */
static long send_with_id(struct h_fleet *f, const char *path, const char *body, const char *id)
{
    char url[160], hdr[200];
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    snprintf(hdr, sizeof(hdr), "X-Request-Id: %s", id);
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};
    struct h_req req = {.url = url, .body = body, .headers = headers};
    struct h_resp resp;
    assert_int_equal(h_http(&req, &resp), 0);
    long status = resp.status;
    h_resp_fini(&resp);
    return status;
}

static void log_path(char *buf, size_t len)
{
    assert_int_equal(h_tmp_path("access.log", buf, len), 0);
}

static char dp_extra[512];

static void fleet_with_log(struct h_fleet *f, size_t n, const char *more)
{
    char path[H_PATH_MAX];
    log_path(path, sizeof(path));
    snprintf(dp_extra, sizeof(dp_extra), "access_log: %s\n%s", path, more != NULL ? more : "");
    h_fleet_start(
        f, &(struct h_fleet_opts){.n = n, .policy = "round_robin", .dataplane_extra = dp_extra});
}

static json_t *attempt(json_t *line, size_t i)
{
    json_t *a = json_array_get(json_object_get(line, "attempts"), i);
    assert_non_null(a);
    return a;
}

/* ---- success, retry, in-band error, hostile strings ----------------------------- */

static void test_success_retry_and_in_band(void **state)
{
    (void)state;
    struct h_fleet f;
    fleet_with_log(&f, 2, NULL);
    char path[H_PATH_MAX];
    log_path(path, sizeof(path));

    /* A success. */
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, "req-ok"), 200);
    json_t *l = wait_line(path, "request_id", "req-ok");
    assert_string_equal(str_of(l, "method"), "POST");
    assert_string_equal(str_of(l, "route"), "/v1/chat/completions");
    assert_string_equal(str_of(l, "model"), H_FLEET_MODEL);
    assert_null_field(l, "tenant");
    assert_non_null(str_of(l, "worker"));
    assert_string_equal(str_of(l, "decision"), "round_robin");
    assert_int_equal(int_of(l, "status"), 200);
    assert_int_equal(int_of(l, "bytes_in"), (long long)strlen(CHAT));
    assert_true(int_of(l, "bytes_out") > 20);
    assert_true(int_of(l, "ttfb_ms") >= 0);
    assert_true(int_of(l, "duration_ms") >= int_of(l, "ttfb_ms"));
    assert_true(int_of(l, "prompt_bytes") >= (long long)strlen("hello access log"));
    assert_null_field(l, "disconnect");
    assert_null_field(l, "prefill_worker");
    assert_int_equal(int_of(l, "in_band_errors"), 0);
    assert_int_equal(int_of(l, "attempts_total"), 1);
    assert_int_equal(json_array_size(json_object_get(l, "attempts")), 1);
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "ok");
    assert_int_equal(int_of(attempt(l, 0), "status"), 200);
    assert_string_equal(str_of(attempt(l, 0), "worker"), str_of(l, "worker"));
    const char *t = str_of(l, "time");
    assert_true(strlen(t) == 24 && t[10] == 'T' && t[23] == 'Z');
    json_decref(l);

    /* A retry: w1 answers 503; the request whose first attempt lands there
     * goes on to w2 (round robin sends one of two requests to w1 first). */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":503}"), 0);
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, "req-r1"), 200);
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, "req-r2"), 200);
    json_t *r1 = wait_line(path, "request_id", "req-r1");
    json_t *r2 = wait_line(path, "request_id", "req-r2");
    json_t *r = int_of(r1, "attempts_total") == 2 ? r1 : r2;
    assert_int_equal(int_of(r, "attempts_total"), 2);
    assert_string_equal(str_of(attempt(r, 0), "worker"), "w1");
    assert_string_equal(str_of(attempt(r, 0), "outcome"), "retryable_status");
    assert_int_equal(int_of(attempt(r, 0), "status"), 503);
    assert_string_equal(str_of(attempt(r, 1), "worker"), "w2");
    assert_string_equal(str_of(attempt(r, 1), "outcome"), "ok");
    assert_string_equal(str_of(r, "worker"), "w2");
    assert_int_equal(int_of(r, "status"), 200);
    json_decref(r1);
    json_decref(r2);
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"fail_status\":0}"), 0);

    /* An in-band error event inside a 200 stream (both workers do it). */
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(h_mock_faults(f.mock[i].url, "{\"stream_error\":\"KV load failed\","
                                                      "\"stream_error_after_chunks\":1}"),
                         0);
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT_STREAM, "req-inband"), 200);
    l = wait_line(path, "request_id", "req-inband");
    assert_int_equal(int_of(l, "in_band_errors"), 1);
    assert_true(json_is_true(json_object_get(l, "stream")));
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "in_band_error");
    json_decref(l);

    /* Hostile strings: the line stays valid JSON and carries them exactly. */
    const char *evil_id = "q\"u\\o{te}\"],\"status\":1";
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, evil_id), 200);
    l = wait_line(path, "request_id", evil_id);
    assert_int_equal(int_of(l, "status"), 200);
    json_decref(l);
    const char *evil_body = "{\"model\":\"evil\\\"\\n\\u0001\\\\\\u00e9\\u2028\",\"messages\":[]}";
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", evil_body, "ignored"), 404);
    l = wait_line(path, "model", "evil\"\n\001\\\xc3\xa9\xe2\x80\xa8");
    assert_int_equal(int_of(l, "status"), 404);
    assert_null_field(l, "worker");
    assert_int_equal(json_array_size(json_object_get(l, "attempts")), 0);
    json_decref(l);
    assert_int_equal(h_fleet_dp_metric_checked(&f, "switchyard_access_log_dropped_total"), 0);
    h_fleet_stop(&f);
}

/* ---- a client that leaves, a timeout -------------------------------------------- */

static void test_disconnect_and_timeout(void **state)
{
    (void)state;
    struct h_fleet f;
    fleet_with_log(&f, 1, "first_byte_timeout: 700ms\n");
    char path[H_PATH_MAX];
    log_path(path, sizeof(path));

    /* Mid-stream: two events arrive, the worker goes silent, the client leaves. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_after_chunks\":2,\"stall_ms\":10000}"),
                     0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    const char *hdrs[] = {"X-Request-Id: req-gone", NULL};
    struct h_async *a;
    assert_int_equal(h_async_start(url, CHAT_STREAM, &(struct h_async_opts){.headers = hdrs}, &a),
                     0);
    assert_int_equal(h_async_wait_body(a, 1, WAIT_MS), 0);
    assert_int_equal(h_async_abort(a), 0);
    json_t *l = wait_line(path, "request_id", "req-gone");
    assert_string_equal(str_of(l, "disconnect"), "streaming");
    assert_int_equal(int_of(l, "status"), 200); /* the headers were relayed */
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "cancelled");
    assert_true(int_of(l, "bytes_out") > 0);
    json_decref(l);
    h_async_destroy(a);

    /* Before the headers: the worker holds the request past first_byte_timeout. */
    assert_int_equal(h_mock_faults(f.mock[0].url, "{\"stall_after_chunks\":0,\"stall_ms\":0,"
                                                  "\"stall_before_headers_ms\":3000}"),
                     0);
    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, "req-slow"), 504);
    l = wait_line(path, "request_id", "req-slow");
    assert_int_equal(int_of(l, "status"), 504);
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "timeout");
    assert_null_field(l, "ttfb_ms");
    assert_true(int_of(l, "duration_ms") >= 600);
    assert_null_field(l, "disconnect");
    json_decref(l);

    /* And a client that leaves while waiting for the headers. */
    const char *hdrs2[] = {"X-Request-Id: req-gone-early", NULL};
    assert_int_equal(
        h_async_start(
            url, CHAT,
            &(struct h_async_opts){.headers = hdrs2, .abort_at = H_ABORT_AFTER_MS, .ms = 200}, &a),
        0);
    l = wait_line(path, "request_id", "req-gone-early");
    assert_string_equal(str_of(l, "disconnect"), "waiting_headers");
    assert_int_equal(int_of(l, "status"), 499);
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "cancelled");
    json_decref(l);
    h_async_destroy(a);
    h_fleet_stop(&f);
}

/* ---- prefill/decode ---------------------------------------------------------------- */

static bool registry_has_two(void *arg)
{
    struct h_fleet *f = arg;
    struct shm_worker_info w[4];
    return shm_registry_snapshot(&f->seg, w, 4) >= 2;
}

static void test_pd_line(void **state)
{
    (void)state;
    struct h_fleet f;
    memset(&f, 0, sizeof(f));
    f.n = 2;
    assert_int_equal(h_mock_start(&f.mock[0], "--model", H_FLEET_MODEL, "--role", "prefill",
                                  "--engine-id", "eng-p1", NULL),
                     0);
    assert_int_equal(h_mock_start(&f.mock[1], "--model", H_FLEET_MODEL, "--role", "decode", NULL),
                     0);
    assert_int_equal(h_config_add_worker(&f.cfg, f.mock[0].url, "w1", H_FLEET_MODEL, "prefill"), 0);
    assert_int_equal(h_config_add_worker(&f.cfg, f.mock[1].url, "w2", H_FLEET_MODEL, "decode"), 0);
    char path[H_PATH_MAX];
    log_path(path, sizeof(path));
    snprintf(dp_extra, sizeof(dp_extra), "access_log: %s\n", path);
    f.cfg.dataplane_extra = dp_extra;
    assert_int_equal(h_config_write(&f.cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f.cfg.path, &f.cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, &f, H_READY_TIMEOUT_MS), 0);
    f.attached = true;
    assert_int_equal(h_wait_until(registry_has_two, &f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_start_dataplane(f.cfg.path, &f.dp), 0);
    assert_int_equal(h_url(f.base, sizeof(f.base), f.cfg.dataplane_port, NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f.base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);

    assert_int_equal(send_with_id(&f, "/v1/chat/completions", CHAT, "req-pd"), 200);
    json_t *l = wait_line(path, "request_id", "req-pd");
    assert_string_equal(str_of(l, "prefill_worker"), "w1");
    assert_string_equal(str_of(l, "worker"), "w2");
    assert_int_equal(int_of(l, "status"), 200);
    assert_int_equal(int_of(l, "attempts_total"), 2);
    assert_string_equal(str_of(attempt(l, 0), "leg"), "prefill");
    assert_string_equal(str_of(attempt(l, 0), "worker"), "w1");
    assert_string_equal(str_of(attempt(l, 0), "outcome"), "ok");
    assert_string_equal(str_of(attempt(l, 1), "leg"), "decode");
    assert_string_equal(str_of(attempt(l, 1), "worker"), "w2");
    assert_string_equal(str_of(attempt(l, 1), "outcome"), "ok");
    json_decref(l);
    h_fleet_stop(&f);
}

/* ---- rotation under load -------------------------------------------------------------- */

struct chat_lines {
    const char *old_path, *new_path;
    long want;
    long have;
};

/* Lines of inference requests (the load's) in path. */
static long count_chat(const char *path)
{
    json_t *all = read_lines(path);
    long n = 0;
    size_t i;
    json_t *o;
    json_array_foreach(all, i, o)
    {
        json_t *r = json_object_get(o, "route");
        if (json_is_string(r) && (strcmp(json_string_value(r), "/v1/chat/completions") == 0 ||
                                  strcmp(json_string_value(r), "/v1/completions") == 0))
            n++;
    }
    json_decref(all);
    return n;
}

static bool all_lines_written(void *arg)
{
    struct chat_lines *c = arg;
    c->have = count_chat(c->old_path) + count_chat(c->new_path);
    return c->have >= c->want;
}

static bool file_has_chat_line(void *arg)
{
    return count_chat(arg) > 0;
}

static bool load_reached(void *arg)
{
    struct h_load_result r;
    h_load_peek(arg, &r);
    return r.ok >= 150;
}

static void test_rotation_loses_no_line(void **state)
{
    (void)state;
    struct h_fleet f;
    fleet_with_log(&f, 1, NULL);
    char path[H_PATH_MAX], rotated[H_PATH_MAX];
    log_path(path, sizeof(path));
    assert_int_equal(h_tmp_path("access.log.1", rotated, sizeof(rotated)), 0);
    struct h_load *load;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 8,
                                                        .total = 600,
                                                        .stream_percent = 50,
                                                        .max_tokens = 4,
                                                        .seed = 11},
                                  &load),
                     0);
    assert_int_equal(h_wait_until(load_reached, load, 30000), 0);
    /* Rotate mid-traffic: rename, then signal. */
    assert_int_equal(rename(path, rotated), 0);
    assert_int_equal(kill(f.dp->pid, SIGUSR1), 0);
    assert_int_equal(h_wait_until(file_has_chat_line, path, WAIT_MS), 0);
    struct h_load_result r;
    while (!h_load_is_done(load)) {
        struct h_load_result peek;
        h_load_peek(load, &peek);
        if (peek.started >= 600)
            break;
        usleep(20000);
    }
    h_load_stop(load, false, &r);
    assert_int_equal(r.ok, r.started);
    struct chat_lines c = {.old_path = rotated, .new_path = path, .want = r.started};
    int rc = h_wait_until(all_lines_written, &c, WAIT_MS);
    print_message("requests %ld, lines: %ld before rotation, %ld after\n", r.started,
                  count_chat(rotated), count_chat(path));
    assert_int_equal(rc, 0);
    assert_int_equal(c.have, r.started);
    assert_true(count_chat(rotated) > 0);
    assert_true(count_chat(path) > 0);
    assert_true(h_proc_log_contains(f.dp, "access log: reopened"));
    assert_int_equal(h_fleet_dp_metric_checked(&f, "switchyard_access_log_dropped_total"), 0);
    h_fleet_stop(&f);
}

/* ---- a log nobody reads ------------------------------------------------------------------ */

static void test_stalled_log_drops_and_never_blocks(void **state)
{
    (void)state;
    char fifo[H_PATH_MAX];
    assert_int_equal(h_tmp_path("stalled.fifo", fifo, sizeof(fifo)), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* Held open for reading, never read: the pipe fills and writes block. */
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    assert_true(rfd >= 0);
    snprintf(dp_extra, sizeof(dp_extra), "access_log: %s\naccess_log_buffer: 4KiB\n", fifo);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = dp_extra});
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    int64_t worst = 0;
    for (int i = 0; i < 600; i++) {
        struct h_resp resp;
        assert_int_equal(h_http_post_json(url, CHAT, &resp), 0);
        assert_int_equal(resp.status, 200);
        if (resp.elapsed_ms > worst)
            worst = resp.elapsed_ms;
        h_resp_fini(&resp);
    }
    long long dropped = h_fleet_dp_metric_checked(&f, "switchyard_access_log_dropped_total");
    print_message("600 requests to a stalled log: %lld lines dropped, slowest %lld ms\n", dropped,
                  (long long)worst);
    assert_true(dropped > 0);
    assert_true(worst < 2000);
    /* The pipe drains: the writer wakes up and the daemon stops cleanly. */
    char sink[65536];
    while (read(rfd, sink, sizeof(sink)) > 0)
        ;
    h_fleet_stop(&f);
    assert_int_equal(h_proc_stop(f.dp, H_STOP_TIMEOUT_MS), 0);
    close(rfd);
}

static bool has_401_line(void *arg)
{
    json_t *all = read_lines(arg);
    size_t i;
    json_t *o;
    bool found = false;
    json_array_foreach(all, i, o) found =
        found || json_integer_value(json_object_get(o, "status")) == 401;
    json_decref(all);
    return found;
}

/* With a keys file, each line names the tenant whose key the request
 * carried; a refused key is logged too, without a tenant. */
static void test_tenant_of_the_key(void **state)
{
    (void)state;
    char keys[H_PATH_MAX], more[H_PATH_MAX + 32];
    /* key_sha256 of the key "alog-key" */
    assert_int_equal(
        h_write_file("keys.yaml",
                     "tenants:\n  - name: team-log\n    key_sha256: "
                     "884d390d43d69ac7bd744e48fc1de2801887e618908abdbce967cd4c17389d32\n",
                     keys, sizeof(keys)),
        0);
    snprintf(more, sizeof(more), "api_keys_file: %s\n", keys);
    struct h_fleet f;
    fleet_with_log(&f, 1, more);
    char path[H_PATH_MAX], url[160];
    log_path(path, sizeof(path));
    snprintf(url, sizeof(url), "%s/v1/chat/completions", f.base);
    const char *good[] = {"Content-Type: application/json", "Authorization: Bearer alog-key",
                          "X-Request-Id: with-key", NULL};
    const char *bad[] = {"Content-Type: application/json", "Authorization: Bearer wrong",
                         "X-Request-Id: bad-key", NULL};
    struct h_resp resp;
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = CHAT, .headers = good}, &resp), 0);
    assert_int_equal(resp.status, 200);
    h_resp_fini(&resp);
    assert_int_equal(h_http(&(struct h_req){.url = url, .body = CHAT, .headers = bad}, &resp), 0);
    assert_int_equal(resp.status, 401);
    h_resp_fini(&resp);
    json_t *l = wait_line(path, "request_id", "with-key");
    assert_string_equal(str_of(l, "tenant"), "team-log");
    json_decref(l);
    /* Refused before it was forwarded: no request id of its own yet. */
    assert_int_equal(h_wait_until(has_401_line, path, WAIT_MS), 0);
    json_t *all = read_lines(path);
    size_t i;
    json_array_foreach(all, i, l)
    {
        if (int_of(l, "status") == 401)
            assert_null_field(l, "tenant");
    }
    json_decref(all);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_success_retry_and_in_band),
        H_TEST(test_disconnect_and_timeout),
        H_TEST(test_pd_line),
        H_TEST(test_rotation_loses_no_line),
        H_TEST(test_stalled_log_drops_and_never_blocks),
        H_TEST(test_tenant_of_the_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
