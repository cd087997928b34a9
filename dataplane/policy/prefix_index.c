/*
 * Fixed-size, pointer-free prefix index (see prefix_index.h).
 *
 * Entry meta layout (64 bits): bits 0..47 hold three 16-bit refs, most
 * recent first, each slot + 1 (0 = empty); bits 48..63 hold the entry's
 * stamp, taken from a process-wide 16-bit clock that advances once per
 * recorded request. Age comparisons use 16-bit wrap-around arithmetic; an
 * entry untouched for 65536 records looks young again, which only makes
 * eviction a little less exact.
 */
#include "dataplane/policy/prefix_index.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Inlined: a library call per block would cost as much as the hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

struct pix_entry {
    _Atomic uint64_t key; /* block hash | 1; 0 = empty */
    _Atomic uint64_t meta;
};

struct pix_bucket {
    struct pix_entry way[PIX_WAYS];
} __attribute__((aligned(64)));

struct pix_index {
    struct pix_bucket *buckets;
    size_t n_buckets; /* power of two */
    _Atomic uint32_t clock;
};

_Static_assert(sizeof(struct pix_bucket) == 64, "a bucket is one cache line");

struct pix_index *pix_create(size_t capacity_blocks)
{
    size_t want = (capacity_blocks + PIX_WAYS - 1) / PIX_WAYS;
    size_t n = 1;
    while (n < want)
        n <<= 1;
    struct pix_index *ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        return NULL;
    /* Anonymous pages read as zero and become resident only when a bucket
     * is first written: an index that routing barely uses costs no memory
     * (a memset would make all 16 MiB resident at start). */
    void *mem = mmap(NULL, n * sizeof(struct pix_bucket), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        free(ix);
        return NULL;
    }
    ix->buckets = mem;
    ix->n_buckets = n;
    return ix;
}

void pix_destroy(struct pix_index *ix)
{
    if (ix == NULL)
        return;
    munmap(ix->buckets, ix->n_buckets * sizeof(struct pix_bucket));
    free(ix);
}

size_t pix_memory_bytes(const struct pix_index *ix)
{
    return sizeof(*ix) + ix->n_buckets * sizeof(struct pix_bucket);
}

size_t pix_capacity(const struct pix_index *ix)
{
    return ix->n_buckets * PIX_WAYS;
}

uint64_t pix_model_seed(const char *model)
{
    return XXH3_64bits(model, strlen(model));
}

size_t pix_hash_blocks(uint64_t seed, const char *text, size_t len, uint64_t *out, size_t cap)
{
    size_t n = len / PIX_BLOCK_BYTES;
    if (n > cap)
        n = cap;
    uint64_t h = seed;
    for (size_t i = 0; i < n; i++) {
        /* The previous block's hash seeds this one's: the chain. */
        h = XXH3_64bits_withSeed(text + i * PIX_BLOCK_BYTES, PIX_BLOCK_BYTES, h);
        out[i] = h;
    }
    return n;
}

static uint64_t pix_key(uint64_t h)
{
    return h | 1u;
}

static struct pix_bucket *pix_bucket_of(struct pix_index *ix, uint64_t h)
{
    /* The low bit is forced in keys; take bucket bits from the top. */
    return &ix->buckets[(h >> 17) & (ix->n_buckets - 1)];
}

static uint16_t pix_ref(uint64_t meta, unsigned i)
{
    return (uint16_t)(meta >> (16 * i));
}

static uint16_t pix_stamp(uint64_t meta)
{
    return (uint16_t)(meta >> 48);
}

/* Reads the meta of h's entry; false when absent. */
static bool pix_lookup(struct pix_index *ix, uint64_t h, uint64_t *meta)
{
    struct pix_bucket *b = pix_bucket_of(ix, h);
    uint64_t key = pix_key(h);
    for (unsigned w = 0; w < PIX_WAYS; w++) {
        if (atomic_load_explicit(&b->way[w].key, memory_order_relaxed) != key)
            continue;
        *meta = atomic_load_explicit(&b->way[w].meta, memory_order_relaxed);
        /* A concurrent eviction may have replaced the entry under us. */
        return atomic_load_explicit(&b->way[w].key, memory_order_relaxed) == key;
    }
    return false;
}

static int pix_meta_position(uint64_t meta, uint32_t slot)
{
    for (unsigned r = 0; r < PIX_REFS; r++)
        if (pix_ref(meta, r) == slot + 1)
            return (int)r;
    return -1;
}

bool pix_has(struct pix_index *ix, uint64_t h, uint32_t slot)
{
    uint64_t meta;
    return pix_lookup(ix, h, &meta) && pix_meta_position(meta, slot) >= 0;
}

void pix_slots_add(struct pix_slot_set *set, uint32_t slot)
{
    if (slot < PIX_SLOT_LIMIT)
        set->bits[slot / 64] |= 1ull << (slot % 64);
}

bool pix_slots_has(const struct pix_slot_set *set, uint32_t slot)
{
    return slot < PIX_SLOT_LIMIT && (set->bits[slot / 64] >> (slot % 64)) & 1u;
}

void pix_slots_clear(struct pix_slot_set *set, const uint32_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (slots[i] < PIX_SLOT_LIMIT)
            set->bits[slots[i] / 64] = 0;
}

/* The most recent candidate ref in meta, as slot + 1; 0 if none. */
static uint32_t pix_best_candidate(uint64_t meta, const struct pix_slot_set *candidates)
{
    for (unsigned r = 0; r < PIX_REFS; r++) {
        uint16_t ref = pix_ref(meta, r);
        if (ref != 0 && pix_slots_has(candidates, (uint32_t)ref - 1))
            return ref;
    }
    return 0;
}

static void pix_prefetch(struct pix_index *ix, uint64_t h)
{
    __builtin_prefetch(pix_bucket_of(ix, h), 0, 1);
}

size_t pix_longest_match(struct pix_index *ix, const uint64_t *hashes, size_t n,
                         const struct pix_slot_set *candidates, uint32_t holders[PIX_REFS],
                         size_t *n_holders)
{
    /* Find the last position whose block some candidate holds. Chained
     * hashes make "held at i" imply "held at every j < i" unless something
     * was evicted, so presence is close enough to monotone to bisect. */
    size_t lo = 0, hi = n;   /* answer m in [lo, hi] */
    uint64_t found_meta = 0; /* the entry of block lo - 1 */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2; /* try a match of length mid */
        /* Both possible next probes go to memory while this one is judged. */
        size_t up = mid + (hi - mid + 1) / 2, down = lo + (mid - 1 - lo + 1) / 2;
        if (up > mid && up <= hi)
            pix_prefetch(ix, hashes[up - 1]);
        if (down > lo && down < mid)
            pix_prefetch(ix, hashes[down - 1]);
        uint64_t meta;
        if (pix_lookup(ix, hashes[mid - 1], &meta) && pix_best_candidate(meta, candidates) != 0) {
            lo = mid;
            found_meta = meta;
        } else {
            hi = mid - 1;
        }
    }
    *n_holders = 0;
    for (unsigned r = 0; lo > 0 && r < PIX_REFS; r++) {
        uint16_t ref = pix_ref(found_meta, r);
        if (ref != 0 && pix_slots_has(candidates, (uint32_t)ref - 1))
            holders[(*n_holders)++] = (uint32_t)ref - 1;
    }
    return lo;
}

static uint64_t pix_meta_with(uint64_t meta, uint32_t slot, uint16_t stamp)
{
    uint16_t refs[PIX_REFS];
    unsigned n = 0;
    refs[n++] = (uint16_t)(slot + 1);
    for (unsigned r = 0; r < PIX_REFS && n < PIX_REFS; r++) {
        uint16_t ref = pix_ref(meta, r);
        if (ref != 0 && ref != slot + 1)
            refs[n++] = ref;
    }
    uint64_t out = (uint64_t)stamp << 48;
    for (unsigned r = 0; r < n; r++)
        out |= (uint64_t)refs[r] << (16 * r);
    return out;
}

static void pix_record_one(struct pix_index *ix, uint64_t h, uint32_t slot, uint16_t stamp)
{
    struct pix_bucket *b = pix_bucket_of(ix, h);
    uint64_t key = pix_key(h);
    unsigned victim = 0;
    uint16_t oldest_age = 0;
    for (unsigned w = 0; w < PIX_WAYS; w++) {
        uint64_t k = atomic_load_explicit(&b->way[w].key, memory_order_relaxed);
        uint64_t meta = atomic_load_explicit(&b->way[w].meta, memory_order_relaxed);
        if (k == key) {
            atomic_store_explicit(&b->way[w].meta, pix_meta_with(meta, slot, stamp),
                                  memory_order_relaxed);
            return;
        }
        /* Empty ways are the oldest of all. */
        uint16_t age = k == 0 ? UINT16_MAX : (uint16_t)(stamp - pix_stamp(meta));
        if (age > oldest_age || w == 0) {
            oldest_age = age;
            victim = w;
        }
    }
    atomic_store_explicit(&b->way[victim].key, 0, memory_order_relaxed);
    atomic_store_explicit(&b->way[victim].meta, pix_meta_with(0, slot, stamp),
                          memory_order_relaxed);
    atomic_store_explicit(&b->way[victim].key, key, memory_order_release);
}

void pix_record(struct pix_index *ix, const uint64_t *hashes, size_t from, size_t n, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return;
    uint16_t stamp = (uint16_t)atomic_fetch_add_explicit(&ix->clock, 1, memory_order_relaxed);
    /* Buckets are random cache lines of a large table: keep a few misses in
     * flight instead of taking them one after another. */
    enum { AHEAD = 8 };
    for (size_t i = from; i < n && i < from + AHEAD; i++)
        __builtin_prefetch(pix_bucket_of(ix, hashes[i]), 1, 1);
    for (size_t i = from; i < n; i++) {
        if (i + AHEAD < n)
            __builtin_prefetch(pix_bucket_of(ix, hashes[i + AHEAD]), 1, 1);
        pix_record_one(ix, hashes[i], slot, stamp);
    }
}
