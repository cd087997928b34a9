/*
 * Min-heap of struct th_timer (see timer_heap.h). Each timer remembers its
 * slot so removal from the middle is O(log n); sift_up/sift_down keep every
 * item's index field equal to its position, which is what makes removal of
 * a stale or already-fired timer detectable (index out of range or
 * pointing at another timer).
 */
#include "tests/mockworker/timer_heap.h"

#include <errno.h>
#include <stdlib.h>

void th_timer_init(struct th_timer *t)
{
    t->deadline = 0;
    t->index = TH_TIMER_NONE;
}

void th_heap_init(struct th_heap *h)
{
    h->items = NULL;
    h->n = 0;
    h->cap = 0;
}

void th_heap_fini(struct th_heap *h)
{
    for (size_t i = 0; i < h->n; i++)
        h->items[i]->index = TH_TIMER_NONE;
    free(h->items);
    th_heap_init(h);
}

static void heap_set(struct th_heap *h, size_t i, struct th_timer *t)
{
    h->items[i] = t;
    t->index = i;
}

static void sift_up(struct th_heap *h, size_t i)
{
    struct th_timer *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->deadline <= t->deadline)
            break;
        heap_set(h, i, h->items[parent]);
        i = parent;
    }
    heap_set(h, i, t);
}

static void sift_down(struct th_heap *h, size_t i)
{
    struct th_timer *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->items[child + 1]->deadline < h->items[child]->deadline)
            child++;
        if (t->deadline <= h->items[child]->deadline)
            break;
        heap_set(h, i, h->items[child]);
        i = child;
    }
    heap_set(h, i, t);
}

int th_heap_push(struct th_heap *h, struct th_timer *t)
{
    if (h->n == h->cap) {
        size_t cap = h->cap > 0 ? h->cap * 2 : 64;
        struct th_timer **grown = realloc(h->items, cap * sizeof(*grown));
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

void th_heap_remove(struct th_heap *h, struct th_timer *t)
{
    size_t i = t->index;
    if (i == TH_TIMER_NONE || i >= h->n || h->items[i] != t)
        return;
    t->index = TH_TIMER_NONE;
    h->n--;
    if (i == h->n)
        return;
    struct th_timer *last = h->items[h->n];
    heap_set(h, i, last);
    if (i > 0 && h->items[(i - 1) / 2]->deadline > last->deadline)
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct th_timer *th_heap_top(const struct th_heap *h)
{
    return h->n > 0 ? h->items[0] : NULL;
}

struct th_timer *th_heap_pop_due(struct th_heap *h, uint64_t now)
{
    struct th_timer *t = th_heap_top(h);
    if (t == NULL || t->deadline > now)
        return NULL;
    th_heap_remove(h, t);
    return t;
}

size_t th_heap_size(const struct th_heap *h)
{
    return h->n;
}

bool th_timer_is_pending(const struct th_timer *t)
{
    return t->index != TH_TIMER_NONE;
}
