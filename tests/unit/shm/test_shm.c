/*
 * Unit tests of the shared-memory segment: layout validation, the seqlocked
 * registry, leases and their reaping, and the load counters' invariants
 * (1 paired accounting, 5 no underflow, 6 generation tags, 7 crash reaping,
 * 8 re-attach keeps load). Processes are forked where two real lease holders
 * are needed: OFD locks and lease identity are per process.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
/* The segment's private bytes, for the tests that tear a slot, forge a
 * header or measure cache-line placement; everything else uses the API. */
#include "shm/layout_private.h"

static char test_name[64];

static const char *fresh_name(void)
{
    static int n;
    snprintf(test_name, sizeof(test_name), "/sy-unit-%d-%d", (int)getpid(), n++);
    return test_name;
}

static int teardown_unlink(void **state)
{
    (void)state;
    shm_unlink(test_name);
    return 0;
}

/* fork() whose child dies with the test process, so a failed assertion in
 * the parent never leaves a child holding a pipe (and the runner) open. */
static pid_t fork_child(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
    }
    return pid;
}

static void open_owner(struct shm_segment *seg, uint32_t workers, uint32_t dataplanes)
{
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    int rc =
        shm_segment_open_owner(seg, test_name, workers, dataplanes, &outcome, err, sizeof(err));
    if (rc != 0)
        fail_msg("open_owner: %s", err);
}

static struct shm_worker_info worker(const char *id, const char *url, const char *model)
{
    struct shm_worker_info w = {.role = CFG_ROLE_REGULAR, .healthy = true};
    snprintf(w.id, sizeof(w.id), "%s", id);
    snprintf(w.url, sizeof(w.url), "%s", url);
    snprintf(w.model, sizeof(w.model), "%s", model);
    return w;
}

/* ---- segment ---------------------------------------------------------------- */

static void test_create_then_reattach_bumps_epoch(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment a;
    open_owner(&a, 16, 4);
    struct shm_segment_stats stats;
    shm_segment_stats(&a, &stats);
    uint64_t epoch1 = stats.epoch;
    assert_int_equal(stats.layout_version, SHM_LAYOUT_VERSION);

    /* The object is 0600 whatever the umask. */
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", test_name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* A second owner while the first lives is refused. */
    struct shm_segment b;
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    assert_int_equal(shm_segment_open_owner(&b, test_name, 16, 4, &outcome, err, sizeof(err)),
                     -EBUSY);
    assert_non_null(strstr(err, "another running control plane"));

    /* The registry counts as published once this epoch's owner says so. */
    assert_false(shm_registry_is_synced(&a));
    shm_registry_mark_synced(&a);
    assert_true(shm_registry_is_synced(&a));

    shm_segment_close(&a);
    assert_int_equal(shm_segment_open_owner(&b, test_name, 16, 4, &outcome, err, sizeof(err)), 0);
    assert_int_equal(outcome, SHM_OPEN_REATTACHED);
    assert_int_equal(shm_segment_epoch(&b), epoch1 + 1);
    /* A new control plane has not synced yet: a dataplane starting now waits. */
    assert_false(shm_registry_is_synced(&b));
    shm_registry_mark_synced(&b);
    assert_true(shm_registry_is_synced(&b));
    shm_segment_close(&b);
}

static void test_attach_refuses_other_layout_version(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment owner;
    open_owner(&owner, 8, 2);
    owner.hdr->layout_version = SHM_LAYOUT_VERSION + 1;

    struct shm_segment dp;
    char err[512] = "";
    assert_int_equal(shm_segment_attach(&dp, test_name, err, sizeof(err)), -EPROTO);
    char want[128];
    snprintf(want, sizeof(want),
             "segment has layout version %u, this binary uses layout version %u",
             SHM_LAYOUT_VERSION + 1, SHM_LAYOUT_VERSION);
    assert_non_null(strstr(err, want));

    /* A restarting control plane refuses it too, and leaves it alone. */
    shm_segment_close(&owner);
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    assert_int_equal(shm_segment_open_owner(&owner, test_name, 8, 2, &outcome, err, sizeof(err)),
                     -EPROTO);
    assert_non_null(strstr(err, want));
}

static void test_attach_refuses_wrong_size(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment owner;
    open_owner(&owner, 8, 2);
    /* Growing the object (never shrink a mapped one) must be noticed. */
    assert_int_equal(ftruncate(owner.fd, (off_t)owner.size + 4096), 0);
    struct shm_segment dp;
    char err[512] = "";
    assert_int_equal(shm_segment_attach(&dp, test_name, err, sizeof(err)), -EPROTO);
    assert_non_null(strstr(err, "segment size mismatch"));
    shm_segment_close(&owner);
}

static void test_attach_waits_for_unpublished_segment(void **state)
{
    (void)state;
    fresh_name();
    /* A creator that died before publishing the magic leaves a zeroed object. */
    int fd = shm_open(test_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)shm_segment_size_for(8, 2)), 0);
    close(fd);
    struct shm_segment dp;
    char err[512] = "";
    assert_int_equal(shm_segment_attach(&dp, test_name, err, sizeof(err)), -EAGAIN);

    /* The next control plane replaces it. */
    struct shm_segment owner;
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    assert_int_equal(shm_segment_open_owner(&owner, test_name, 8, 2, &outcome, err, sizeof(err)),
                     0);
    assert_int_equal(outcome, SHM_OPEN_REPLACED);
    assert_int_equal(shm_segment_attach(&dp, test_name, err, sizeof(err)), 0);
    shm_segment_close(&dp);
    shm_segment_close(&owner);
}

static void test_capacity_change_is_refused(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment owner;
    open_owner(&owner, 8, 2);
    shm_segment_close(&owner);
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    assert_int_equal(shm_segment_open_owner(&owner, test_name, 16, 2, &outcome, err, sizeof(err)),
                     -EPROTO);
    assert_non_null(strstr(err, "max_workers 8"));
}

/* ---- registry ---------------------------------------------------------------- */

static void test_registry_add_find_remove_generation(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 2);
    struct shm_worker_info a = worker("w1", "http://127.0.0.1:9001", "m");
    struct shm_worker_info placed, got;
    assert_int_equal(shm_registry_add(&seg, &a, &placed), 0);
    assert_int_equal(placed.generation, 1);
    assert_int_equal(shm_registry_find(&seg, "w1", &got), 0);
    assert_string_equal(got.url, "http://127.0.0.1:9001");
    assert_true(got.healthy);
    assert_int_equal(got.role, CFG_ROLE_REGULAR);

    /* Duplicate id or url. */
    struct shm_worker_info dup_id = worker("w1", "http://127.0.0.1:9009", "m");
    struct shm_worker_info dup_url = worker("w9", "http://127.0.0.1:9001", "m");
    assert_int_equal(shm_registry_add(&seg, &dup_id, NULL), -EEXIST);
    assert_int_equal(shm_registry_add(&seg, &dup_url, NULL), -EEXIST);

    /* Health and draining do not change the generation. */
    uint64_t changes = shm_registry_changes(&seg);
    assert_int_equal(shm_registry_set_healthy(&seg, placed.slot, false), 0);
    assert_int_equal(shm_registry_set_draining(&seg, placed.slot, true), 0);
    assert_true(shm_registry_changes(&seg) > changes);
    assert_int_equal(shm_registry_read_slot(&seg, placed.slot, &got), 0);
    assert_false(got.healthy);
    assert_true(got.draining);
    assert_int_equal(got.generation, 1);

    /* Removal keeps the generation; reuse bumps it. */
    assert_int_equal(shm_registry_remove(&seg, placed.slot), 0);
    assert_int_equal(shm_registry_read_slot(&seg, placed.slot, &got), -ENOENT);
    assert_int_equal(shm_registry_generation(&seg, placed.slot), 1);
    struct shm_worker_info b = worker("w2", "http://127.0.0.1:9002", "m");
    struct shm_worker_info placed_b;
    assert_int_equal(shm_registry_add(&seg, &b, &placed_b), 0);
    assert_int_equal(placed_b.slot, placed.slot);
    assert_int_equal(placed_b.generation, 2);
    shm_segment_close(&seg);
}

/* A reset_load's drain (RESETTING with DRAINING) ends with the reset, or
 * when a successor control plane attaches; an operator's drain outlives it. */
static void test_registry_reset_drain(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 2);
    struct shm_worker_info a = worker("w1", "http://127.0.0.1:9001", "m");
    struct shm_worker_info b = worker("w2", "http://127.0.0.1:9002", "m");
    struct shm_worker_info pa, pb, got;
    assert_int_equal(shm_registry_add(&seg, &a, &pa), 0);
    assert_int_equal(shm_registry_add(&seg, &b, &pb), 0);

    assert_int_equal(shm_registry_set_reset_drain(&seg, pa.slot, true), 0);
    assert_int_equal(shm_registry_read_slot(&seg, pa.slot, &got), 0);
    assert_true(got.draining);
    assert_true(got.resetting);
    assert_true(shm_registry_is_draining(&seg, pa.slot));
    assert_int_equal(shm_registry_set_reset_drain(&seg, pa.slot, false), 0);
    assert_int_equal(shm_registry_read_slot(&seg, pa.slot, &got), 0);
    assert_false(got.draining);
    assert_false(got.resetting);

    /* Already draining: the reset leaves the operator's drain alone. */
    assert_int_equal(shm_registry_set_draining(&seg, pb.slot, true), 0);
    assert_int_equal(shm_registry_set_reset_drain(&seg, pb.slot, true), 0);
    assert_int_equal(shm_registry_read_slot(&seg, pb.slot, &got), 0);
    assert_false(got.resetting);
    assert_int_equal(shm_registry_set_reset_drain(&seg, pb.slot, false), 0);
    assert_int_equal(shm_registry_read_slot(&seg, pb.slot, &got), 0);
    assert_true(got.draining);

    /* A real drain set mid-reset outlives the reset. */
    assert_int_equal(shm_registry_set_reset_drain(&seg, pa.slot, true), 0);
    assert_int_equal(shm_registry_set_draining(&seg, pa.slot, true), 0);
    assert_int_equal(shm_registry_set_reset_drain(&seg, pa.slot, false), 0);
    assert_int_equal(shm_registry_read_slot(&seg, pa.slot, &got), 0);
    assert_true(got.draining);
    assert_false(got.resetting);

    /* A control plane that died mid-reset: its successor ends only that drain. */
    assert_int_equal(shm_registry_set_draining(&seg, pa.slot, false), 0);
    assert_int_equal(shm_registry_set_reset_drain(&seg, pa.slot, true), 0);
    assert_int_equal(shm_registry_end_interrupted_resets(&seg), 1);
    assert_int_equal(shm_registry_read_slot(&seg, pa.slot, &got), 0);
    assert_false(got.draining);
    assert_int_equal(shm_registry_read_slot(&seg, pb.slot, &got), 0);
    assert_true(got.draining);
    assert_int_equal(shm_registry_end_interrupted_resets(&seg), 0);
    assert_int_equal(shm_registry_set_reset_drain(&seg, 99, true), -ENOENT);
    shm_segment_close(&seg);
}

/* A worker's other names (layout 2): set with its model, matched whole. */
static void test_registry_aliases(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 2);
    struct shm_worker_info a = worker("w1", "http://127.0.0.1:9001", "");
    struct shm_worker_info placed, got;
    assert_int_equal(shm_registry_add(&seg, &a, &placed), 0);
    assert_string_equal(placed.aliases, "");
    assert_int_equal(shm_registry_set_names(&seg, placed.slot, "a", "bb\nsql-lora"), 0);
    assert_int_equal(shm_registry_find(&seg, "w1", &got), 0);
    assert_string_equal(got.model, "a");
    assert_string_equal(got.aliases, "bb\nsql-lora");
    assert_true(shm_worker_serves(&got, "a"));
    assert_true(shm_worker_serves(&got, "bb"));
    assert_true(shm_worker_serves(&got, "sql-lora"));
    assert_false(shm_worker_serves(&got, "b"));
    assert_false(shm_worker_serves(&got, "sql"));
    assert_false(shm_worker_serves(&got, "bb\nsql-lora"));
    char big[SHM_ALIASES_MAX + 1];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(shm_registry_set_names(&seg, placed.slot, "a", big), -EINVAL);
    /* A worker placed in the slot later starts without them. */
    assert_int_equal(shm_registry_remove(&seg, placed.slot), 0);
    assert_int_equal(shm_registry_add(&seg, &a, &placed), 0);
    assert_int_equal(shm_registry_read_slot(&seg, placed.slot, &got), 0);
    assert_string_equal(got.aliases, "");
    shm_segment_close(&seg);
}

static void test_registry_full(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 2, 1);
    struct shm_worker_info a = worker("a", "http://127.0.0.1:1", ""),
                           b = worker("b", "http://127.0.0.1:2", ""),
                           c = worker("c", "http://127.0.0.1:3", "");
    assert_int_equal(shm_registry_add(&seg, &a, NULL), 0);
    assert_int_equal(shm_registry_add(&seg, &b, NULL), 0);
    assert_int_equal(shm_registry_add(&seg, &c, NULL), -ENOSPC);
    shm_segment_close(&seg);
}

struct seqlock_ctx {
    struct shm_segment *seg;
    uint32_t slot;
    _Atomic bool stop;
    _Atomic uint64_t reads;
    _Atomic uint64_t torn;
};

static void *seqlock_reader(void *arg)
{
    struct seqlock_ctx *ctx = arg;
    while (!atomic_load(&ctx->stop)) {
        struct shm_worker_info got;
        if (shm_registry_read_slot(ctx->seg, ctx->slot, &got) != 0)
            continue;
        unsigned a = 0, b = 0, c = 0;
        /* The writer always writes one number n into all three fields. */
        if (sscanf(got.id, "w-%u", &a) != 1 || sscanf(got.url, "http://127.0.0.1:%u", &b) != 1 ||
            sscanf(got.model, "model-%u", &c) != 1 || a != b || b != c)
            atomic_fetch_add(&ctx->torn, 1);
        atomic_fetch_add(&ctx->reads, 1);
    }
    return NULL;
}

/* Rewrites a slot's strings in place, as fast as possible, through the
 * real writer protocol (set_names is one seqlocked write; the id and url
 * go through the same begin/end pair via remove + add in a 1-slot registry). */
static void test_seqlock_no_torn_reads(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 1, 1);
    struct shm_worker_info w = worker("w-0", "http://127.0.0.1:0", "model-0");
    struct shm_worker_info placed;
    assert_int_equal(shm_registry_add(&seg, &w, &placed), 0);

    struct seqlock_ctx ctx = {.seg = &seg, .slot = placed.slot};
    pthread_t readers[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&readers[i], NULL, seqlock_reader, &ctx), 0);
    uint64_t writes = 0;
    uint64_t deadline = proc_monotonic_ms() + 1500;
    for (unsigned n = 1; proc_monotonic_ms() < deadline || atomic_load(&ctx.reads) < 10000; n++) {
        struct shm_worker_info next;
        char id[32], url[64], model[32];
        snprintf(id, sizeof(id), "w-%u", n);
        snprintf(url, sizeof(url), "http://127.0.0.1:%u", n);
        snprintf(model, sizeof(model), "model-%u", n);
        next = worker(id, url, model);
        assert_int_equal(shm_registry_remove(&seg, placed.slot), 0);
        assert_int_equal(shm_registry_add(&seg, &next, NULL), 0);
        writes++;
    }
    atomic_store(&ctx.stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(readers[i], NULL);
    print_message("seqlock: %llu writes, %llu reads, %llu torn\n", (unsigned long long)writes,
                  (unsigned long long)atomic_load(&ctx.reads),
                  (unsigned long long)atomic_load(&ctx.torn));
    assert_true(atomic_load(&ctx.reads) >= 10000);
    assert_int_equal(atomic_load(&ctx.torn), 0);
    shm_segment_close(&seg);
}

static void test_repair_closes_half_written_slot(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 1);
    struct shm_worker_info w = worker("keep", "http://127.0.0.1:1", "m");
    struct shm_worker_info placed, got;
    assert_int_equal(shm_registry_add(&seg, &w, &placed), 0);
    /* Simulate a writer that died mid-write. */
    atomic_fetch_add(&seg.slots[placed.slot].seq, 1);
    assert_int_equal(shm_registry_read_slot(&seg, placed.slot, &got), -EAGAIN);
    shm_segment_close(&seg);

    open_owner(&seg, 4, 1);
    assert_int_equal(shm_registry_repair(&seg), 1);
    assert_int_equal(shm_registry_read_slot(&seg, placed.slot, &got), 0);
    assert_string_equal(got.id, "keep");
    shm_segment_close(&seg);
}

/* ---- load counters -------------------------------------------------------- */

static void test_guard_release_is_idempotent(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 2);
    struct shm_lease_handle lease;
    char err[256];
    assert_int_equal(shm_lease_claim(&seg, &lease, err, sizeof(err)), 0);
    struct shm_worker_info w = worker("a", "http://127.0.0.1:1", "");
    struct shm_worker_info p;
    assert_int_equal(shm_registry_add(&seg, &w, &p), 0);

    struct shm_load_guard g1, g2;
    assert_int_equal(shm_load_acquire(&seg, lease.index, p.slot, p.generation, &g1), 0);
    assert_int_equal(shm_load_acquire(&seg, lease.index, p.slot, p.generation, &g2), 0);
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), 2);
    shm_load_release(&seg, &g1);
    shm_load_release(&seg, &g1);
    shm_load_release(&seg, &g1);
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), 1);
    shm_load_release(&seg, &g2);
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), 0);
    assert_int_equal(shm_load_underflows(&seg), 0);
    shm_lease_release(&lease);
    shm_segment_close(&seg);
}

static void test_decrement_at_zero_counts_underflow(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 2);
    struct shm_lease_handle lease;
    char err[256];
    assert_int_equal(shm_lease_claim(&seg, &lease, err, sizeof(err)), 0);
    struct shm_worker_info w = worker("a", "http://127.0.0.1:1", "");
    struct shm_worker_info p;
    assert_int_equal(shm_registry_add(&seg, &w, &p), 0);
    struct shm_load_guard g;
    assert_int_equal(shm_load_acquire(&seg, lease.index, p.slot, p.generation, &g), 0);
    /* Drift: the count vanished under a live guard (e.g. a wrong reset). */
    assert_int_equal(shm_load_reset(&seg, p.slot, p.generation), 1);
    assert_int_equal(shm_load_underflows(&seg), 0);
    shm_load_release(&seg, &g);
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), 0);
    assert_int_equal(shm_load_in_lease(&seg, lease.index, p.slot, p.generation), 0);
    assert_int_equal(shm_load_underflows(&seg), 1);
    shm_lease_release(&lease);
    shm_segment_close(&seg);
}

static void test_stale_guard_never_touches_new_occupant(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 1, 2);
    struct shm_lease_handle lease;
    char err[256];
    assert_int_equal(shm_lease_claim(&seg, &lease, err, sizeof(err)), 0);
    struct shm_worker_info old_w = worker("old", "http://127.0.0.1:1", "");
    struct shm_worker_info old_p;
    assert_int_equal(shm_registry_add(&seg, &old_w, &old_p), 0);
    struct shm_load_guard stale;
    assert_int_equal(shm_load_acquire(&seg, lease.index, old_p.slot, old_p.generation, &stale), 0);

    /* The worker is removed and its slot handed to a new worker with load 3. */
    assert_int_equal(shm_registry_remove(&seg, old_p.slot), 0);
    struct shm_worker_info new_w = worker("new", "http://127.0.0.1:2", "");
    struct shm_worker_info new_p;
    assert_int_equal(shm_registry_add(&seg, &new_w, &new_p), 0);
    assert_int_equal(new_p.slot, old_p.slot);
    assert_int_not_equal(new_p.generation, old_p.generation);
    struct shm_load_guard fresh[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            shm_load_acquire(&seg, lease.index, new_p.slot, new_p.generation, &fresh[i]), 0);
    assert_int_equal(shm_load_of(&seg, new_p.slot, new_p.generation), 3);

    /* The old guard releases late: the new occupant keeps exactly 3. */
    shm_load_release(&seg, &stale);
    assert_int_equal(shm_load_of(&seg, new_p.slot, new_p.generation), 3);
    assert_int_equal(shm_load_underflows(&seg), 0);
    assert_int_equal(shm_load_stale_releases(&seg), 1);

    /* And a guard for the old generation cannot be taken any more. */
    struct shm_load_guard late;
    assert_int_equal(shm_load_acquire(&seg, lease.index, old_p.slot, old_p.generation, &late),
                     -ESTALE);
    assert_int_equal(shm_load_of(&seg, new_p.slot, new_p.generation), 3);
    for (int i = 0; i < 3; i++)
        shm_load_release(&seg, &fresh[i]);
    assert_int_equal(shm_load_of(&seg, new_p.slot, new_p.generation), 0);
    shm_lease_release(&lease);
    shm_segment_close(&seg);
}

/* A child process: attaches on its own (own OFD = own lease lock), claims a
 * lease, takes `hold` guards on slot 0 and tells the parent, runs `pairs`
 * acquire/release pairs, then waits for the go to release and exit. */
static void child_pairs(const char *name, uint32_t gen, int pairs, int hold, int ready_fd,
                        int go_fd)
{
    struct shm_segment seg;
    struct shm_lease_handle lease;
    char err[256];
    if (shm_segment_attach(&seg, name, err, sizeof(err)) != 0 ||
        shm_lease_claim(&seg, &lease, err, sizeof(err)) != 0)
        _exit(10);
    struct shm_load_guard *held = calloc((size_t)hold, sizeof(*held));
    for (int i = 0; i < hold; i++)
        if (shm_load_acquire(&seg, lease.index, 0, gen, &held[i]) != 0)
            _exit(11);
    for (int i = 0; i < pairs; i++) {
        struct shm_load_guard g;
        if (shm_load_acquire(&seg, lease.index, 0, gen, &g) != 0)
            _exit(12);
        shm_load_release(&seg, &g);
    }
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 1)
        _exit(13);
    for (int i = 0; i < hold; i++)
        shm_load_release(&seg, &held[i]);
    free(held);
    shm_lease_release(&lease);
    shm_segment_close(&seg);
    _exit(0);
}

static void test_two_processes_million_pairs(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 2, 4);
    struct shm_worker_info w = worker("a", "http://127.0.0.1:1", "");
    struct shm_worker_info p;
    assert_int_equal(shm_registry_add(&seg, &w, &p), 0);
    assert_int_equal(p.slot, 0);

    enum { CHILDREN = 2, PAIRS = 1000000, HOLD = 37 };
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        pids[i] = fork_child();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            child_pairs(test_name, p.generation, PAIRS, HOLD + i, ready[1], go[0]);
    }
    char c;
    for (int i = 0; i < CHILDREN; i++)
        assert_int_equal(read(ready[0], &c, 1), 1);
    /* Both children hold their guards and finished their pairs. */
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), HOLD + HOLD + 1);
    for (int i = 0; i < CHILDREN; i++)
        assert_int_equal(write(go[1], "g", 1), 1);
    for (int i = 0; i < CHILDREN; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(shm_load_of(&seg, p.slot, p.generation), 0);
    for (uint32_t i = 0; i < seg.max_dataplanes; i++)
        assert_int_equal(shm_load_in_lease(&seg, i, p.slot, p.generation), 0);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    shm_segment_close(&seg);
}

/* The reaper's building blocks, judged by hand: a SIGKILLed holder's lease
 * is dead (its lock is gone), reaping drops exactly its share. The real
 * control plane's timing is tested end to end (tests/e2e). */
static void test_killed_holder_is_judged_dead_and_reaped(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 4);
    struct shm_worker_info p[3];
    for (int i = 0; i < 3; i++) {
        char id[16], url[32];
        snprintf(id, sizeof(id), "w%d", i);
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", 9000 + i);
        struct shm_worker_info w = worker(id, url, "");
        assert_int_equal(shm_registry_add(&seg, &w, &p[i]), 0);
    }
    /* Another live holder (its own attach, as a dataplane would) holds 1 on
     * each worker: that must survive the reap. */
    struct shm_segment other;
    struct shm_lease_handle mine;
    char err[256];
    assert_int_equal(shm_segment_attach(&other, test_name, err, sizeof(err)), 0);
    assert_int_equal(shm_lease_claim(&other, &mine, err, sizeof(err)), 0);
    struct shm_load_guard own[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_acquire(&other, mine.index, p[i].slot, p[i].generation, &own[i]),
                         0);

    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork_child();
    assert_true(child >= 0);
    if (child == 0) {
        struct shm_segment cs;
        struct shm_lease_handle cl;
        if (shm_segment_attach(&cs, test_name, err, sizeof(err)) != 0 ||
            shm_lease_claim(&cs, &cl, err, sizeof(err)) != 0)
            _exit(10);
        for (int i = 0; i < 3; i++)
            for (int k = 0; k <= i; k++) {
                struct shm_load_guard g;
                if (shm_load_acquire(&cs, cl.index, p[i].slot, p[i].generation, &g) != 0)
                    _exit(11);
            }
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(12);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_of(&seg, p[i].slot, p[i].generation), 1 + (uint64_t)i + 1);

    struct shm_lease_watch watch[4] = {0};
    uint64_t now = proc_monotonic_ms();
    for (uint32_t i = 0; i < 4; i++)
        assert_int_not_equal(shm_lease_judge(&seg, i, &watch[i], now),
                             SHM_LEASE_VERDICT_DEAD_NO_LOCK);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);

    int reaped = 0;
    for (uint32_t i = 0; i < 4; i++) {
        enum shm_lease_verdict v = shm_lease_judge(&seg, i, &watch[i], now);
        if (i == mine.index) {
            assert_int_equal(v, SHM_LEASE_VERDICT_ALIVE);
            continue;
        }
        if (v == SHM_LEASE_VERDICT_DEAD_NO_LOCK) {
            assert_int_equal(shm_lease_reap(&seg, i, watch[i].nonce), 0);
            reaped++;
        }
    }
    assert_int_equal(reaped, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_of(&seg, p[i].slot, p[i].generation), 1);
    for (int i = 0; i < 3; i++)
        shm_load_release(&other, &own[i]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_load_of(&seg, p[i].slot, p[i].generation), 0);
    assert_int_equal(shm_load_underflows(&seg), 0);
    close(ready[0]);
    close(ready[1]);
    shm_lease_release(&mine);
    shm_segment_close(&other);
    shm_segment_close(&seg);
}

static void test_stalled_heartbeat_is_judged_dead(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 1, 2);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork_child();
    assert_true(child >= 0);
    if (child == 0) {
        struct shm_segment cs;
        struct shm_lease_handle cl;
        char err[256];
        if (shm_segment_attach(&cs, test_name, err, sizeof(err)) != 0 ||
            shm_lease_claim(&cs, &cl, err, sizeof(err)) != 0)
            _exit(10);
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(12);
        pause(); /* alive, holding its lock, never beating */
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    struct shm_lease_watch watch = {0};
    uint64_t t0 = 1000000;
    assert_int_equal(shm_lease_judge(&seg, 0, &watch, t0), SHM_LEASE_VERDICT_ALIVE);
    assert_int_equal(shm_lease_judge(&seg, 0, &watch, t0 + SHM_HEARTBEAT_TIMEOUT_MS / 2),
                     SHM_LEASE_VERDICT_ALIVE);
    assert_int_equal(shm_lease_judge(&seg, 0, &watch, t0 + SHM_HEARTBEAT_TIMEOUT_MS + 1),
                     SHM_LEASE_VERDICT_DEAD_HEARTBEAT);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    shm_segment_close(&seg);
}

static void test_reattach_keeps_every_lease_load(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment cp;
    open_owner(&cp, 4, 2);
    struct shm_worker_info w = worker("a", "http://127.0.0.1:1", "");
    struct shm_worker_info p;
    assert_int_equal(shm_registry_add(&cp, &w, &p), 0);

    struct shm_segment dp;
    struct shm_lease_handle lease;
    char err[256];
    assert_int_equal(shm_segment_attach(&dp, test_name, err, sizeof(err)), 0);
    assert_int_equal(shm_lease_claim(&dp, &lease, err, sizeof(err)), 0);
    struct shm_load_guard g[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(shm_load_acquire(&dp, lease.index, p.slot, p.generation, &g[i]), 0);

    /* The control plane goes away and comes back. */
    shm_segment_close(&cp);
    open_owner(&cp, 4, 2);
    assert_int_equal(shm_load_of(&cp, p.slot, p.generation), 5);
    struct shm_worker_info got;
    assert_int_equal(shm_registry_find(&cp, "a", &got), 0);
    assert_int_equal(got.generation, p.generation);
    assert_true(shm_lease_is_mine(&lease));
    for (int i = 0; i < 5; i++)
        shm_load_release(&dp, &g[i]);
    assert_int_equal(shm_load_of(&cp, p.slot, p.generation), 0);
    shm_lease_release(&lease);
    shm_segment_close(&dp);
    shm_segment_close(&cp);
}

static void test_counters_of_workers_do_not_share_lines(void **state)
{
    (void)state;
    fresh_name();
    struct shm_segment seg;
    open_owner(&seg, 4, 20);
    assert_int_equal(seg.lines_per_worker, 3);
    uintptr_t w0 = (uintptr_t)&seg.loads[0 * seg.lines_per_worker];
    uintptr_t w1 = (uintptr_t)&seg.loads[1 * seg.lines_per_worker];
    assert_int_equal(w0 % SHM_CACHE_LINE, 0);
    assert_true(w1 - w0 >= SHM_CACHE_LINE * 3);
    /* Lease 19 of worker 0 and lease 0 of worker 1 are in different lines. */
    assert_true((uintptr_t)&seg.loads[2].counter[3] / SHM_CACHE_LINE !=
                (uintptr_t)&seg.loads[3].counter[0] / SHM_CACHE_LINE);
    shm_segment_close(&seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_then_reattach_bumps_epoch, teardown_unlink),
        cmocka_unit_test_teardown(test_registry_reset_drain, teardown_unlink),
        cmocka_unit_test_teardown(test_attach_refuses_other_layout_version, teardown_unlink),
        cmocka_unit_test_teardown(test_attach_refuses_wrong_size, teardown_unlink),
        cmocka_unit_test_teardown(test_attach_waits_for_unpublished_segment, teardown_unlink),
        cmocka_unit_test_teardown(test_capacity_change_is_refused, teardown_unlink),
        cmocka_unit_test_teardown(test_registry_add_find_remove_generation, teardown_unlink),
        cmocka_unit_test_teardown(test_registry_aliases, teardown_unlink),
        cmocka_unit_test_teardown(test_registry_full, teardown_unlink),
        cmocka_unit_test_teardown(test_seqlock_no_torn_reads, teardown_unlink),
        cmocka_unit_test_teardown(test_repair_closes_half_written_slot, teardown_unlink),
        cmocka_unit_test_teardown(test_guard_release_is_idempotent, teardown_unlink),
        cmocka_unit_test_teardown(test_decrement_at_zero_counts_underflow, teardown_unlink),
        cmocka_unit_test_teardown(test_stale_guard_never_touches_new_occupant, teardown_unlink),
        cmocka_unit_test_teardown(test_two_processes_million_pairs, teardown_unlink),
        cmocka_unit_test_teardown(test_killed_holder_is_judged_dead_and_reaped, teardown_unlink),
        cmocka_unit_test_teardown(test_stalled_heartbeat_is_judged_dead, teardown_unlink),
        cmocka_unit_test_teardown(test_reattach_keeps_every_lease_load, teardown_unlink),
        cmocka_unit_test_teardown(test_counters_of_workers_do_not_share_lines, teardown_unlink),
    };
    return cmocka_run_group_tests_name("shm", tests, NULL, NULL);
}
