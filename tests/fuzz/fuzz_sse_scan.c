/*
 * Fuzz target: the in-band error scanner that watches a relayed stream.
 * Oracle: the scanner's answer must not depend on how the stream was cut
 * into reads. The first input byte picks the cut points; the whole stream
 * fed at once and fed in pieces must report the same events.
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataplane/core/sse_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 17u + 1u;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    struct dp_sse_scan whole;
    dp_sse_scan_init(&whole);
    bool found_whole = dp_sse_scan_feed(&whole, body, len);

    struct dp_sse_scan pieces;
    dp_sse_scan_init(&pieces);
    bool found_pieces = false;
    for (size_t off = 0; off < len; off += step) {
        size_t n = len - off < step ? len - off : step;
        found_pieces |= dp_sse_scan_feed(&pieces, body + off, n);
    }
    if (found_whole != found_pieces)
        abort();
    return 0;
}
