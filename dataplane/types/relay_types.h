/* The types of relay.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_RELAY_TYPES_H
#define SY_DATAPLANE_RELAY_TYPES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf_types.h"

#define DP_RELAY_CAP (64u * 1024u) /* per-request relay buffer toward the client, at most */

#define DP_RELAY_INIT (1u * 1024u) /* ... and at first: SSE events and small answers fit */

/* Zeroed = closed: no buffer, nothing pending. */
struct dp_relay {
    struct buf buf; /* capped at DP_RELAY_CAP; no memory when closed or drained */
    size_t head;    /* pending: buf.data[head, buf.len) */
    bool open;
    bool whole; /* collecting a whole answer: nothing may be read yet */
};

#endif
