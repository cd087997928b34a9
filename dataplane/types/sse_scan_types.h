/* The types of sse_scan.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_SSE_SCAN_TYPES_H
#define SY_DATAPLANE_SSE_SCAN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dp_sse_scan {
    bool at_start;   /* the next byte begins an event */
    bool blank;      /* the current line has had no content yet */
    uint8_t matched; /* bytes of the prefix matched so far at this event's start */
};

#endif
