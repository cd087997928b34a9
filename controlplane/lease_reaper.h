/*
 * The control plane's lease reaper: on every tick it judges each dataplane
 * lease (shm_lease_judge: lock, pid, heartbeat) and reaps the dead, so a
 * crashed dataplane's load disappears and nothing else changes (invariant
 * 7). It keeps, per lease, what it last saw of the heartbeat.
 *
 * Owned by the control plane's main loop thread.
 */
#ifndef SY_CONTROLPLANE_LEASE_REAPER_H
#define SY_CONTROLPLANE_LEASE_REAPER_H

#include <stdint.h>

#include "shm/lease.h"
#include "shm/segment.h"

struct cp_lease_reaper {
    struct shm_segment *seg; /* borrowed */
    struct shm_lease_watch watch[SHM_MAX_DATAPLANES_LIMIT];
    uint64_t reaped; /* by this process */
};

void cp_lease_reaper_init(struct cp_lease_reaper *r, struct shm_segment *seg);

/* Judges every lease at now_ms and reaps the dead. Returns how many it reaped. */
int cp_lease_reaper_tick(struct cp_lease_reaper *r, uint64_t now_ms);

#endif
