/*
 * Load reports in worker slots (see load_report.h). The seqlock is the
 * registry's (shm/registry.c): writer seq+1 (odd) relaxed, release fence,
 * relaxed stores, seq+1 (even) release; reader acquire seq, relaxed loads,
 * acquire fence, seq again. One writer thread, the control plane's loop.
 */
#include "shm/load_report.h"

#include <errno.h>
#include <math.h>

#include "shm/layout_private.h"

static uint32_t shm_kv_to_ppm(double usage)
{
    if (!(usage > 0)) /* NaN too */
        return 0;
    if (usage >= 1.0)
        return 1000000u;
    return (uint32_t)lround(usage * 1e6);
}

int shm_load_report_write(struct shm_segment *seg, uint32_t slot, uint32_t generation,
                          const struct shm_load_report *r)
{
    if (slot >= seg->max_workers || r->unix_ms == 0)
        return -EINVAL;
    struct shm_worker_slot *s = &seg->slots[slot];
    if (atomic_load_explicit(&s->generation, memory_order_relaxed) != generation)
        return -ESTALE;
    uint32_t seq = atomic_load_explicit(&s->report_seq, memory_order_relaxed);
    atomic_store_explicit(&s->report_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->report_generation, generation, memory_order_relaxed);
    atomic_store_explicit(&s->report_running, r->running, memory_order_relaxed);
    atomic_store_explicit(&s->report_waiting, r->waiting, memory_order_relaxed);
    atomic_store_explicit(&s->report_kv_ppm, shm_kv_to_ppm(r->kv_cache_usage),
                          memory_order_relaxed);
    atomic_store_explicit(&s->report_own, r->own_inflight, memory_order_relaxed);
    atomic_store_explicit(&s->report_unix_ms, r->unix_ms, memory_order_relaxed);
    for (unsigned i = 0; i < SHM_ADAPTER_SET_WORDS; i++)
        atomic_store_explicit(&s->report_adapters[i], r->running_adapters.bits[i],
                              memory_order_relaxed);
    atomic_store_explicit(&s->report_seq, seq + 2, memory_order_release);
    return 0;
}

int shm_load_report_read(const struct shm_segment *seg, uint32_t slot, uint32_t generation,
                         struct shm_load_report *out)
{
    if (slot >= seg->max_workers)
        return -ENOENT;
    struct shm_worker_slot *s = &seg->slots[slot];
    for (int attempt = 0; attempt < SHM_LOAD_REPORT_READ_RETRIES; attempt++) {
        uint32_t seq1 = atomic_load_explicit(&s->report_seq, memory_order_acquire);
        if (seq1 & 1u)
            continue;
        uint32_t gen = atomic_load_explicit(&s->report_generation, memory_order_relaxed);
        struct shm_load_report r = {
            .running = atomic_load_explicit(&s->report_running, memory_order_relaxed),
            .waiting = atomic_load_explicit(&s->report_waiting, memory_order_relaxed),
            .kv_cache_usage = atomic_load_explicit(&s->report_kv_ppm, memory_order_relaxed) / 1e6,
            .own_inflight = atomic_load_explicit(&s->report_own, memory_order_relaxed),
            .unix_ms = atomic_load_explicit(&s->report_unix_ms, memory_order_relaxed),
        };
        for (unsigned i = 0; i < SHM_ADAPTER_SET_WORDS; i++)
            r.running_adapters.bits[i] =
                atomic_load_explicit(&s->report_adapters[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->report_seq, memory_order_relaxed) != seq1)
            continue;
        if (r.unix_ms == 0 || gen != generation)
            return -ENOENT;
        *out = r;
        return 0;
    }
    return -EAGAIN;
}

int shm_load_report_repair(struct shm_segment *seg)
{
    int dropped = 0;
    for (uint32_t i = 0; i < seg->max_workers; i++) {
        struct shm_worker_slot *s = &seg->slots[i];
        uint32_t seq = atomic_load_explicit(&s->report_seq, memory_order_relaxed);
        if (!(seq & 1u))
            continue;
        atomic_store_explicit(&s->report_unix_ms, 0, memory_order_relaxed);
        atomic_store_explicit(&s->report_seq, seq + 1, memory_order_release);
        dropped++;
    }
    return dropped;
}
