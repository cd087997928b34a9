/*
 * Rate-limit buckets in shared memory (see buckets.h). The layout is
 * private to this file: a header and SHM_BUCKET_SLOTS slots of four
 * 64-bit atomics each (one cache line per two slots is fine: a tenant's
 * words are written once per request).
 */
#include "shm/buckets.h"

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

#define SHM_BUCKET_MAGIC   UINT64_C(0x53594254424b5431) /* "SYBTBKT1" */
#define SHM_BUCKET_WAIT_MS 1000u

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

struct shm_bucket_header {
    _Atomic uint64_t magic; /* published last */
    uint32_t version;
    uint32_t header_size;
    uint32_t slot_size;
    uint32_t n_slots;
    uint64_t total_size;
};

struct shm_bucket_slot {
    _Atomic uint64_t key; /* 0 = free; claimed once by CAS */
    _Atomic uint64_t tat_us[SHM_BUCKET_KINDS];
    uint64_t reserved;
};

/* key: 0 = free, 1 = being claimed (its name is being written), else the hash. */
#define SHM_BUCKET_MODEL_CLAIMING 1u

struct shm_bucket_model {
    _Atomic uint64_t key;
    char name[SHM_BUCKET_NAME]; /* written once, before key is published */
    _Atomic int32_t depth[SHM_BUCKET_LEASES];
};

static size_t buckets_size(void)
{
    return sizeof(struct shm_bucket_header) + SHM_BUCKET_SLOTS * sizeof(struct shm_bucket_slot) +
           SHM_BUCKET_MODELS * sizeof(struct shm_bucket_model);
}

static void buckets_bind(struct shm_buckets *b, int fd, void *base, size_t size)
{
    b->fd = fd;
    b->base = base;
    b->size = size;
    b->hdr = base;
    b->slots = (struct shm_bucket_slot *)((char *)base + sizeof(struct shm_bucket_header));
    b->models = (struct shm_bucket_model *)(b->slots + SHM_BUCKET_SLOTS);
}

int shm_buckets_name(const char *segment_name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s-ratelimit", segment_name);
    return n < 0 || (size_t)n >= cap || n > 255 ? -ENAMETOOLONG : 0;
}

uint64_t shm_buckets_key(const char *tenant_name)
{
    uint64_t h = XXH3_64bits(tenant_name, strlen(tenant_name));
    return h != 0 ? h : 1;
}

/* The creator's lock: held from creation until the header is published. */
#define BUCKETS_LOCK_OFF 0u
#define BUCKETS_LOCK_LEN 8u

/* True when another open file description holds the creator's lock (or we
 * cannot tell: assume alive, the caller's wait bounds it). */
static bool buckets_creator_alive(int fd)
{
    return shm_object_locked_by_other(fd, BUCKETS_LOCK_OFF, BUCKETS_LOCK_LEN);
}

static int buckets_create(struct shm_buckets *b, const char *name, char *err, size_t err_len)
{
    size_t size = buckets_size();
    struct shm_object o;
    int rc = shm_object_create(name, "rate-limit object", size, BUCKETS_LOCK_OFF, BUCKETS_LOCK_LEN,
                               &o, err, err_len);
    if (rc != 0)
        return rc; /* -EEXIST without a message: the caller attaches */
    void *base = o.base;
    struct shm_bucket_header *h = base;
    h->version = SHM_BUCKET_VERSION;
    h->header_size = sizeof(*h);
    h->slot_size = sizeof(struct shm_bucket_slot);
    h->n_slots = SHM_BUCKET_SLOTS;
    h->total_size = size;
    atomic_store_explicit(&h->magic, SHM_BUCKET_MAGIC, memory_order_release);
    shm_object_unlock(o.fd, BUCKETS_LOCK_OFF, BUCKETS_LOCK_LEN);
    buckets_bind(b, o.fd, base, size);
    return 0;
}

/* 0, -EAGAIN (not published yet, creator alive), -ESTALE (a dead creator's), or an error. */
static int buckets_attach(struct shm_buckets *b, const char *name, char *err, size_t err_len)
{
    struct shm_object o;
    int rc = shm_object_open(name, "rate-limit object", sizeof(struct shm_bucket_header), &o, err,
                             err_len);
    if (rc == -ENODATA) {
        /* Not sized yet: being built, or a dead creator's. */
        int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        rc = buckets_creator_alive(fd) ? -EAGAIN : -ESTALE;
        close(fd);
        return rc;
    }
    if (rc != 0)
        return rc;
    size_t size = buckets_size();
    const struct shm_bucket_header *h = o.base;
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_BUCKET_MAGIC) {
        rc = buckets_creator_alive(o.fd) ? -EAGAIN : -ESTALE;
        snprintf(err, err_len, "%s is not published", name);
    } else if (h->version != SHM_BUCKET_VERSION || h->header_size != sizeof(*h) ||
               h->slot_size != sizeof(struct shm_bucket_slot) || h->n_slots != SHM_BUCKET_SLOTS ||
               h->total_size != size || (uint64_t)o.size != size) {
        snprintf(err, err_len,
                 "%s has layout version %u (%u slots, %llu bytes), this binary expects version "
                 "%u (%u slots, %zu bytes): stop every data plane of the node and remove it",
                 name, h->version, h->n_slots, (unsigned long long)o.size, SHM_BUCKET_VERSION,
                 SHM_BUCKET_SLOTS, size);
        rc = -EPROTO;
    }
    if (rc != 0) {
        shm_object_unmap(&o);
        return rc;
    }
    buckets_bind(b, o.fd, o.base, size);
    return 0;
}

int shm_buckets_open(struct shm_buckets *b, const char *name, char *err, size_t err_len)
{
    memset(b, 0, sizeof(*b));
    b->fd = -1;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int rc = buckets_create(b, name, err, err_len);
        if (rc != -EEXIST)
            return rc;
        rc = buckets_attach(b, name, err, err_len);
        if (rc == -ESTALE) {
            /* Its creator died before publishing: nothing in it counts. */
            shm_unlink(name);
            continue;
        }
        if (rc != -EAGAIN && rc != -ENOENT)
            return rc;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
            SHM_BUCKET_WAIT_MS) {
            snprintf(err, err_len, "%s: its creator has not published it after %u ms", name,
                     SHM_BUCKET_WAIT_MS);
            return -ETIMEDOUT;
        }
        struct timespec ts = {.tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int shm_buckets_attach(struct shm_buckets *b, const char *name, char *err, size_t err_len)
{
    memset(b, 0, sizeof(*b));
    b->fd = -1;
    int rc = buckets_attach(b, name, err, err_len);
    return rc == -ESTALE ? -EAGAIN : rc;
}

void shm_buckets_close(struct shm_buckets *b)
{
    if (b == NULL || b->base == NULL)
        return;
    munmap(b->base, b->size);
    close(b->fd);
    b->base = NULL;
    b->fd = -1;
}

int shm_buckets_unlink(const char *name)
{
    return shm_unlink(name) == 0 ? 0 : -errno;
}

/* The tenant's slot, claimed when claim; NULL when absent (or the table is full). */
static struct shm_bucket_slot *buckets_slot(const struct shm_buckets *b, uint64_t key, bool claim)
{
    for (uint32_t i = 0; i < SHM_BUCKET_SLOTS; i++) {
        struct shm_bucket_slot *s = &b->slots[(key + i) % SHM_BUCKET_SLOTS];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s;
        if (k != 0)
            continue;
        if (!claim)
            return NULL;
        uint64_t expect = 0;
        if (atomic_compare_exchange_strong_explicit(&s->key, &expect, key, memory_order_acq_rel,
                                                    memory_order_acquire) ||
            expect == key)
            return s;
    }
    return NULL;
}

uint64_t shm_buckets_take(struct shm_buckets *b, uint64_t tenant_hash, enum shm_bucket_kind kind,
                          const struct shm_bucket_limit *lim, uint64_t cost, uint64_t now_us)
{
    struct shm_bucket_slot *s = buckets_slot(b, tenant_hash, true);
    if (s == NULL || lim->capacity == 0)
        return 0;
    if (cost > lim->capacity)
        cost = lim->capacity;
    uint64_t tau = lim->capacity * lim->interval_us;
    uint64_t t = atomic_load_explicit(&s->tat_us[kind], memory_order_relaxed);
    for (;;) {
        uint64_t nt = (t > now_us ? t : now_us) + cost * lim->interval_us;
        if (nt - now_us > tau)
            return nt - now_us - tau;
        if (atomic_compare_exchange_weak_explicit(&s->tat_us[kind], &t, nt, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 0;
    }
}

void shm_buckets_refund(struct shm_buckets *b, uint64_t tenant_hash, enum shm_bucket_kind kind,
                        const struct shm_bucket_limit *lim, uint64_t cost)
{
    struct shm_bucket_slot *s = buckets_slot(b, tenant_hash, false);
    if (s == NULL)
        return;
    if (cost > lim->capacity)
        cost = lim->capacity;
    uint64_t back = cost * lim->interval_us;
    uint64_t t = atomic_load_explicit(&s->tat_us[kind], memory_order_relaxed);
    for (;;) {
        uint64_t nt = t > back ? t - back : 0;
        if (atomic_compare_exchange_weak_explicit(&s->tat_us[kind], &t, nt, memory_order_relaxed,
                                                  memory_order_relaxed))
            return;
    }
}

uint64_t shm_buckets_available(const struct shm_buckets *b, uint64_t tenant_hash,
                               enum shm_bucket_kind kind, const struct shm_bucket_limit *lim,
                               uint64_t now_us)
{
    const struct shm_bucket_slot *s = buckets_slot(b, tenant_hash, false);
    if (s == NULL || lim->interval_us == 0)
        return lim->capacity;
    uint64_t t = atomic_load_explicit(&s->tat_us[kind], memory_order_relaxed);
    uint64_t used = t > now_us ? (t - now_us + lim->interval_us - 1) / lim->interval_us : 0;
    return used >= lim->capacity ? 0 : lim->capacity - used;
}

int shm_buckets_model(struct shm_buckets *b, const char *model)
{
    uint64_t key = XXH3_64bits(model, strlen(model));
    if (key <= SHM_BUCKET_MODEL_CLAIMING)
        key += 2;
    for (uint32_t i = 0; i < SHM_BUCKET_MODELS; i++) {
        struct shm_bucket_model *m = &b->models[(key + i) % SHM_BUCKET_MODELS];
        uint64_t k = atomic_load_explicit(&m->key, memory_order_acquire);
        /* Another process writing a name here: wait for it (a few stores). */
        for (int spin = 0; k == SHM_BUCKET_MODEL_CLAIMING && spin < 100000; spin++)
            k = atomic_load_explicit(&m->key, memory_order_acquire);
        if (k == key && strncmp(m->name, model, SHM_BUCKET_NAME) == 0)
            return (int)((key + i) % SHM_BUCKET_MODELS);
        if (k != 0)
            continue;
        uint64_t expect = 0;
        if (!atomic_compare_exchange_strong_explicit(&m->key, &expect, SHM_BUCKET_MODEL_CLAIMING,
                                                     memory_order_acq_rel, memory_order_acquire)) {
            i--; /* someone claimed it meanwhile: look at this slot again */
            continue;
        }
        snprintf(m->name, sizeof(m->name), "%s", model);
        atomic_store_explicit(&m->key, key, memory_order_release);
        return (int)((key + i) % SHM_BUCKET_MODELS);
    }
    return -ENOSPC;
}

void shm_buckets_depth_add(struct shm_buckets *b, int row, uint32_t lease, int delta)
{
    if (row < 0 || (uint32_t)row >= SHM_BUCKET_MODELS || lease >= SHM_BUCKET_LEASES)
        return;
    atomic_fetch_add_explicit(&b->models[row].depth[lease], delta, memory_order_relaxed);
}

void shm_buckets_lease_reset(struct shm_buckets *b, uint32_t lease)
{
    if (lease >= SHM_BUCKET_LEASES)
        return;
    for (uint32_t i = 0; i < SHM_BUCKET_MODELS; i++)
        atomic_store_explicit(&b->models[i].depth[lease], 0, memory_order_relaxed);
}

void shm_buckets_depths(const struct shm_buckets *b, uint64_t live_mask,
                        void (*fn)(void *arg, const char *model, uint64_t depth), void *arg)
{
    for (uint32_t i = 0; i < SHM_BUCKET_MODELS; i++) {
        struct shm_bucket_model *m = &b->models[i];
        if (atomic_load_explicit(&m->key, memory_order_acquire) <= SHM_BUCKET_MODEL_CLAIMING)
            continue;
        int64_t sum = 0;
        for (uint32_t l = 0; l < SHM_BUCKET_LEASES; l++)
            if (live_mask & (UINT64_C(1) << l))
                sum += atomic_load_explicit(&m->depth[l], memory_order_relaxed);
        char name[SHM_BUCKET_NAME];
        memcpy(name, m->name, sizeof(name));
        name[sizeof(name) - 1] = '\0';
        fn(arg, name, sum > 0 ? (uint64_t)sum : 0);
    }
}
