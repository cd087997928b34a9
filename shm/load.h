/*
 * Per-worker load: the number of requests in flight to a worker, summed over
 * the live dataplane leases. This is what load-aware routing trusts, so it is
 * exact by construction:
 *
 *  - Paired accounting (invariant 1): an increment is owned by a guard; the
 *    guard releases it exactly once, and releasing again is a no-op.
 *  - No underflow, no wrap (invariant 5): a decrement at zero stays at zero,
 *    is logged, and is counted in the lease's underflow counter.
 *  - Generation tags (invariant 6): each counter word is
 *    (generation << 32 | count). A guard carries the (slot, generation) it
 *    counted against; if the slot has changed hands since, the counter holds
 *    a newer generation and the guard's release does nothing to it.
 *
 * Guards belong to one request and are touched by one thread at a time; the
 * counters are shared and updated with CAS loops. The only other writer is
 * the control plane's administrative reset (shm_load_reset), also a CAS.
 */
#ifndef SY_SHM_LOAD_H
#define SY_SHM_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/segment.h"
#include "shm/load_types.h"

/*
 * Counts one request in flight to (slot, generation) in lease `lease`.
 * Returns 0 with g held, or -ESTALE when the slot already belongs to a newer
 * generation (the worker was removed: pick again), -EOVERFLOW at 2^32-1.
 */
int shm_load_acquire(struct shm_segment *seg, uint32_t lease, uint32_t slot, uint32_t generation,
                     struct shm_load_guard *g);

/* Releases g's increment if still held; a second call is a no-op. */
void shm_load_release(struct shm_segment *seg, struct shm_load_guard *g);

/* Load of (slot, generation): the sum over active leases. */
uint64_t shm_load_of(const struct shm_segment *seg, uint32_t slot, uint32_t generation);

/* Load of (slot, generation) counted in one lease only (active or not). */
uint32_t shm_load_in_lease(const struct shm_segment *seg, uint32_t lease, uint32_t slot,
                           uint32_t generation);

/* Loads of n workers for one routing decision; reads the lease mask once. */
void shm_load_read_many(const struct shm_segment *seg, const uint32_t *slots,
                        const uint32_t *generations, size_t n, uint64_t *out);

/*
 * Administrative reset (control plane, after every dataplane confirmed zero
 * in flight): sets (slot, generation)'s count to 0 in every lease. Returns
 * the total that was discarded.
 */
uint64_t shm_load_reset(struct shm_segment *seg, uint32_t slot, uint32_t generation);

/* Sum of underflows / stale releases over active leases (for metrics). */
uint64_t shm_load_underflows(const struct shm_segment *seg);
uint64_t shm_load_stale_releases(const struct shm_segment *seg);

/* Underflows counted in one lease only (a dataplane's own, for its metrics). */
uint64_t shm_load_underflows_in_lease(const struct shm_segment *seg, uint32_t lease);

#endif
