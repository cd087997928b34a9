/*
 * The exact holder index (see kv_holders.h): fixed-size, pointer-free, in a
 * shared segment or in private memory; the bytes are the same either way.
 *
 * Layout: struct kvh_header (KVH_HEADER_BYTES); then the slot table, one
 * struct kvh_slot {epoch, facts} per registry slot below KVH_SLOTS; then
 * n_buckets buckets of 256 bytes, each a sequence counter and KVH_WAYS
 * facts {key, meta}. A fact says "slot holds block key": meta packs slot + 1
 * (16 bits), the slot's epoch when the fact was written (32 bits) and an age
 * stamp (16 bits, the header's clock, +1 per kvh_add). Every fact of a key
 * lives in the key's bucket, so one bucket read answers "who holds this
 * block"; a bucket holds at most KVH_WAYS holders of one block, and when
 * full the oldest fact in it goes.
 *
 * Why readers never see a torn or wrong fact. There is one writer (the
 * control plane's event thread); readers are any thread of any process.
 *  - Each bucket is a seqlock. The writer makes the counter odd (relaxed
 *    store), issues a release fence, rewrites facts with relaxed atomic
 *    stores, then stores the counter + 1 with release. A reader loads the
 *    counter with acquire (odd: a write is under way, try again), copies the
 *    facts with relaxed loads, issues an acquire fence and loads the counter
 *    again: equal means no store of that write was seen half (the fences pair
 *    with the writer's, so a copied value from a later write implies the
 *    second load sees that write's odd counter). Every access is atomic, so
 *    there is no data race in the C11 sense. A reader gives up after
 *    KVH_READ_TRIES attempts and takes the bucket as empty: "not known to be
 *    held", the safe answer; that also covers a writer that died mid-write
 *    (its bucket stays odd until the next writer touches it: a writer that
 *    finds an odd counter keeps it odd and ends the write even, so it heals).
 *  - Forgetting a slot is one store: the slot's epoch + 1. A fact counts
 *    only while its epoch equals its slot's current one, which readers check
 *    after copying the bucket; stale facts are free ways for the writer and
 *    are reclaimed as it passes. A reader racing a forget sees the state
 *    before or after it. Epochs are 32 bits: a stale fact could look valid
 *    again only after 2^32 forgets of its slot while it sits untouched.
 *  - The bound evicts a fact of a full bucket (whose: the fair-share rule
 *    of kv_holders.h, which needs only the writer's per-slot counts and
 *    its count of slots holding facts): that loses a true fact ("not known
 *    to be held"), never invents one. Removal and forgetting are explicit,
 *    so a fact that remains is one the worker reported and has not
 *    withdrawn.
 *  - Per-slot fact counts and the total are written by the writer alone
 *    (relaxed), for metrics; readers may see them a write behind.
 *
 * A kept segment (kvh_open_owner finding one of the same size) has every
 * slot forgotten: the previous writer's map from the workers' own hashes to
 * these keys died with it, so nothing could ever remove its facts. A
 * segment being replaced is emptied the same way before it is unlinked, so
 * a data plane still mapping it sees nothing rather than facts frozen in
 * time.
 */
#include "shm/kv_holders.h"

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

#define KVH_HEADER_BYTES 128u
#define KVH_WAYS         15u
#define KVH_SLOTS        65536u /* > PIX_SLOT_LIMIT: every recordable slot has a row */
#define KVH_READ_TRIES   64

struct kvh_fact {
    _Atomic uint64_t key; /* block key | 1; 0 = empty */
    _Atomic uint64_t meta;
};

struct kvh_bucket {
    _Atomic uint64_t seq; /* odd while the writer changes the bucket */
    uint64_t reserved;
    struct kvh_fact way[KVH_WAYS];
} __attribute__((aligned(64)));

struct kvh_slot {
    _Atomic uint32_t epoch; /* facts of another epoch are forgotten */
    _Atomic uint32_t facts; /* valid facts of this slot (writer's count) */
};

/* The segment's first bytes. Written once by its creator before the magic;
 * afterwards only the writer's clock and count change. */
struct kvh_header {
    _Atomic uint64_t magic; /* KVH_MAGIC once complete (release) */
    uint32_t layout_version;
    uint32_t header_size;
    uint32_t bucket_size;
    uint32_t ways;
    uint32_t slots;
    uint32_t reserved0;
    uint64_t n_buckets; /* power of two */
    uint64_t total_size;
    uint64_t created_unix_ms;
    _Atomic uint64_t count; /* valid facts in all */
    _Atomic uint32_t clock; /* +1 per kvh_add */
    uint8_t reserved[KVH_HEADER_BYTES - 68];
};

/* "SYKVHLD1" */
#define KVH_MAGIC          UINT64_C(0x31444c48564b5953)
#define KVH_LAYOUT_VERSION 1u
#define KVH_MIN_FACTS      (UINT64_C(1) << 12)
#define KVH_MAX_FACTS      (UINT64_C(1) << 28)

_Static_assert(sizeof(struct kvh_bucket) == 256, "a bucket is four cache lines");
_Static_assert(sizeof(struct kvh_header) == KVH_HEADER_BYTES, "header size is part of the layout");
_Static_assert(KVH_SLOTS > PIX_SLOT_LIMIT, "every recordable slot needs a row");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the segment needs lock-free atomics");

/* A process's view of an index. Owned by its creator; the mapping lives
 * until kvh_destroy. */
struct kvh_index {
    struct kvh_header *hdr;
    struct kvh_slot *slots;
    struct kvh_bucket *buckets;
    size_t n_buckets; /* power of two, copied from the validated header */
    size_t size;      /* bytes mapped */
    bool shared;
    /* The writer's: slots holding at least one valid fact, the divisor of
     * every slot's share. Starts at 0 with every view, which is right for
     * the writer's: it starts on an empty (or emptied) index. */
    uint32_t active_slots;
};

static size_t kvh_buckets_for(size_t capacity)
{
    if (capacity < KVH_MIN_FACTS)
        capacity = KVH_MIN_FACTS;
    if (capacity > KVH_MAX_FACTS)
        capacity = KVH_MAX_FACTS;
    size_t want = (capacity + KVH_WAYS - 1) / KVH_WAYS;
    size_t n = 1;
    while (n < want)
        n <<= 1;
    return n;
}

static size_t kvh_slots_bytes(void)
{
    return KVH_SLOTS * sizeof(struct kvh_slot);
}

static size_t kvh_size_for(size_t n_buckets)
{
    return KVH_HEADER_BYTES + kvh_slots_bytes() + n_buckets * sizeof(struct kvh_bucket);
}

static void kvh_header_init(struct kvh_header *h, size_t n_buckets)
{
    h->layout_version = KVH_LAYOUT_VERSION;
    h->header_size = KVH_HEADER_BYTES;
    h->bucket_size = sizeof(struct kvh_bucket);
    h->ways = KVH_WAYS;
    h->slots = KVH_SLOTS;
    h->n_buckets = n_buckets;
    h->total_size = kvh_size_for(n_buckets);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->created_unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    atomic_store_explicit(&h->magic, KVH_MAGIC, memory_order_release);
}

static void kvh_bind(struct kvh_index *ix, void *base, size_t size, bool shared)
{
    ix->hdr = base;
    ix->slots = (struct kvh_slot *)((char *)base + KVH_HEADER_BYTES);
    ix->buckets = (struct kvh_bucket *)((char *)base + KVH_HEADER_BYTES + kvh_slots_bytes());
    ix->n_buckets = (size_t)ix->hdr->n_buckets;
    ix->size = size;
    ix->shared = shared;
}

static struct kvh_index *kvh_view(void *base, size_t size, bool shared)
{
    struct kvh_index *ix = calloc(1, sizeof(*ix));
    if (ix != NULL)
        kvh_bind(ix, base, size, shared);
    return ix;
}

struct kvh_index *kvh_create(size_t capacity_blocks)
{
    size_t n = kvh_buckets_for(capacity_blocks);
    size_t size = kvh_size_for(n);
    /* Anonymous pages read as zero and become resident when first written. */
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    kvh_header_init(mem, n);
    struct kvh_index *ix = kvh_view(mem, size, false);
    if (ix == NULL)
        munmap(mem, size);
    return ix;
}

void kvh_destroy(struct kvh_index *ix)
{
    if (ix == NULL)
        return;
    munmap(ix->hdr, ix->size);
    free(ix);
}

int kvh_segment_name(const char *shm_name, char *out, size_t len)
{
    return shm_object_suffixed_name(shm_name, KVH_NAME_SUFFIX, out, len);
}

int kvh_validate(const void *hdr_bytes, uint64_t file_size, char *err, size_t err_len)
{
    const struct kvh_header *h = hdr_bytes;
    uint64_t magic = atomic_load_explicit(&((struct kvh_header *)h)->magic, memory_order_acquire);
    if (magic != KVH_MAGIC) {
        snprintf(err, err_len, "KV holder index segment is not published yet (magic %#llx)",
                 (unsigned long long)magic);
        return -EAGAIN;
    }
    if (h->layout_version != KVH_LAYOUT_VERSION || h->header_size != KVH_HEADER_BYTES ||
        h->bucket_size != sizeof(struct kvh_bucket) || h->ways != KVH_WAYS ||
        h->slots != KVH_SLOTS) {
        snprintf(err, err_len,
                 "KV holder index segment has layout version %u (header %u, bucket %u, ways %u, "
                 "slots %u); this binary uses version %u",
                 h->layout_version, h->header_size, h->bucket_size, h->ways, h->slots,
                 KVH_LAYOUT_VERSION);
        return -EPROTO;
    }
    uint64_t n = h->n_buckets;
    if (n == 0 || (n & (n - 1)) != 0 || n < kvh_buckets_for(KVH_MIN_FACTS) ||
        n > kvh_buckets_for(KVH_MAX_FACTS)) {
        snprintf(err, err_len, "KV holder index segment has an invalid bucket count %llu",
                 (unsigned long long)n);
        return -EPROTO;
    }
    uint64_t expect = kvh_size_for((size_t)n);
    if (h->total_size != expect || file_size != expect) {
        snprintf(err, err_len,
                 "KV holder index segment size mismatch: header says %llu bytes, object has "
                 "%llu, %llu buckets imply %llu",
                 (unsigned long long)h->total_size, (unsigned long long)file_size,
                 (unsigned long long)n, (unsigned long long)expect);
        return -EPROTO;
    }
    return 0;
}

int kvh_attach(const char *name, struct kvh_index **out, char *err, size_t err_len)
{
    void *base;
    size_t size;
    int rc = shm_object_attach_checked(name, "KV holder index segment", KVH_HEADER_BYTES,
                                       kvh_validate, &base, &size, err, err_len);
    if (rc != 0)
        return rc;
    *out = kvh_view(base, size, true);
    if (*out == NULL) {
        munmap(base, size);
        return -ENOMEM;
    }
    return 0;
}

static void kvh_init_new(void *base, size_t size, void *arg)
{
    (void)size;
    kvh_header_init(base, *(const size_t *)arg);
}

/* An existing index, kept or about to be replaced: either way its facts
 * are ones nobody can withdraw any more (their publishers' subscriptions
 * died with the last control plane), and data planes may still read it. */
static void kvh_adopt_old(void *base, size_t size, void *arg)
{
    (void)arg;
    struct kvh_index old;
    kvh_bind(&old, base, size, true);
    kvh_forget_all(&old);
}

int kvh_open_owner(const char *name, size_t capacity_blocks, struct kvh_index **out, bool *replaced,
                   char *err, size_t err_len)
{
    size_t n_buckets = kvh_buckets_for(capacity_blocks);
    const struct shm_rebuildable r = {
        .what = "KV holder index segment",
        .size = kvh_size_for(n_buckets),
        .header_bytes = KVH_HEADER_BYTES,
        .validate = kvh_validate,
        .init = kvh_init_new,
        .adopt = kvh_adopt_old,
        .arg = &n_buckets,
    };
    void *base;
    size_t size;
    enum shm_rebuildable_outcome how;
    *replaced = false;
    int rc = shm_object_open_rebuildable(name, &r, &base, &size, &how, err, err_len);
    if (rc != 0)
        return rc;
    *out = kvh_view(base, size, true);
    if (*out == NULL) {
        munmap(base, size);
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    *replaced = how == SHM_REBUILDABLE_REPLACED;
    return 0;
}

bool kvh_is_shared(const struct kvh_index *ix)
{
    return ix->shared;
}

size_t kvh_memory_bytes(const struct kvh_index *ix)
{
    return ix->size;
}

size_t kvh_capacity(const struct kvh_index *ix)
{
    return ix->n_buckets * KVH_WAYS;
}

size_t kvh_count(const struct kvh_index *ix)
{
    return (size_t)atomic_load_explicit(&ix->hdr->count, memory_order_relaxed);
}

size_t kvh_slot_count(const struct kvh_index *ix, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return 0;
    return atomic_load_explicit(&ix->slots[slot].facts, memory_order_relaxed);
}

/* ---- facts ---- */

static uint64_t kvh_key(uint64_t h)
{
    return h | 1u;
}

static uint32_t kvh_meta_ref(uint64_t meta)
{
    return (uint32_t)(meta & 0xffffu);
}

static uint32_t kvh_meta_epoch(uint64_t meta)
{
    return (uint32_t)(meta >> 16);
}

static uint16_t kvh_meta_stamp(uint64_t meta)
{
    return (uint16_t)(meta >> 48);
}

static uint64_t kvh_meta(uint32_t slot, uint32_t epoch, uint16_t stamp)
{
    return (uint64_t)(slot + 1) | (uint64_t)epoch << 16 | (uint64_t)stamp << 48;
}

static struct kvh_bucket *kvh_bucket_of(const struct kvh_index *ix, uint64_t h)
{
    /* The low bit is forced in keys; take bucket bits from the top half. */
    return &ix->buckets[(h >> 23) & (ix->n_buckets - 1)];
}

static uint32_t kvh_epoch(const struct kvh_index *ix, uint32_t slot)
{
    return atomic_load_explicit(&ix->slots[slot].epoch, memory_order_relaxed);
}

/* The slot a fact names, if it is still valid; -1 otherwise. */
static int64_t kvh_valid_slot(const struct kvh_index *ix, uint64_t meta)
{
    uint32_t ref = kvh_meta_ref(meta);
    if (ref == 0 || ref > PIX_SLOT_LIMIT)
        return -1;
    return kvh_meta_epoch(meta) == kvh_epoch(ix, ref - 1) ? (int64_t)(ref - 1) : -1;
}

/* A consistent copy of a bucket's metas whose key is `key` (at most
 * KVH_WAYS); the number copied, 0 when the bucket could not be read. */
static size_t kvh_read(const struct kvh_index *ix, uint64_t h, uint64_t metas[KVH_WAYS])
{
    struct kvh_bucket *b = kvh_bucket_of(ix, h);
    uint64_t key = kvh_key(h);
    for (int tries = 0; tries < KVH_READ_TRIES; tries++) {
        uint64_t s1 = atomic_load_explicit(&b->seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        size_t n = 0;
        for (unsigned w = 0; w < KVH_WAYS; w++) {
            uint64_t k = atomic_load_explicit(&b->way[w].key, memory_order_relaxed);
            uint64_t m = atomic_load_explicit(&b->way[w].meta, memory_order_relaxed);
            if (k == key)
                metas[n++] = m;
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&b->seq, memory_order_relaxed) == s1)
            return n;
    }
    return 0; /* a writer that never finishes: nothing known */
}

bool kvh_has(const struct kvh_index *ix, uint64_t key, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return false;
    uint64_t metas[KVH_WAYS];
    size_t n = kvh_read(ix, key, metas);
    for (size_t i = 0; i < n; i++)
        if (kvh_valid_slot(ix, metas[i]) == (int64_t)slot)
            return true;
    return false;
}

/* Candidates holding block h into holders (up to max); returns how many. */
static size_t kvh_holders_of(const struct kvh_index *ix, uint64_t h,
                             const struct pix_slot_set *candidates, uint32_t *holders, size_t max)
{
    uint64_t metas[KVH_WAYS];
    size_t n = kvh_read(ix, h, metas), found = 0;
    for (size_t i = 0; i < n && found < max; i++) {
        int64_t s = kvh_valid_slot(ix, metas[i]);
        if (s >= 0 && pix_slots_has(candidates, (uint32_t)s))
            holders[found++] = (uint32_t)s;
    }
    return found;
}

size_t kvh_longest_match(const struct kvh_index *ix, const uint64_t *chain, size_t n,
                         const struct pix_slot_set *candidates, uint32_t *holders,
                         size_t max_holders, size_t *n_holders)
{
    /* Bisection over positions on "some candidate holds block m-1". A
     * block's key covers its whole prefix, and vLLM frees a request's
     * blocks tail first, so a worker holding block i almost always holds
     * every block before it: holding is close enough to monotone. */
    uint32_t probe[KVH_WAYS];
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        size_t up = mid + (hi - mid + 1) / 2, down = lo + (mid - lo) / 2;
        if (up > mid && up <= hi)
            __builtin_prefetch(kvh_bucket_of(ix, chain[up - 1]), 0, 1);
        if (down > lo && down < mid)
            __builtin_prefetch(kvh_bucket_of(ix, chain[down - 1]), 0, 1);
        if (kvh_holders_of(ix, chain[mid - 1], candidates, probe, 1) > 0)
            lo = mid;
        else
            hi = mid - 1;
    }
    *n_holders = lo > 0 ? kvh_holders_of(ix, chain[lo - 1], candidates, holders, max_holders) : 0;
    /* Removed between the bisection and this read: report no match rather
     * than a length nobody holds. */
    if (lo > 0 && *n_holders == 0 && max_holders > 0)
        lo = 0;
    return lo;
}

/* ---- writer ---- */

static uint64_t kvh_write_begin(struct kvh_bucket *b)
{
    uint64_t s = atomic_load_explicit(&b->seq, memory_order_relaxed);
    /* Odd already: a writer died here; stay odd until this write ends. */
    s |= 1u;
    atomic_store_explicit(&b->seq, s, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    return s;
}

static void kvh_write_end(struct kvh_bucket *b, uint64_t s)
{
    atomic_store_explicit(&b->seq, s + 1, memory_order_release);
}

static void kvh_count_add(struct kvh_index *ix, uint32_t slot, int delta)
{
    uint32_t c = atomic_load_explicit(&ix->slots[slot].facts, memory_order_relaxed);
    if (c == 0 && delta > 0)
        ix->active_slots++;
    else if (c > 0 && (int64_t)c + delta == 0 && ix->active_slots > 0)
        ix->active_slots--;
    atomic_store_explicit(&ix->slots[slot].facts, (uint32_t)((int64_t)c + delta),
                          memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&ix->hdr->count, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->count, (uint64_t)((int64_t)t + delta), memory_order_relaxed);
}

static void kvh_clear_way(struct kvh_fact *f)
{
    atomic_store_explicit(&f->key, 0, memory_order_relaxed);
    atomic_store_explicit(&f->meta, 0, memory_order_relaxed);
}

/* Whether a fact of a slot holding `facts` facts, `age` clock ticks old,
 * goes before one of v_facts and v_age: the biggest holder pays first, its
 * oldest fact first. */
static bool kvh_pays_first(uint32_t facts, uint16_t age, uint32_t v_facts, uint16_t v_age)
{
    return facts != v_facts ? facts > v_facts : age > v_age;
}

size_t kvh_share(const struct kvh_index *ix, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return 0;
    uint32_t n = ix->active_slots;
    if (atomic_load_explicit(&ix->slots[slot].facts, memory_order_relaxed) == 0)
        n++; /* a newcomer counts itself: its first fact makes it a holder */
    return kvh_capacity(ix) / n;
}

enum kvh_add_result kvh_add(struct kvh_index *ix, uint64_t key, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return KVH_ADD_REFUSED;
    uint16_t stamp = (uint16_t)atomic_load_explicit(&ix->hdr->clock, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->clock, (uint32_t)stamp + 1u, memory_order_relaxed);
    uint32_t epoch = kvh_epoch(ix, slot);
    bool over =
        atomic_load_explicit(&ix->slots[slot].facts, memory_order_relaxed) >= kvh_share(ix, slot);
    struct kvh_bucket *b = kvh_bucket_of(ix, key);
    uint64_t k = kvh_key(key);
    /* The writer reads its own bucket without the protocol: nobody else
     * writes it. The victim of a full bucket: for a slot over its share,
     * its own oldest fact there; else the oldest fact of the slot holding
     * the most facts in the whole index (the biggest holder pays first). */
    int free_way = -1, own = -1, victim = -1;
    uint16_t own_age = 0, victim_age = 0;
    uint32_t victim_facts = 0;
    for (unsigned w = 0; w < KVH_WAYS; w++) {
        uint64_t wk = atomic_load_explicit(&b->way[w].key, memory_order_relaxed);
        uint64_t wm = atomic_load_explicit(&b->way[w].meta, memory_order_relaxed);
        int64_t holder = wk == 0 ? -1 : kvh_valid_slot(ix, wm);
        if (holder < 0) {
            if (free_way < 0)
                free_way = (int)w;
            continue;
        }
        if (wk == k && holder == (int64_t)slot) {
            /* Stored again (a re-store after our removal was lost, or a
             * replayed batch): refresh its age only. */
            uint64_t s = kvh_write_begin(b);
            atomic_store_explicit(&b->way[w].meta, kvh_meta(slot, epoch, stamp),
                                  memory_order_relaxed);
            kvh_write_end(b, s);
            return KVH_ADD_REFRESHED;
        }
        uint16_t age = (uint16_t)(stamp - kvh_meta_stamp(wm));
        if (holder == (int64_t)slot && (own < 0 || age > own_age)) {
            own = (int)w;
            own_age = age;
        }
        uint32_t facts =
            atomic_load_explicit(&ix->slots[(uint32_t)holder].facts, memory_order_relaxed);
        if (victim < 0 || kvh_pays_first(facts, age, victim_facts, victim_age)) {
            victim = (int)w;
            victim_facts = facts;
            victim_age = age;
        }
    }
    enum kvh_add_result res = KVH_ADD_STORED;
    if (free_way < 0 && over) {
        /* Over its share: a free way costs nobody anything (and is won
         * back by the first slot under its share that needs it), but a
         * full bucket only ever gives up this slot's own facts. */
        if (own < 0)
            return KVH_ADD_REFUSED;
        victim = own;
        res = KVH_ADD_SELF_EVICTED;
    } else if (free_way < 0) {
        res = victim == own ? KVH_ADD_SELF_EVICTED : KVH_ADD_EVICTED;
    }
    unsigned w = free_way >= 0 ? (unsigned)free_way : (unsigned)victim;
    uint64_t s = kvh_write_begin(b);
    if (free_way < 0) {
        /* Full: a true fact is lost, no false one made. */
        int64_t gone =
            kvh_valid_slot(ix, atomic_load_explicit(&b->way[w].meta, memory_order_relaxed));
        if (gone >= 0)
            kvh_count_add(ix, (uint32_t)gone, -1);
    }
    atomic_store_explicit(&b->way[w].key, k, memory_order_relaxed);
    atomic_store_explicit(&b->way[w].meta, kvh_meta(slot, epoch, stamp), memory_order_relaxed);
    kvh_write_end(b, s);
    kvh_count_add(ix, slot, +1);
    return res;
}

void kvh_remove(struct kvh_index *ix, uint64_t key, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return;
    struct kvh_bucket *b = kvh_bucket_of(ix, key);
    uint64_t k = kvh_key(key);
    /* A forgotten fact of the same block and slot may sit in another way
     * (a re-store after a forget reuses any free way): the valid one is
     * the one to withdraw, so look at every way. */
    for (unsigned w = 0; w < KVH_WAYS; w++) {
        if (atomic_load_explicit(&b->way[w].key, memory_order_relaxed) != k)
            continue;
        uint64_t wm = atomic_load_explicit(&b->way[w].meta, memory_order_relaxed);
        if (kvh_meta_ref(wm) != slot + 1)
            continue;
        bool valid = kvh_valid_slot(ix, wm) == (int64_t)slot;
        uint64_t s = kvh_write_begin(b);
        kvh_clear_way(&b->way[w]);
        kvh_write_end(b, s);
        if (valid) {
            kvh_count_add(ix, slot, -1);
            return;
        }
    }
}

void kvh_forget_slot(struct kvh_index *ix, uint32_t slot)
{
    if (slot >= PIX_SLOT_LIMIT)
        return;
    /* Readers compare a fact's epoch with this one after copying it. */
    uint32_t e = kvh_epoch(ix, slot);
    atomic_store_explicit(&ix->slots[slot].epoch, e + 1u, memory_order_relaxed);
    uint32_t c = atomic_load_explicit(&ix->slots[slot].facts, memory_order_relaxed);
    atomic_store_explicit(&ix->slots[slot].facts, 0, memory_order_relaxed);
    if (c > 0 && ix->active_slots > 0)
        ix->active_slots--;
    uint64_t t = atomic_load_explicit(&ix->hdr->count, memory_order_relaxed);
    atomic_store_explicit(&ix->hdr->count, t >= c ? t - c : 0, memory_order_relaxed);
}

void kvh_forget_all(struct kvh_index *ix)
{
    for (uint32_t slot = 0; slot < PIX_SLOT_LIMIT; slot++) {
        uint32_t e = kvh_epoch(ix, slot);
        atomic_store_explicit(&ix->slots[slot].epoch, e + 1u, memory_order_relaxed);
        atomic_store_explicit(&ix->slots[slot].facts, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&ix->hdr->count, 0, memory_order_relaxed);
    ix->active_slots = 0;
}
