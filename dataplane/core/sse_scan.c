/*
 * In-band SSE error detection (see sse_scan.h). An event whose start and
 * the prefix's length of bytes after it are in one piece (nearly all: a
 * token event arrives whole) is checked with one memcmp; otherwise bytes
 * are looked at one by one while the prefix may still match. The rest of
 * every line is skipped to its newline with memchr, so a token stream costs
 * about a memcmp and two memchr per event (the byte loop alone was 5% of
 * the dataplane's instructions per relayed token).
 */
#include "dataplane/core/sse_scan.h"

#include <string.h>

static const char DP_SSE_ERROR_PREFIX[] = "data: {\"error\"";

void dp_sse_scan_init(struct dp_sse_scan *s)
{
    s->at_start = true;
    s->blank = true;
    s->matched = 0;
}

bool dp_sse_scan_feed(struct dp_sse_scan *s, const char *data, size_t len)
{
    const size_t plen = sizeof(DP_SSE_ERROR_PREFIX) - 1;
    bool hit = false;
    size_t i = 0;
    while (i < len) {
        if (s->at_start && s->matched == 0 && len - i >= plen) {
            /* The whole prefix is here: one comparison. A mismatch leaves
             * the line to the code below from its first byte, as the byte
             * loop's mismatch at the first byte does. */
            s->at_start = false;
            if (memcmp(data + i, DP_SSE_ERROR_PREFIX, plen) == 0) {
                hit = true;
                s->blank = false;
                i += plen;
                continue;
            }
        } else if (s->at_start || s->matched > 0) {
            if (data[i] == DP_SSE_ERROR_PREFIX[s->matched]) {
                s->at_start = false;
                s->blank = false;
                s->matched++;
                if (s->matched == plen) {
                    hit = true;
                    s->matched = 0;
                }
                i++;
                continue;
            }
            s->matched = 0;
            s->at_start = false;
        }
        const char *nl = memchr(data + i, '\n', len - i);
        size_t end = nl != NULL ? (size_t)(nl - data) : len;
        /* A line of only "\r" bytes is still blank (CRLF framing). Looked at
         * byte by byte, so the answer cannot depend on where a read ended;
         * a content line stops at its first byte. */
        for (size_t k = i; k < end && s->blank; k++)
            if (data[k] != '\r')
                s->blank = false;
        if (nl == NULL)
            break;
        s->at_start = s->blank; /* a blank line ends an event */
        s->blank = true;
        i = end + 1;
    }
    return hit;
}
