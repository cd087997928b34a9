/*
 * The mock worker's timers: a binary min-heap of deadlines embedded in
 * their owners. A loop arms its epoll_wait timeout for th_heap_top() and
 * fires every timer whose deadline passed. The mock worker parks requests
 * until a moment with it (simulated prefill, the next token, a stall),
 * thousands of distinct deadlines, each armed once.
 *
 * It lives here, not in common/, because neither daemon has that shape of
 * timeouts: the data plane's attempt deadlines move later with every body
 * chunk, one store against a lower bound but a heap update each
 * (dataplane/types/forwarder_types.h has the measurement), and the control
 * plane's loop waits for the earliest of a fixed handful of subsystems,
 * each of which knows its own next moment and changes it every pass.
 *
 * Invariants: a struct th_timer is in at most one heap; its index is
 * TH_TIMER_NONE exactly while it is in none (th_timer_init, removal, pop
 * and th_heap_fini all restore that), so removing twice, or removing a
 * timer that already fired, is a no-op. Deadlines are plain uint64_t in
 * whatever monotonic unit the heap's owner chooses (ns, ms): one unit per
 * heap. Ties come out in no particular order. Push is O(log n) amortised
 * (the array doubles from 64 entries), remove O(log n), top O(1).
 *
 * Ownership and threading: the heap owns its array, never the timers,
 * which live in their owners (remove a timer before freeing its owner).
 * One heap per thread (event loop); no locking.
 */
#ifndef SY_TESTS_MOCKWORKER_TIMER_HEAP_H
#define SY_TESTS_MOCKWORKER_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TH_TIMER_NONE SIZE_MAX

/* Embedded in its owner; index is TH_TIMER_NONE while not in a heap. */
struct th_timer {
    uint64_t deadline; /* set before th_heap_push; read-only while pending */
    size_t index;      /* the heap's */
};

/* Caller storage; th_heap_init / th_heap_fini. Owns the array, not the timers. */
struct th_heap {
    struct th_timer **items;
    size_t n;
    size_t cap;
};

/* Marks t as in no heap (do this once when the owner is created). */
void th_timer_init(struct th_timer *t);

void th_heap_init(struct th_heap *h);

/* Frees the array; every timer still in h becomes not pending. */
void th_heap_fini(struct th_heap *h);

/* Adds t (not in a heap) with t->deadline set. Returns 0 or -ENOMEM (t unchanged). */
int th_heap_push(struct th_heap *h, struct th_timer *t);

/* Removes t if it is in h; a no-op otherwise. */
void th_heap_remove(struct th_heap *h, struct th_timer *t);

/* The earliest timer, or NULL when h is empty. */
struct th_timer *th_heap_top(const struct th_heap *h);

/* Removes and returns the earliest timer if its deadline is <= now, else NULL. */
struct th_timer *th_heap_pop_due(struct th_heap *h, uint64_t now);

size_t th_heap_size(const struct th_heap *h);

bool th_timer_is_pending(const struct th_timer *t);

#endif
