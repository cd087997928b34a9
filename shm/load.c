/*
 * Load counters (see load.h). A counter word is (generation << 32 | count);
 * every change is a CAS on the whole word, so the generation check and the
 * count change are one atomic step.
 *
 * Generations compare with wrap-around arithmetic: g is newer than h when
 * (int32_t)(g - h) > 0. A slot would have to change hands 2^31 times while a
 * guard is held for that to mislead.
 */
#include "shm/load.h"

#include <errno.h>

#include "common/log.h"
#include "shm/layout_private.h"

#define SHM_COUNT_MASK UINT64_C(0xffffffff)

static _Atomic uint64_t *shm_counter(const struct shm_segment *seg, uint32_t lease, uint32_t slot)
{
    struct shm_load_line *line =
        &seg->loads[(size_t)slot * seg->lines_per_worker + lease / SHM_LEASES_PER_LINE];
    return &line->counter[lease % SHM_LEASES_PER_LINE];
}

static uint32_t shm_word_gen(uint64_t word)
{
    return (uint32_t)(word >> 32);
}

static uint32_t shm_word_count(uint64_t word)
{
    return (uint32_t)(word & SHM_COUNT_MASK);
}

static uint64_t shm_word(uint32_t generation, uint32_t count)
{
    return ((uint64_t)generation << 32) | count;
}

static bool shm_gen_newer(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) > 0;
}

int shm_load_acquire(struct shm_segment *seg, uint32_t lease, uint32_t slot, uint32_t generation,
                     struct shm_load_guard *g)
{
    g->held = false;
    if (slot >= seg->max_workers || lease >= seg->max_dataplanes)
        return -EINVAL;
    _Atomic uint64_t *c = shm_counter(seg, lease, slot);
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    uint64_t next;
    do {
        uint32_t gen = shm_word_gen(cur);
        if (gen == generation) {
            if (shm_word_count(cur) == UINT32_MAX)
                return -EOVERFLOW;
            next = cur + 1;
        } else if (shm_gen_newer(generation, gen)) {
            /* The counter still holds a previous occupant's count: that
             * worker is gone, so its count goes with it. */
            next = shm_word(generation, 1);
        } else {
            return -ESTALE;
        }
    } while (!atomic_compare_exchange_weak_explicit(c, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    g->slot = slot;
    g->generation = generation;
    g->lease = lease;
    g->held = true;
    return 0;
}

void shm_load_release(struct shm_segment *seg, struct shm_load_guard *g)
{
    if (g == NULL || !g->held)
        return;
    g->held = false;
    _Atomic uint64_t *c = shm_counter(seg, g->lease, g->slot);
    struct shm_lease *lease = &seg->leases[g->lease];
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    uint64_t next;
    do {
        if (shm_word_gen(cur) != g->generation) {
            /* The slot changed hands (or the counter was reset for a new
             * holder of the lease): the guard's count is already gone. */
            atomic_fetch_add_explicit(&lease->stale_releases, 1, memory_order_relaxed);
            return;
        }
        if (shm_word_count(cur) == 0) {
            atomic_fetch_add_explicit(&lease->underflows, 1, memory_order_relaxed);
            log_warn("load underflow: release at zero for worker slot %u generation %u in "
                     "lease %u; counter stays at 0",
                     g->slot, g->generation, g->lease);
            return;
        }
        next = cur - 1;
    } while (!atomic_compare_exchange_weak_explicit(c, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
}

uint32_t shm_load_in_lease(const struct shm_segment *seg, uint32_t lease, uint32_t slot,
                           uint32_t generation)
{
    uint64_t w = atomic_load_explicit(shm_counter(seg, lease, slot), memory_order_relaxed);
    return shm_word_gen(w) == generation ? shm_word_count(w) : 0;
}

static uint64_t shm_load_sum(const struct shm_segment *seg, uint64_t active, uint32_t slot,
                             uint32_t generation)
{
    uint64_t sum = 0;
    const struct shm_load_line *lines = &seg->loads[(size_t)slot * seg->lines_per_worker];
    while (active != 0) {
        uint32_t lease = (uint32_t)__builtin_ctzll(active);
        active &= active - 1;
        uint64_t w = atomic_load_explicit(
            &lines[lease / SHM_LEASES_PER_LINE].counter[lease % SHM_LEASES_PER_LINE],
            memory_order_relaxed);
        if (shm_word_gen(w) == generation)
            sum += shm_word_count(w);
    }
    return sum;
}

uint64_t shm_load_of(const struct shm_segment *seg, uint32_t slot, uint32_t generation)
{
    if (slot >= seg->max_workers)
        return 0;
    uint64_t active = atomic_load_explicit(&seg->hdr->active_leases, memory_order_acquire);
    return shm_load_sum(seg, active, slot, generation);
}

void shm_load_read_many(const struct shm_segment *seg, const uint32_t *slots,
                        const uint32_t *generations, size_t n, uint64_t *out)
{
    uint64_t active = atomic_load_explicit(&seg->hdr->active_leases, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        out[i] =
            slots[i] < seg->max_workers ? shm_load_sum(seg, active, slots[i], generations[i]) : 0;
}

uint64_t shm_load_reset(struct shm_segment *seg, uint32_t slot, uint32_t generation)
{
    uint64_t discarded = 0;
    if (slot >= seg->max_workers)
        return 0;
    for (uint32_t lease = 0; lease < seg->max_dataplanes; lease++) {
        _Atomic uint64_t *c = shm_counter(seg, lease, slot);
        uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
        while (shm_word_gen(cur) == generation && shm_word_count(cur) != 0) {
            if (atomic_compare_exchange_weak_explicit(c, &cur, shm_word(generation, 0),
                                                      memory_order_relaxed, memory_order_relaxed)) {
                discarded += shm_word_count(cur);
                break;
            }
        }
    }
    return discarded;
}

static uint64_t shm_sum_lease_field(const struct shm_segment *seg, size_t offset)
{
    uint64_t active = atomic_load_explicit(&seg->hdr->active_leases, memory_order_acquire);
    uint64_t sum = 0;
    while (active != 0) {
        uint32_t lease = (uint32_t)__builtin_ctzll(active);
        active &= active - 1;
        _Atomic uint64_t *field = (_Atomic uint64_t *)((char *)&seg->leases[lease] + offset);
        sum += atomic_load_explicit(field, memory_order_relaxed);
    }
    return sum;
}

uint64_t shm_load_underflows(const struct shm_segment *seg)
{
    return shm_sum_lease_field(seg, offsetof(struct shm_lease, underflows));
}

uint64_t shm_load_stale_releases(const struct shm_segment *seg)
{
    return shm_sum_lease_field(seg, offsetof(struct shm_lease, stale_releases));
}

uint64_t shm_load_underflows_in_lease(const struct shm_segment *seg, uint32_t lease)
{
    return atomic_load_explicit(&seg->leases[lease].underflows, memory_order_relaxed);
}
