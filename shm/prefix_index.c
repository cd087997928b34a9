/*
 * Fixed-size, pointer-free prefix index (see prefix_index.h), in a shared
 * segment or in private memory; the bytes are the same either way.
 *
 * Segment layout: struct pix_header (PIX_HEADER_BYTES), then n_buckets
 * buckets of 64 bytes. Creation sizes the object, writes the geometry and
 * publishes the magic last with a release store, as the registry segment
 * does; attaching checks every number against fstat before touching a
 * bucket.
 *
 * Entry meta layout (64 bits): bits 0..47 hold three 16-bit refs, most
 * recent first, each slot + 1 (0 = empty); bits 48..63 hold the entry's
 * stamp, taken from the header's 16-bit clock that advances once per
 * recorded request (shared by every process using the segment). Age
 * comparisons use 16-bit wrap-around arithmetic; an entry untouched for
 * 65536 records looks young again, which only makes eviction a little less
 * exact.
 */
#include "shm/prefix_index.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm/object.h"

/* Inlined: a library call per block would cost as much as the hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define PIX_HEADER_BYTES 128u

struct pix_entry {
    _Atomic uint64_t key; /* block hash | 1; 0 = empty */
    _Atomic uint64_t meta;
};

struct pix_bucket {
    struct pix_entry way[PIX_WAYS];
} __attribute__((aligned(64)));

/* The segment's first bytes. Written once by its creator before the magic,
 * read-only afterwards except the clock. */
struct pix_header {
    _Atomic uint64_t magic; /* PIX_MAGIC once complete (release) */
    uint32_t layout_version;
    uint32_t header_size;
    uint32_t bucket_size;
    uint32_t ways;
    uint32_t block_bytes;
    uint32_t refs;
    uint64_t n_buckets; /* power of two */
    uint64_t total_size;
    uint64_t created_unix_ms;
    _Atomic uint32_t clock; /* +1 per recorded request */
    uint8_t reserved[PIX_HEADER_BYTES - 60];
};

_Static_assert(sizeof(struct pix_bucket) == 64, "a bucket is one cache line");
_Static_assert(sizeof(struct pix_header) == PIX_HEADER_BYTES, "header size is part of the layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the segment needs lock-free atomics");

/* A process's view of an index. Owned by its creator; the mapping lives
 * until pix_destroy. */
struct pix_index {
    struct pix_header *hdr;
    struct pix_bucket *buckets;
    size_t n_buckets; /* power of two, copied from the validated header */
    size_t size;      /* bytes mapped */
    bool shared;
};

static size_t pix_buckets_for(size_t capacity_blocks)
{
    if (capacity_blocks < PIX_MIN_BLOCKS)
        capacity_blocks = PIX_MIN_BLOCKS;
    if (capacity_blocks > PIX_MAX_CAPACITY_BLOCKS)
        capacity_blocks = PIX_MAX_CAPACITY_BLOCKS;
    size_t want = (capacity_blocks + PIX_WAYS - 1) / PIX_WAYS;
    size_t n = 1;
    while (n < want)
        n <<= 1;
    return n;
}

static size_t pix_size_for(size_t n_buckets)
{
    return PIX_HEADER_BYTES + n_buckets * sizeof(struct pix_bucket);
}

/* Writes the geometry into zeroed memory and publishes it. */
static void pix_header_init(struct pix_header *h, size_t n_buckets)
{
    h->layout_version = PIX_LAYOUT_VERSION;
    h->header_size = PIX_HEADER_BYTES;
    h->bucket_size = sizeof(struct pix_bucket);
    h->ways = PIX_WAYS;
    h->block_bytes = PIX_BLOCK_BYTES;
    h->refs = PIX_REFS;
    h->n_buckets = n_buckets;
    h->total_size = pix_size_for(n_buckets);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->created_unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    atomic_store_explicit(&h->magic, PIX_MAGIC, memory_order_release);
}

static struct pix_index *pix_view(void *base, size_t size, bool shared)
{
    struct pix_index *ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        return NULL;
    ix->hdr = base;
    ix->buckets = (struct pix_bucket *)((char *)base + PIX_HEADER_BYTES);
    ix->n_buckets = (size_t)ix->hdr->n_buckets;
    ix->size = size;
    ix->shared = shared;
    return ix;
}

struct pix_index *pix_create(size_t capacity_blocks)
{
    size_t n = pix_buckets_for(capacity_blocks);
    size_t size = pix_size_for(n);
    /* Anonymous pages read as zero and become resident only when a bucket
     * is first written: an index that routing barely uses costs no memory
     * (a memset would make all 16 MiB resident at start). */
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    pix_header_init(mem, n);
    struct pix_index *ix = pix_view(mem, size, false);
    if (ix == NULL)
        munmap(mem, size);
    return ix;
}

void pix_destroy(struct pix_index *ix)
{
    if (ix == NULL)
        return;
    munmap(ix->hdr, ix->size);
    free(ix);
}

int pix_segment_name(const char *shm_name, char *out, size_t len)
{
    return shm_object_suffixed_name(shm_name, PIX_NAME_SUFFIX, out, len);
}

int pix_validate(const void *hdr_bytes, uint64_t file_size, char *err, size_t err_len)
{
    const struct pix_header *h = hdr_bytes;
    uint64_t magic = atomic_load_explicit(&((struct pix_header *)h)->magic, memory_order_acquire);
    if (magic != PIX_MAGIC) {
        snprintf(err, err_len, "prefix index segment is not published yet (magic %#llx)",
                 (unsigned long long)magic);
        return -EAGAIN;
    }
    if (h->layout_version != PIX_LAYOUT_VERSION) {
        snprintf(err, err_len, "prefix index segment has layout version %u, this binary uses %u",
                 h->layout_version, PIX_LAYOUT_VERSION);
        return -EPROTO;
    }
    if (h->header_size != PIX_HEADER_BYTES || h->bucket_size != sizeof(struct pix_bucket) ||
        h->ways != PIX_WAYS || h->block_bytes != PIX_BLOCK_BYTES || h->refs != PIX_REFS) {
        snprintf(err, err_len,
                 "prefix index segment geometry (header %u, bucket %u, ways %u, block %u, refs "
                 "%u) differs from this binary's under the same layout version %u",
                 h->header_size, h->bucket_size, h->ways, h->block_bytes, h->refs,
                 PIX_LAYOUT_VERSION);
        return -EPROTO;
    }
    uint64_t n = h->n_buckets;
    if (n == 0 || (n & (n - 1)) != 0 || n < PIX_MIN_BLOCKS / PIX_WAYS ||
        n > PIX_MAX_CAPACITY_BLOCKS / PIX_WAYS) {
        snprintf(err, err_len, "prefix index segment has an invalid bucket count %llu",
                 (unsigned long long)n);
        return -EPROTO;
    }
    uint64_t expect = pix_size_for((size_t)n);
    if (h->total_size != expect || file_size != expect) {
        snprintf(err, err_len,
                 "prefix index segment size mismatch: header says %llu bytes, object has %llu, "
                 "%llu buckets imply %llu",
                 (unsigned long long)h->total_size, (unsigned long long)file_size,
                 (unsigned long long)n, (unsigned long long)expect);
        return -EPROTO;
    }
    return 0;
}

/* Maps an open object after the ownership, size and header checks. */
int pix_attach(const char *name, struct pix_index **out, char *err, size_t err_len)
{
    void *base;
    size_t size;
    int rc = shm_object_attach_checked(name, "prefix index segment", PIX_HEADER_BYTES, pix_validate,
                                       &base, &size, err, err_len);
    if (rc != 0)
        return rc;
    *out = pix_view(base, size, true);
    if (*out == NULL) {
        munmap(base, size);
        return -ENOMEM;
    }
    return 0;
}

static void pix_init_new(void *base, size_t size, void *arg)
{
    (void)size;
    /* ftruncate zero-filled it (and tmpfs allocates pages on first write). */
    pix_header_init(base, *(const size_t *)arg);
}

int pix_open_owner(const char *name, size_t capacity_blocks, struct pix_index **out,
                   enum pix_open_outcome *outcome, char *err, size_t err_len)
{
    size_t n_buckets = pix_buckets_for(capacity_blocks);
    const struct shm_rebuildable r = {
        .what = "prefix index segment",
        .size = pix_size_for(n_buckets),
        .header_bytes = PIX_HEADER_BYTES,
        .validate = pix_validate,
        .init = pix_init_new,
        .arg = &n_buckets,
    };
    void *base;
    size_t size;
    enum shm_rebuildable_outcome how;
    int rc = shm_object_open_rebuildable(name, &r, &base, &size, &how, err, err_len);
    if (rc != 0)
        return rc;
    *out = pix_view(base, size, true);
    if (*out == NULL) {
        munmap(base, size);
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    *outcome = how == SHM_REBUILDABLE_CREATED      ? PIX_OPEN_CREATED
               : how == SHM_REBUILDABLE_REATTACHED ? PIX_OPEN_REATTACHED
                                                   : PIX_OPEN_REPLACED;
    if (how == SHM_REBUILDABLE_REPLACED) {
        size_t at = strlen(err);
        snprintf(err + at, err_len - at, " (the remembered prefixes are lost)");
    }
    return 0;
}

bool pix_is_shared(const struct pix_index *ix)
{
    return ix->shared;
}

size_t pix_memory_bytes(const struct pix_index *ix)
{
    return ix->size;
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

/* Whether some candidate holds block hash h; its entry's meta in *meta if so. */
static bool pix_held(struct pix_index *ix, uint64_t h, const struct pix_slot_set *candidates,
                     uint64_t *meta)
{
    return pix_lookup(ix, h, meta) && pix_best_candidate(*meta, candidates) != 0;
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
    /* The first probe is the whole prompt (a repeated prompt, or one whose
     * every block was seen): one lookup instead of log2(n). A hit there is
     * the longest match there can be, whatever holes evictions left before
     * it (a block held means its worker was sent every block before it
     * too), so this can only lengthen what the bisection alone would find;
     * on a miss the bisection goes on from its usual first probe, which is
     * prefetched meanwhile. */
    for (bool whole = true; lo < hi; whole = false) {
        size_t mid = whole ? hi : lo + (hi - lo + 1) / 2; /* try a match of length mid */
        /* Both possible next probes go to memory while this one is judged. */
        size_t up = mid + (hi - mid + 1) / 2, down = lo + (mid - 1 - lo + 1) / 2;
        if (up > mid && up <= hi)
            pix_prefetch(ix, hashes[up - 1]);
        if (down > lo && down < mid)
            pix_prefetch(ix, hashes[down - 1]);
        uint64_t meta;
        if (pix_held(ix, hashes[mid - 1], candidates, &meta)) {
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
    uint16_t stamp = (uint16_t)atomic_fetch_add_explicit(&ix->hdr->clock, 1, memory_order_relaxed);
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
