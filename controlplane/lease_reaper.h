/*
 * The control plane's lease reaper: on every tick it judges each dataplane
 * lease (shm_lease_judge: lock, pid, heartbeat) and reaps the dead, so a
 * crashed dataplane's load disappears and nothing else changes (invariant
 * 7). It keeps, per lease, what it last saw of the heartbeat.
 *
 * A fourth signal comes from the admin channel: a holder whose channel
 * connection was lost (and not re-established) and whose heartbeat has not
 * moved for CP_REAPER_LOST_STALE_MS is reaped as well, well before the
 * plain heartbeat timeout. A lost connection alone never reaps (a control
 * plane restart drops every connection), and a holder that never connected
 * is judged by the segment's signals only.
 *
 * Owned by the control plane's main loop thread.
 */
#ifndef SY_CONTROLPLANE_LEASE_REAPER_H
#define SY_CONTROLPLANE_LEASE_REAPER_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/lease.h"
#include "shm/segment.h"

#define CP_REAPER_LOST_STALE_MS 1000u

/* True when the holding (lease, nonce) lost its admin-channel connection. */
typedef bool (*cp_channel_lost_fn)(void *arg, uint32_t lease, uint64_t nonce);

struct cp_lease_reaper {
    struct shm_segment *seg;         /* borrowed */
    cp_channel_lost_fn channel_lost; /* NULL = no channel signal */
    void *channel_arg;
    struct shm_lease_watch watch[SHM_MAX_DATAPLANES_LIMIT];
    uint64_t reaped; /* by this process */
};

void cp_lease_reaper_init(struct cp_lease_reaper *r, struct shm_segment *seg);

/* Adds the admin channel's signal (see the file comment). */
void cp_lease_reaper_set_channel(struct cp_lease_reaper *r, cp_channel_lost_fn fn, void *arg);

/* Judges every lease at now_ms and reaps the dead. Returns how many it reaped. */
int cp_lease_reaper_tick(struct cp_lease_reaper *r, uint64_t now_ms);

#endif
