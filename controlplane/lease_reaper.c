/*
 * Lease reaping (see lease_reaper.h). Logging names the lease, its holder's
 * pid (in the holder's namespace) and why it was judged dead, once.
 */
#include "controlplane/lease_reaper.h"

#include <string.h>

#include "common/log.h"

void cp_lease_reaper_init(struct cp_lease_reaper *r, struct shm_segment *seg)
{
    memset(r, 0, sizeof(*r));
    r->seg = seg;
}

void cp_lease_reaper_set_channel(struct cp_lease_reaper *r, cp_channel_lost_fn fn, void *arg)
{
    r->channel_lost = fn;
    r->channel_arg = arg;
}

/* The channel's signal: connection lost and heartbeat stale for a while. */
static bool cp_lost_and_stale(const struct cp_lease_reaper *r, uint32_t i, uint64_t now_ms)
{
    const struct shm_lease_watch *w = &r->watch[i];
    return r->channel_lost != NULL && now_ms - w->heartbeat_seen_ms > CP_REAPER_LOST_STALE_MS &&
           r->channel_lost(r->channel_arg, i, w->nonce);
}

int cp_lease_reaper_tick(struct cp_lease_reaper *r, uint64_t now_ms)
{
    int reaped = 0;
    for (uint32_t i = 0; i < r->seg->max_dataplanes; i++) {
        enum shm_lease_verdict v = shm_lease_judge(r->seg, i, &r->watch[i], now_ms);
        if (v == SHM_LEASE_VERDICT_FREE)
            continue;
        bool lost = v == SHM_LEASE_VERDICT_ALIVE && cp_lost_and_stale(r, i, now_ms);
        if (v == SHM_LEASE_VERDICT_ALIVE && !lost)
            continue;
        struct shm_lease_info l;
        shm_lease_snapshot(r->seg, i, &l);
        int pid = l.pid;
        if (shm_lease_reap(r->seg, i, r->watch[i].nonce) != 0)
            continue;
        reaped++;
        r->reaped++;
        log_warn("lease %u of dataplane pid %d reaped: %s; its load was discarded", i, pid,
                 lost ? "admin channel connection lost and heartbeat stale"
                      : shm_lease_verdict_name(v));
    }
    return reaped;
}
