/*
 * The relay buffer (see relay.h). A byte window [head, buf.len) in a
 * capped buffer (common/buf.h): reads advance head, and an empty window
 * starts again at 0 (a streamed one without its memory); an append that
 * does not fit at the tail first compacts the window to the start, then
 * lets the buffer grow (doubling) up to DP_RELAY_CAP. Freeing and taking
 * DP_RELAY_INIT bytes once per relayed event is a hit in malloc's
 * per-thread cache, cheaper than holding 1 KiB per idle stream.
 *
 * "No room" is back-pressure here, not a failure: the producer pauses and
 * tries again once the reader made room, so the buffer is grown with
 * buf_make_room (which records no error) before every append, and an
 * append never fails once room was made.
 */
#include "dataplane/core/relay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The buffer's first memory: exactly DP_RELAY_INIT bytes, as many events need no more. */
static int relay_take_memory(struct dp_relay *r)
{
    return buf_reserve(&r->buf, DP_RELAY_INIT) == 0 ? 0 : -ENOMEM;
}

int dp_relay_open(struct dp_relay *r, bool whole)
{
    buf_init(&r->buf, DP_RELAY_CAP);
    r->head = 0;
    /* Taken now, although a streamed relay may give it back at once: a
     * relay that cannot start fails here, where the caller can answer. */
    if (relay_take_memory(r) != 0)
        return -ENOMEM;
    r->open = true;
    r->whole = whole;
    return 0;
}

void dp_relay_fini(struct dp_relay *r)
{
    buf_fini(&r->buf);
    r->head = 0;
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
    return r->buf.len - r->head;
}

bool dp_relay_has_room(const struct dp_relay *r, size_t n)
{
    return DP_RELAY_CAP - dp_relay_pending(r) >= n;
}

/* Room for n more bytes at the tail: compacts, then grows up to DP_RELAY_CAP. */
static int relay_reserve(struct dp_relay *r, size_t n)
{
    if (dp_relay_pending(r) + n > DP_RELAY_CAP)
        return -ENOSPC;
    /* Drained earlier (dp_relay_read): a fresh buffer, grown below if n needs more. */
    if (r->buf.data == NULL && relay_take_memory(r) != 0)
        return -ENOSPC;
    if (r->buf.len + n >= r->buf.alloc && r->head > 0) {
        buf_consume(&r->buf, r->head);
        r->head = 0;
    }
    return buf_make_room(&r->buf, n) == 0 ? 0 : -ENOSPC;
}

int dp_relay_append(struct dp_relay *r, const void *data, size_t len)
{
    if (!r->open || relay_reserve(r, len) != 0)
        return -ENOSPC;
    return buf_append(&r->buf, data, len) == 0 ? 0 : -ENOSPC;
}

size_t dp_relay_read(struct dp_relay *r, void *buf, size_t max)
{
    size_t have = dp_relay_pending(r);
    size_t n = have < max ? have : max;
    if (n == 0)
        return 0;
    memcpy(buf, r->buf.data + r->head, n);
    r->head += n;
    if (r->head == r->buf.len) {
        r->head = 0;
        if (r->whole)
            buf_reset(&r->buf);
        else
            buf_fini(&r->buf);
    }
    return n;
}

unsigned char *dp_relay_release(struct dp_relay *r, size_t *len)
{
    if (!r->open)
        return NULL;
    *len = 0;
    unsigned char *b = NULL;
    if (r->buf.data != NULL) {
        buf_consume(&r->buf, r->head);
        b = (unsigned char *)buf_detach(&r->buf, len);
    }
    buf_fini(&r->buf);
    r->head = 0;
    r->open = false;
    return b;
}
