/*
 * Dataplane load guards (see guard.h). The shared-memory increment is the
 * truth routing sees; the process table mirrors it so this dataplane can
 * say how many requests it really has in flight per worker, independent of
 * what an administrator did to the shared counters.
 */
#include "dataplane/core/guard.h"

#include <errno.h>
#include <stdlib.h>

#include "shm/registry.h"

#define DP_GEN_OF(w)   ((uint32_t)((w) >> 32))
#define DP_COUNT_OF(w) ((uint32_t)((w)&0xffffffffu))
#define DP_WORD(g, c)  (((uint64_t)(g) << 32) | (uint64_t)(c))

int dp_guards_init(struct dp_guards *t, struct shm_segment *seg, uint32_t lease)
{
    t->seg = seg;
    t->lease = lease;
    t->max_workers = seg->max_workers;
    t->live = calloc(t->max_workers, sizeof(*t->live));
    if (t->live == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->max_workers; i++)
        atomic_init(&t->live[i], 0);
    return 0;
}

void dp_guards_fini(struct dp_guards *t)
{
    free(t->live);
    t->live = NULL;
}

static void live_add(struct dp_guards *t, uint32_t slot, uint32_t gen)
{
    uint64_t w = atomic_load_explicit(&t->live[slot], memory_order_relaxed);
    for (;;) {
        uint64_t nw = DP_GEN_OF(w) == gen ? w + 1 : DP_WORD(gen, 1);
        if ((int32_t)(DP_GEN_OF(w) - gen) > 0)
            return; /* a newer generation already counts here: ours is stale */
        if (atomic_compare_exchange_weak_explicit(&t->live[slot], &w, nw, memory_order_relaxed,
                                                  memory_order_relaxed))
            return;
    }
}

static void live_sub(struct dp_guards *t, uint32_t slot, uint32_t gen)
{
    uint64_t w = atomic_load_explicit(&t->live[slot], memory_order_relaxed);
    for (;;) {
        if (DP_GEN_OF(w) != gen || DP_COUNT_OF(w) == 0)
            return;
        if (atomic_compare_exchange_weak_explicit(&t->live[slot], &w, w - 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return;
    }
}

/*
 * The order is what makes reset_load safe (invariant 4): this process
 * announces the guard in its live table first, then looks at the draining
 * flag, and only then increments the shared counter. reset_load sets the
 * flag first and then asks every dataplane for its live guards. Both sides
 * put a sequentially consistent fence between their write and their read,
 * so either the answer counts this guard (and the reset is refused) or this
 * guard sees the worker draining and backs off without having counted.
 */
int dp_guard_acquire(struct dp_guards *t, struct dp_guard *g, uint32_t slot, uint32_t generation)
{
    g->held = false;
    if (slot >= t->max_workers)
        return -EINVAL;
    live_add(t, slot, generation);
    atomic_thread_fence(memory_order_seq_cst);
    if (shm_registry_is_draining(t->seg, slot)) {
        live_sub(t, slot, generation);
        return -EBUSY;
    }
    int rc = shm_load_acquire(t->seg, t->lease, slot, generation, &g->shm);
    if (rc != 0) {
        live_sub(t, slot, generation);
        return rc;
    }
    g->held = true;
    return 0;
}

void dp_guard_release(struct dp_guards *t, struct dp_guard *g)
{
    if (!g->held)
        return;
    g->held = false;
    shm_load_release(t->seg, &g->shm);
    live_sub(t, g->shm.slot, g->shm.generation);
}

bool dp_guard_is_held(const struct dp_guard *g)
{
    return g->held;
}

uint32_t dp_guards_live(const struct dp_guards *t, uint32_t slot, uint32_t generation)
{
    if (slot >= t->max_workers)
        return 0;
    /* The reader's half of the fence pair described at dp_guard_acquire. */
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t w = atomic_load_explicit(&t->live[slot], memory_order_relaxed);
    return DP_GEN_OF(w) == generation ? DP_COUNT_OF(w) : 0;
}

uint64_t dp_guards_live_total(const struct dp_guards *t)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < t->max_workers; i++)
        sum += DP_COUNT_OF(atomic_load_explicit(&t->live[i], memory_order_relaxed));
    return sum;
}
