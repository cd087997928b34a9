/*
 * Load guards of the dataplane: one per attempt, owning that attempt's
 * increment of a worker's load in this dataplane's lease (shm/load.h), plus
 * this process's own count of live guards per (slot, generation), which the
 * admin channel and switchyard_worker_inflight report. Releasing twice is a
 * no-op (invariant 1); a guard remembers its generation, so a stale one
 * never touches the slot's next occupant (invariant 6).
 *
 * Threading: a struct dp_guard is touched by the thread that owns its
 * attempt; the table (struct dp_guards) is process-wide, updated with CAS
 * on one 64-bit word per slot (generation << 32 | count).
 */
#ifndef SY_DATAPLANE_GUARD_H
#define SY_DATAPLANE_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm/load.h"
#include "shm/segment.h"
#include "dataplane/types/guard_types.h"

int dp_guards_init(struct dp_guards *t, struct shm_segment *seg, uint32_t lease);
void dp_guards_fini(struct dp_guards *t);

/*
 * Counts one request to (slot, generation). 0, -EBUSY (the worker is
 * draining: a reset_load may be running, pick another), -ESTALE, -EOVERFLOW,
 * -EINVAL.
 */
int dp_guard_acquire(struct dp_guards *t, struct dp_guard *g, uint32_t slot, uint32_t generation);

/* Releases g if held; later calls are no-ops. */
void dp_guard_release(struct dp_guards *t, struct dp_guard *g);

bool dp_guard_is_held(const struct dp_guard *g);

/* This process's live guards on (slot, generation). */
uint32_t dp_guards_live(const struct dp_guards *t, uint32_t slot, uint32_t generation);

/* Sum over every slot (for shutdown checks and logs). */
uint64_t dp_guards_live_total(const struct dp_guards *t);

#endif
