/*
 * In-band error detection in a relayed SSE stream. vLLM answers a stream
 * with 200 before its engine runs the request, so a later failure (a KV
 * load that failed, say) reaches the client as an event inside that 200:
 * `data: {"error": {...}}` then `data: [DONE]`. The relay passes the
 * stream through untouched; this scanner only watches the bytes go by so
 * the request can be counted as an upstream error.
 *
 * It is deliberately shallow: it looks at the first bytes of each event
 * (after a blank line, or at the start of the body) for the exact prefix
 * `data: {"error"`, across chunk boundaries, and skips the rest of every
 * line with memchr. No JSON is parsed.
 *
 * Ownership: caller storage, zero-initialised then dp_sse_scan_init.
 * Threading: the owning loop's thread only.
 */
#ifndef SY_DATAPLANE_SSE_SCAN_H
#define SY_DATAPLANE_SSE_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "dataplane/types/sse_scan_types.h"

/* Resets s to the start of a body. */
void dp_sse_scan_init(struct dp_sse_scan *s);

/* Feeds the next len bytes of the body; true when an error event started in them. */
bool dp_sse_scan_feed(struct dp_sse_scan *s, const char *data, size_t len);

#endif
