/*
 * Unit tests of the Kubernetes watch stream's line splitter
 * (controlplane/sources/source_kubernetes_http.h, kube_api_feed_watch) and of the
 * Kubernetes source's reset (cp_kube_reset). A watch body arrives in reads
 * cut anywhere: the events handed up, and where a bad line makes the
 * stream refused, must not depend on the cuts, and the cost must stay
 * linear in the bytes however small the reads (a long line a byte at a
 * time once rescanned the whole pending line on every read).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/log.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_kubernetes.h"
#include "controlplane/sources/source_kubernetes_http.h"
#include "shm/registry.h"
#include "shm/segment.h"

/* What the splitter handed up: each event's compact dump, joined by '|'. */
struct seen {
    char text[4096];
    size_t n;
};

static void on_event(void *user, const json_t *ev)
{
    struct seen *s = user;
    char *d = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
    assert_non_null(d);
    size_t used = strlen(s->text);
    assert_true(used + strlen(d) + 2 < sizeof(s->text));
    snprintf(s->text + used, sizeof(s->text) - used, "%s|", d);
    free(d);
    s->n++;
}

static void on_count(void *user, const json_t *ev)
{
    (void)ev;
    ((struct seen *)user)->n++;
}

static void on_done(void *user, const struct kube_result *r)
{
    (void)user;
    (void)r;
    fail_msg("no transfer runs in these tests");
}

static struct kube_api *new_api(struct seen *s)
{
    struct kube_api_opts o = {.on_event = on_event, .on_done = on_done, .user = s};
    struct kube_api *a = NULL;
    assert_int_equal(kube_api_create(&o, &a), 0);
    return a;
}

/* A few events as a watch sends them: an empty line between two, a CRLF
 * ending, a bookmark, an ERROR, and an unfinished last line (a watch that
 * ends there drops it). */
static const char STREAM[] =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"vllm-0\","
    "\"uid\":\"u-0\",\"resourceVersion\":\"10\"}}}\n"
    "\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"vllm-0\",\"resourceVersion\":"
    "\"11\"},\"status\":{\"podIP\":\"10.0.0.7\"}}}\r\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"12\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"code\":410,\"message\":\"too old\"}}\n"
    "{\"type\":\"DELETED\",\"obj";
#define STREAM_EVENTS 4

/* Feeds s[0..len) cut at the offsets cuts[0..n) (ascending); returns the
 * index of the read refused (n + 1 when none was). */
static size_t feed_cut(struct kube_api *a, const char *s, size_t len, const size_t *cuts, size_t n)
{
    size_t from = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t to = i < n ? cuts[i] : len;
        if (!kube_api_feed_watch(a, s + from, to - from))
            return i;
        from = to;
    }
    kube_api_cancel(a); /* the watch ends: the unfinished line goes */
    return n + 1;
}

static void test_every_split_point(void **state)
{
    (void)state;
    size_t len = sizeof(STREAM) - 1;
    struct seen whole = {.n = 0};
    struct kube_api *a = new_api(&whole);
    assert_int_equal(feed_cut(a, STREAM, len, NULL, 0), 1);
    assert_int_equal(whole.n, STREAM_EVENTS);
    assert_non_null(strstr(whole.text, "\"podIP\":\"10.0.0.7\""));
    assert_null(strstr(whole.text, "DELETED"));
    kube_api_destroy(a);

    /* Every split point, each with a second cut up to 32 bytes after it
     * (the same point: an empty read between): two reads, and three with
     * a short one in the middle, wherever they fall. */
    struct seen cut;
    a = new_api(&cut);
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len && j <= i + 32; j++) {
            memset(&cut, 0, sizeof(cut));
            size_t cuts[2] = {i, j};
            assert_int_equal(feed_cut(a, STREAM, len, cuts, 2), 3);
            if (cut.n != whole.n || strcmp(cut.text, whole.text) != 0)
                fail_msg("cut at %zu and %zu: %zu events, not %zu", i, j, cut.n, whole.n);
        }
    }
    /* One byte a read. */
    memset(&cut, 0, sizeof(cut));
    for (size_t i = 0; i < len; i++)
        assert_true(kube_api_feed_watch(a, STREAM + i, 1));
    kube_api_cancel(a);
    assert_string_equal(cut.text, whole.text);
    kube_api_destroy(a);
}

/* A line that is no JSON object is refused by the read that completes it,
 * wherever the cuts fall, after every event before it was handed up. */
static void test_bad_line_refused_by_the_read_that_ends_it(void **state)
{
    (void)state;
    static const char bad[] = "{\"type\":\"ADDED\",\"object\":{}}\n"
                              "[\"an array\"]\n"
                              "{\"type\":\"BOOKMARK\",\"object\":{}}\n";
    size_t len = sizeof(bad) - 1;
    size_t bad_end = (size_t)(strchr(strchr(bad, '\n') + 1, '\n') - bad); /* its newline */
    struct seen s;
    struct kube_api *a = new_api(&s);
    for (size_t i = 0; i <= len; i++) {
        memset(&s, 0, sizeof(s));
        size_t cuts[1] = {i};
        size_t refused = feed_cut(a, bad, len, cuts, 1);
        assert_int_equal(refused, bad_end < i ? 0 : 1);
        assert_int_equal(s.n, 1);
        /* The refusal emptied the splitter: the next stream starts clean. */
        memset(&s, 0, sizeof(s));
        assert_true(kube_api_feed_watch(a, "{\"type\":\"BOOKMARK\"}\n", 20));
        assert_int_equal(s.n, 1);
        kube_api_cancel(a);
    }
    kube_api_destroy(a);
}

/* A line of 3 MiB (under the 4 MiB bound) a byte at a time, then its
 * newline: linear, tens of milliseconds of CPU. Rescanning the pending
 * line on every read costs about 5 * 10^12 byte reads, minutes even for
 * a vector memchr: the budget (CPU time, so a loaded machine does not
 * count) catches it long before. */
static void test_long_line_in_one_byte_reads_is_linear(void **state)
{
    (void)state;
    const size_t body = 3u << 20;
    static const char head[] = "{\"type\":\"BOOKMARK\",\"object\":{\"pad\":\"";
    static const char tail[] = "\"}}\n";
    size_t len = sizeof(head) - 1 + body + sizeof(tail) - 1;
    char *line = malloc(len);
    assert_non_null(line);
    memcpy(line, head, sizeof(head) - 1);
    memset(line + sizeof(head) - 1, 'x', body);
    memcpy(line + sizeof(head) - 1 + body, tail, sizeof(tail) - 1);
    struct seen s = {.n = 0};
    struct kube_api_opts o = {.on_event = on_count, .on_done = on_done, .user = &s};
    struct kube_api *a = NULL;
    assert_int_equal(kube_api_create(&o, &a), 0);
    const clock_t budget = 3 * CLOCKS_PER_SEC;
    clock_t start = clock();
    for (size_t i = 0; i < len; i++) {
        assert_true(kube_api_feed_watch(a, line + i, 1));
        if ((i & 0xfff) == 0 && clock() - start > budget)
            fail_msg("%zu bytes of one line fed a byte at a time took over 3 s of CPU", i);
    }
    assert_int_equal(s.n, 1);
    kube_api_destroy(a);
    free(line);
}

/* ---- the source's reset ------------------------------------------------------ */

static char seg_name[64];

/* The state: a registry writer over a private segment. */
static int setup_segment(void **state)
{
    static struct shm_segment seg;
    static struct cp_registry reg;
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    snprintf(seg_name, sizeof(seg_name), "/sy-unit-kwatch-%d", (int)getpid());
    if (shm_segment_open_owner(&seg, seg_name, 8, 2, &outcome, err, sizeof(err)) != 0)
        fail_msg("open_owner: %s", err);
    cp_registry_init(&reg, &seg);
    *state = &reg;
    return 0;
}

static int teardown_segment(void **state)
{
    struct cp_registry *reg = *state;
    shm_segment_close(reg->seg);
    cp_registry_fini(reg);
    shm_unlink(seg_name);
    return 0;
}

static const char PODS[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"vllm-0\",\"uid\":\"u-0\","
    "\"resourceVersion\":\"20\",\"labels\":{\"app\":\"vllm\"}},\"spec\":{\"containers\":[{"
    "\"name\":\"vllm\",\"ports\":[{\"name\":\"http\",\"containerPort\":8000}]}]},\"status\":{"
    "\"phase\":\"Running\",\"podIP\":\"10.0.0.5\",\"conditions\":[{\"type\":\"Ready\","
    "\"status\":\"True\"}]}}}\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"21\"}}}\n";

static json_int_t status_int(struct cp_kube *k, const char *key)
{
    json_t *st = cp_kube_status_json(k, 0);
    assert_non_null(st);
    json_int_t v = json_integer_value(json_object_get(st, key));
    json_decref(st);
    return v;
}

static char *status_rv(struct cp_kube *k)
{
    json_t *st = cp_kube_status_json(k, 0);
    assert_non_null(st);
    char *rv = strdup(json_string_value(json_object_get(st, "resource_version")));
    json_decref(st);
    return rv;
}

/* After a reset the source knows nothing: the same stream then does what
 * it does to a new source, and the registry is left to the caller. */
static void test_reset_is_a_new_source(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cfg cfg;
    cfg_init_defaults(&cfg);
    struct cfg_kubernetes *kc = &cfg.discovery.kubernetes;
    kc->enabled = true;
    snprintf(kc->api_server, sizeof(kc->api_server), "http://127.0.0.1:1"); /* never contacted */
    snprintf(kc->namespace_name, sizeof(kc->namespace_name), "unit");
    snprintf(kc->token_file, sizeof(kc->token_file), "/nonexistent/switchyard-unit-token");
    kc->port = 8000;
    struct cp_kube *k = NULL;
    char err[256];
    assert_int_equal(cp_kube_create(reg, &cfg, &k, err, sizeof(err)), 0);

    for (int round = 0; round < 2; round++) {
        assert_int_equal(status_int(k, "pods"), 0);
        assert_int_equal(status_int(k, "workers"), 0);
        char *rv = status_rv(k);
        assert_string_equal(rv, "");
        free(rv);
        assert_true(cp_kube_is_stale(k));
        /* Second round: the line left unfinished before the reset must
         * not glue onto this stream (it would make it refused). */
        assert_true(cp_kube_feed_watch(k, PODS, sizeof(PODS) - 1, 1000));
        assert_int_equal(status_int(k, "pods"), 1);
        assert_int_equal(status_int(k, "workers"), 1);
        rv = status_rv(k);
        assert_string_equal(rv, "21");
        free(rv);
        assert_true(cp_kube_feed_watch(k, "{\"type\":\"ADDED\",\"obj", 20, 1100));

        cp_kube_reset(k);
        assert_int_equal(status_int(k, "pods"), 0);
        /* The registry is the caller's: the worker is still there. */
        struct shm_worker_info w[8];
        assert_int_equal(shm_registry_snapshot(seg, w, 8), 1);
        struct cp_source_set none = {.kind = CP_SOURCE_KUBERNETES, .workers = NULL, .n = 0};
        assert_int_equal(cp_registry_sync(reg, &none, err, sizeof(err)), 0);
        assert_int_equal(shm_registry_snapshot(seg, w, 8), 0);
    }
    cp_kube_destroy(k);
    cfg_fini(&cfg);
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_bad_line_refused_by_the_read_that_ends_it),
        cmocka_unit_test(test_long_line_in_one_byte_reads_is_linear),
        cmocka_unit_test_setup_teardown(test_reset_is_a_new_source, setup_segment,
                                        teardown_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
