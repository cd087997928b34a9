/*
 * The order in which the admission queue (dataplane/admission/adm_queue.c) hands
 * requests to workers, and who it refuses, driven through its real entry
 * points with a fake fleet in place of the forwarder: a number of free
 * slots, taken by each request the queue dispatches (or the request goes
 * back to the queue when none is free), and an arrival that does what the
 * forwarder does (dp_adm_before_pick, then a free slot or dp_adm_wait).
 *
 * What must hold: strict priority bands; in a band, tenants alternate
 * (round robin) while both wait, FIFO within a tenant; a tenant back from
 * an absence catches up by at most a few requests in a row; the room of a
 * tenant that asked recently is kept for it between its requests (a flood
 * is refused on arrival, not let in and pushed out later); and an arrival
 * never overtakes the requests already waiting when a slot frees.
 *
 * Across event loops (adm_hub.c): a second loop shares the data plane's
 * hub and the fake fleet; a loop's wake-up is recorded and run as its
 * event loop would (its queue tried). The order above holds over both:
 * a slot seen free by one loop goes to the tenant served least even when
 * that tenant's requests wait on the other loop, an arrival does not take
 * such a slot, and what leaves a loop's queue leaves the hub's count. The
 * room is the data plane's too: max_depth and each tenant's share of it
 * count over both loops, and an arrival that takes the place of a request
 * waiting on the other loop gets that place at once, while the request is
 * answered 429 queue_full by its own loop when that loop runs (never handed
 * a worker meanwhile).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/proc.h"
#include "dataplane/admission/adm_hub.h"
#include "dataplane/admission/adm_metrics.h"
#include "dataplane/admission/adm_queue.h"
#include "dataplane/core/loop.h"
#include "dataplane/types/request_types.h"
#include "common/list.h"

#define MAX_REQS 64

struct fx {
    struct cfg cfg;
    struct dp_shared sh;
    struct dp_loop loop;
    struct dp_loop loop2; /* another event loop of the same data plane */
    bool woken[2];        /* a wake-up not yet run, per loop index */
    unsigned wakes;
    unsigned free_slots;
    struct dp_request *reqs[MAX_REQS];
    size_t n_reqs;
    struct dp_request *served[MAX_REQS]; /* in dispatch order */
    size_t n_served;
    struct dp_request *refused[MAX_REQS];
    const char *refused_code[MAX_REQS];
    size_t n_refused;
    void (*during_dispatch)(void); /* another loop's thread, meanwhile */
};

static struct fx *fx;

static void fake_take(struct dp_request *req)
{
    fx->free_slots--;
    fx->served[fx->n_served++] = req;
}

/* The forwarder's dispatch of a queued request: a free slot, or back. */
static void fake_dispatch(struct dp_request *req)
{
    if (fx->during_dispatch != NULL) {
        void (*f)(void) = fx->during_dispatch;
        fx->during_dispatch = NULL;
        f();
    }
    if (fx->free_slots == 0) {
        dp_adm_wait(req);
        return;
    }
    fake_take(req);
}

static void fake_reply(struct dp_request *req, int status, const char *code, const char *msg)
{
    (void)msg;
    (void)status; /* 429, or 503 for what teardown flushes */
    fx->refused_code[fx->n_refused] = code;
    fx->refused[fx->n_refused++] = req;
}

static const struct dp_adm_ops fake_ops = {.dispatch = fake_dispatch, .reply = fake_reply};

/* The eventfd write of loop_run.c: the loop runs later, as its thread would. */
static void fake_wake(struct dp_loop *loop)
{
    fx->woken[loop->index] = true;
    fx->wakes++;
}

/* Each woken loop's pass: its queue is tried (dp_adm_woken, then the end
 * of the pass), until no loop is woken. */
static void run_wakes(void)
{
    for (bool any = true; any;) {
        any = false;
        for (unsigned i = 0; i < 2; i++)
            if (fx->woken[i]) {
                fx->woken[i] = false;
                any = true;
                dp_adm_queue_dispatch(i == 0 ? &fx->loop : &fx->loop2);
            }
    }
}

static void loop_setup(struct dp_loop *loop, unsigned index)
{
    loop->sh = &fx->sh;
    loop->index = index;
    loop->adm.ops = &fake_ops;
    loop->adm.wake = fake_wake;
    list_init(&loop->adm.models);
    list_init(&loop->adm.by_age);
    dp_adm_hub_attach(fx->sh.adm.hub, index, loop);
}

static int setup(void **state)
{
    (void)state;
    fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->cfg.admission.max_inflight_per_worker = 1;
    fx->cfg.admission.queue.max_depth = 100;
    fx->cfg.admission.queue.max_wait_ms = 30000;
    fx->sh.cfg = &fx->cfg;
    fx->sh.adm.metrics = dp_adm_metrics_create();
    assert_non_null(fx->sh.adm.metrics);
    fx->sh.adm.hub = dp_adm_hub_create();
    assert_non_null(fx->sh.adm.hub);
    loop_setup(&fx->loop, 0);
    loop_setup(&fx->loop2, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dp_adm_queue_flush(&fx->loop); /* answers what is left (counted as refused) */
    dp_adm_queue_flush(&fx->loop2);
    /* What left the loops' queues left the hub's count, and nothing is
     * owed: every doomed request left. */
    assert_false(dp_adm_hub_any_waiting(fx->sh.adm.hub));
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 0), 0);
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 1), 0);
    dp_adm_queue_fini(&fx->loop);
    dp_adm_queue_fini(&fx->loop2);
    dp_adm_hub_destroy(fx->sh.adm.hub);
    dp_adm_metrics_destroy(fx->sh.adm.metrics);
    for (size_t i = 0; i < fx->n_reqs; i++)
        free(fx->reqs[i]);
    free(fx);
    fx = NULL;
    return 0;
}

static struct dp_request *req_new_on(struct dp_loop *loop, const char *tenant, enum dp_prio prio)
{
    assert_true(fx->n_reqs < MAX_REQS);
    struct dp_request *req = calloc(1, sizeof(*req));
    assert_non_null(req);
    req->loop = loop;
    req->refs = 1; /* the test's: the queue's ref/unref around a dispatch never frees it */
    snprintf(req->model, sizeof(req->model), "%s", "m");
    snprintf(req->adm.tenant, sizeof(req->adm.tenant), "%s", tenant);
    req->adm.prio = prio;
    fx->reqs[fx->n_reqs++] = req;
    return req;
}

/* A new request on loop, as the forwarder handles it: the queue first
 * (which may keep it), then a free slot if one is left, else it waits. */
static struct dp_request *arrive_on(struct dp_loop *loop, const char *tenant, enum dp_prio prio)
{
    struct dp_request *req = req_new_on(loop, tenant, prio);
    if (dp_adm_before_pick(req))
        return req;
    if (fx->free_slots > 0)
        fake_take(req);
    else
        dp_adm_wait(req);
    return req;
}

static struct dp_request *arrive(const char *tenant, enum dp_prio prio)
{
    return arrive_on(&fx->loop, tenant, prio);
}

/* n slots free up at once (another loop's or data plane's, seen at a tick). */
static void free_slots(unsigned n)
{
    fx->free_slots += n;
    dp_adm_queue_dispatch(&fx->loop);
}

static void assert_served(size_t from, struct dp_request *const *want, size_t n)
{
    assert_true(fx->n_served >= from + n);
    for (size_t i = 0; i < n; i++)
        assert_ptr_equal(fx->served[from + i], want[i]);
}

static void test_tenants_alternate_fifo_within(void **state)
{
    (void)state;
    struct dp_request *a[6], *b[2];
    for (int i = 0; i < 6; i++)
        a[i] = arrive("flood", DP_PRIO_NORMAL);
    for (int i = 0; i < 2; i++)
        b[i] = arrive("small", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_served, 0);
    assert_int_equal(fx->loop.adm.queued, 8);
    for (int i = 0; i < 8; i++)
        free_slots(1); /* one at a time, as workers finish */
    struct dp_request *const want[] = {a[0], b[0], a[1], b[1], a[2], a[3], a[4], a[5]};
    assert_served(0, want, 8);
    assert_int_equal(fx->loop.adm.queued, 0);
    assert_int_equal(fx->n_refused, 0);
}

static void test_priority_bands_first(void **state)
{
    (void)state;
    struct dp_request *low = arrive("bulk", DP_PRIO_LOW);
    struct dp_request *normal = arrive("team", DP_PRIO_NORMAL);
    struct dp_request *high = arrive("urgent", DP_PRIO_HIGH);
    free_slots(3);
    struct dp_request *const want[] = {high, normal, low};
    assert_served(0, want, 3);
}

static void test_absent_tenant_catches_up_bounded(void **state)
{
    (void)state;
    /* Both ask; "small" is served once, then is away while "flood" is
     * served 10 times. */
    (void)arrive("flood", DP_PRIO_NORMAL);
    (void)arrive("small", DP_PRIO_NORMAL);
    free_slots(2);
    for (int i = 0; i < 10; i++) {
        (void)arrive("flood", DP_PRIO_NORMAL);
        free_slots(1);
    }
    size_t mark = fx->n_served;
    assert_int_equal(mark, 12);
    /* Both back with more than enough waiting. */
    struct dp_request *a[8], *b[8];
    for (int i = 0; i < 8; i++)
        a[i] = arrive("flood", DP_PRIO_NORMAL);
    for (int i = 0; i < 8; i++)
        b[i] = arrive("small", DP_PRIO_NORMAL);
    for (int i = 0; i < 10; i++)
        free_slots(1);
    /* "small" first, a few in a row (what it missed, up to the credit),
     * then the two alternate. */
    struct dp_request *const want[] = {b[0], b[1], b[2], b[3], a[0], b[4], a[1], b[5], a[2], b[6]};
    assert_served(mark, want, 10);
}

static void test_room_kept_for_a_recent_tenant(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 2;
    struct dp_request *a0 = arrive("flood", DP_PRIO_NORMAL);
    struct dp_request *b0 = arrive("small", DP_PRIO_NORMAL);
    free_slots(1); /* the flood's goes */
    free_slots(1); /* the small tenant's goes: it has nothing queued now */
    struct dp_request *const want[] = {a0, b0};
    assert_served(0, want, 2);
    struct dp_request *a1 = arrive("flood", DP_PRIO_NORMAL);
    /* Its share is 1 of 2 while the other asked within the last second:
     * refused on arrival although a place is free. */
    struct dp_request *a2 = arrive("flood", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], a2);
    assert_string_equal(fx->refused_code[0], "queue_full");
    /* The small tenant's next request finds its place: nothing pushed out. */
    struct dp_request *b1 = arrive("small", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_int_equal(fx->loop.adm.queued, 2);
    free_slots(2);
    struct dp_request *const then[] = {a1, b1};
    assert_served(2, then, 2);
}

static void test_arrival_does_not_overtake(void **state)
{
    (void)state;
    struct dp_request *w0 = arrive("team", DP_PRIO_NORMAL);
    struct dp_request *w1 = arrive("team", DP_PRIO_NORMAL);
    assert_int_equal(fx->loop.adm.queued, 2);
    /* A slot frees somewhere the queue has not looked yet (another loop's
     * guard, seen at this loop's next tick); a request arrives first. */
    fx->free_slots = 1;
    struct dp_request *late = arrive("team", DP_PRIO_NORMAL);
    /* The slot went to the oldest waiting; the arrival waits behind. */
    assert_int_equal(fx->n_served, 1);
    assert_ptr_equal(fx->served[0], w0);
    assert_int_equal(fx->loop.adm.queued, 2);
    free_slots(2);
    struct dp_request *const want[] = {w0, w1, late};
    assert_served(0, want, 3);
    /* Also across tenants: the other tenant's waiting request goes first. */
    struct dp_request *x = arrive("other", DP_PRIO_NORMAL);
    assert_int_equal(fx->loop.adm.queued, 1);
    fx->free_slots = 1;
    struct dp_request *y = arrive("team", DP_PRIO_NORMAL);
    assert_ptr_equal(fx->served[3], x);
    assert_int_equal(fx->loop.adm.queued, 1);
    free_slots(1);
    assert_ptr_equal(fx->served[4], y);
}

static void test_cross_loop_least_served_first(void **state)
{
    (void)state;
    /* The flood waits on loop 0, the small tenant on loop 1. */
    struct dp_request *a[6], *b[2];
    for (int i = 0; i < 6; i++)
        a[i] = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    for (int i = 0; i < 2; i++)
        b[i] = arrive_on(&fx->loop2, "small", DP_PRIO_NORMAL);
    assert_int_equal(fx->loop.adm.queued, 6);
    assert_int_equal(fx->loop2.adm.queued, 2);
    /* Slots free on loop 0 only (its guards released), one at a time. */
    for (int i = 0; i < 8; i++) {
        fx->free_slots++;
        dp_adm_queue_dispatch(&fx->loop);
        run_wakes();
    }
    /* Interleaved as on one loop: the small tenant's went on loop 1, woken
     * for them, although loop 0 had its own waiting. */
    struct dp_request *const want[] = {a[0], b[0], a[1], b[1], a[2], a[3], a[4], a[5]};
    assert_served(0, want, 8);
    assert_true(fx->wakes >= 2);
    assert_int_equal(fx->loop.adm.queued, 0);
    assert_int_equal(fx->loop2.adm.queued, 0);
    assert_int_equal(fx->n_refused, 0);
}

static void test_cross_loop_priority_first(void **state)
{
    (void)state;
    struct dp_request *low = arrive_on(&fx->loop, "bulk", DP_PRIO_LOW);
    struct dp_request *high = arrive_on(&fx->loop2, "urgent", DP_PRIO_HIGH);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    assert_int_equal(fx->n_served, 1);
    assert_ptr_equal(fx->served[0], high);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    assert_ptr_equal(fx->served[1], low);
}

static void test_cross_loop_arrival_waits_behind(void **state)
{
    (void)state;
    struct dp_request *b0 = arrive_on(&fx->loop2, "small", DP_PRIO_NORMAL);
    /* A slot frees where no loop has looked yet; the flood's request
     * arrives on loop 0 first. */
    fx->free_slots = 1;
    struct dp_request *a0 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_served, 0);
    assert_int_equal(fx->loop.adm.queued, 1); /* it waits... */
    run_wakes();                              /* ...and loop 1 takes the slot */
    assert_int_equal(fx->n_served, 1);
    assert_ptr_equal(fx->served[0], b0);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop2); /* a slot seen by loop 1: loop 0's */
    run_wakes();
    assert_ptr_equal(fx->served[1], a0);
    assert_false(dp_adm_hub_any_waiting(fx->sh.adm.hub));
}

static void test_cross_loop_gone_leaves_the_hub(void **state)
{
    (void)state;
    struct dp_request *a0 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    struct dp_request *b0 = arrive_on(&fx->loop2, "small", DP_PRIO_NORMAL);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    assert_ptr_equal(fx->served[0], a0); /* first in the ring among equals */
    /* Queued behind b0 (loop 1 is woken for the small tenant, served less). */
    struct dp_request *a1 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    assert_int_equal(fx->loop.adm.queued, 1);
    /* The small tenant's client leaves: nothing of it waits any more, so
     * the next slot is loop 0's own, with no wake-up for nothing. */
    dp_adm_leave(b0, DP_ADM_LEFT_GONE);
    unsigned wakes = fx->wakes;
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    assert_int_equal(fx->wakes, wakes);
    assert_int_equal(fx->n_served, 2);
    assert_ptr_equal(fx->served[1], a1);
    assert_false(dp_adm_hub_any_waiting(fx->sh.adm.hub));
}

/* Until the monotonic clock has moved on by a millisecond (the queue's
 * unit), so that two arrivals have different ages. */
static void next_ms(void)
{
    uint64_t t0 = proc_monotonic_ms();
    for (int i = 0; i < 100000000 && proc_monotonic_ms() == t0; i++)
        ;
    assert_true(proc_monotonic_ms() > t0);
}

static void test_cross_loop_fifo_within_tenant(void **state)
{
    (void)state;
    /* One tenant, its older request on loop 1, a younger one on loop 0. */
    struct dp_request *old = arrive_on(&fx->loop2, "team", DP_PRIO_NORMAL);
    next_ms();
    struct dp_request *young = arrive_on(&fx->loop, "team", DP_PRIO_NORMAL);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop); /* loop 0 sees the slot... */
    run_wakes();                      /* ...and loop 1's older request takes it */
    assert_int_equal(fx->n_served, 1);
    assert_ptr_equal(fx->served[0], old);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    assert_ptr_equal(fx->served[1], young);
}

/* Requests of a tenant waiting on both loops (the hub's count). */
static void assert_queued(unsigned on0, unsigned on1)
{
    assert_int_equal(fx->loop.adm.queued, on0);
    assert_int_equal(fx->loop2.adm.queued, on1);
}

static void test_cross_loop_depth_bound(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 3;
    struct dp_request *a0 = arrive_on(&fx->loop, "team", DP_PRIO_NORMAL);
    struct dp_request *a1 = arrive_on(&fx->loop2, "team", DP_PRIO_NORMAL);
    struct dp_request *a2 = arrive_on(&fx->loop, "team", DP_PRIO_NORMAL);
    assert_queued(2, 1);
    /* Loop 1 holds one of 3 places, but the model's 3 are taken: refused,
     * although each loop alone would have room. */
    struct dp_request *a3 = arrive_on(&fx->loop2, "team", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], a3);
    assert_string_equal(fx->refused_code[0], "queue_full");
    assert_queued(2, 1);
    /* A place freed on one loop is a place for an arrival on the other. */
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    assert_ptr_equal(fx->served[0], a0);
    struct dp_request *a4 = arrive_on(&fx->loop2, "team", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_queued(1, 2);
    fx->free_slots += 3;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    assert_int_equal(fx->n_served, 4); /* a0, then a1, a2 and a4 */
    assert_int_equal(fx->n_refused, 1);
    (void)a1;
    (void)a2;
    (void)a4;
    assert_false(dp_adm_hub_any_waiting(fx->sh.adm.hub));
}

static void test_cross_loop_shares(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 4;
    /* Both tenants ask (the small one's request waits on loop 1), so each
     * may hold 2 of the 4 places over both loops. */
    struct dp_request *b0 = arrive_on(&fx->loop2, "small", DP_PRIO_NORMAL);
    struct dp_request *a0 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    struct dp_request *a1 = arrive_on(&fx->loop2, "flood", DP_PRIO_NORMAL);
    assert_queued(1, 2);
    /* The flood's third, on loop 0 where it holds one: over its share. */
    struct dp_request *a2 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], a2);
    assert_string_equal(fx->refused_code[0], "queue_full");
    /* The small tenant's second, on loop 0, has its place. */
    struct dp_request *b1 = arrive_on(&fx->loop, "small", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 1);
    assert_queued(2, 2);
    fx->free_slots += 4;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    assert_int_equal(fx->n_served, 4);
    (void)a0;
    (void)a1;
    (void)b0;
    (void)b1;
}

static void test_cross_loop_higher_band_takes_a_place(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 2;
    struct dp_request *old = arrive_on(&fx->loop, "bulk", DP_PRIO_LOW);
    next_ms();
    struct dp_request *young = arrive_on(&fx->loop2, "bulk", DP_PRIO_LOW);
    /* A high request on loop 0: the place of the newest low one, held by
     * loop 1, is its own at once (loop 1 is woken to answer that one). */
    struct dp_request *high = arrive_on(&fx->loop, "urgent", DP_PRIO_HIGH);
    assert_int_equal(fx->n_refused, 0); /* loop 1 has not run yet... */
    assert_true(fx->woken[1]);
    assert_queued(2, 1);
    /* ...and the full queue holds 2 places: another low one is refused. */
    struct dp_request *late = arrive_on(&fx->loop, "bulk", DP_PRIO_LOW);
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], late);
    /* Slots seen by loop 0 before loop 1 ran: the doomed request gets none. */
    fx->free_slots += 2;
    dp_adm_queue_dispatch(&fx->loop);
    struct dp_request *const want[] = {high, old};
    assert_served(0, want, 2);
    assert_int_equal(fx->n_served, 2);
    /* Loop 1 runs: the newest low request is answered 429 queue_full. */
    run_wakes();
    assert_int_equal(fx->n_refused, 2);
    assert_ptr_equal(fx->refused[1], young);
    assert_string_equal(fx->refused_code[1], "queue_full");
    assert_queued(0, 0);
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 1), 0);
    assert_int_equal(fx->n_served, 2);
}

static void test_cross_loop_under_share_takes_a_place(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 2;
    /* The flood alone fills the model's 2 places, its newest on loop 1. */
    struct dp_request *a0 = arrive_on(&fx->loop, "flood", DP_PRIO_NORMAL);
    next_ms();
    struct dp_request *a1 = arrive_on(&fx->loop2, "flood", DP_PRIO_NORMAL);
    /* The small tenant arrives on loop 0, under its share (1 of 2): it
     * takes the flood's newest place, on loop 1. */
    struct dp_request *b0 = arrive_on(&fx->loop, "small", DP_PRIO_NORMAL);
    assert_queued(2, 1);
    run_wakes();
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], a1);
    assert_string_equal(fx->refused_code[0], "queue_full");
    assert_queued(2, 0);
    /* Each at its share now: the flood is refused on loop 1 too. */
    struct dp_request *a2 = arrive_on(&fx->loop2, "flood", DP_PRIO_NORMAL);
    assert_int_equal(fx->n_refused, 2);
    assert_ptr_equal(fx->refused[1], a2);
    fx->free_slots += 2;
    dp_adm_queue_dispatch(&fx->loop2);
    run_wakes();
    struct dp_request *const want[] = {a0, b0};
    assert_served(0, want, 2);
}

/* The doomed request's client leaves before its loop runs: that leave is
 * its eviction (nothing more is owed), and the older request of the same
 * tenant keeps its place. */
static void test_cross_loop_doomed_gone_first(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 2;
    struct dp_request *old = arrive_on(&fx->loop2, "bulk", DP_PRIO_LOW);
    next_ms();
    struct dp_request *young = arrive_on(&fx->loop2, "bulk", DP_PRIO_LOW);
    struct dp_request *high = arrive_on(&fx->loop, "urgent", DP_PRIO_HIGH);
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 1), 1);
    dp_adm_leave(young, DP_ADM_LEFT_GONE);
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 1), 0);
    run_wakes();
    assert_int_equal(fx->n_refused, 0);
    assert_queued(1, 1);
    fx->free_slots += 2;
    dp_adm_queue_dispatch(&fx->loop);
    run_wakes();
    struct dp_request *const want[] = {high, old};
    assert_served(0, want, 2);
}

/* A doomed request is never handed a worker, nor does it hold up one: a
 * slot seen by loop 0 goes to a request of the same tenant with a place,
 * although the doomed one on loop 1 is older. */
static void test_cross_loop_doomed_never_dispatched(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 2;
    struct dp_request *b1 = arrive_on(&fx->loop2, "bulk", DP_PRIO_LOW);
    struct dp_request *h1 = arrive_on(&fx->loop, "urgent", DP_PRIO_HIGH);
    struct dp_request *h2 = arrive_on(&fx->loop, "urgent", DP_PRIO_HIGH);
    assert_int_equal(dp_adm_hub_owed(fx->sh.adm.hub, 1), 1); /* b1's place is h2's */
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    next_ms();
    struct dp_request *b2 = arrive_on(&fx->loop, "bulk", DP_PRIO_LOW);
    assert_int_equal(fx->n_refused, 0);
    fx->free_slots += 2;
    dp_adm_queue_dispatch(&fx->loop); /* loop 1 has not run yet */
    struct dp_request *const want[] = {h1, h2, b2};
    assert_served(0, want, 3);
    run_wakes();
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], b1);
    assert_int_equal(fx->n_served, 3);
}

static struct dp_request *meanwhile_req;

static void arrive_on_loop1(void)
{
    meanwhile_req = arrive_on(&fx->loop2, "team", DP_PRIO_NORMAL);
}

/* A request being handed to a worker keeps its place until it has one: an
 * arrival on another loop meanwhile finds the queue full, and the request,
 * back for want of a worker, finds its place. */
static void test_cross_loop_place_kept_while_dispatching(void **state)
{
    (void)state;
    fx->cfg.admission.queue.max_depth = 1;
    struct dp_request *a0 = arrive_on(&fx->loop, "team", DP_PRIO_NORMAL);
    fx->during_dispatch = arrive_on_loop1;
    dp_adm_queue_dispatch(&fx->loop); /* no slot: a0 comes back */
    assert_non_null(meanwhile_req);
    assert_int_equal(fx->n_refused, 1);
    assert_ptr_equal(fx->refused[0], meanwhile_req);
    assert_queued(1, 0);
    fx->free_slots++;
    dp_adm_queue_dispatch(&fx->loop);
    assert_ptr_equal(fx->served[0], a0);
    meanwhile_req = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tenants_alternate_fifo_within, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority_bands_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absent_tenant_catches_up_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_room_kept_for_a_recent_tenant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arrival_does_not_overtake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_least_served_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_priority_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_arrival_waits_behind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_gone_leaves_the_hub, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_fifo_within_tenant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_depth_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_shares, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_higher_band_takes_a_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_under_share_takes_a_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_doomed_gone_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_doomed_never_dispatched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_loop_place_kept_while_dispatching, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
