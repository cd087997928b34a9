/*
 * Framing of the admin channel (proto/admin.proto) over a Unix stream socket:
 * each frame is a 4-byte big-endian payload length followed by one packed
 * AdminMessage. The length has a hard cap (FRAME_MAX_PAYLOAD): a peer
 * announcing more is broken or hostile and its connection is closed before
 * a byte of the payload is read. Both daemons use this file.
 *
 * A frame_reader accumulates bytes from a non-blocking socket and yields
 * whole frames; partial reads of the header or the payload simply wait for
 * more. A frame_writer queues encoded frames in a bounded buffer and flushes
 * what the socket takes. Both are fixed-size caller storage (no allocation),
 * owned by one connection and touched by one thread.
 */
#ifndef SY_PROTO_FRAME_H
#define SY_PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/admin.pb-c.h"

#define FRAME_HEADER_LEN       4u
#define FRAME_MAX_PAYLOAD      (64u * 1024u)
#define FRAME_WRITER_CAP       (4u * (FRAME_HEADER_LEN + FRAME_MAX_PAYLOAD))
#define ADMIN_PROTOCOL_VERSION 1u

struct frame_reader {
    size_t len; /* bytes held in buf */
    uint8_t buf[FRAME_HEADER_LEN + FRAME_MAX_PAYLOAD];
};

struct frame_writer {
    size_t len; /* bytes queued in buf, not yet written */
    uint8_t buf[FRAME_WRITER_CAP];
};

void frame_reader_init(struct frame_reader *r);

/*
 * Reads what fd has (non-blocking) into r, stopping when r cannot take more
 * without a frame being consumed. Returns the bytes read (> 0), 0 when r is
 * already holding a complete frame or is full, -EAGAIN when nothing was
 * available, -ECONNRESET at end of stream, or another negative errno.
 */
long frame_reader_fill(struct frame_reader *r, int fd);

/* Appends bytes (tests; callers that read by themselves). Returns 0
 * or -ENOSPC when they do not fit. */
int frame_reader_feed(struct frame_reader *r, const void *data, size_t len);

/*
 * Looks at the buffered bytes. Returns 1 with *payload and *len naming the first
 * complete frame's payload (valid until frame_reader_consume), 0 when more
 * bytes are needed, or -EMSGSIZE when the announced length exceeds
 * FRAME_MAX_PAYLOAD (the stream cannot be resynchronised: close it).
 */
int frame_reader_next(const struct frame_reader *r, const uint8_t **payload, size_t *len);

/* Drops the first complete frame (after frame_reader_next returned 1). */
void frame_reader_consume(struct frame_reader *r);

/*
 * Decodes a payload. Returns a message to free with frame_msg_free, or NULL
 * when the bytes are not an AdminMessage or its body is not set (a member
 * this build does not know, or none).
 */
Switchyard__Admin__AdminMessage *frame_decode(const uint8_t *payload, size_t len);
void frame_msg_free(Switchyard__Admin__AdminMessage *msg);

/* Encodes msg with its header into buf. Returns the frame's size, or
 * -EMSGSIZE when the payload exceeds FRAME_MAX_PAYLOAD or cap. */
long frame_encode(const Switchyard__Admin__AdminMessage *msg, uint8_t *buf, size_t cap);

void frame_writer_init(struct frame_writer *w);

/* Queues msg as one frame. 0, -EMSGSIZE, or -ENOBUFS when the writer is
 * full (the peer stopped reading). */
int frame_writer_queue(struct frame_writer *w, const Switchyard__Admin__AdminMessage *msg);

/* Writes what fd takes. 0 when everything was written, -EAGAIN when bytes
 * remain (wait for EPOLLOUT), or another negative errno. */
int frame_writer_flush(struct frame_writer *w, int fd);

bool frame_writer_is_empty(const struct frame_writer *w);

#endif
