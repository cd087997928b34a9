/*
 * The relay buffer of one request: the bytes of the worker's response that
 * curl's write callback has delivered and MHD's content reader has not yet
 * taken. It is bounded (DP_RELAY_CAP): when a chunk does not fit, the
 * producer pauses its transfer and resumes once the reader has made room,
 * so memory per stream is bounded and a slow client slows its worker. It
 * starts small (DP_RELAY_INIT) and grows on demand; a streamed relay gives
 * its buffer back whenever the reader has taken everything and takes one
 * again at the next append, so a stream between two tokens holds no
 * buffer at all (thousands of held streams spend most of their life so).
 *
 * A relay opened "whole" collects an answer (not SSE) before anything is
 * sent, so it leaves in one write with a Content-Length (dp_relay_release);
 * once it no longer fits, the producer switches it to streaming
 * (dp_relay_stream) and it is read piece by piece like any stream.
 *
 * Ownership: caller storage (struct dp_request); the buffer is owned until
 * dp_relay_release hands it over or dp_relay_fini frees it. Threading: the
 * owning loop's thread only.
 */
#ifndef SY_DATAPLANE_RELAY_H
#define SY_DATAPLANE_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "dataplane/types/relay_types.h"

/* Allocates the buffer (DP_RELAY_INIT bytes); whole: collect the whole
 * answer first. 0 or -ENOMEM (the relay stays closed). */
int dp_relay_open(struct dp_relay *r, bool whole);

/* Frees the buffer; the relay is closed again. Idempotent. */
void dp_relay_fini(struct dp_relay *r);

/* True once opened (and not yet released or finished). */
bool dp_relay_is_open(const struct dp_relay *r);

/* True while the relay collects a whole answer (see dp_relay_stream). */
bool dp_relay_is_whole(const struct dp_relay *r);

/* From now on the content is relayed as it comes (a whole answer too large
 * for the buffer). */
void dp_relay_stream(struct dp_relay *r);

/* Bytes written and not yet read. */
size_t dp_relay_pending(const struct dp_relay *r);

/* True when at least n more bytes fit under DP_RELAY_CAP once the reader
 * caught up with what is pending (a paused producer may resume). */
bool dp_relay_has_room(const struct dp_relay *r, size_t n);

/* Appends len bytes of data. 0, or -ENOSPC when they do not fit: the client
 * is behind by DP_RELAY_CAP, or memory is short (the same for the caller:
 * pause the producer; the client's reads make room). A closed relay: -ENOSPC. */
int dp_relay_append(struct dp_relay *r, const void *data, size_t len);

/* Copies up to max pending bytes into buf and consumes them; a streamed
 * relay left empty frees its buffer. Returns the number copied (0 when
 * nothing is pending). */
size_t dp_relay_read(struct dp_relay *r, void *buf, size_t max);

/* Hands the buffer to the caller (who frees it with free()) with its
 * pending bytes at its start, *len of them; the relay is closed after it.
 * NULL when the relay is not open (or, out of memory, holds nothing). */
unsigned char *dp_relay_release(struct dp_relay *r, size_t *len);

#endif
