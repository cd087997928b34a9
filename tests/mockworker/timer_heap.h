/*
 * A binary min-heap of deadlines, one per event loop: the requests that are
 * parked until a moment (simulated prefill, the next token, a stall). The
 * loop arms its timerfd for the top entry. Entries are embedded in their
 * owner (struct mw_timer), which remembers its index so a request that ends
 * early (client gone) leaves the heap in O(log n).
 *
 * Threading: one heap per loop thread, never shared.
 */
#ifndef SY_TESTS_MOCKWORKER_TIMER_HEAP_H
#define SY_TESTS_MOCKWORKER_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MW_TIMER_NONE SIZE_MAX

/* Embedded in its owner; index is MW_TIMER_NONE while not in a heap. */
struct mw_timer {
    uint64_t deadline_ns;
    size_t index;
};

/* Caller storage; mw_timer_heap_init / _fini. Owns the array, not the timers. */
struct mw_timer_heap {
    struct mw_timer **items;
    size_t n;
    size_t cap;
};

void mw_timer_heap_init(struct mw_timer_heap *h);
void mw_timer_heap_fini(struct mw_timer_heap *h);

/* Adds t (not in a heap) with t->deadline_ns set. 0 or -ENOMEM. */
int mw_timer_heap_push(struct mw_timer_heap *h, struct mw_timer *t);

/* Removes t if it is in h; no-op otherwise. */
void mw_timer_heap_remove(struct mw_timer_heap *h, struct mw_timer *t);

/* Earliest timer, or NULL. */
struct mw_timer *mw_timer_heap_top(const struct mw_timer_heap *h);

bool mw_timer_is_pending(const struct mw_timer *t);

#endif
