/*
 * Unit tests of the dataplane's load guards (dataplane/core/guard.c) against a
 * real segment: paired accounting, the live table that the admin channel
 * reports, and the handshake that makes reset_load safe (invariant 4): a
 * guard taken while a reset is deciding is either counted in the answer or
 * backs off, so a reset never discards a request really in flight.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/core/guard.h"
#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"

struct fixture {
    char name[64];
    struct shm_segment seg;
    struct shm_lease_handle lease;
    struct dp_guards guards;
    struct shm_worker_info w;
};

static int setup(void **state)
{
    static int n;
    static struct fixture f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "/sy-guard-%d-%d", (int)getpid(), n++);
    char err[256] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    if (shm_segment_open_owner(&f.seg, f.name, 4, 2, &outcome, err, sizeof(err)) != 0)
        fail_msg("open_owner: %s", err);
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR, .healthy = true};
    snprintf(in.id, sizeof(in.id), "w1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:1");
    snprintf(in.model, sizeof(in.model), "m");
    assert_int_equal(shm_registry_add(&f.seg, &in, &f.w), 0);
    if (shm_lease_claim(&f.seg, &f.lease, err, sizeof(err)) != 0)
        fail_msg("lease: %s", err);
    assert_int_equal(dp_guards_init(&f.guards, &f.seg, f.lease.index), 0);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    dp_guards_fini(&f->guards);
    shm_lease_release(&f->lease);
    shm_segment_close(&f->seg);
    shm_unlink(f->name);
    return 0;
}

static void test_acquire_release_pairs_and_live_table(void **state)
{
    struct fixture *f = *state;
    struct dp_guard a, b;
    assert_int_equal(dp_guard_acquire(&f->guards, &a, f->w.slot, f->w.generation), 0);
    assert_int_equal(dp_guard_acquire(&f->guards, &b, f->w.slot, f->w.generation), 0);
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 2);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 2);
    dp_guard_release(&f->guards, &a);
    dp_guard_release(&f->guards, &a); /* twice: a no-op */
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 1);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 1);
    dp_guard_release(&f->guards, &b);
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 0);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 0);
    assert_int_equal(shm_load_underflows(&f->seg), 0);
}

static void test_draining_worker_refuses_without_counting(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(shm_registry_set_draining(&f->seg, f->w.slot, true), 0);
    struct dp_guard g;
    assert_int_equal(dp_guard_acquire(&f->guards, &g, f->w.slot, f->w.generation), -EBUSY);
    assert_false(dp_guard_is_held(&g));
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 0);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 0);
    assert_int_equal(shm_registry_set_draining(&f->seg, f->w.slot, false), 0);
    assert_int_equal(dp_guard_acquire(&f->guards, &g, f->w.slot, f->w.generation), 0);
    dp_guard_release(&f->guards, &g);
}

static void test_stale_generation_refused(void **state)
{
    struct fixture *f = *state;
    struct dp_guard g, old;
    assert_int_equal(dp_guard_acquire(&f->guards, &g, f->w.slot, f->w.generation), 0);
    /* A guard for the slot's previous occupant is refused and not counted. */
    assert_int_equal(dp_guard_acquire(&f->guards, &old, f->w.slot, f->w.generation - 1), -ESTALE);
    assert_false(dp_guard_is_held(&old));
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 1);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation - 1), 0);
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 1);
    dp_guard_release(&f->guards, &g);
}

/* ---- reset_load against concurrent requests ------------------------------- */

#define RESET_ROUNDS     50000
#define RESET_ROUNDS_MAX 20000000 /* a bound, should the threads never overlap */
#define RACE_OUTCOMES    100      /* of each kind, so the race really ran */

struct race {
    struct fixture *f;
    atomic_bool stop;
    atomic_ulong guards_taken;
    unsigned long resets_done;
    unsigned long resets_refused;
};

static void spin(unsigned n)
{
    for (volatile unsigned i = 0; i < n; i++)
        ;
}

/* A dataplane loop: takes a guard when the worker admits it, holds it for a
 * moment, releases it, idles a varying moment. */
static void *race_requests(void *arg)
{
    struct race *r = arg;
    struct fixture *f = r->f;
    unsigned x = 12345;
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        x = x * 1103515245u + 12345u;
        struct dp_guard g;
        if (dp_guard_acquire(&f->guards, &g, f->w.slot, f->w.generation) == 0) {
            atomic_fetch_add_explicit(&r->guards_taken, 1, memory_order_relaxed);
            spin((x >> 16) % 64);
            dp_guard_release(&f->guards, &g);
        }
        spin((x >> 8) % 256);
    }
    return NULL;
}

/* The control plane's half, as controlplane/admin/reset_load.c does it: drain,
 * ask (here: read the live table, as the dataplane's admin answer does),
 * reset only on 0, restore. */
static void *race_resets(void *arg)
{
    struct race *r = arg;
    struct fixture *f = r->f;
    unsigned x = 777;
    /* Start once the request loop runs (on a loaded machine it may get the
     * CPU late), and go on until both outcomes were seen often enough. */
    while (atomic_load_explicit(&r->guards_taken, memory_order_relaxed) == 0)
        sched_yield();
    for (long i = 0; i < RESET_ROUNDS_MAX && (i < RESET_ROUNDS || r->resets_done < RACE_OUTCOMES ||
                                              r->resets_refused < RACE_OUTCOMES);
         i++) {
        x = x * 1103515245u + 12345u;
        shm_registry_set_draining(&f->seg, f->w.slot, true);
        spin((x >> 16) % 64); /* the admin channel's round trip */
        if (dp_guards_live(&f->guards, f->w.slot, f->w.generation) == 0) {
            shm_load_reset(&f->seg, f->w.slot, f->w.generation);
            r->resets_done++;
        } else {
            r->resets_refused++;
        }
        shm_registry_set_draining(&f->seg, f->w.slot, false);
        spin((x >> 8) % 512);
    }
    atomic_store_explicit(&r->stop, true, memory_order_relaxed);
    return NULL;
}

/* Invariant 4: with requests racing the reset's decision, no reset ever
 * discards a live guard: a discarded live guard would be released later
 * against a zeroed counter and show up as an underflow. */
static void test_reset_never_discards_a_live_guard(void **state)
{
    struct fixture *f = *state;
    struct race r = {.f = f};
    pthread_t req, reset;
    assert_int_equal(pthread_create(&req, NULL, race_requests, &r), 0);
    assert_int_equal(pthread_create(&reset, NULL, race_resets, &r), 0);
    pthread_join(reset, NULL);
    pthread_join(req, NULL);
    print_message("guards %lu, resets done %lu, refused %lu\n", atomic_load(&r.guards_taken),
                  r.resets_done, r.resets_refused);
    /* The race was really run: both outcomes happened and requests got in. */
    assert_true(atomic_load(&r.guards_taken) > 0);
    assert_true(r.resets_done >= RACE_OUTCOMES);
    assert_true(r.resets_refused >= RACE_OUTCOMES);
    assert_int_equal(shm_load_underflows(&f->seg), 0);
    assert_int_equal(shm_load_of(&f->seg, f->w.slot, f->w.generation), 0);
    assert_int_equal(dp_guards_live(&f->guards, f->w.slot, f->w.generation), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_acquire_release_pairs_and_live_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_draining_worker_refuses_without_counting, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stale_generation_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_never_discards_a_live_guard, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
