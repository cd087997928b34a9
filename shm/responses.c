/*
 * The response table (see responses.h). Layout: a header of one cache
 * line, then the entries. Everything in it is an atomic; entry fields are
 * written with relaxed stores between the odd and even sequence stores
 * (release), and read between an acquire load and an acquire fence, as
 * the registry's slots are.
 */
#include "shm/responses.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "shm/object.h"

#define SHM_RESP_MAGIC   UINT64_C(0x3130505352595301) /* "\1SYRSP01" */
#define SHM_RESP_VERSION 2u                           /* 2: entries carry their tenant */
#define SHM_RESP_WORDS   (SHM_RESP_ID_MAX / 8u)
#define SHM_RESP_TRIES   4
#define SHM_RESP_WAIT_MS 2000u /* a creator being this slow to publish is dead */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
_Static_assert(SHM_RESP_ID_MAX % 8u == 0, "ids are stored as 64-bit words");

struct shm_resp_header {
    _Atomic uint64_t magic; /* published last; the creator's lock covers it */
    uint32_t layout_version;
    uint32_t header_size;
    uint32_t entry_size;
    uint32_t ways;
    uint64_t n_entries;
    uint64_t total_size;
    _Atomic uint64_t inserts;
    _Atomic uint64_t evictions;
    _Atomic uint64_t registry_id; /* the registry the slots and generations belong to */
};
_Static_assert(sizeof(struct shm_resp_header) == 64, "header is one cache line");

struct shm_resp_entry {
    _Atomic uint64_t seq;        /* odd while a writer holds it */
    _Atomic uint64_t key;        /* XXH3 of the id, never 0; 0 = empty */
    _Atomic uint64_t created_ms; /* monotonic */
    _Atomic uint64_t used_ms;    /* last put or hit, for LRU */
    _Atomic uint32_t slot;
    _Atomic uint32_t generation;
    _Atomic uint32_t id_len;
    _Atomic uint32_t reserved;
    _Atomic uint64_t tenant; /* the creating request's tenant (responses.h) */
    _Atomic uint64_t id[SHM_RESP_WORDS];
};
_Static_assert(sizeof(struct shm_resp_entry) == 216, "docs/shm-layout.md gives the entry's size");

int shm_resp_name(const char *shm_name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s.responses", shm_name);
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static size_t shm_resp_size_for(uint64_t n_entries)
{
    return sizeof(struct shm_resp_header) + (size_t)n_entries * sizeof(struct shm_resp_entry);
}

static void shm_resp_bind(struct shm_resp_table *t, void *base, size_t size)
{
    t->base = base;
    t->size = size;
    t->hdr = base;
    t->entries = (struct shm_resp_entry *)((char *)base + sizeof(struct shm_resp_header));
    t->n_entries = t->hdr->n_entries;
}

/* The creator's lock: held from creation until the header is published. */
#define SHM_RESP_LOCK_OFF 0u
#define SHM_RESP_LOCK_LEN 8u

static int shm_resp_create(struct shm_resp_table *t, const char *name, uint64_t n_entries,
                           uint64_t registry_id, char *err, size_t err_len)
{
    size_t size = shm_resp_size_for(n_entries);
    struct shm_object o;
    int rc = shm_object_create(name, "response table", size, SHM_RESP_LOCK_OFF, SHM_RESP_LOCK_LEN,
                               &o, err, err_len);
    if (rc != 0)
        return rc; /* -EEXIST without a message: the caller adopts it */
    void *base = o.base;
    struct shm_resp_header *h = base;
    h->layout_version = SHM_RESP_VERSION;
    h->header_size = sizeof(struct shm_resp_header);
    h->entry_size = sizeof(struct shm_resp_entry);
    h->ways = SHM_RESP_WAYS;
    h->n_entries = n_entries;
    h->total_size = size;
    /* Every entry of a new object is zero (empty): it belongs to this
     * registry as it is. Binding it later would read every entry, and
     * reading a page of a shared-memory object allocates it: the whole
     * table (13 MB at the default size) in memory and in this process's
     * RSS before a single id is stored. */
    atomic_store_explicit(&h->registry_id, registry_id, memory_order_relaxed);
    atomic_store_explicit(&h->magic, SHM_RESP_MAGIC, memory_order_release);
    shm_object_unlock(o.fd, SHM_RESP_LOCK_OFF, SHM_RESP_LOCK_LEN);
    t->fd = o.fd;
    shm_resp_bind(t, base, size);
    return 0;
}

static int shm_resp_validate(const struct shm_resp_header *h, uint64_t file_size, char *err,
                             size_t err_len)
{
    if (h->layout_version != SHM_RESP_VERSION || h->header_size != sizeof(*h) ||
        h->entry_size != sizeof(struct shm_resp_entry) || h->ways != SHM_RESP_WAYS) {
        snprintf(err, err_len,
                 "response table has layout version %u (header %u, entry %u bytes), this binary "
                 "uses version %u (%zu, %zu): stop every data plane using it and remove it",
                 h->layout_version, h->header_size, h->entry_size, SHM_RESP_VERSION, sizeof(*h),
                 sizeof(struct shm_resp_entry));
        return -EPROTO;
    }
    if (h->n_entries == 0 || h->n_entries % SHM_RESP_WAYS != 0 ||
        h->total_size != shm_resp_size_for(h->n_entries) || file_size != h->total_size) {
        snprintf(err, err_len,
                 "response table size mismatch: %llu entries, header %llu bytes, "
                 "object %llu bytes",
                 (unsigned long long)h->n_entries, (unsigned long long)h->total_size,
                 (unsigned long long)file_size);
        return -EPROTO;
    }
    return 0;
}

/* -EAGAIN: not published yet, and its creator is alive; -ESTALE: never
 * published and nobody is building it. */
static int shm_resp_adopt(struct shm_resp_table *t, const char *name, char *err, size_t err_len)
{
    struct shm_object o;
    int rc =
        shm_object_open(name, "response table", sizeof(struct shm_resp_header), &o, err, err_len);
    if (rc != 0 && rc != -ENODATA)
        return rc;
    if (rc == -ENODATA) {
        /* Not sized yet: being built, or a dead creator's. Peek at the lock
         * with a descriptor of our own. */
        int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        bool building = shm_object_locked_by_other(fd, SHM_RESP_LOCK_OFF, SHM_RESP_LOCK_LEN);
        close(fd);
        return building ? -EAGAIN : -ESTALE;
    }
    const struct shm_resp_header *h = o.base;
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_RESP_MAGIC) {
        snprintf(err, err_len, "response table %s is not published yet", name);
        rc = shm_object_locked_by_other(o.fd, SHM_RESP_LOCK_OFF, SHM_RESP_LOCK_LEN) ? -EAGAIN
                                                                                    : -ESTALE;
    } else {
        rc = shm_resp_validate(h, (uint64_t)o.size, err, err_len);
    }
    if (rc != 0) {
        shm_object_unmap(&o);
        return rc;
    }
    t->fd = o.fd;
    shm_resp_bind(t, o.base, o.size);
    return 0;
}

/* Empties every entry (each under its own sequence, as a writer). */
static uint64_t shm_resp_forget_all(struct shm_resp_table *t)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < t->n_entries; i++) {
        struct shm_resp_entry *e = &t->entries[i];
        if (atomic_load_explicit(&e->key, memory_order_relaxed) == 0)
            continue;
        uint64_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
        if ((s & 1u) || !atomic_compare_exchange_strong_explicit(
                            &e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed))
            continue; /* being written: by a holder of the new registry */
        atomic_store_explicit(&e->key, 0, memory_order_relaxed);
        atomic_store_explicit(&e->seq, s + 2, memory_order_release);
        n++;
    }
    return n;
}

/* Binds the table to registry_id, forgetting another registry's entries:
 * the one opener that moves the id empties the table. */
static uint64_t shm_resp_bind_registry(struct shm_resp_table *t, uint64_t registry_id)
{
    uint64_t cur = atomic_load_explicit(&t->hdr->registry_id, memory_order_acquire);
    if (cur == registry_id ||
        !atomic_compare_exchange_strong_explicit(&t->hdr->registry_id, &cur, registry_id,
                                                 memory_order_acq_rel, memory_order_acquire))
        return 0;
    return shm_resp_forget_all(t);
}

int shm_resp_open(struct shm_resp_table *t, const char *name, uint64_t n_entries,
                  uint64_t registry_id, bool *created, uint64_t *forgot, char *err, size_t err_len)
{
    memset(t, 0, sizeof(*t));
    t->fd = -1;
    *created = false;
    *forgot = 0;
    if (n_entries == 0) {
        snprintf(err, err_len, "a response table needs at least one entry");
        return -EINVAL;
    }
    n_entries = (n_entries + SHM_RESP_WAYS - 1) / SHM_RESP_WAYS * SHM_RESP_WAYS;
    struct timespec pause = {.tv_nsec = 10 * 1000000L};
    for (unsigned waited = 0; waited < SHM_RESP_WAIT_MS; waited += 10) {
        int rc = shm_resp_create(t, name, n_entries, registry_id, err, err_len);
        if (rc == 0) {
            *created = true;
            return 0;
        }
        if (rc != -EEXIST)
            return rc;
        rc = shm_resp_adopt(t, name, err, err_len);
        if (rc == 0)
            *forgot = shm_resp_bind_registry(t, registry_id);
        if (rc == 0 || (rc != -EAGAIN && rc != -ESTALE && rc != -ENOENT))
            return rc;
        if (rc == -ESTALE)
            shm_unlink(name); /* never published, nobody building: a dead creator's */
        nanosleep(&pause, NULL);
    }
    snprintf(err, err_len, "response table %s: its creator never published it", name);
    return -ETIMEDOUT;
}

void shm_resp_close(struct shm_resp_table *t)
{
    if (t == NULL)
        return;
    if (t->base != NULL)
        munmap(t->base, t->size);
    if (t->fd >= 0)
        close(t->fd);
    memset(t, 0, sizeof(*t));
    t->fd = -1;
}

static uint64_t shm_resp_key(const char *id, size_t len)
{
    uint64_t k = XXH3_64bits(id, len);
    return k != 0 ? k : 1;
}

/* The id as zero-padded words. */
static void shm_resp_words(const char *id, size_t len, uint64_t words[SHM_RESP_WORDS])
{
    memset(words, 0, SHM_RESP_WORDS * sizeof(uint64_t));
    memcpy(words, id, len);
}

/* A consistent copy of e's key, times, worker and id; false when torn
 * or being written throughout. */
struct shm_resp_copy {
    uint64_t key, created_ms, used_ms, tenant;
    uint32_t slot, generation, id_len;
    uint64_t id[SHM_RESP_WORDS];
};

static bool shm_resp_read(struct shm_resp_entry *e, struct shm_resp_copy *c, bool with_id)
{
    for (int i = 0; i < SHM_RESP_TRIES; i++) {
        uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
        if (s1 & 1u)
            continue;
        c->key = atomic_load_explicit(&e->key, memory_order_relaxed);
        c->created_ms = atomic_load_explicit(&e->created_ms, memory_order_relaxed);
        c->used_ms = atomic_load_explicit(&e->used_ms, memory_order_relaxed);
        c->slot = atomic_load_explicit(&e->slot, memory_order_relaxed);
        c->generation = atomic_load_explicit(&e->generation, memory_order_relaxed);
        c->id_len = atomic_load_explicit(&e->id_len, memory_order_relaxed);
        c->tenant = atomic_load_explicit(&e->tenant, memory_order_relaxed);
        if (with_id)
            for (unsigned w = 0; w < SHM_RESP_WORDS; w++)
                c->id[w] = atomic_load_explicit(&e->id[w], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s1)
            return true;
    }
    return false;
}

/* True when c holds exactly this id: the hash alone is not the id. */
static bool shm_resp_is(const struct shm_resp_copy *c, uint64_t key, size_t len,
                        const uint64_t words[SHM_RESP_WORDS])
{
    return c->key == key && c->id_len == len &&
           memcmp(c->id, words, SHM_RESP_WORDS * sizeof(uint64_t)) == 0;
}

static bool shm_resp_same_owner(const struct shm_resp_copy *c, const struct shm_resp_owner *o)
{
    return c->slot == o->slot && c->generation == o->generation && c->tenant == o->tenant;
}

int shm_resp_put(struct shm_resp_table *t, const char *id, size_t len,
                 const struct shm_resp_owner *owner, uint64_t now_ms, uint64_t ttl_ms)
{
    if (t->base == NULL || len == 0 || len > SHM_RESP_ID_MAX)
        return -EINVAL;
    uint64_t key = shm_resp_key(id, len);
    uint64_t words[SHM_RESP_WORDS];
    shm_resp_words(id, len, words);
    struct shm_resp_entry *set =
        &t->entries[(key % (t->n_entries / SHM_RESP_WAYS)) * SHM_RESP_WAYS];
    for (int attempt = 0; attempt < SHM_RESP_TRIES; attempt++) {
        /* The same id, else an empty entry, else the least recently used. */
        int victim = -1, same = -1, empty = -1;
        uint64_t oldest = UINT64_MAX;
        for (unsigned w = 0; w < SHM_RESP_WAYS; w++) {
            struct shm_resp_copy c;
            if (!shm_resp_read(&set[w], &c, true))
                continue;
            if (same < 0 && shm_resp_is(&c, key, len, words)) {
                same = (int)w;
                /* A live id keeps its worker and tenant: whoever answers
                 * with an id that exists (a worker's bug, or its lie) must
                 * not take over another conversation. */
                if (now_ms - c.created_ms <= ttl_ms && !shm_resp_same_owner(&c, owner))
                    return -EEXIST;
            }
            if (c.key == 0 && empty < 0)
                empty = (int)w;
            if (c.used_ms < oldest) {
                oldest = c.used_ms;
                victim = (int)w;
            }
        }
        int pick = same >= 0 ? same : empty >= 0 ? empty : victim;
        if (pick < 0)
            continue;
        struct shm_resp_entry *e = &set[pick];
        uint64_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
        if ((s & 1u) || !atomic_compare_exchange_strong_explicit(
                            &e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed))
            continue;
        /* Held now: it may have changed since it was read (a racing put of
         * the same id into the entry taken as empty or least used). */
        struct shm_resp_copy held = {
            .key = atomic_load_explicit(&e->key, memory_order_relaxed),
            .created_ms = atomic_load_explicit(&e->created_ms, memory_order_relaxed),
            .tenant = atomic_load_explicit(&e->tenant, memory_order_relaxed),
            .slot = atomic_load_explicit(&e->slot, memory_order_relaxed),
            .generation = atomic_load_explicit(&e->generation, memory_order_relaxed),
            .id_len = atomic_load_explicit(&e->id_len, memory_order_relaxed),
        };
        for (unsigned w = 0; w < SHM_RESP_WORDS; w++)
            held.id[w] = atomic_load_explicit(&e->id[w], memory_order_relaxed);
        if (shm_resp_is(&held, key, len, words) && now_ms - held.created_ms <= ttl_ms &&
            !shm_resp_same_owner(&held, owner)) {
            atomic_store_explicit(&e->seq, s + 2, memory_order_release); /* untouched */
            return -EEXIST;
        }
        bool evicts = held.key != 0 && !shm_resp_is(&held, key, len, words);
        atomic_store_explicit(&e->key, key, memory_order_relaxed);
        atomic_store_explicit(&e->created_ms, now_ms, memory_order_relaxed);
        atomic_store_explicit(&e->used_ms, now_ms, memory_order_relaxed);
        atomic_store_explicit(&e->slot, owner->slot, memory_order_relaxed);
        atomic_store_explicit(&e->generation, owner->generation, memory_order_relaxed);
        atomic_store_explicit(&e->tenant, owner->tenant, memory_order_relaxed);
        atomic_store_explicit(&e->id_len, (uint32_t)len, memory_order_relaxed);
        for (unsigned w = 0; w < SHM_RESP_WORDS; w++)
            atomic_store_explicit(&e->id[w], words[w], memory_order_relaxed);
        atomic_store_explicit(&e->seq, s + 2, memory_order_release);
        atomic_fetch_add_explicit(&t->hdr->inserts, 1, memory_order_relaxed);
        if (evicts)
            atomic_fetch_add_explicit(&t->hdr->evictions, 1, memory_order_relaxed);
        return 0;
    }
    return -EBUSY;
}

int shm_resp_get(struct shm_resp_table *t, const char *id, size_t len, uint64_t now_ms,
                 uint64_t ttl_ms, struct shm_resp_owner *owner)
{
    if (t->base == NULL || len == 0 || len > SHM_RESP_ID_MAX)
        return -ENOENT;
    uint64_t key = shm_resp_key(id, len);
    uint64_t words[SHM_RESP_WORDS];
    shm_resp_words(id, len, words);
    struct shm_resp_entry *set =
        &t->entries[(key % (t->n_entries / SHM_RESP_WAYS)) * SHM_RESP_WAYS];
    for (unsigned w = 0; w < SHM_RESP_WAYS; w++) {
        struct shm_resp_copy c;
        if (atomic_load_explicit(&set[w].key, memory_order_relaxed) != key ||
            !shm_resp_read(&set[w], &c, true))
            continue;
        if (!shm_resp_is(&c, key, len, words))
            continue;
        if (now_ms - c.created_ms > ttl_ms)
            return -ENOENT;
        /* Only the LRU order: a racing rewrite of the entry may lose it. */
        atomic_store_explicit(&set[w].used_ms, now_ms, memory_order_relaxed);
        owner->slot = c.slot;
        owner->generation = c.generation;
        owner->tenant = c.tenant;
        return 0;
    }
    return -ENOENT;
}

void shm_resp_stats(const struct shm_resp_table *t, struct shm_resp_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (t->base == NULL)
        return;
    out->entries = t->n_entries;
    out->inserts = atomic_load_explicit(&t->hdr->inserts, memory_order_relaxed);
    out->evictions = atomic_load_explicit(&t->hdr->evictions, memory_order_relaxed);
}
