/*
 * Unit tests of the per-worker poller (controlplane/probes/worker_poller.c) on a
 * real segment, against loopback ports nobody listens on (every transfer
 * fails fast with "connection refused"): a worker in the registry gets a
 * target, its jobs start when due and not again while in flight or
 * before on_start's next time; results reach on_done and are counted as
 * it classes them; a slot that changes hands gets a fresh target with
 * zeroed state and counters; a removed worker's target stops; the
 * timeout says when the next job is due.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "controlplane/probes/worker_poller.h"
#include "shm/registry.h"
#include "tests/unit/unit_shm.h"

struct calls {
    int seen, fresh, started, done;
    uint64_t next_in;
    struct wp_poller *p;
};

struct state {
    int mark;
};

static void on_seen(void *user, const struct wp_target *t, const struct shm_worker_info *w,
                    bool fresh, uint64_t now_ms)
{
    struct calls *c = user;
    (void)w;
    (void)now_ms;
    c->seen++;
    c->fresh += fresh;
    struct state *st = wp_state(c->p, t->slot);
    if (fresh)
        assert_int_equal(st->mark, 0); /* zeroed for the newcomer */
    st->mark = 1;
}

static uint64_t on_start(void *user, const struct wp_target *t, unsigned job, uint64_t now_ms)
{
    struct calls *c = user;
    (void)t;
    (void)job;
    c->started++;
    return now_ms + c->next_in;
}

static enum wp_outcome on_done(void *user, const struct wp_target *t, unsigned job,
                               const struct wp_result *r)
{
    struct calls *c = user;
    (void)t;
    (void)job;
    c->done++;
    assert_int_not_equal(r->curl, CURLE_OK);
    return WP_FAILED;
}

/* Runs the poller until cond or 5 s. */
static void run_until(struct wp_poller *p, const int *counter, int want)
{
    uint64_t end = proc_monotonic_ms() + 5000;
    while (*counter < want && proc_monotonic_ms() < end) {
        wp_run(p, proc_monotonic_ms());
        usleep(1000);
    }
    assert_true(*counter >= want);
}

static void test_poller(void **state)
{
    (void)state;
    struct shm_segment seg;
    struct shm_worker_info w;
    unit_segment_with_worker(&seg, "wp", "", &w);

    struct calls c = {.next_in = 60000};
    const struct wp_ops ops = {.user = &c,
                               .n_jobs = 1,
                               .body_max = {1024},
                               .path = {"/metrics"},
                               .state_size = sizeof(struct state),
                               .on_seen = on_seen,
                               .on_start = on_start,
                               .on_done = on_done};
    struct wp_poller *p = NULL;
    assert_int_equal(wp_create(&seg, &ops, 1000, &p), 0);
    c.p = p;
    assert_false(wp_scanned(p));
    assert_int_equal(wp_timeout_ms(p, proc_monotonic_ms()), 0); /* registry to read */
    run_until(p, &c.done, 1);
    assert_true(wp_scanned(p));
    assert_int_equal(c.fresh, 1);
    assert_int_equal(c.started, 1); /* due at once, then not for next_in */
    const struct wp_target *t = wp_target(p, w.slot);
    assert_true(t->active);
    assert_string_equal(t->id, "w1");
    struct wp_worker_stats st[4];
    assert_int_equal(wp_stats(p, st, 4), 1);
    assert_int_equal(st[0].failed, 1);
    assert_int_equal(st[0].ok, 0);
    /* Next due in about a minute: the timeout says so and nothing starts. */
    int to = wp_timeout_ms(p, proc_monotonic_ms());
    assert_true(to > 50000 && to <= 60000);
    wp_run(p, proc_monotonic_ms());
    assert_int_equal(c.started, 1);
    /* Made due now: it runs again. */
    wp_schedule(p, w.slot, 0, 0);
    run_until(p, &c.done, 2);
    assert_int_equal(c.started, 2);
    assert_int_equal(wp_stats(p, st, 4), 1);
    assert_int_equal(st[0].failed, 2);

    /* The slot changes hands: fresh target, zeroed state and counters. */
    assert_int_equal(shm_registry_remove(&seg, w.slot), 0);
    wp_run(p, proc_monotonic_ms());
    assert_false(wp_target(p, w.slot)->active);
    assert_int_equal(wp_stats(p, st, 4), 0);
    struct shm_worker_info in = w, w2;
    snprintf(in.id, sizeof(in.id), "w2");
    assert_int_equal(shm_registry_add(&seg, &in, &w2), 0);
    assert_int_equal(w2.slot, w.slot);
    run_until(p, &c.done, 3);
    assert_int_equal(c.fresh, 2);
    assert_string_equal(wp_target(p, w.slot)->id, "w2");
    assert_int_equal(wp_stats(p, st, 4), 1);
    assert_int_equal(st[0].failed, 1);
    wp_destroy(p);
    shm_segment_close(&seg);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poller),
    };
    int rc = cmocka_run_group_tests_name("cp_worker_poller", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
