/*
 * Min-heap of struct mw_timer (see timer_heap.h). Ties keep no particular
 * order: callers that need FIFO among equal deadlines do not exist here.
 */
#include "tests/mockworker/timer_heap.h"

#include <errno.h>
#include <stdlib.h>

void mw_timer_heap_init(struct mw_timer_heap *h)
{
    h->items = NULL;
    h->n = 0;
    h->cap = 0;
}

void mw_timer_heap_fini(struct mw_timer_heap *h)
{
    for (size_t i = 0; i < h->n; i++)
        h->items[i]->index = MW_TIMER_NONE;
    free(h->items);
    mw_timer_heap_init(h);
}

static void heap_set(struct mw_timer_heap *h, size_t i, struct mw_timer *t)
{
    h->items[i] = t;
    t->index = i;
}

static void sift_up(struct mw_timer_heap *h, size_t i)
{
    struct mw_timer *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->deadline_ns <= t->deadline_ns)
            break;
        heap_set(h, i, h->items[parent]);
        i = parent;
    }
    heap_set(h, i, t);
}

static void sift_down(struct mw_timer_heap *h, size_t i)
{
    struct mw_timer *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->items[child + 1]->deadline_ns < h->items[child]->deadline_ns)
            child++;
        if (t->deadline_ns <= h->items[child]->deadline_ns)
            break;
        heap_set(h, i, h->items[child]);
        i = child;
    }
    heap_set(h, i, t);
}

int mw_timer_heap_push(struct mw_timer_heap *h, struct mw_timer *t)
{
    if (h->n == h->cap) {
        size_t cap = h->cap > 0 ? h->cap * 2 : 64;
        struct mw_timer **grown = realloc(h->items, cap * sizeof(*grown));
        if (grown == NULL)
            return -ENOMEM;
        h->items = grown;
        h->cap = cap;
    }
    h->items[h->n] = t;
    t->index = h->n;
    h->n++;
    sift_up(h, h->n - 1);
    return 0;
}

void mw_timer_heap_remove(struct mw_timer_heap *h, struct mw_timer *t)
{
    size_t i = t->index;
    if (i == MW_TIMER_NONE || i >= h->n || h->items[i] != t)
        return;
    t->index = MW_TIMER_NONE;
    h->n--;
    if (i == h->n)
        return;
    struct mw_timer *last = h->items[h->n];
    heap_set(h, i, last);
    if (i > 0 && h->items[(i - 1) / 2]->deadline_ns > last->deadline_ns)
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct mw_timer *mw_timer_heap_top(const struct mw_timer_heap *h)
{
    return h->n > 0 ? h->items[0] : NULL;
}

bool mw_timer_is_pending(const struct mw_timer *t)
{
    return t->index != MW_TIMER_NONE;
}
