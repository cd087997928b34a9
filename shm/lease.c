/*
 * Lease claim, heartbeat, release, and the control plane's judge and reaper
 * (see lease.h for the liveness rules and why they are what they are).
 */
#include "shm/lease.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/proc.h"
#include "shm/layout_private.h"

uint64_t shm_lease_offset(const struct shm_segment *seg, uint32_t index)
{
    return seg->hdr->leases_offset + (uint64_t)index * sizeof(struct shm_lease);
}

static struct shm_lease *shm_lease_at(const struct shm_segment *seg, uint32_t index)
{
    return &seg->leases[index];
}

/* Zeroes lease i's counter in every worker's load line. */
static void shm_lease_zero_counters(struct shm_segment *seg, uint32_t index)
{
    uint32_t line = index / SHM_LEASES_PER_LINE;
    uint32_t col = index % SHM_LEASES_PER_LINE;
    for (uint32_t w = 0; w < seg->max_workers; w++) {
        struct shm_load_line *l = &seg->loads[(size_t)w * seg->lines_per_worker + line];
        atomic_store_explicit(&l->counter[col], 0, memory_order_relaxed);
    }
}

static uint64_t shm_unix_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

int shm_lease_claim(struct shm_segment *seg, struct shm_lease_handle *out, char *err,
                    size_t err_len)
{
    memset(out, 0, sizeof(*out));
    uint64_t start = 0, ns = 0;
    proc_start_time(getpid(), &start);
    proc_pid_namespace(&ns);

    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        struct shm_lease *l = shm_lease_at(seg, i);
        if (atomic_load_explicit(&l->state, memory_order_acquire) != SHM_LEASE_FREE)
            continue;
        if (shm_segment_try_lock(seg, shm_lease_offset(seg, i), sizeof(struct shm_lease)) != 0)
            continue;
        uint32_t expect = SHM_LEASE_FREE;
        /* Holding the lock, only the reaper could still race us, and it never
         * touches a FREE lease; the CAS is belt and braces. */
        if (!atomic_compare_exchange_strong_explicit(&l->state, &expect, SHM_LEASE_CLAIMING,
                                                     memory_order_acq_rel, memory_order_relaxed)) {
            shm_segment_unlock(seg, shm_lease_offset(seg, i), sizeof(struct shm_lease));
            continue;
        }
        shm_lease_zero_counters(seg, i);
        atomic_store_explicit(&l->pid, (int32_t)getpid(), memory_order_relaxed);
        atomic_store_explicit(&l->start_time, start, memory_order_relaxed);
        atomic_store_explicit(&l->pid_namespace, ns, memory_order_relaxed);
        atomic_store_explicit(&l->heartbeat, 0, memory_order_relaxed);
        atomic_store_explicit(&l->underflows, 0, memory_order_relaxed);
        atomic_store_explicit(&l->stale_releases, 0, memory_order_relaxed);
        atomic_store_explicit(&l->claimed_unix_ms, shm_unix_ms(), memory_order_relaxed);
        uint64_t nonce = atomic_fetch_add_explicit(&l->nonce, 1, memory_order_relaxed) + 1;
        atomic_store_explicit(&l->state, SHM_LEASE_ACTIVE, memory_order_release);
        atomic_fetch_or_explicit(&seg->hdr->active_leases, UINT64_C(1) << i, memory_order_release);
        out->seg = seg;
        out->index = i;
        out->nonce = nonce;
        out->held = true;
        return 0;
    }
    snprintf(err, err_len,
             "no free dataplane lease in segment %s (max_dataplanes %u are all held or not yet "
             "reaped)",
             seg->name, seg->max_dataplanes);
    return -EBUSY;
}

void shm_lease_heartbeat(const struct shm_lease_handle *h)
{
    if (!h->held)
        return;
    atomic_fetch_add_explicit(&shm_lease_at(h->seg, h->index)->heartbeat, 1, memory_order_relaxed);
}

bool shm_lease_is_mine(const struct shm_lease_handle *h)
{
    if (!h->held)
        return false;
    struct shm_lease *l = shm_lease_at(h->seg, h->index);
    return atomic_load_explicit(&l->state, memory_order_acquire) == SHM_LEASE_ACTIVE &&
           atomic_load_explicit(&l->nonce, memory_order_relaxed) == h->nonce;
}

bool shm_lease_is_active(const struct shm_segment *seg, uint32_t index)
{
    return atomic_load_explicit(&shm_lease_at(seg, index)->state, memory_order_acquire) ==
           SHM_LEASE_ACTIVE;
}

void shm_lease_snapshot(const struct shm_segment *seg, uint32_t index, struct shm_lease_info *out)
{
    struct shm_lease *l = shm_lease_at(seg, index);
    out->index = index;
    out->active = atomic_load_explicit(&l->state, memory_order_acquire) == SHM_LEASE_ACTIVE;
    out->nonce = atomic_load_explicit(&l->nonce, memory_order_acquire);
    out->pid = atomic_load_explicit(&l->pid, memory_order_relaxed);
    out->start_time = atomic_load_explicit(&l->start_time, memory_order_relaxed);
    out->pid_namespace = atomic_load_explicit(&l->pid_namespace, memory_order_relaxed);
    out->heartbeat = atomic_load_explicit(&l->heartbeat, memory_order_relaxed);
    out->claimed_unix_ms = atomic_load_explicit(&l->claimed_unix_ms, memory_order_relaxed);
    out->underflows = atomic_load_explicit(&l->underflows, memory_order_relaxed);
    out->stale_releases = atomic_load_explicit(&l->stale_releases, memory_order_relaxed);
}

void shm_lease_holder_key(const struct shm_segment *seg, uint32_t index, char *buf, size_t len)
{
    int32_t pid = atomic_load_explicit(&shm_lease_at(seg, index)->pid, memory_order_relaxed);
    bool shared = false;
    for (uint32_t i = 0; i < seg->max_dataplanes && !shared; i++)
        shared = i != index && shm_lease_is_active(seg, i) &&
                 atomic_load_explicit(&shm_lease_at(seg, i)->pid, memory_order_relaxed) == pid;
    if (shared)
        snprintf(buf, len, "%d@%u", (int)pid, index);
    else
        snprintf(buf, len, "%d", (int)pid);
}

void shm_lease_release(struct shm_lease_handle *h)
{
    if (h == NULL || !h->held)
        return;
    struct shm_segment *seg = h->seg;
    if (shm_lease_is_mine(h)) {
        struct shm_lease *l = shm_lease_at(seg, h->index);
        /* Clear the bit first so routing stops summing us, then zero. */
        atomic_fetch_and_explicit(&seg->hdr->active_leases, ~(UINT64_C(1) << h->index),
                                  memory_order_release);
        atomic_store_explicit(&l->state, SHM_LEASE_CLAIMING, memory_order_release);
        shm_lease_zero_counters(seg, h->index);
        atomic_store_explicit(&l->state, SHM_LEASE_FREE, memory_order_release);
    }
    shm_segment_unlock(seg, shm_lease_offset(seg, h->index), sizeof(struct shm_lease));
    h->held = false;
}

enum shm_lease_verdict shm_lease_judge(const struct shm_segment *seg, uint32_t index,
                                       struct shm_lease_watch *watch, uint64_t now_ms)
{
    struct shm_lease *l = shm_lease_at(seg, index);
    uint32_t state = atomic_load_explicit(&l->state, memory_order_acquire);
    uint64_t nonce = atomic_load_explicit(&l->nonce, memory_order_relaxed);
    uint64_t beat = atomic_load_explicit(&l->heartbeat, memory_order_relaxed);
    if (state == SHM_LEASE_FREE) {
        watch->nonce = nonce;
        return SHM_LEASE_VERDICT_FREE;
    }
    if (watch->nonce != nonce) {
        /* A new holding: start watching its heartbeat from now. */
        watch->nonce = nonce;
        watch->heartbeat = beat;
        watch->heartbeat_seen_ms = now_ms;
    } else if (watch->heartbeat != beat) {
        watch->heartbeat = beat;
        watch->heartbeat_seen_ms = now_ms;
    }

    bool locked =
        shm_segment_is_locked_by_other(seg, shm_lease_offset(seg, index), sizeof(struct shm_lease));
    if (!locked) {
        /* A claimer takes the lock before leaving FREE, and a releaser drops
         * it after returning to FREE: so a non-FREE lease without a lock is
         * dead, unless it went FREE between our two reads. */
        if (atomic_load_explicit(&l->state, memory_order_acquire) == SHM_LEASE_FREE)
            return SHM_LEASE_VERDICT_FREE;
        return SHM_LEASE_VERDICT_DEAD_NO_LOCK;
    }
    uint64_t our_ns = 0;
    proc_pid_namespace(&our_ns);
    uint64_t their_ns = atomic_load_explicit(&l->pid_namespace, memory_order_relaxed);
    if (state == SHM_LEASE_ACTIVE && their_ns != 0 && their_ns == our_ns) {
        pid_t pid = atomic_load_explicit(&l->pid, memory_order_relaxed);
        uint64_t start = atomic_load_explicit(&l->start_time, memory_order_relaxed);
        if (!proc_is_alive(pid, start))
            return SHM_LEASE_VERDICT_DEAD_PID;
    }
    uint64_t timeout = seg->hdr->heartbeat_timeout_ms;
    if (state == SHM_LEASE_ACTIVE && now_ms - watch->heartbeat_seen_ms > timeout)
        return SHM_LEASE_VERDICT_DEAD_HEARTBEAT;
    return SHM_LEASE_VERDICT_ALIVE;
}

int shm_lease_reap(struct shm_segment *seg, uint32_t index, uint64_t nonce)
{
    struct shm_lease *l = shm_lease_at(seg, index);
    if (atomic_load_explicit(&l->nonce, memory_order_acquire) != nonce)
        return -ESTALE;
    uint32_t state = atomic_load_explicit(&l->state, memory_order_acquire);
    if (state == SHM_LEASE_FREE)
        return -ESTALE;
    atomic_fetch_and_explicit(&seg->hdr->active_leases, ~(UINT64_C(1) << index),
                              memory_order_release);
    shm_lease_zero_counters(seg, index);
    if (!atomic_compare_exchange_strong_explicit(&l->state, &state, SHM_LEASE_FREE,
                                                 memory_order_acq_rel, memory_order_relaxed))
        return -ESTALE;
    atomic_fetch_add_explicit(&seg->hdr->leases_reaped, 1, memory_order_relaxed);
    return 0;
}

const char *shm_lease_verdict_name(enum shm_lease_verdict verdict)
{
    switch (verdict) {
    case SHM_LEASE_VERDICT_FREE:
        return "free";
    case SHM_LEASE_VERDICT_ALIVE:
        return "alive";
    case SHM_LEASE_VERDICT_DEAD_NO_LOCK:
        return "dead (lease lock released)";
    case SHM_LEASE_VERDICT_DEAD_PID:
        return "dead (process gone)";
    case SHM_LEASE_VERDICT_DEAD_HEARTBEAT:
        return "dead (heartbeat stopped)";
    default:
        return "unknown";
    }
}
