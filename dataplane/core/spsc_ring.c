/*
 * The SPSC byte ring (see spsc_ring.h). Positions are free-running 64-bit
 * byte counts, reduced modulo cap only to index the buffer, so full and
 * empty never look alike and no byte is wasted.
 */
#include "dataplane/core/spsc_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DP_RING_MIN 4096u

int dp_ring_init(struct dp_ring *r, size_t cap)
{
    size_t c = DP_RING_MIN;
    while (c < cap && c < ((size_t)1 << 40))
        c <<= 1;
    r->buf = malloc(c);
    if (r->buf == NULL)
        return -ENOMEM;
    r->cap = c;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return 0;
}

void dp_ring_fini(struct dp_ring *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}

bool dp_ring_push(struct dp_ring *r, const void *data, size_t len)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (len > r->cap - (size_t)(tail - head))
        return false;
    size_t at = (size_t)(tail & (r->cap - 1));
    size_t first = r->cap - at < len ? r->cap - at : len;
    memcpy(r->buf + at, data, first);
    memcpy(r->buf, (const char *)data + first, len - first);
    atomic_store_explicit(&r->tail, tail + len, memory_order_release);
    return true;
}

size_t dp_ring_peek(struct dp_ring *r, struct iovec iov[2])
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    size_t n = (size_t)(tail - head);
    size_t at = (size_t)(head & (r->cap - 1));
    size_t first = r->cap - at < n ? r->cap - at : n;
    iov[0].iov_base = r->buf + at;
    iov[0].iov_len = first;
    iov[1].iov_base = r->buf;
    iov[1].iov_len = n - first;
    return n;
}

size_t dp_ring_used(struct dp_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    return (size_t)(tail - head);
}

void dp_ring_consume(struct dp_ring *r, size_t n)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, head + n, memory_order_release);
}
