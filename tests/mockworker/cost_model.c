/*
 * Token/block arithmetic, the LRU KV cache and the FIFO scheduler of the
 * mock worker (see cost_model.h for the model itself). The cache is a slot
 * array with an intrusive LRU list and a chained hash table of slot indices:
 * lookups and touches are O(1) and nothing is allocated after init. The
 * scheduler keeps intrusive lists, so submit/finish allocate nothing either.
 */
#include "tests/mockworker/cost_model.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t mw_prompt_tokens(size_t bytes)
{
    return ((uint64_t)bytes + MW_BYTES_PER_TOKEN - 1) / MW_BYTES_PER_TOKEN;
}

size_t mw_full_blocks(size_t bytes, uint32_t block_tokens)
{
    if (block_tokens == 0)
        return 0;
    return bytes / ((size_t)block_tokens * MW_BYTES_PER_TOKEN);
}

void mw_block_hashes(const char *text, size_t len, uint32_t block_tokens, uint64_t *out, size_t n)
{
    mw_block_hashes_from(0, text, len, block_tokens, out, n);
}

void mw_block_hashes_from(uint64_t none_hash, const char *text, size_t len, uint32_t block_tokens,
                          uint64_t *out, size_t n)
{
    size_t block_bytes = (size_t)block_tokens * MW_BYTES_PER_TOKEN;
    assert(n <= mw_full_blocks(len, block_tokens));
    uint64_t prev = none_hash;
    for (size_t i = 0; i < n; i++) {
        prev = XXH3_64bits_withSeed(text + i * block_bytes, block_bytes, prev);
        out[i] = prev;
    }
}

uint64_t mw_salted_seed(uint64_t none_hash, const char *salt, size_t salt_len)
{
    return salt_len > 0 ? XXH3_64bits_withSeed(salt, salt_len, none_hash) : none_hash;
}

/* ---- KV cache ------------------------------------------------------------ */

static uint32_t kv_bucket(const struct mw_kv_cache *kv, uint64_t hash)
{
    /* Block hashes are already XXH3 output: the low bits are uniform. */
    return (uint32_t)(hash & kv->mask);
}

int mw_kv_init(struct mw_kv_cache *kv, uint32_t capacity)
{
    memset(kv, 0, sizeof(*kv));
    if (capacity == 0)
        return -EINVAL;
    uint32_t buckets = 1;
    while (buckets < capacity * 2u && buckets < (1u << 31))
        buckets <<= 1;
    kv->buckets = malloc(sizeof(*kv->buckets) * buckets);
    kv->slots = calloc(capacity, sizeof(*kv->slots));
    if (kv->buckets == NULL || kv->slots == NULL) {
        free(kv->buckets);
        free(kv->slots);
        memset(kv, 0, sizeof(*kv));
        return -ENOMEM;
    }
    kv->capacity = capacity;
    kv->mask = buckets - 1;
    mw_kv_clear(kv);
    return 0;
}

void mw_kv_fini(struct mw_kv_cache *kv)
{
    free(kv->buckets);
    free(kv->slots);
    memset(kv, 0, sizeof(*kv));
}

void mw_kv_clear(struct mw_kv_cache *kv)
{
    for (uint32_t i = 0; i <= kv->mask; i++)
        kv->buckets[i] = MW_KV_NONE;
    memset(kv->slots, 0, sizeof(*kv->slots) * kv->capacity);
    kv->used = 0;
    kv->lru_head = MW_KV_NONE;
    kv->lru_tail = MW_KV_NONE;
    kv->free_top = 0;
    kv->evictions = 0;
}

uint32_t mw_kv_find(const struct mw_kv_cache *kv, uint64_t hash)
{
    uint32_t i = kv->buckets[kv_bucket(kv, hash)];
    while (i != MW_KV_NONE) {
        if (kv->slots[i].hash == hash)
            return i;
        i = kv->slots[i].chain;
    }
    return MW_KV_NONE;
}

size_t mw_kv_match_prefix(const struct mw_kv_cache *kv, const uint64_t *hashes, size_t n)
{
    size_t hit = 0;
    while (hit < n && mw_kv_find(kv, hashes[hit]) != MW_KV_NONE)
        hit++;
    return hit;
}

static void lru_unlink(struct mw_kv_cache *kv, uint32_t i)
{
    struct mw_kv_slot *s = &kv->slots[i];
    if (s->lru_prev != MW_KV_NONE)
        kv->slots[s->lru_prev].lru_next = s->lru_next;
    else
        kv->lru_head = s->lru_next;
    if (s->lru_next != MW_KV_NONE)
        kv->slots[s->lru_next].lru_prev = s->lru_prev;
    else
        kv->lru_tail = s->lru_prev;
    s->lru_prev = MW_KV_NONE;
    s->lru_next = MW_KV_NONE;
}

static void lru_push_head(struct mw_kv_cache *kv, uint32_t i)
{
    struct mw_kv_slot *s = &kv->slots[i];
    s->lru_prev = MW_KV_NONE;
    s->lru_next = kv->lru_head;
    if (kv->lru_head != MW_KV_NONE)
        kv->slots[kv->lru_head].lru_prev = i;
    kv->lru_head = i;
    if (kv->lru_tail == MW_KV_NONE)
        kv->lru_tail = i;
}

static void bucket_remove(struct mw_kv_cache *kv, uint32_t i)
{
    uint32_t *link = &kv->buckets[kv_bucket(kv, kv->slots[i].hash)];
    while (*link != MW_KV_NONE && *link != i)
        link = &kv->slots[*link].chain;
    assert(*link == i);
    *link = kv->slots[i].chain;
    kv->slots[i].chain = MW_KV_NONE;
}

/* A free slot: a never-used one while any is left, else the LRU victim. */
static uint32_t kv_take_slot(struct mw_kv_cache *kv)
{
    if (kv->free_top < kv->capacity) {
        kv->used++;
        return kv->free_top++;
    }
    uint32_t victim = kv->lru_tail;
    assert(victim != MW_KV_NONE);
    lru_unlink(kv, victim);
    bucket_remove(kv, victim);
    kv->evictions++;
    if (kv->evict_log != NULL && kv->evict_n < kv->evict_cap)
        kv->evict_log[kv->evict_n++] = kv->slots[victim].hash;
    return victim;
}

static uint32_t kv_touch(struct mw_kv_cache *kv, uint64_t hash)
{
    uint32_t i = mw_kv_find(kv, hash);
    if (i != MW_KV_NONE) {
        lru_unlink(kv, i);
        lru_push_head(kv, i);
        return i;
    }
    i = kv_take_slot(kv);
    struct mw_kv_slot *s = &kv->slots[i];
    s->hash = hash;
    s->used = true;
    uint32_t b = kv_bucket(kv, hash);
    s->chain = kv->buckets[b];
    kv->buckets[b] = i;
    lru_push_head(kv, i);
    return i;
}

void mw_kv_insert(struct mw_kv_cache *kv, const uint64_t *hashes, size_t n, uint32_t *ids)
{
    for (size_t k = n; k > 0; k--) {
        uint32_t id = kv_touch(kv, hashes[k - 1]);
        if (ids != NULL)
            ids[k - 1] = id;
    }
}

/* ---- scheduler ------------------------------------------------------------ */

int mw_engine_init(struct mw_engine *e, uint32_t kv_blocks, uint32_t block_tokens,
                   uint32_t max_running)
{
    memset(e, 0, sizeof(*e));
    if (block_tokens == 0 || max_running == 0)
        return -EINVAL;
    int rc = mw_kv_init(&e->kv, kv_blocks);
    if (rc != 0)
        return rc;
    rc = pthread_mutex_init(&e->lock, NULL);
    if (rc != 0) {
        mw_kv_fini(&e->kv);
        return -rc;
    }
    list_init(&e->waiting_list);
    for (unsigned i = 0; i < MW_ENGINE_MAX_OWNERS; i++)
        list_init(&e->ready_list[i]);
    e->block_tokens = block_tokens;
    e->max_running = max_running;
    return 0;
}

void mw_engine_fini(struct mw_engine *e)
{
    pthread_mutex_destroy(&e->lock);
    mw_kv_fini(&e->kv);
}

/* Index of h in a[0..n), or n. */
static size_t find_hash(const uint64_t *a, size_t n, uint64_t h)
{
    size_t i = 0;
    while (i < n && a[i] != h)
        i++;
    return i;
}

/*
 * mw_kv_insert, telling the observer the net change (see struct
 * mw_kv_observer): evicted blocks that were cached before and are gone
 * after, then each run of the prompt's blocks that were absent before and
 * are present after. Engine lock held. Without memory for the bookkeeping
 * the insert still happens and the observer hears nothing: a test of the
 * events then sees a gap in the cache's story, never a false one.
 */
static void insert_observed(struct mw_engine *e, struct mw_sched_entry *x)
{
    const struct mw_kv_observer *o = e->observer;
    size_t n = x->n_hashes;
    bool *was = calloc(n, sizeof(*was));
    uint64_t *evicted = malloc(sizeof(*evicted) * n);
    if (was == NULL || evicted == NULL) {
        free(was);
        free(evicted);
        mw_kv_insert(&e->kv, x->hashes, n, x->block_ids);
        return;
    }
    for (size_t i = 0; i < n; i++)
        was[i] = mw_kv_find(&e->kv, x->hashes[i]) != MW_KV_NONE;
    e->kv.evict_log = evicted;
    e->kv.evict_n = 0;
    e->kv.evict_cap = n;
    mw_kv_insert(&e->kv, x->hashes, n, x->block_ids);
    e->kv.evict_log = NULL;
    size_t n_evicted = e->kv.evict_n;
    for (size_t k = 0; k < n_evicted; k++) {
        uint64_t h = evicted[k];
        size_t j = find_hash(x->hashes, n, h);
        bool before = j == n || was[j];
        bool after = mw_kv_find(&e->kv, h) != MW_KV_NONE;
        /* A block evicted twice (re-stored in between) is reported once. */
        if (before && !after && find_hash(evicted, k, h) == k)
            o->removed(o->ctx, &h, 1);
    }
    size_t bytes = (size_t)e->block_tokens * MW_BYTES_PER_TOKEN;
    for (size_t i = 0; i < n;) {
        if (was[i] || mw_kv_find(&e->kv, x->hashes[i]) == MW_KV_NONE) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < n && !was[i] && mw_kv_find(&e->kv, x->hashes[i]) != MW_KV_NONE)
            i++;
        o->stored(o->ctx, x->hashes + start, i - start, start > 0 ? &x->hashes[start - 1] : NULL,
                  x->text + start * bytes, x->salt, x->salt_len);
    }
    o->flush(o->ctx);
    free(was);
    free(evicted);
}

/* Takes a running slot for x and does its prefix lookup. Engine lock held. */
static void engine_admit(struct mw_engine *e, struct mw_sched_entry *x)
{
    uint64_t hit = 0;
    if (x->use_prefix_cache && x->n_hashes > 0) {
        size_t hit_blocks = mw_kv_match_prefix(&e->kv, x->hashes, x->n_hashes);
        hit = (uint64_t)hit_blocks * e->block_tokens;
        if (hit > x->prompt_tokens)
            hit = x->prompt_tokens;
        if (e->observer != NULL && x->text != NULL)
            insert_observed(e, x);
        else
            mw_kv_insert(&e->kv, x->hashes, x->n_hashes, x->block_ids);
    }
    if (x->use_prefix_cache) {
        e->prefix_query_tokens += x->prompt_tokens;
        e->prefix_hit_tokens += hit;
    }
    uint64_t rest = x->prompt_tokens - hit;
    uint64_t remote = x->remote_tokens < rest ? x->remote_tokens : rest;
    x->hit_tokens = hit;
    x->compute_tokens = rest - remote;
    x->held_blocks = (x->prompt_tokens + e->block_tokens - 1) / e->block_tokens;
    e->held_blocks += x->held_blocks;
    e->prompt_tokens += x->prompt_tokens;
    e->running++;
}

/* Admits waiting entries into free running slots (none while asleep);
 * returns the owners to wake. Engine lock held. */
static uint64_t engine_admit_waiting(struct mw_engine *e)
{
    uint64_t wake = 0;
    while (e->sleep_level == 0 && e->running < e->max_running && !list_is_empty(&e->waiting_list)) {
        struct mw_sched_entry *x =
            list_entry(list_pop_front(&e->waiting_list), struct mw_sched_entry, link);
        e->waiting--;
        engine_admit(e, x);
        x->state = MW_SCHED_READY;
        list_push_back(&e->ready_list[x->owner], &x->link);
        wake |= 1ull << x->owner;
    }
    return wake;
}

bool mw_engine_submit(struct mw_engine *e, struct mw_sched_entry *entry)
{
    assert(entry->state == MW_SCHED_NONE);
    assert(entry->owner < MW_ENGINE_MAX_OWNERS);
    bool admitted = false;
    pthread_mutex_lock(&e->lock);
    if (e->sleep_level == 0 && e->running < e->max_running && list_is_empty(&e->waiting_list)) {
        engine_admit(e, entry);
        entry->state = MW_SCHED_RUNNING;
        admitted = true;
    } else {
        list_push_back(&e->waiting_list, &entry->link);
        entry->state = MW_SCHED_WAITING;
        e->waiting++;
    }
    pthread_mutex_unlock(&e->lock);
    return admitted;
}

uint64_t mw_engine_finish(struct mw_engine *e, struct mw_sched_entry *entry,
                          uint64_t generated_tokens)
{
    uint64_t wake = 0;
    pthread_mutex_lock(&e->lock);
    switch (entry->state) {
    case MW_SCHED_WAITING:
        list_remove(&entry->link);
        e->waiting--;
        break;
    case MW_SCHED_READY:
        list_remove(&entry->link);
        /* It holds a running slot like a running entry. */
        __attribute__((fallthrough));
    case MW_SCHED_RUNNING:
        assert(e->running > 0 && e->held_blocks >= entry->held_blocks);
        e->running--;
        e->held_blocks -= entry->held_blocks;
        e->generation_tokens += generated_tokens;
        break;
    default:
        break;
    }
    entry->state = MW_SCHED_NONE;
    wake = engine_admit_waiting(e);
    pthread_mutex_unlock(&e->lock);
    return wake;
}

void mw_engine_sleep(struct mw_engine *e, uint32_t level)
{
    pthread_mutex_lock(&e->lock);
    mw_kv_clear(&e->kv);
    if (e->observer != NULL) {
        e->observer->cleared(e->observer->ctx);
        e->observer->flush(e->observer->ctx);
    }
    e->sleep_level = level;
    e->asleep_tags = MW_SLEEP_TAGS_ALL;
    pthread_mutex_unlock(&e->lock);
}

uint64_t mw_engine_wake(struct mw_engine *e, unsigned tags)
{
    uint64_t wake = 0;
    pthread_mutex_lock(&e->lock);
    e->asleep_tags &= tags == 0 ? 0u : ~tags;
    if (e->asleep_tags == 0) {
        e->sleep_level = 0;
        wake = engine_admit_waiting(e);
    }
    pthread_mutex_unlock(&e->lock);
    return wake;
}

struct mw_sched_entry *mw_engine_take_ready(struct mw_engine *e, unsigned owner)
{
    assert(owner < MW_ENGINE_MAX_OWNERS);
    pthread_mutex_lock(&e->lock);
    struct mw_sched_entry *chain = NULL, **tail = &chain;
    struct list_node *node;
    while ((node = list_pop_front(&e->ready_list[owner])) != NULL) {
        struct mw_sched_entry *x = list_entry(node, struct mw_sched_entry, link);
        x->state = MW_SCHED_RUNNING;
        x->next = NULL;
        *tail = x;
        tail = &x->next;
    }
    pthread_mutex_unlock(&e->lock);
    return chain;
}

void mw_engine_snapshot(struct mw_engine *e, struct mw_engine_snapshot *out)
{
    pthread_mutex_lock(&e->lock);
    out->running = e->running;
    out->waiting = e->waiting;
    out->kv_capacity = e->kv.capacity;
    out->kv_used_blocks = e->kv.used;
    out->held_blocks = e->held_blocks;
    uint64_t held = e->held_blocks < e->kv.capacity ? e->held_blocks : e->kv.capacity;
    out->kv_usage = e->kv.capacity > 0 ? (double)held / (double)e->kv.capacity : 0.0;
    out->prefix_query_tokens = e->prefix_query_tokens;
    out->prefix_hit_tokens = e->prefix_hit_tokens;
    out->prompt_tokens = e->prompt_tokens;
    out->generation_tokens = e->generation_tokens;
    out->sleep_level = e->sleep_level;
    pthread_mutex_unlock(&e->lock);
}

void mw_engine_reset(struct mw_engine *e)
{
    pthread_mutex_lock(&e->lock);
    mw_kv_clear(&e->kv);
    if (e->observer != NULL) {
        e->observer->cleared(e->observer->ctx);
        e->observer->flush(e->observer->ctx);
    }
    e->prefix_query_tokens = 0;
    e->prefix_hit_tokens = 0;
    e->prompt_tokens = 0;
    e->generation_tokens = 0;
    pthread_mutex_unlock(&e->lock);
}

void mw_engine_set_observer(struct mw_engine *e, const struct mw_kv_observer *obs)
{
    pthread_mutex_lock(&e->lock);
    e->observer = obs;
    pthread_mutex_unlock(&e->lock);
}
