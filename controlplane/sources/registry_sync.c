/*
 * Per-source reconciliation of the registry (see registry_sync.h). Checks
 * run first, on a snapshot, so a refused proposal changes nothing. Lookups
 * go through the proposal sorted by id and by url, so a sync costs one
 * registry snapshot plus O(n log n), whatever the number of workers. Then
 * removals run before additions, so that a worker renamed by its source
 * (same url, new id) does not collide with its own old entry. What it
 * keeps beside the segment is the caller's struct cp_registry: nothing
 * here lives at file scope (the sorts take their set through qsort_r).
 */
#include "controlplane/sources/registry_sync.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

_Static_assert(CP_SOURCE_COUNT <= 32, "a source kind is a 5-bit tag in the slot");

/* The KV-event endpoints of one slot (cp_registry_kv_events). */
struct cp_kv_slot {
    bool set;
    uint32_t generation;
    struct cfg_kv_events kv;
};

void cp_registry_init(struct cp_registry *reg, struct shm_segment *seg)
{
    *reg = (struct cp_registry){.seg = seg, .start_healthy = true};
}

void cp_registry_fini(struct cp_registry *reg)
{
    free(reg->kv_slots);
    reg->kv_slots = NULL;
    reg->kv_cap = 0;
}

static void cp_kv_put(struct cp_registry *reg, uint32_t slot, uint32_t generation,
                      const struct cfg_kv_events *kv)
{
    bool none = kv == NULL || kv->endpoint[0] == '\0';
    if (slot >= reg->kv_cap) {
        if (none)
            return;
        size_t cap = slot + 64;
        struct cp_kv_slot *grown = realloc(reg->kv_slots, cap * sizeof(*grown));
        if (grown == NULL) {
            log_error("registry: out of memory recording the kv_events of slot %u", slot);
            return;
        }
        memset(grown + reg->kv_cap, 0, (cap - reg->kv_cap) * sizeof(*grown));
        reg->kv_slots = grown;
        reg->kv_cap = cap;
    }
    struct cp_kv_slot *s = &reg->kv_slots[slot];
    bool same = none ? !s->set
                     : s->set && s->generation == generation &&
                           strcmp(s->kv.endpoint, kv->endpoint) == 0 &&
                           strcmp(s->kv.replay_endpoint, kv->replay_endpoint) == 0 &&
                           s->kv.data_parallel_size == kv->data_parallel_size;
    if (same)
        return;
    s->set = !none;
    s->generation = generation;
    if (!none)
        s->kv = *kv;
    reg->kv_version++;
}

const struct cfg_kv_events *cp_registry_kv_events(const struct cp_registry *reg, uint32_t slot,
                                                  uint32_t generation)
{
    if (slot >= reg->kv_cap || !reg->kv_slots[slot].set ||
        reg->kv_slots[slot].generation != generation)
        return NULL;
    return &reg->kv_slots[slot].kv;
}

uint64_t cp_registry_kv_version(const struct cp_registry *reg)
{
    return reg->kv_version;
}

void cp_registry_set_start_healthy(struct cp_registry *reg, bool healthy)
{
    reg->start_healthy = healthy;
}

/*
 * The proposal sorted by id and by url (indices into set->workers), so that
 * every lookup is a binary search: a sync of a thousand discovered workers
 * stays a few hundred microseconds instead of a million string compares
 * and slot copies.
 */
struct cp_index {
    const struct cp_source_set *set;
    size_t *by_id;
    size_t *by_url;
};

/* Equal keys stay in the set's order, so a duplicate is found as the later one. */
static int cp_cmp_index(size_t x, size_t y)
{
    return x < y ? -1 : x > y;
}

/* qsort_r comparators: arg is the set the indices point into. */
static int cp_cmp_id(const void *a, const void *b, void *arg)
{
    const struct cp_source_set *set = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(set->workers[x].id, set->workers[y].id);
    return c != 0 ? c : cp_cmp_index(x, y);
}

static int cp_cmp_url(const void *a, const void *b, void *arg)
{
    const struct cp_source_set *set = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(set->workers[x].url, set->workers[y].url);
    return c != 0 ? c : cp_cmp_index(x, y);
}

static int cp_index_init(struct cp_index *x, const struct cp_source_set *set)
{
    x->set = set;
    x->by_id = calloc(set->n + 1, sizeof(*x->by_id));
    x->by_url = calloc(set->n + 1, sizeof(*x->by_url));
    if (x->by_id == NULL || x->by_url == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < set->n; i++)
        x->by_id[i] = x->by_url[i] = i;
    qsort_r(x->by_id, set->n, sizeof(size_t), cp_cmp_id, (void *)set);
    qsort_r(x->by_url, set->n, sizeof(size_t), cp_cmp_url, (void *)set);
    return 0;
}

static void cp_index_fini(struct cp_index *x)
{
    free(x->by_id);
    free(x->by_url);
}

/* The index of the proposed worker with this id (by_url: url), or -1. */
static long cp_index_find(const struct cp_index *x, const char *key, bool by_url)
{
    const size_t *ix = by_url ? x->by_url : x->by_id;
    size_t lo = 0, hi = x->set->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct cp_source_worker *w = &x->set->workers[ix[mid]];
        int c = strcmp(by_url ? w->url : w->id, key);
        if (c == 0)
            return (long)ix[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Whether a slot still describes the proposed worker (same occupant). */
static bool cp_same_worker(const struct shm_worker_info *slot, const struct cp_source_worker *w)
{
    if (strcmp(slot->url, w->url) != 0 || slot->role != w->role)
        return false;
    /* An empty proposed model means "learn it": a learned model is no change. */
    return w->model[0] == '\0' || strcmp(slot->model, w->model) == 0;
}

/*
 * Refuses a set that names an id or url twice, or uses another source's.
 * The worker named is the first one in the set's order that is at fault
 * (for a duplicate: the later of the two).
 */
static int cp_check_set(const struct cp_source_set *set, const struct cp_index *x,
                        const struct shm_worker_info *cur, size_t n_cur, char *err, size_t err_len)
{
    size_t dup = SIZE_MAX;
    for (size_t k = 1; k < set->n; k++) {
        size_t a = x->by_id[k - 1], b = x->by_id[k]; /* a < b when equal */
        if (b < dup && strcmp(set->workers[a].id, set->workers[b].id) == 0)
            dup = b;
        a = x->by_url[k - 1];
        b = x->by_url[k];
        if (b < dup && strcmp(set->workers[a].url, set->workers[b].url) == 0)
            dup = b;
    }
    /* Another source's worker, for the first proposal that clashes (its id
     * checked before its url, the registry in slot order). */
    size_t clash = SIZE_MAX;
    const struct shm_worker_info *with = NULL;
    bool by_id = false;
    for (size_t j = 0; j < n_cur; j++) {
        const struct shm_worker_info *c = &cur[j];
        if (c->source == set->kind)
            continue;
        long i = cp_index_find(x, c->id, false);
        if (i >= 0 && (size_t)i < clash) {
            clash = (size_t)i;
            with = c;
            by_id = true;
        }
        i = cp_index_find(x, c->url, true);
        if (i >= 0 && (size_t)i < clash) {
            clash = (size_t)i;
            with = c;
            by_id = false;
        }
    }
    if (dup != SIZE_MAX && dup <= clash) {
        const struct cp_source_worker *w = &set->workers[dup];
        snprintf(err, err_len, "worker %s: its id or url %s is proposed twice by the %s", w->id,
                 w->url, cp_source_name(set->kind));
        return -EINVAL;
    }
    if (clash == SIZE_MAX)
        return 0;
    const struct cp_source_worker *w = &set->workers[clash];
    if (by_id)
        snprintf(err, err_len,
                 "worker %s: this id is already used by a worker of the %s (url %s); "
                 "remove that worker first",
                 w->id, cp_source_name(with->source), with->url);
    else
        snprintf(err, err_len,
                 "worker %s: url %s is already registered under another id (%s, added "
                 "by the %s); remove that worker first",
                 w->id, w->url, with->id, cp_source_name(with->source));
    return -EEXIST;
}

int cp_registry_add(struct cp_registry *reg, enum cp_source_kind kind,
                    const struct cp_source_worker *w, struct shm_worker_info *out)
{
    struct shm_worker_info add = {
        .role = w->role,
        .healthy = reg->start_healthy, /* until probes say otherwise */
        .source = (uint8_t)kind,
    };
    snprintf(add.id, sizeof(add.id), "%s", w->id);
    snprintf(add.url, sizeof(add.url), "%s", w->url);
    snprintf(add.model, sizeof(add.model), "%s", w->model);
    struct shm_worker_info placed;
    int rc = shm_registry_add(reg->seg, &add, &placed);
    if (rc == 0)
        cp_kv_put(reg, placed.slot, placed.generation, &w->kv_events);
    if (rc == 0 && out != NULL)
        *out = placed;
    return rc;
}

int cp_registry_retire(struct cp_registry *reg, enum cp_source_kind kind, const char *id)
{
    struct shm_worker_info w;
    if (shm_registry_find(reg->seg, id, &w) != 0)
        return -ENOENT;
    if (w.source != kind)
        return -EPERM;
    cp_kv_put(reg, w.slot, w.generation, NULL);
    return shm_registry_remove(reg->seg, w.slot);
}

int cp_registry_sync(struct cp_registry *reg, const struct cp_source_set *set, char *err,
                     size_t err_len)
{
    struct shm_segment *seg = reg->seg;
    struct shm_worker_info *cur = calloc(seg->max_workers, sizeof(*cur));
    if (cur == NULL) {
        snprintf(err, err_len, "out of memory reading the registry");
        return -ENOMEM;
    }
    size_t n = shm_registry_snapshot(seg, cur, seg->max_workers);
    const char *name = cp_source_name(set->kind);
    struct cp_index x = {0};
    bool *kept = calloc(set->n + 1, sizeof(*kept));
    int rc = cp_index_init(&x, set);
    if (rc != 0 || kept == NULL) {
        snprintf(err, err_len, "out of memory indexing the proposal");
        rc = -ENOMEM;
        goto out_free;
    }
    rc = cp_check_set(set, &x, cur, n, err, err_len);
    if (rc != 0)
        goto out_free;

    for (size_t i = 0; i < n; i++) {
        if (cur[i].source != set->kind)
            continue; /* invariant 12: never another source's worker */
        long p = cp_index_find(&x, cur[i].id, false);
        const struct cp_source_worker *w = p >= 0 ? &set->workers[p] : NULL;
        if (w != NULL && cp_same_worker(&cur[i], w)) {
            kept[p] = true;
            /* Its endpoints may have changed (a reload): the slot stays. */
            cp_kv_put(reg, cur[i].slot, cur[i].generation, &w->kv_events);
            continue;
        }
        cp_kv_put(reg, cur[i].slot, cur[i].generation, NULL);
        shm_registry_remove(seg, cur[i].slot);
        log_info("registry: removed worker %s (%s), slot %u generation %u: %s %s", cur[i].id,
                 cur[i].url, cur[i].slot, cur[i].generation,
                 w != NULL ? "changed by the" : "no longer proposed by the", name);
    }

    for (size_t i = 0; i < set->n; i++) {
        const struct cp_source_worker *w = &set->workers[i];
        struct shm_worker_info placed;
        if (kept[i])
            continue; /* unchanged: checked above that it is ours */
        rc = cp_registry_add(reg, set->kind, w, &placed);
        if (rc == -ENOSPC) {
            snprintf(err, err_len, "worker %s: the registry is full (shm.max_workers = %u)", w->id,
                     seg->max_workers);
            goto out_free;
        }
        if (rc != 0) {
            snprintf(err, err_len, "worker %s: %s", w->id, strerror(-rc));
            goto out_free;
        }
        log_info("registry: added worker %s (%s, model '%s', role %s) from the %s in slot %u "
                 "generation %u",
                 placed.id, placed.url, placed.model, cfg_role_name(placed.role), name, placed.slot,
                 placed.generation);
    }

out_free:
    cp_index_fini(&x);
    free(kept);
    free(cur);
    return rc;
}
