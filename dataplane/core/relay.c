/*
 * The relay buffer (see relay.h). A byte window [head, tail) in a buffer of
 * cap bytes: reads advance head, and an empty window starts again at 0 (a
 * streamed one without its buffer); an append that does not fit at the
 * tail first compacts the window to the start, then doubles the buffer up
 * to DP_RELAY_CAP. Freeing and taking DP_RELAY_INIT bytes once per relayed
 * event is a hit in malloc's per-thread cache, cheaper than holding 1 KiB
 * per idle stream.
 */
#include "dataplane/core/relay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dp_relay_open(struct dp_relay *r, bool whole)
{
    /* Taken now, although a streamed relay may give it back at once: a
     * relay that cannot start fails here, where the caller can answer. */
    r->buf = malloc(DP_RELAY_INIT);
    if (r->buf == NULL)
        return -ENOMEM;
    r->cap = DP_RELAY_INIT;
    r->head = r->tail = 0;
    r->open = true;
    r->whole = whole;
    return 0;
}

void dp_relay_fini(struct dp_relay *r)
{
    free(r->buf);
    r->buf = NULL;
    r->head = r->tail = r->cap = 0;
    r->open = false;
}

bool dp_relay_is_open(const struct dp_relay *r)
{
    return r->open;
}

bool dp_relay_is_whole(const struct dp_relay *r)
{
    return r->whole;
}

void dp_relay_stream(struct dp_relay *r)
{
    r->whole = false;
}

size_t dp_relay_pending(const struct dp_relay *r)
{
    return r->tail - r->head;
}

bool dp_relay_has_room(const struct dp_relay *r, size_t n)
{
    return DP_RELAY_CAP - dp_relay_pending(r) >= n;
}

/* Room for n more bytes at the tail: compacts, then grows up to DP_RELAY_CAP. */
static int relay_reserve(struct dp_relay *r, size_t n)
{
    size_t used = r->tail - r->head;
    if (used + n > DP_RELAY_CAP)
        return -ENOSPC;
    if (r->buf == NULL) {
        /* Drained earlier (dp_relay_read): a fresh buffer, grown below if
         * n needs more. */
        r->buf = malloc(DP_RELAY_INIT);
        if (r->buf == NULL)
            return -ENOSPC;
        r->cap = DP_RELAY_INIT;
    }
    if (r->tail + n > r->cap && r->head > 0) {
        memmove(r->buf, r->buf + r->head, used);
        r->tail = used;
        r->head = 0;
    }
    if (r->tail + n > r->cap) {
        size_t cap = r->cap * 2;
        while (cap < r->tail + n)
            cap *= 2;
        if (cap > DP_RELAY_CAP)
            cap = DP_RELAY_CAP;
        unsigned char *grown = realloc(r->buf, cap);
        if (grown == NULL)
            return -ENOSPC;
        r->buf = grown;
        r->cap = cap;
    }
    return 0;
}

int dp_relay_append(struct dp_relay *r, const void *data, size_t len)
{
    if (!r->open || relay_reserve(r, len) != 0)
        return -ENOSPC;
    memcpy(r->buf + r->tail, data, len);
    r->tail += len;
    return 0;
}

size_t dp_relay_read(struct dp_relay *r, void *buf, size_t max)
{
    size_t have = r->tail - r->head;
    size_t n = have < max ? have : max;
    if (n == 0)
        return 0;
    memcpy(buf, r->buf + r->head, n);
    r->head += n;
    if (r->head == r->tail) {
        r->head = r->tail = 0;
        if (!r->whole) {
            free(r->buf);
            r->buf = NULL;
            r->cap = 0;
        }
    }
    return n;
}

unsigned char *dp_relay_release(struct dp_relay *r, size_t *len)
{
    unsigned char *b = r->buf;
    if (!r->open)
        return NULL;
    *len = 0;
    if (b != NULL && r->head > 0)
        memmove(b, b + r->head, r->tail - r->head);
    if (b != NULL)
        *len = r->tail - r->head;
    r->buf = NULL;
    r->head = r->tail = r->cap = 0;
    r->open = false;
    return b;
}
