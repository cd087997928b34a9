/*
 * End-to-end tests of lease liveness when the control plane and the
 * dataplanes live in different PID namespaces, as the two containers of a
 * Kubernetes pod do by default (invariant 7): each daemon runs as pid 1 of
 * a PID namespace of its own with its own /proc (`unshare --pid --fork
 * --mount-proc`, harness_pidns.h), and they share only /dev/shm and the
 * admin socket's directory.
 *
 * From the control plane's namespace a dataplane's recorded pid means
 * nothing: it is 1, which there is the control plane itself, so a pid check
 * would judge a live dataplane dead (another start time) or, with a shared
 * /proc, a dead one alive. The lease records its
 * holder's namespace and the control plane skips the pid check for a
 * foreign one; what must work instead is the OFD lock (a SIGKILLed
 * dataplane's lease is reaped within two heartbeat intervals, its load
 * gone, another dataplane's lease and load untouched) and the heartbeat (a
 * hung dataplane is reaped after the heartbeat timeout). Both are proven
 * here with real daemons forwarding real streams to a mock worker.
 *
 * When PID namespaces cannot be created (no CAP_SYS_ADMIN, a seccomp
 * profile refusing unshare), every test is skipped with the reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#include "tests/e2e/harness_pidns.h"

#define READY_MS  10000
#define MODEL     "mock-model"
#define STREAM_MS 60000

/* A stream that runs for a long time: 2000 tokens at 20 ms each. */
static const char *const LONG_STREAM =
    "{\"model\":\"" MODEL "\",\"stream\":true,\"max_tokens\":2000,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"keep talking\"}]}";

/* Skips the calling test (with the reason) when PID namespaces are out of reach. */
static void require_pidns(void)
{
    char why[512];
    if (h_pidns_probe(why, sizeof(why)) != 0) {
        print_message("SKIP: cannot run daemons in separate PID namespaces: %s\n", why);
        skip();
    }
}

/* The router under test: one mock worker w1, a control plane in its own
 * PID namespace, the segment attached for reading. */
struct rig {
    struct h_mock mock;
    struct h_config cfg;
    struct h_pidns_proc cp;
    struct shm_segment seg;
    bool attached;
    struct shm_worker_info w1;
};

static bool rig_attach(void *arg)
{
    struct rig *r = arg;
    char err[256];
    if (!r->attached && shm_segment_attach(&r->seg, r->cfg.shm_name, err, sizeof(err)) == 0)
        r->attached = true;
    return r->attached && shm_registry_find(&r->seg, "w1", &r->w1) == 0;
}

static void rig_start(struct rig *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(h_mock_start(&r->mock, "--model", MODEL, "--tpot-ms", "20", NULL), 0);
    assert_int_equal(h_config_add_worker(&r->cfg, r->mock.url, "w1", MODEL, NULL), 0);
    assert_int_equal(h_config_write(&r->cfg, NULL), 0);
    assert_int_equal(h_pidns_start_controlplane(r->cfg.path, &r->cp), 0);
    assert_int_equal(h_wait_until(rig_attach, r, READY_MS), 0);
    /* The control plane recorded its own namespace: not ours. */
    assert_int_equal(atomic_load(&r->seg.hdr->cp_pid_namespace), r->cp.ns_inode);
    assert_int_not_equal(r->cp.ns_inode, h_pidns_self());
    assert_int_equal(atomic_load(&r->seg.hdr->cp_pid), 1);
}

static void rig_stop(struct rig *r)
{
    assert_int_equal(h_pidns_stop(&r->cp, 5000), 0);
    if (r->attached)
        shm_segment_close(&r->seg);
    r->attached = false;
}

/* Writes a copy of the rig's config with a dataplane port of its own. */
static void dataplane_config(struct rig *r, const char *name, struct h_config *out)
{
    *out = r->cfg;
    out->dataplane_port = 0;
    assert_int_equal(h_config_write(out, name), 0);
}

/* Starts a dataplane in its own namespace and waits until it serves. */
static void start_dataplane(struct h_config *cfg, struct h_pidns_proc *dp)
{
    assert_int_equal(h_pidns_start_dataplane(cfg->path, dp), 0);
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), cfg->dataplane_port, "/health"), 0);
    assert_int_equal(h_wait_http_ok(url, READY_MS), 0);
}

/* The lease held by the process of PID namespace ns, or -1. */
static int lease_of_namespace(struct shm_segment *seg, uint64_t ns)
{
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        const struct shm_lease *l = &seg->leases[i];
        if (shm_lease_is_active(seg, i) &&
            atomic_load_explicit((_Atomic uint64_t *)&l->pid_namespace, memory_order_relaxed) == ns)
            return (int)i;
    }
    return -1;
}

struct lease_wait {
    struct shm_segment *seg;
    uint64_t ns;
    int lease;
};

static bool lease_claimed(void *arg)
{
    struct lease_wait *w = arg;
    w->lease = lease_of_namespace(w->seg, w->ns);
    return w->lease >= 0;
}

/* Waits for the lease of dataplane dp and checks what it recorded. */
static uint32_t dataplane_lease(struct rig *r, const struct h_pidns_proc *dp)
{
    struct lease_wait w = {.seg = &r->seg, .ns = dp->ns_inode, .lease = -1};
    assert_int_equal(h_wait_until(lease_claimed, &w, READY_MS), 0);
    const struct shm_lease *l = &r->seg.leases[w.lease];
    /* pid 1 of its own namespace: in the control plane's namespace pid 1 is
     * the control plane itself, so the pid must not be what decides. */
    assert_int_equal(atomic_load_explicit((_Atomic int32_t *)&l->pid, memory_order_relaxed), 1);
    assert_int_not_equal(dp->ns_inode, r->cp.ns_inode);
    assert_int_not_equal(dp->ns_inode, h_pidns_self());
    return (uint32_t)w.lease;
}

/* Starts n long streams through the dataplane on port. */
static void start_streams(uint16_t port, struct h_async **a, size_t n)
{
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), port, "/v1/chat/completions"), 0);
    struct h_async_opts opts = {.timeout_ms = STREAM_MS};
    for (size_t i = 0; i < n; i++)
        assert_int_equal(h_async_start(url, LONG_STREAM, &opts, &a[i]), 0);
}

struct load_wait {
    struct rig *r;
    uint64_t want;
};

static bool load_is(void *arg)
{
    struct load_wait *w = arg;
    return shm_load_of(&w->r->seg, w->r->w1.slot, w->r->w1.generation) == w->want;
}

static void wait_load(struct rig *r, uint64_t want, int timeout_ms)
{
    struct load_wait w = {.r = r, .want = want};
    int rc = h_wait_until(load_is, &w, timeout_ms);
    if (rc != 0)
        print_message("load of w1 is %llu, expected %llu\n",
                      (unsigned long long)shm_load_of(&r->seg, r->w1.slot, r->w1.generation),
                      (unsigned long long)want);
    assert_int_equal(rc, 0);
}

static bool one_lease_reaped(void *arg)
{
    struct rig *r = arg;
    return atomic_load(&r->seg.hdr->leases_reaped) == 1;
}

/* The reaper zeroes a lease's counters before it frees and counts it: a
 * load that reached its value says the reap began, this that it ended. */
static void wait_reaped(struct rig *r, int timeout_ms)
{
    assert_int_equal(h_wait_until(one_lease_reaped, r, timeout_ms), 0);
}

/* GET /status of the control plane: number of dataplanes it lists. */
static long status_dataplanes(struct rig *r)
{
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), r->cfg.admin_port, "/status"), 0);
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    json_t *j = h_resp_json(&resp);
    assert_non_null(j);
    long n = (long)json_array_size(json_object_get(j, "dataplanes"));
    json_decref(j);
    h_resp_fini(&resp);
    return n;
}

/* GET /workers/w1: its inflight_by_dataplane entry for key, or -1 when absent. */
static long long inflight_entry(struct rig *r, const char *key, size_t *n_entries)
{
    char url[96];
    assert_int_equal(h_url(url, sizeof(url), r->cfg.admin_port, "/workers/w1"), 0);
    struct h_resp resp;
    assert_int_equal(h_http_get(url, &resp), 0);
    assert_int_equal(resp.status, 200);
    json_t *j = h_resp_json(&resp);
    assert_non_null(j);
    json_t *by_dp = json_object_get(j, "inflight_by_dataplane");
    *n_entries = json_object_size(by_dp);
    json_t *v = json_object_get(by_dp, key);
    long long n = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(j);
    h_resp_fini(&resp);
    return n;
}

/* ---- tests -------------------------------------------------------------- */

static void test_sigkilled_dataplane_in_other_pidns_is_reaped(void **state)
{
    (void)state;
    require_pidns();
    struct rig r;
    rig_start(&r);

    /* Two dataplanes, each pid 1 of its own namespace: a survivor with 2
     * streams and a victim with 3, all on w1. */
    struct h_config survivor_cfg, victim_cfg;
    dataplane_config(&r, "survivor.yaml", &survivor_cfg);
    dataplane_config(&r, "victim.yaml", &victim_cfg);
    struct h_pidns_proc survivor, victim;
    start_dataplane(&survivor_cfg, &survivor);
    start_dataplane(&victim_cfg, &victim);
    assert_int_not_equal(survivor.ns_inode, victim.ns_inode);
    uint32_t survivor_lease = dataplane_lease(&r, &survivor);
    uint32_t victim_lease = dataplane_lease(&r, &victim);
    assert_int_not_equal(survivor_lease, victim_lease);

    struct h_async *keep[2], *lose[3];
    start_streams(survivor_cfg.dataplane_port, keep, 2);
    start_streams(victim_cfg.dataplane_port, lose, 3);
    wait_load(&r, 5, READY_MS);
    assert_int_equal(shm_load_in_lease(&r.seg, victim_lease, r.w1.slot, r.w1.generation), 3);
    assert_int_equal(status_dataplanes(&r), 2);
    /* Both are pid 1: the admin API keys them apart by lease. */
    char key[32];
    size_t n_entries = 0;
    snprintf(key, sizeof(key), "1@%u", survivor_lease);
    assert_int_equal(inflight_entry(&r, key, &n_entries), 2);
    snprintf(key, sizeof(key), "1@%u", victim_lease);
    assert_int_equal(inflight_entry(&r, key, &n_entries), 3);
    assert_int_equal(n_entries, 2);

    assert_int_equal(h_pidns_signal(&victim, SIGKILL), 0);
    int64_t killed_at = h_now_ms();
    uint32_t interval = r.seg.hdr->heartbeat_interval_ms;
    wait_load(&r, 2, 5000);
    wait_reaped(&r, 5000);
    int64_t took = h_now_ms() - killed_at;
    print_message("lease of a SIGKILLed dataplane in another PID namespace reaped %lld ms after "
                  "the kill (bound: two heartbeat intervals, %u ms)\n",
                  (long long)took, 2 * interval);
    assert_true(took <= 2 * (int64_t)interval);
    assert_false(shm_lease_is_active(&r.seg, victim_lease));
    assert_true(shm_lease_is_active(&r.seg, survivor_lease));
    assert_int_equal(shm_load_in_lease(&r.seg, survivor_lease, r.w1.slot, r.w1.generation), 2);
    assert_int_equal(atomic_load(&r.seg.hdr->leases_reaped), 1);
    assert_int_equal(status_dataplanes(&r), 1);
    /* unshare follows its child (util-linux 2.38 cannot re-raise SIGKILL on
     * itself and exits 1 instead). */
    int status = 0;
    assert_int_equal(h_proc_wait(victim.outer, 5000, &status), 0);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The victim's streams were cut; the mock sees its connections go. */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(h_async_wait(lose[i], 5000), 0);
    assert_int_equal(h_wait_mock_stat(r.mock.url, "inflight", 2, 5000), 0);

    /* A fresh dataplane in yet another namespace claims a lease and serves. */
    struct h_pidns_proc again;
    start_dataplane(&victim_cfg, &again);
    dataplane_lease(&r, &again);
    struct h_async *more[1];
    start_streams(victim_cfg.dataplane_port, more, 1);
    wait_load(&r, 3, READY_MS);

    for (size_t i = 0; i < 2; i++)
        h_async_destroy(keep[i]);
    h_async_destroy(more[0]);
    wait_load(&r, 0, 5000);
    assert_int_equal(h_pidns_stop(&again, 5000), 0);
    assert_int_equal(h_pidns_stop(&survivor, 5000), 0);
    assert_int_equal(shm_load_underflows(&r.seg), 0);
    rig_stop(&r);
}

static void test_hung_dataplane_in_other_pidns_is_reaped_by_heartbeat(void **state)
{
    (void)state;
    require_pidns();
    struct rig r;
    rig_start(&r);
    struct h_config dp_cfg;
    dataplane_config(&r, "dataplane.yaml", &dp_cfg);
    struct h_pidns_proc dp;
    start_dataplane(&dp_cfg, &dp);
    uint32_t lease = dataplane_lease(&r, &dp);
    struct h_async *a[2];
    start_streams(dp_cfg.dataplane_port, a, 2);
    wait_load(&r, 2, READY_MS);

    /* Stopped, it keeps its lock and its admin-channel connection: only the
     * heartbeat can tell, since its pid is meaningless to the control plane. */
    assert_int_equal(h_pidns_signal(&dp, SIGSTOP), 0);
    int64_t stopped_at = h_now_ms();
    uint32_t timeout = r.seg.hdr->heartbeat_timeout_ms;
    uint32_t interval = r.seg.hdr->heartbeat_interval_ms;
    wait_load(&r, 0, (int)(timeout + 20 * interval));
    wait_reaped(&r, 5000);
    int64_t took = h_now_ms() - stopped_at;
    print_message("lease of a hung dataplane in another PID namespace reaped %lld ms after "
                  "SIGSTOP (heartbeat timeout %u ms)\n",
                  (long long)took, timeout);
    assert_true(took >= (int64_t)timeout - 2 * (int64_t)interval);
    /* Generous above: a loaded machine delays the reaper tick, not the verdict. */
    assert_true(took <= (int64_t)timeout + 10 * (int64_t)interval);
    assert_false(shm_lease_is_active(&r.seg, lease));
    assert_int_equal(atomic_load(&r.seg.hdr->leases_reaped), 1);

    /* Woken up, it finds its lease reaped and exits (operations.md). */
    assert_int_equal(h_pidns_signal(&dp, SIGCONT), 0);
    dp.outer->expected = true;
    assert_int_equal(h_proc_wait(dp.outer, 5000, NULL), 0);
    for (size_t i = 0; i < 2; i++)
        h_async_destroy(a[i]);
    assert_int_equal(shm_load_of(&r.seg, r.w1.slot, r.w1.generation), 0);
    assert_int_equal(shm_load_underflows(&r.seg), 0);
    rig_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_sigkilled_dataplane_in_other_pidns_is_reaped),
        H_TEST(test_hung_dataplane_in_other_pidns_is_reaped_by_heartbeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
