/*
 * KV-cache events into the exact holder index (see kv_apply.h).
 *
 * Each worker's map is an open-addressing table (linear probing, deletion
 * by backward shift, so no tombstones) from the worker's block hash to the
 * router's key, plus a ring of (hash, sequence) in insertion order that
 * finds the oldest entry when the bound is reached; a ring entry whose
 * block was removed since is stale (its sequence no longer matches) and is
 * just dropped when it comes up. Both grow by doubling up to the bound, so
 * a worker that stores little costs little. A worker's map is made on its
 * first event and freed when it is forgotten.
 */
#include "controlplane/kv/kv_apply.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/token_chain.h"

#define KVA_MODEL_MAX  256
#define KVA_MIN_TABLE  64u
#define KVA_MAX_GROUPS 64u /* group kinds remembered per worker (vLLM has a handful) */

struct kva_entry {
    uint64_t vh;  /* the worker's block hash */
    uint64_t key; /* the router's chain hash */
    uint64_t seq; /* 0 = empty */
};

struct kva_ring_entry {
    uint64_t vh;
    uint64_t seq;
};

/* One worker's map. Owned by struct kv_apply; sink thread only. */
struct kva_map {
    struct kva_entry *tab;
    size_t cap; /* power of two */
    size_t n;
    struct kva_ring_entry *ring;
    size_t ring_cap, head, len;
    uint64_t next_seq;
};

/* A slot's facts held back by its share of the index (kvh_add), under
 * the id of the worker they were counted for. The sink thread writes; the
 * metrics page reads; the id changes under the mutex of struct kv_apply. */
struct kva_share_stats {
    char worker[CFG_ID_MAX]; /* "" = nothing counted yet */
    _Atomic uint64_t self_evicted, refused;
};

/* Allocated apart, so the metrics page reaching it through a const
 * struct kv_apply may still take its mutex. */
struct kva_shares {
    pthread_mutex_t mu; /* guards slot[].worker */
    struct kva_share_stats slot[];
};

struct kv_apply {
    struct kvh_index *ix; /* borrowed */
    uint32_t block_size;
    uint32_t max_slots;
    size_t bound; /* entries per worker map */
    kva_model_fn model_of;
    void *model_arg;
    struct kva_map **maps; /* [max_slots], NULL until a worker's first store */
    /* [max_slots]: the KV-cache group whose blocks are routed on (-1 until
     * a full-attention group's first store), and each group's kind as its
     * stores said (KV_SPEC_UNSET until then), so that a BlockRemoved, which
     * names only its group, is counted under its group's kind. */
    int64_t *routed_group;
    uint8_t (*group_kind)[KVA_MAX_GROUPS];
    /* Read by the metrics page from another thread. */
    _Atomic uint64_t applied[3];
    _Atomic uint64_t skipped[KVA_SKIP_COUNT];
    _Atomic uint64_t blocks_stored, blocks_removed, map_evictions, forgets;
    _Atomic uint64_t group_skipped[KV_SPEC_COUNT];
    struct kva_shares *shares; /* slot[max_slots] */
};

static void kva_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t kva_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- the map ---- */

static void kva_map_free(struct kva_map *m)
{
    if (m == NULL)
        return;
    free(m->tab);
    free(m->ring);
    free(m);
}

static struct kva_map *kva_map_new(void)
{
    struct kva_map *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->cap = KVA_MIN_TABLE;
    m->tab = calloc(m->cap, sizeof(*m->tab));
    m->ring_cap = KVA_MIN_TABLE / 2;
    m->ring = calloc(m->ring_cap, sizeof(*m->ring));
    m->next_seq = 1;
    if (m->tab == NULL || m->ring == NULL) {
        kva_map_free(m);
        return NULL;
    }
    return m;
}

static struct kva_entry *kva_find(const struct kva_map *m, uint64_t vh)
{
    size_t mask = m->cap - 1;
    for (size_t i = kva_mix(vh) & mask;; i = (i + 1) & mask) {
        struct kva_entry *e = &m->tab[i];
        if (e->seq == 0)
            return NULL;
        if (e->vh == vh)
            return e;
    }
}

static void kva_place(struct kva_entry *tab, size_t cap, const struct kva_entry *e)
{
    size_t mask = cap - 1;
    size_t i = kva_mix(e->vh) & mask;
    while (tab[i].seq != 0)
        i = (i + 1) & mask;
    tab[i] = *e;
}

/* Removes e (an entry of m) by shifting the run after it back. */
static void kva_delete(struct kva_map *m, struct kva_entry *e)
{
    size_t mask = m->cap - 1;
    size_t hole = (size_t)(e - m->tab);
    m->tab[hole].seq = 0;
    for (size_t i = (hole + 1) & mask; m->tab[i].seq != 0; i = (i + 1) & mask) {
        size_t home = kva_mix(m->tab[i].vh) & mask;
        /* Move it into the hole unless its home lies cyclically in (hole, i]. */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays)
            continue;
        m->tab[hole] = m->tab[i];
        m->tab[i].seq = 0;
        hole = i;
    }
    m->n--;
}

static int kva_grow_table(struct kva_map *m)
{
    size_t cap = m->cap * 2;
    struct kva_entry *tab = calloc(cap, sizeof(*tab));
    if (tab == NULL)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->tab[i].seq != 0)
            kva_place(tab, cap, &m->tab[i]);
    free(m->tab);
    m->tab = tab;
    m->cap = cap;
    return 0;
}

static int kva_grow_ring(struct kva_map *m, size_t bound)
{
    size_t cap = m->ring_cap * 2 < bound ? m->ring_cap * 2 : bound;
    struct kva_ring_entry *ring = malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return -1;
    for (size_t i = 0; i < m->len; i++)
        ring[i] = m->ring[(m->head + i) % m->ring_cap];
    free(m->ring);
    m->ring = ring;
    m->ring_cap = cap;
    m->head = 0;
    return 0;
}

/* Drops the ring's oldest entry; when it is still live, its block leaves
 * the map and the index. */
static void kva_evict_oldest(struct kv_apply *a, struct kva_map *m, uint32_t slot)
{
    struct kva_ring_entry r = m->ring[m->head];
    m->head = (m->head + 1) % m->ring_cap;
    m->len--;
    struct kva_entry *e = kva_find(m, r.vh);
    if (e == NULL || e->seq != r.seq)
        return; /* removed (or stored again) since */
    kvh_remove(a->ix, e->key, slot);
    kva_delete(m, e);
    kva_count(&a->map_evictions, 1);
}

/* Records vh -> key; 0, or -1 when memory ran out (then nothing changed). */
static int kva_insert(struct kv_apply *a, struct kva_map *m, uint32_t slot, uint64_t vh,
                      uint64_t key)
{
    struct kva_entry *e = kva_find(m, vh);
    if (e != NULL) {
        e->key = key;
        return 0;
    }
    if (m->len == a->bound)
        kva_evict_oldest(a, m, slot);
    if (m->len == m->ring_cap && kva_grow_ring(m, a->bound) != 0)
        return -1;
    if ((m->n + 1) * 2 > m->cap && kva_grow_table(m) != 0)
        return -1;
    struct kva_entry ne = {.vh = vh, .key = key, .seq = m->next_seq++};
    kva_place(m->tab, m->cap, &ne);
    m->n++;
    m->ring[(m->head + m->len) % m->ring_cap] = (struct kva_ring_entry){vh, ne.seq};
    m->len++;
    return 0;
}

/* ---- events ---- */

static void kva_skip(struct kv_apply *a, enum kva_skip why)
{
    kva_count(&a->skipped[why], 1);
}

/* Counts a fact kvh_add held back for the slot's share. A slot taken by
 * another worker starts its counts over under the new id. */
static void kva_count_share(struct kv_apply *a, uint32_t slot, const char *worker_id,
                            enum kvh_add_result r)
{
    if (r != KVH_ADD_SELF_EVICTED && r != KVH_ADD_REFUSED)
        return;
    struct kva_share_stats *st = &a->shares->slot[slot];
    if (strncmp(st->worker, worker_id, sizeof(st->worker) - 1) != 0) {
        pthread_mutex_lock(&a->shares->mu);
        snprintf(st->worker, sizeof(st->worker), "%s", worker_id);
        atomic_store_explicit(&st->self_evicted, 0, memory_order_relaxed);
        atomic_store_explicit(&st->refused, 0, memory_order_relaxed);
        pthread_mutex_unlock(&a->shares->mu);
    }
    kva_count(r == KVH_ADD_REFUSED ? &st->refused : &st->self_evicted, 1);
}

static void kva_forget(struct kv_apply *a, uint32_t slot)
{
    kvh_forget_slot(a->ix, slot);
    if (slot < a->max_slots) {
        /* Freed, not kept: a forget often means the worker left, and one
         * that stays grows its map again as it stores. */
        kva_map_free(a->maps[slot]);
        a->maps[slot] = NULL;
        a->routed_group[slot] = -1;
        memset(a->group_kind[slot], KV_SPEC_UNSET, sizeof(a->group_kind[slot]));
    }
    kva_count(&a->forgets, 1);
}

/*
 * Whether ev is of the group the worker is routed on; counts it by its
 * group's kind when not. Routed on: the first full-attention group a
 * worker stores in (or every event of a publisher without groups). Other
 * kinds keep only part of a prompt (a sliding window's tail, a state), so
 * their blocks never say a prefix is cheap there; a second full-attention
 * group holds the same blocks under the same hashes, and applying it too
 * would let its removals withdraw what the first still holds.
 */
static bool kva_routed_group(struct kv_apply *a, uint32_t slot, const struct kv_event *ev)
{
    enum kv_spec_kind kind = ev->spec_kind;
    if (ev->kind == KV_EVENT_BLOCK_STORED && ev->has_group && ev->group_idx < KVA_MAX_GROUPS &&
        kind != KV_SPEC_UNSET)
        a->group_kind[slot][ev->group_idx] = (uint8_t)kind;
    if (ev->kind == KV_EVENT_BLOCK_REMOVED && ev->has_group)
        kind = ev->group_idx < KVA_MAX_GROUPS ? a->group_kind[slot][ev->group_idx] : KV_SPEC_OTHER;
    bool full = kind == KV_SPEC_UNSET || kind == KV_SPEC_FULL_ATTENTION;
    if (full && ev->has_group) {
        if (a->routed_group[slot] < 0 && ev->kind == KV_EVENT_BLOCK_STORED)
            a->routed_group[slot] = ev->group_idx;
        full = a->routed_group[slot] < 0 || a->routed_group[slot] == (int64_t)ev->group_idx;
        if (!full && kind == KV_SPEC_UNSET)
            kind = KV_SPEC_OTHER; /* a removal of a group never stored in */
        else if (!full)
            kind = KV_SPEC_FULL_ATTENTION;
    }
    if (!full)
        kva_count(&a->group_skipped[kind], 1);
    return full;
}

static void kva_stored(struct kv_apply *a, uint32_t slot, const char *worker_id,
                       const struct kv_event *ev)
{
    if (!kva_routed_group(a, slot, ev))
        return;
    if (ev->medium != KV_MEDIUM_GPU) {
        kva_skip(a, KVA_SKIP_MEDIUM);
        return;
    }
    if (ev->block_size != a->block_size) {
        kva_skip(a, KVA_SKIP_BLOCK_SIZE);
        return;
    }
    if (ev->n_block_hashes == 0 || ev->token_ids == NULL ||
        ev->n_token_ids != ev->n_block_hashes * (size_t)ev->block_size ||
        (!ev->has_parent && ev->salt_unreadable)) {
        kva_skip(a, KVA_SKIP_MALFORMED);
        return;
    }
    struct kva_map *m = a->maps[slot];
    uint64_t prev;
    if (ev->has_parent) {
        const struct kva_entry *p = m != NULL ? kva_find(m, ev->parent_block_hash) : NULL;
        if (p == NULL) {
            kva_skip(a, KVA_SKIP_UNKNOWN_PARENT);
            return;
        }
        prev = p->key;
    } else if (ev->lora_name != NULL && ev->lora_name[0] != '\0') {
        prev = tkc_seed(ev->lora_name);
    } else {
        char model[KVA_MODEL_MAX];
        if (a->model_of == NULL ||
            a->model_of(a->model_arg, slot, worker_id, model, sizeof(model)) != 0) {
            kva_skip(a, KVA_SKIP_UNKNOWN_MODEL);
            return;
        }
        prev = tkc_seed(model);
    }
    /* vLLM mixes the request's cache_salt into the chain's first block, so
     * the router's key of every block of a salted chain is salted as the
     * data plane salts the request's (token_chain.h): a salted prompt
     * matches only blocks stored under the same salt, and no other
     * tenant's request ever matches them. */
    if (!ev->has_parent && ev->salt != NULL)
        prev = tkc_salt_seed(prev, tkc_salt_hash(ev->salt, ev->salt_len));
    if (m == NULL && (m = a->maps[slot] = kva_map_new()) == NULL) {
        kva_skip(a, KVA_SKIP_MALFORMED);
        return;
    }
    size_t bs = ev->block_size, added = 0;
    for (size_t i = 0; i < ev->n_block_hashes; i++) {
        uint64_t key = tkc_next(prev, ev->token_ids + i * bs, bs);
        if (kva_insert(a, m, slot, ev->block_hashes[i], key) != 0)
            break; /* out of memory: the rest cannot be withdrawn later, so not added */
        kva_count_share(a, slot, worker_id != NULL ? worker_id : "", kvh_add(a->ix, key, slot));
        prev = key;
        added++;
    }
    kva_count(&a->blocks_stored, added);
    kva_count(&a->applied[KV_EVENT_BLOCK_STORED], 1);
}

static void kva_removed(struct kv_apply *a, uint32_t slot, const struct kv_event *ev)
{
    if (!kva_routed_group(a, slot, ev))
        return;
    if (ev->medium != KV_MEDIUM_GPU) {
        kva_skip(a, KVA_SKIP_MEDIUM);
        return;
    }
    struct kva_map *m = a->maps[slot];
    size_t removed = 0;
    for (size_t i = 0; m != NULL && i < ev->n_block_hashes; i++) {
        struct kva_entry *e = kva_find(m, ev->block_hashes[i]);
        if (e == NULL)
            continue; /* never placed (skipped) or evicted from the map */
        kvh_remove(a->ix, e->key, slot);
        kva_delete(m, e);
        removed++;
    }
    kva_count(&a->blocks_removed, removed);
    kva_count(&a->applied[KV_EVENT_BLOCK_REMOVED], 1);
}

static void kva_on_batch(void *ctx, uint32_t slot, const char *worker_id,
                         const struct kv_event_batch *batch)
{
    struct kv_apply *a = ctx;
    if (slot >= a->max_slots || slot >= PIX_SLOT_LIMIT) {
        kva_count(&a->skipped[KVA_SKIP_MALFORMED], batch->n_events);
        return;
    }
    for (size_t i = 0; i < batch->n_events; i++) {
        const struct kv_event *ev = &batch->events[i];
        switch (ev->kind) {
        case KV_EVENT_BLOCK_STORED:
            kva_stored(a, slot, worker_id, ev);
            break;
        case KV_EVENT_BLOCK_REMOVED:
            kva_removed(a, slot, ev);
            break;
        case KV_EVENT_ALL_BLOCKS_CLEARED:
            kva_forget(a, slot);
            kva_count(&a->applied[KV_EVENT_ALL_BLOCKS_CLEARED], 1);
            break;
        default:
            kva_skip(a, KVA_SKIP_MALFORMED);
        }
    }
}

static void kva_on_forget(void *ctx, uint32_t slot, const char *worker_id)
{
    (void)worker_id;
    struct kv_apply *a = ctx;
    if (slot < a->max_slots)
        kva_forget(a, slot);
}

/* ---- lifecycle, stats ---- */

struct kv_apply *kva_create(struct kvh_index *ix, uint32_t block_size, uint32_t max_slots,
                            size_t map_blocks, kva_model_fn model_of, void *model_arg)
{
    if (ix == NULL || block_size == 0 || max_slots == 0 || map_blocks == 0)
        return NULL;
    struct kv_apply *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->maps = calloc(max_slots, sizeof(*a->maps));
    a->routed_group = malloc(max_slots * sizeof(*a->routed_group));
    a->group_kind = calloc(max_slots, sizeof(*a->group_kind));
    a->shares = calloc(1, sizeof(*a->shares) + max_slots * sizeof(a->shares->slot[0]));
    if (a->maps == NULL || a->routed_group == NULL || a->group_kind == NULL || a->shares == NULL) {
        free(a->maps);
        free(a->routed_group);
        free(a->group_kind);
        free(a->shares);
        free(a);
        return NULL;
    }
    for (uint32_t s = 0; s < max_slots; s++)
        a->routed_group[s] = -1;
    pthread_mutex_init(&a->shares->mu, NULL);
    a->ix = ix;
    a->block_size = block_size;
    a->max_slots = max_slots;
    a->bound = map_blocks;
    a->model_of = model_of;
    a->model_arg = model_arg;
    return a;
}

void kva_destroy(struct kv_apply *a)
{
    if (a == NULL)
        return;
    for (uint32_t s = 0; s < a->max_slots; s++)
        kva_map_free(a->maps[s]);
    free(a->maps);
    free(a->routed_group);
    free(a->group_kind);
    pthread_mutex_destroy(&a->shares->mu);
    free(a->shares);
    free(a);
}

struct kv_event_sink kva_sink(struct kv_apply *a)
{
    return (struct kv_event_sink){.ctx = a, .on_batch = kva_on_batch, .on_forget = kva_on_forget};
}

size_t kva_map_size(const struct kv_apply *a, uint32_t slot)
{
    return slot < a->max_slots && a->maps[slot] != NULL ? a->maps[slot]->n : 0;
}

static uint64_t kva_load(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void kva_stats(const struct kv_apply *a, struct kva_stats *out)
{
    for (int k = 0; k < 3; k++)
        out->applied[k] = kva_load(&a->applied[k]);
    for (int r = 0; r < KVA_SKIP_COUNT; r++)
        out->skipped[r] = kva_load(&a->skipped[r]);
    out->blocks_stored = kva_load(&a->blocks_stored);
    out->blocks_removed = kva_load(&a->blocks_removed);
    out->map_evictions = kva_load(&a->map_evictions);
    out->forgets = kva_load(&a->forgets);
    for (int k = 0; k < KV_SPEC_COUNT; k++)
        out->group_skipped[k] = kva_load(&a->group_skipped[k]);
}

void kva_metrics_write(const void *arg, struct prom_writer *w)
{
    const struct kv_apply *a = arg;
    static const char *const kinds[3] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};
    static const char *const reasons[KVA_SKIP_COUNT] = {"block_size", "unknown_parent", "medium",
                                                        "unknown_model", "malformed"};
    struct kva_stats st;
    kva_stats(a, &st);
    prom_family(w, "switchyard_kv_index_facts", PROM_GAUGE,
                "(block, worker) facts in the KV holder index.");
    prom_sample_u64(w, NULL, NULL, 0, kvh_count(a->ix));
    prom_family(w, "switchyard_kv_index_capacity", PROM_GAUGE,
                "Facts the KV holder index can hold (shm.kv_index_blocks, rounded up).");
    prom_sample_u64(w, NULL, NULL, 0, kvh_capacity(a->ix));
    prom_family(w, "switchyard_kv_events_applied_total", PROM_COUNTER,
                "KV-cache events applied to the holder index, by type.");
    for (int k = 0; k < 3; k++) {
        struct prom_label l = {"type", kinds[k]};
        prom_sample_u64(w, NULL, &l, 1, st.applied[k]);
    }
    prom_family(w, "switchyard_kv_events_skipped_total", PROM_COUNTER,
                "KV-cache events not applied, by reason.");
    for (int r = 0; r < KVA_SKIP_COUNT; r++) {
        struct prom_label l = {"reason", reasons[r]};
        prom_sample_u64(w, NULL, &l, 1, st.skipped[r]);
    }
    prom_family(w, "switchyard_kv_events_group_skipped_total", PROM_COUNTER,
                "KV-cache events of a group not routed on (hybrid models), by the group's kind: "
                "sliding-window and state groups keep only part of a prompt, a second "
                "full-attention group repeats the first.");
    static const char *const spec_names[KV_SPEC_COUNT] = {
        [KV_SPEC_FULL_ATTENTION] = "full_attention",
        [KV_SPEC_SLIDING_WINDOW] = "sliding_window",
        [KV_SPEC_CHUNKED_LOCAL] = "chunked_local_attention",
        [KV_SPEC_MAMBA] = "mamba",
        [KV_SPEC_OTHER] = "other",
    };
    for (int k = KV_SPEC_UNSET + 1; k < KV_SPEC_COUNT; k++) {
        struct prom_label l = {"kind", spec_names[k]};
        prom_sample_u64(w, NULL, &l, 1, st.group_skipped[k]);
    }
    prom_family(w, "switchyard_kv_blocks_total", PROM_COUNTER,
                "Blocks placed in (stored) and withdrawn from (removed) the holder index.");
    struct prom_label stored = {"op", "stored"}, removed = {"op", "removed"};
    prom_sample_u64(w, NULL, &stored, 1, st.blocks_stored);
    prom_sample_u64(w, NULL, &removed, 1, st.blocks_removed);
    prom_family(w, "switchyard_kv_map_evictions_total", PROM_COUNTER,
                "Blocks dropped (with their facts) because a worker's hash map was full.");
    prom_sample_u64(w, NULL, NULL, 0, st.map_evictions);
    prom_family(w, "switchyard_kv_worker_forgets_total", PROM_COUNTER,
                "Times a worker's facts were all dropped (AllBlocksCleared, gap, restart, leave).");
    prom_sample_u64(w, NULL, NULL, 0, st.forgets);
    prom_family(w, "switchyard_kv_share_limited_total", PROM_COUNTER,
                "Blocks of a worker over its share of the KV holder index that met a full "
                "bucket: recorded in place of its own oldest fact (self_evicted) or not recorded "
                "(refused); another worker's facts are never taken.");
    pthread_mutex_lock(&a->shares->mu);
    for (uint32_t s = 0; s < a->max_slots; s++) {
        const struct kva_share_stats *sh = &a->shares->slot[s];
        if (sh->worker[0] == '\0')
            continue;
        struct prom_label se[] = {{"worker", sh->worker}, {"action", "self_evicted"}};
        struct prom_label re[] = {{"worker", sh->worker}, {"action", "refused"}};
        prom_sample_u64(w, NULL, se, 2, kva_load(&sh->self_evicted));
        prom_sample_u64(w, NULL, re, 2, kva_load(&sh->refused));
    }
    pthread_mutex_unlock(&a->shares->mu);
}
