/*
 * End-to-end test of the one race admission's exact limit has to lose
 * gracefully: another data plane takes a worker's last slot between the
 * forwarder's saturation filter and its re-check after taking the guard
 * (dp_adm_confirm, admission.max_inflight_per_worker). The forwarder must
 * then give its guard back and put the request in the queue, where it
 * holds no worker load (invariant 11) until a slot frees; then it is
 * dispatched, answered, and every load returns to 0 (invariant 1).
 *
 * The window is nanoseconds wide, so nothing here hopes for it: the data
 * plane under test is the real one linked with a gate in front of
 * dp_adm_confirm (tests/e2e/race_confirm_wrap.c, built as
 * tests/e2e/switchyard-dataplane-confirm-race). On its first call the gate
 * reports over a FIFO that the guard is taken and waits; the test then
 * takes the worker's only slot as a second data plane (the lease holder,
 * harness_holder.h), lets the real check run, which must refuse, and
 * reads the loads from the control plane's GET /workers and the segment
 * while the request waits. Two ways into the window: a request arriving
 * at an idle worker, and a queued request dispatched when a slot frees.
 * The gate stops the data plane's event loop, so while it waits the test
 * reads only what other processes serve (the control plane, the segment,
 * the mock worker).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_holder.h"

#define RACE_DP_BIN  "tests/e2e/switchyard-dataplane-confirm-race"
#define RACE_ENV     "SWITCHYARD_TEST_CONFIRM_GATE"
#define RACE_WAIT_MS 10000

static const char chat_body[] =
    "{\"model\":\"" H_FLEET_MODEL "\",\"messages\":[{\"role\":\"user\",\"content\":\"race\"}],"
    "\"max_tokens\":4}";

/* One worker taking one request at a time, a control plane, and the gated
 * data plane (one event loop), plus the two ends of the gate's FIFOs. */
struct rig {
    struct h_fleet f;          /* f.dp is the gated data plane */
    int reached_fd;            /* the gate says 'r', then '0' or '1' */
    int go_fd;                 /* the test says go */
    struct shm_worker_info w1; /* its slot and generation */
};

static bool registry_has_w1(void *arg)
{
    struct rig *r = arg;
    return shm_registry_find(&r->f.seg, "w1", &r->w1) == 0;
}

/* A FIFO in the temp dir, opened read-write: never blocks, never EOF. */
static int open_fifo(const char *name)
{
    char path[H_PATH_MAX];
    assert_int_equal(h_tmp_path(name, path, sizeof(path)), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static void rig_start(struct rig *r)
{
    memset(r, 0, sizeof(*r));
    struct h_fleet *f = &r->f;
    f->n = 1;
    assert_int_equal(h_mock_start(&f->mock[0], "--model", H_FLEET_MODEL, "--seed", "7", NULL), 0);
    assert_int_equal(h_config_add_worker(&f->cfg, f->mock[0].url, "w1", H_FLEET_MODEL, NULL), 0);
    f->cfg.dataplane_extra = "threads: 1\n";
    f->cfg.extra_yaml = "admission:\n"
                        "  max_inflight_per_worker: 1\n"
                        "  queue:\n"
                        "    max_wait: 30s\n";
    assert_int_equal(h_config_write(&f->cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f->cfg.path, &f->cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, f, H_READY_TIMEOUT_MS), 0);
    f->attached = true;
    assert_int_equal(h_wait_until(registry_has_w1, r, H_READY_TIMEOUT_MS), 0);

    r->reached_fd = open_fifo("confirm-reached");
    r->go_fd = open_fifo("confirm-go");
    char bin[H_PATH_MAX];
    assert_int_equal(h_bin_path(RACE_DP_BIN, bin, sizeof(bin)), 0);
    const char *argv[] = {bin, "--config", f->cfg.path, NULL};
    assert_int_equal(setenv(RACE_ENV, h_tmpdir(), 1), 0);
    int rc = h_spawn("dataplane", argv, &f->dp);
    unsetenv(RACE_ENV);
    assert_int_equal(rc, 0);
    assert_int_equal(h_url(f->base, sizeof(f->base), f->cfg.dataplane_port, NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

static void rig_stop(struct rig *r)
{
    close(r->reached_fd);
    close(r->go_fd);
    h_fleet_stop(&r->f);
}

/* The next byte the gate writes, or 0 when none came within timeout_ms. */
static char gate_read(struct rig *r, int timeout_ms)
{
    char buf[2];
    size_t len = 0;
    if (h_fd_read_more(r->reached_fd, buf, 2, &len, timeout_ms) != 1)
        return 0;
    return buf[0];
}

static void gate_go(struct rig *r)
{
    assert_int_equal(write(r->go_fd, "g", 1), 1);
}

/* The gated data plane's lease index (the active lease of its pid). */
static uint32_t dp_lease(struct rig *r)
{
    for (uint32_t i = 0; i < r->f.seg.max_dataplanes; i++) {
        struct shm_lease_info li;
        shm_lease_snapshot(&r->f.seg, i, &li);
        if (li.active && li.pid == (int32_t)r->f.dp->pid)
            return i;
    }
    fail_msg("the data plane (pid %d) holds no lease", (int)r->f.dp->pid);
    return UINT32_MAX;
}

/* w1's load counted in the gated data plane's own lease (the segment). */
static long long dp_own_load(struct rig *r)
{
    return shm_load_in_lease(&r->f.seg, dp_lease(r), r->w1.slot, r->w1.generation);
}

/* What the control plane's GET /workers says of w1: its load, and the
 * in-flight of the data planes keyed by pid (-1 when absent). */
struct cp_view {
    long long load;
    long long dp;     /* the gated data plane's entry */
    long long holder; /* the lease holder's entry */
};

static void cp_view(struct rig *r, pid_t holder, struct cp_view *v)
{
    char url[96], dp_key[16], holder_key[16];
    assert_int_equal(h_url(url, sizeof(url), r->f.cfg.admin_port, "/workers"), 0);
    snprintf(dp_key, sizeof(dp_key), "%d", (int)r->f.dp->pid);
    snprintf(holder_key, sizeof(holder_key), "%d", (int)holder);
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    json_t *j = h_resp_json(&resp);
    assert_non_null(j);
    json_t *arr = json_is_array(j) ? j : json_object_get(j, "workers");
    assert_true(json_is_array(arr));
    json_t *w = NULL;
    for (size_t i = 0; i < json_array_size(arr) && w == NULL; i++) {
        json_t *id = json_object_get(json_array_get(arr, i), "id");
        if (json_is_string(id) && strcmp(json_string_value(id), "w1") == 0)
            w = json_array_get(arr, i);
    }
    assert_non_null(w);
    json_t *by = json_object_get(w, "inflight_by_dataplane");
    json_t *d = json_object_get(by, dp_key), *h = json_object_get(by, holder_key);
    v->load = json_integer_value(json_object_get(w, "load"));
    v->dp = json_is_integer(d) ? json_integer_value(d) : -1;
    v->holder = json_is_integer(h) ? json_integer_value(h) : -1;
    json_decref(j);
    h_resp_fini(&resp);
}

/* queue_depth of the model on the control plane's GET /status (-1: absent):
 * readable while the data plane's loop is held by the gate. */
static long long cp_queue_depth(struct rig *r)
{
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), r->f.cfg.admin_port, "/status"), 0);
    struct h_resp resp = {0};
    long long v = -1;
    if (h_http_get(url, &resp) == 0 && resp.status == 200) {
        json_t *j = h_resp_json(&resp);
        json_t *d = json_object_get(json_object_get(j, "queue_depth"), H_FLEET_MODEL);
        if (json_is_integer(d))
            v = json_integer_value(d);
        json_decref(j);
    }
    h_resp_fini(&resp);
    return v;
}

static bool queued_one(void *arg)
{
    return cp_queue_depth(arg) == 1;
}

static bool loads_zero(void *arg)
{
    struct rig *r = arg;
    return h_fleet_load(&r->f, 0) == 0 && dp_own_load(r) == 0;
}

static struct h_async *post_async(struct rig *r)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", r->f.base);
    static const char *const headers[] = {"Content-Type: application/json", NULL};
    struct h_async_opts o = {.headers = headers, .abort_at = H_ABORT_NEVER};
    struct h_async *a = NULL;
    assert_int_equal(h_async_start(url, chat_body, &o, &a), 0);
    return a;
}

/* Takes w1's only slot as another data plane (its own lease, on the admin
 * channel like a real one). */
static void hold_w1(struct rig *r, struct h_holder *h)
{
    struct h_holder_spec hs = {.shm = r->f.cfg.shm_name,
                               .socket = r->f.cfg.admin_socket,
                               .slot = r->w1.slot,
                               .generation = r->w1.generation,
                               .guards = 1,
                               .answer = 1};
    h_holder_start(h, &hs);
}

/*
 * The gate holds the data plane between its guard and the real check:
 * takes the slot as another data plane, lets the check run (it must
 * refuse), waits until the request is back in the queue, and asserts it
 * holds nothing there. Returns with the holder holding the slot.
 */
static void race_for_the_slot(struct rig *r, struct h_holder *h)
{
    assert_int_equal(gate_read(r, RACE_WAIT_MS), 'r');
    /* In the window: the data plane's guard is counted, nothing is queued. */
    assert_int_equal(dp_own_load(r), 1);
    assert_true(cp_queue_depth(r) <= 0);
    hold_w1(r, h);
    assert_int_equal(h_fleet_load(&r->f, 0), 2);
    gate_go(r);
    assert_int_equal(gate_read(r, RACE_WAIT_MS), '0'); /* the slot was gone: refused */
    /* Queued again: the forwarder releases the guard before it queues. */
    assert_int_equal(h_wait_until(queued_one, r, RACE_WAIT_MS), 0);
    struct cp_view v;
    cp_view(r, h->pid, &v);
    assert_int_equal(v.dp, 0);     /* waiting holds no load (invariant 11) */
    assert_int_equal(v.holder, 1); /* the other data plane's slot */
    assert_int_equal(v.load, 1);
    assert_int_equal(dp_own_load(r), 0);
    assert_int_equal(h_fleet_mock_stat(&r->f, 0, "requests_total"), 0);
}

/* The slot frees: the queued request is dispatched and answered, and every
 * load returns to 0. */
static void free_and_finish(struct rig *r, struct h_holder *h, struct h_async *a)
{
    h_holder_finish(h);
    assert_int_equal(h_async_wait(a, RACE_WAIT_MS), 0);
    struct h_async_state s;
    h_async_get_state(a, &s);
    assert_int_equal(s.status, 200);
    assert_int_equal(h_fleet_mock_stat(&r->f, 0, "requests_total"), 1);
    assert_int_equal(h_wait_until(loads_zero, r, 5000), 0);
    assert_int_equal(cp_queue_depth(r), 0);
    assert_int_equal(h_fleet_dp_metric(&r->f, "switchyard_admission_queue_left_total{reason="
                                              "\"dispatched\"}"),
                     1);
    assert_int_equal(h_fleet_dp_metric(&r->f, "switchyard_admission_queued_total"), 1);
    /* Gone from the data plane's own count too, not only from the sum. */
    struct cp_view v;
    cp_view(r, 0, &v);
    assert_int_equal(v.dp, 0);
    assert_int_equal(v.load, 0);
}

/* ---- tests -------------------------------------------------------------- */

/* A request arrives at an idle worker; another data plane takes the slot
 * between the filter and the check. */
static void test_arrival_loses_the_last_slot(void **state)
{
    (void)state;
    struct rig r;
    rig_start(&r);
    struct h_async *a = post_async(&r);
    struct h_holder h;
    race_for_the_slot(&r, &h);
    free_and_finish(&r, &h, a);
    rig_stop(&r);
}

/* A queued request is dispatched when the slot frees; another data plane
 * takes it again between the dispatch's filter and its check. */
static void test_dispatch_loses_the_freed_slot(void **state)
{
    (void)state;
    struct rig r;
    rig_start(&r);
    struct h_holder first;
    hold_w1(&r, &first);
    struct h_async *a = post_async(&r);
    /* Queued by the filter alone: the check was never reached. */
    assert_int_equal(h_wait_until(queued_one, &r, RACE_WAIT_MS), 0);
    assert_int_equal(dp_own_load(&r), 0);
    assert_int_equal(gate_read(&r, 0), 0);
    h_holder_finish(&first);
    struct h_holder second;
    race_for_the_slot(&r, &second);
    free_and_finish(&r, &second, a);
    rig_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_arrival_loses_the_last_slot),
        H_TEST(test_dispatch_loses_the_freed_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
