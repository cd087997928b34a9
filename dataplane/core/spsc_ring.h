/*
 * A bounded single-producer single-consumer byte ring: how an event loop
 * hands finished records (access-log lines, encoded spans) to a thread that
 * does the slow part (a file write, an HTTP export) without ever waiting
 * for it. The producer appends a whole record or nothing: a record that
 * does not fit is refused at once (the caller counts it as dropped), so a
 * stalled consumer costs the loop one failed comparison, never a block.
 *
 * The consumer sees only whole records: the producer publishes its tail
 * (release) after the record's last byte, the consumer reads up to the tail
 * it loaded (acquire) and gives the room back by publishing its head.
 * Records are opaque bytes to the ring; both users end each one with '\n'.
 *
 * Ownership: caller storage, dp_ring_init / dp_ring_fini. Threading: one
 * producer thread and one consumer thread at a time; no locks.
 */
#ifndef SY_DATAPLANE_SPSC_RING_H
#define SY_DATAPLANE_SPSC_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct dp_ring {
    char *buf;
    size_t cap;            /* a power of two */
    _Atomic uint64_t head; /* consumer: bytes consumed since init */
    _Atomic uint64_t tail; /* producer: bytes published since init */
};

/* A ring of at least cap bytes (rounded up to a power of two, 4 KiB at
 * least). 0 or -ENOMEM. */
int dp_ring_init(struct dp_ring *r, size_t cap);
void dp_ring_fini(struct dp_ring *r);

/* Producer: appends len bytes as one piece. true, or false (nothing
 * appended) when they do not fit now. */
bool dp_ring_push(struct dp_ring *r, const void *data, size_t len);

/* Bytes published and not yet consumed (any thread; a snapshot). */
size_t dp_ring_used(struct dp_ring *r);

/* Consumer: the published bytes not yet consumed, as up to two spans in
 * iov (the second when they wrap). Returns how many bytes in all. */
size_t dp_ring_peek(struct dp_ring *r, struct iovec iov[2]);

/* Consumer: gives back the first n bytes of what dp_ring_peek showed. */
void dp_ring_consume(struct dp_ring *r, size_t n);

#endif
