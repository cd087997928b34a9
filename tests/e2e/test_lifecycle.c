/*
 * End-to-end tests of the two daemons' lifecycles around the segment:
 * the control plane reaps a SIGKILLed lease holder's load within two
 * heartbeat intervals (invariant 7), a control plane restarted after SIGKILL
 * keeps the registry and every lease's load (invariant 8), a second control
 * plane is refused, a dataplane waits for the segment, claims a lease and
 * gives it back on SIGTERM, and bad configs or layouts are refused loudly.
 *
 * Lease holders with load are forked children of the test that use the shm
 * API directly: the real dataplane counts load only while it forwards, and
 * these tests are about the segment, not forwarding.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
/* This test forges and inspects the segment's bytes. */
#include "shm/layout_private.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_holder.h"

#define READY_MS 10000

struct seg_ctx {
    const char *name;
    struct shm_segment seg;
};

static bool segment_attachable(void *arg)
{
    struct seg_ctx *c = arg;
    char err[256];
    if (shm_segment_attach(&c->seg, c->name, err, sizeof(err)) != 0)
        return false;
    return true;
}

struct registry_ctx {
    struct shm_segment *seg;
    size_t want;
};

static bool registry_has(void *arg)
{
    struct registry_ctx *c = arg;
    struct shm_worker_info w[8];
    return shm_registry_snapshot(c->seg, w, 8) == c->want;
}

/* Starts a control plane on cfg, attaches to its segment as a reader and
 * waits until the configured workers are published (the segment is
 * attachable before the control plane has written the registry). */
static void start_cp_and_attach(struct h_config *cfg, struct h_proc **cp, struct seg_ctx *sc)
{
    assert_int_equal(h_start_controlplane(cfg->path, cp), 0);
    sc->name = cfg->shm_name;
    assert_int_equal(h_wait_until(segment_attachable, sc, READY_MS), 0);
    struct registry_ctx rc = {.seg = &sc->seg, .want = cfg->n_workers};
    assert_int_equal(h_wait_until(registry_has, &rc, READY_MS), 0);
}

/* Starts a holder with counts[i] guards on worker w[i]; returns its lease. */
static uint32_t holder_start(struct h_holder *h, const char *name, const struct shm_worker_info *w,
                             const int *counts, size_t n)
{
    struct h_holder_load loads[4];
    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++)
        loads[i] = (struct h_holder_load){w[i].slot, w[i].generation, counts[i]};
    struct h_holder_spec spec = {.shm = name, .more = loads, .n_more = n};
    h_holder_start(h, &spec);
    return h->lease;
}

static void config_with_workers(struct h_config *cfg, int n)
{
    memset(cfg, 0, sizeof(*cfg));
    for (int i = 0; i < n; i++) {
        char url[64], id[16];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", 19001 + i);
        snprintf(id, sizeof(id), "w%d", i + 1);
        assert_int_equal(h_config_add_worker(cfg, url, id, "mock", NULL), 0);
    }
    assert_int_equal(h_config_write(cfg, NULL), 0);
}

static void find_workers(struct shm_segment *seg, struct shm_worker_info *w, int n)
{
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof(id), "w%d", i + 1);
        assert_int_equal(shm_registry_find(seg, id, &w[i]), 0);
    }
}

/* ---- tests -------------------------------------------------------------- */

struct reaped_ctx {
    struct shm_segment *seg;
    const struct shm_worker_info *w;
    const uint64_t *want;
};

/* The reaper zeroes the lease's counters, then frees it, then counts the
 * reap: wait for the last step, or the test races the reaper between them. */
static bool lease_reaped_with_loads(void *arg)
{
    struct reaped_ctx *c = arg;
    if (atomic_load(&c->seg->hdr->leases_reaped) == 0)
        return false;
    for (int i = 0; i < 3; i++)
        if (shm_load_of(c->seg, c->w[i].slot, c->w[i].generation) != c->want[i])
            return false;
    return true;
}

static void test_sigkilled_holder_is_reaped_within_two_intervals(void **state)
{
    (void)state;
    struct h_config cfg;
    config_with_workers(&cfg, 3);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp_and_attach(&cfg, &cp, &sc);
    struct shm_worker_info w[3];
    find_workers(&sc.seg, w, 3);

    /* A survivor with 1, 2, 3 and a victim with 4, 5, 6 on the 3 workers. */
    struct h_holder survivor, victim;
    int keep[3] = {1, 2, 3}, lose[3] = {4, 5, 6};
    holder_start(&survivor, sc.name, w, keep, 3);
    uint32_t victim_lease = holder_start(&victim, sc.name, w, lose, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_of(&sc.seg, w[i].slot, w[i].generation),
                         (uint64_t)(keep[i] + lose[i]));
    assert_true(shm_lease_is_active(&sc.seg, victim_lease));

    h_holder_kill(&victim);
    int64_t killed_at = h_now_ms();
    uint64_t want[3] = {1, 2, 3};
    struct reaped_ctx rc = {.seg = &sc.seg, .w = w, .want = want};
    assert_int_equal(h_wait_until(lease_reaped_with_loads, &rc, 5000), 0);
    int64_t took = h_now_ms() - killed_at;
    print_message("reaped %lld ms after the kill (heartbeat interval %u ms)\n", (long long)took,
                  sc.seg.hdr->heartbeat_interval_ms);
    assert_true(took <= 2 * (int64_t)sc.seg.hdr->heartbeat_interval_ms);
    assert_false(shm_lease_is_active(&sc.seg, victim_lease));
    assert_int_equal(atomic_load(&sc.seg.hdr->leases_reaped), 1);

    h_holder_finish(&survivor);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_of(&sc.seg, w[i].slot, w[i].generation), 0);
    assert_int_equal(shm_load_underflows(&sc.seg), 0);
    shm_segment_close(&sc.seg);
}

static void test_controlplane_restart_keeps_registry_and_load(void **state)
{
    (void)state;
    struct h_config cfg;
    config_with_workers(&cfg, 2);
    struct h_proc *cp;
    struct seg_ctx sc = {0};
    start_cp_and_attach(&cfg, &cp, &sc);
    struct shm_worker_info before[2];
    find_workers(&sc.seg, before, 2);
    uint64_t epoch = atomic_load(&sc.seg.hdr->epoch);

    struct h_holder h;
    int counts[2] = {5, 7};
    holder_start(&h, sc.name, before, counts, 2);

    assert_int_equal(h_proc_signal(cp, SIGKILL), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(cp, 5000, &status), 0);
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);

    /* Wait for the new owner: the epoch moves. */
    int64_t deadline = h_now_ms() + READY_MS;
    while (atomic_load(&sc.seg.hdr->epoch) == epoch && h_now_ms() < deadline)
        usleep(2000);
    assert_int_equal(atomic_load(&sc.seg.hdr->epoch), epoch + 1);
    struct shm_worker_info after[2];
    find_workers(&sc.seg, after, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(after[i].slot, before[i].slot);
        assert_int_equal(after[i].generation, before[i].generation);
        assert_int_equal(shm_load_of(&sc.seg, after[i].slot, after[i].generation),
                         (uint64_t)counts[i]);
    }
    /* The restarted control plane beats and judges the live holder alive. */
    uint64_t beat = atomic_load(&sc.seg.hdr->cp_heartbeat);
    deadline = h_now_ms() + READY_MS;
    while (atomic_load(&sc.seg.hdr->cp_heartbeat) < beat + 3 && h_now_ms() < deadline)
        usleep(2000);
    for (int i = 0; i < 2; i++)
        assert_int_equal(shm_load_of(&sc.seg, after[i].slot, after[i].generation),
                         (uint64_t)counts[i]);
    h_holder_finish(&h);
    for (int i = 0; i < 2; i++)
        assert_int_equal(shm_load_of(&sc.seg, after[i].slot, after[i].generation), 0);
    shm_segment_close(&sc.seg);
}

static void test_second_controlplane_is_refused(void **state)
{
    (void)state;
    struct h_config cfg;
    config_with_workers(&cfg, 1);
    struct h_proc *cp, *second;
    struct seg_ctx sc = {0};
    start_cp_and_attach(&cfg, &cp, &sc);
    assert_int_equal(h_start_controlplane(cfg.path, &second), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(second, 5000, &status), 0);
    second->expected = true;
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
    assert_true(h_proc_is_running(cp));
    shm_segment_close(&sc.seg);
}

struct lease_ctx {
    struct shm_segment *seg;
    bool want_active;
};

static bool some_lease_active(void *arg)
{
    struct lease_ctx *c = arg;
    uint64_t mask = atomic_load(&c->seg->hdr->active_leases);
    return c->want_active ? mask != 0 : mask == 0;
}

static void test_dataplane_waits_claims_and_releases(void **state)
{
    (void)state;
    struct h_config cfg;
    config_with_workers(&cfg, 1);
    /* The dataplane starts first and must wait for the segment. */
    struct h_proc *dp, *cp;
    assert_int_equal(h_start_dataplane(cfg.path, &dp), 0);
    assert_true(h_proc_is_running(dp));
    struct seg_ctx sc = {0};
    start_cp_and_attach(&cfg, &cp, &sc);
    struct lease_ctx lc = {.seg = &sc.seg, .want_active = true};
    assert_int_equal(h_wait_until(some_lease_active, &lc, READY_MS), 0);

    assert_int_equal(h_proc_signal(dp, SIGTERM), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(dp, 5000, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    lc.want_active = false;
    assert_true(some_lease_active(&lc));
    assert_int_equal(atomic_load(&sc.seg.hdr->leases_reaped), 0);
    shm_segment_close(&sc.seg);
}

static void test_dataplane_refuses_other_layout_version(void **state)
{
    (void)state;
    struct h_config cfg;
    config_with_workers(&cfg, 1);
    struct h_proc *cp, *dp;
    struct seg_ctx sc = {0};
    start_cp_and_attach(&cfg, &cp, &sc);
    /* Pretend a newer control plane built the segment. */
    sc.seg.hdr->layout_version = SHM_LAYOUT_VERSION + 1;
    assert_int_equal(h_start_dataplane(cfg.path, &dp), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(dp, 5000, &status), 0);
    dp->expected = true;
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
    char want[160];
    snprintf(want, sizeof(want),
             "segment has layout version %u, this binary uses layout version %u",
             SHM_LAYOUT_VERSION + 1, SHM_LAYOUT_VERSION);
    assert_true(h_proc_log_contains(dp, want));
    sc.seg.hdr->layout_version = SHM_LAYOUT_VERSION;
    shm_segment_close(&sc.seg);
}

static void test_bad_config_is_refused_with_position(void **state)
{
    (void)state;
    char path[H_PATH_MAX];
    assert_int_equal(h_write_file("bad.yaml", "dataplane:\n  threads: many\n", path, sizeof(path)),
                     0);
    const char *bins[] = {"switchyard-controlplane", "switchyard-dataplane"};
    for (int i = 0; i < 2; i++) {
        char bin[H_PATH_MAX];
        assert_int_equal(h_bin_path(bins[i], bin, sizeof(bin)), 0);
        const char *argv[] = {bin, "--config", path, NULL};
        struct h_proc *p;
        assert_int_equal(h_spawn(bins[i], argv, &p), 0);
        int status = 0;
        assert_int_equal(h_proc_wait(p, 5000, &status), 0);
        p->expected = true;
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 2);
        char want[H_PATH_MAX + 64];
        snprintf(want, sizeof(want), "%s:2:12: dataplane.threads:", path);
        assert_true(h_proc_log_contains(p, want));
    }
}

static void test_version_names_layout(void **state)
{
    (void)state;
    const char *bins[] = {"switchyard-controlplane", "switchyard-dataplane"};
    for (int i = 0; i < 2; i++) {
        char bin[H_PATH_MAX];
        assert_int_equal(h_bin_path(bins[i], bin, sizeof(bin)), 0);
        const char *argv[] = {bin, "--version", NULL};
        struct h_proc *p;
        assert_int_equal(h_spawn(bins[i], argv, &p), 0);
        int status = 0;
        assert_int_equal(h_proc_wait(p, 5000, &status), 0);
        p->expected = true;
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char want[64];
        snprintf(want, sizeof(want), "shm layout version %u", SHM_LAYOUT_VERSION);
        assert_true(h_proc_log_contains(p, want));
    }
}

static bool channel_connected_logged(void *arg)
{
    return h_proc_log_contains(arg, "admin channel: dataplane pid");
}

/*
 * A clean control-plane shutdown with a data plane connected logs no
 * warning about the admin channel (it used to warn "connection closed
 * before hello" for every data plane), only what it closed.
 */
static void test_clean_shutdown_logs_no_channel_warning(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_wait_until(channel_connected_logged, f.cp, READY_MS), 0);
    h_fleet_stop(&f);
    assert_int_equal(h_proc_stop(f.cp, H_STOP_TIMEOUT_MS), 0);
    assert_false(h_proc_log_contains(f.cp, "closed before hello"));
    assert_false(h_proc_log_contains(f.cp, "disconnected:"));
    assert_true(h_proc_log_contains(f.cp, "admin channel: closed 1 connection on shutdown"));
}

static bool dataplane_left_logged(void *arg)
{
    return h_proc_log_contains(arg, "(lease 0) left: SIGTERM");
}

/*
 * A data plane stopped with SIGTERM says when its drain ended, with its
 * counts, and the control plane logs the planned disconnect at info: the
 * warning was for losses only (issue 42 item 5).
 */
static void test_drained_exit_is_logged_as_planned(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(h_wait_until(channel_connected_logged, f.cp, READY_MS), 0);
    assert_int_equal(h_proc_stop(f.dp, H_STOP_TIMEOUT_MS), 0);
    assert_true(h_proc_log_contains(f.dp, "level=info proc=dataplane"));
    assert_true(h_proc_log_contains(f.dp, "drained after SIGTERM in "));
    assert_true(h_proc_log_contains(f.dp, "0 requests to workers were in flight, all finished"));
    assert_int_equal(h_wait_until(dataplane_left_logged, f.cp, READY_MS), 0);
    assert_false(h_proc_log_contains(f.cp, "disconnected: end of stream"));
    h_fleet_stop(&f);
}

static bool cp_ready_logged(void *arg)
{
    return h_proc_log_contains(arg, "control plane ready");
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

static long admin_call(uint16_t port, const char *method, const char *path, const char *body)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)port, path);
    struct h_req req = {.method = method, .url = url, .body = body};
    struct h_resp resp = {0};
    long status = h_http(&req, &resp) == 0 ? resp.status : -1;
    h_resp_fini(&resp);
    return status;
}

/*
 * --fresh: a control plane restarted with it starts from the config alone
 * (the worker added through the API and the drain are gone), and it is
 * refused while a data plane still uses the segment.
 */
static void test_fresh_start_discards_runtime_state(void **state)
{
    (void)state;
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1});
    assert_int_equal(admin_call(f.cfg.admin_port, "POST", "/workers",
                                "{\"url\":\"http://127.0.0.1:9\",\"id\":\"extra\","
                                "\"model\":\"" H_FLEET_MODEL "\"}"),
                     201);
    assert_int_equal(
        admin_call(f.cfg.admin_port, "POST", "/workers/w1/drain", "{\"draining\":true}"), 200);
    h_fleet_stop(&f);
    assert_int_equal(h_proc_stop(f.cp, H_STOP_TIMEOUT_MS), 0);

    /* The data plane still holds its lease: --fresh must not pull the
     * segment from under it. */
    struct h_proc *refused = NULL;
    assert_int_equal(start_cp_fresh(f.cfg.path, &refused), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(refused, 10000, &status), 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    assert_true(h_proc_log_contains(refused, "is in use by a running control plane or data plane"));

    assert_int_equal(h_proc_stop(f.dp, H_STOP_TIMEOUT_MS), 0);
    struct h_proc *cp = NULL;
    assert_int_equal(start_cp_fresh(f.cfg.path, &cp), 0);
    /* Attach only once it is ready: before, the old segment still exists. */
    assert_int_equal(h_wait_until(cp_ready_logged, cp, READY_MS), 0);
    struct seg_ctx sc = {.name = f.cfg.shm_name};
    assert_int_equal(h_wait_until(segment_attachable, &sc, READY_MS), 0);
    struct registry_ctx rc = {.seg = &sc.seg, .want = 1};
    assert_int_equal(h_wait_until(registry_has, &rc, READY_MS), 0);
    struct shm_worker_info w;
    assert_int_equal(shm_registry_find(&sc.seg, "extra", &w), -ENOENT);
    assert_int_equal(shm_registry_find(&sc.seg, "w1", &w), 0);
    assert_false(w.draining);
    shm_segment_close(&sc.seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_sigkilled_holder_is_reaped_within_two_intervals),
        H_TEST(test_controlplane_restart_keeps_registry_and_load),
        H_TEST(test_second_controlplane_is_refused),
        H_TEST(test_dataplane_waits_claims_and_releases),
        H_TEST(test_dataplane_refuses_other_layout_version),
        H_TEST(test_bad_config_is_refused_with_position),
        H_TEST(test_version_names_layout),
        H_TEST(test_clean_shutdown_logs_no_channel_warning),
        H_TEST(test_drained_exit_is_logged_as_planned),
        H_TEST(test_fresh_start_discards_runtime_state),
    };
    return cmocka_run_group_tests_name("lifecycle", tests, NULL, NULL);
}
