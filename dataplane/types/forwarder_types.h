/*
 * The forwarder's state in a loop (struct dp_fwd, embedded in struct
 * dp_loop): types only, apart from forwarder.h's functions, so loop.h can
 * embed it without depending on the forwarder. Touched only by
 * forwarder.c once the loop's driver has cleared it.
 */
#ifndef SY_DATAPLANE_CORE_FORWARDER_TYPES_H
#define SY_DATAPLANE_CORE_FORWARDER_TYPES_H

#include <stdint.h>

#include "common/list_types.h"

struct dp_attempt;
struct dp_request;
struct pol_candidate;

/* A loop's forwarding state (in struct dp_loop; touched only by forwarder.c). */
struct dp_fwd {
    struct list_node attempts; /* every live attempt (dp_attempt.link) */
    struct list_node retrying; /* requests waiting for their backoff (dp_request.retry_link) */
    /* No attempt's deadline is earlier than this (0 = unknown, scan): the
     * tick skips its walk over every attempt until then, so thousands of
     * idle streams cost nothing between tokens. Lowered by every deadline
     * set earlier; recomputed by each walk. Kept instead of a timer heap
     * (as the mock worker's, tests/mockworker/timer_heap.h): every body
     * chunk pushes its attempt's idle deadline later, which is one store
     * here but a heap update there,
     * while the walk runs about once per idle_timeout (measured: 5 walks
     * in 1250 ticks with ~1500 live streams per loop and a 3 s idle
     * timeout, about 95 ns per attempt walked). */
    uint64_t deadline_floor_ms;
    /* fwd_try's working arrays, max_workers long, allocated at first use:
     * a routing decision allocates nothing. */
    struct pol_candidate *pick_cands;
    uint32_t *pick_slots; /* slots, then generations */
    uint64_t *pick_loads;
    uint32_t *pick_refused;
};

#endif
