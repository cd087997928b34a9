/*
 * Seqlocked worker slots (see registry.h).
 *
 * Writer (control plane, single thread): seq+1 (odd) relaxed, release fence,
 * relaxed field stores, seq+1 (even) with release. Reader: seq acquire; if
 * odd, retry; relaxed field loads; acquire fence; seq again; retry on
 * change. Strings live in relaxed-atomic 64-bit words so that the racing
 * copy is not a data race in the C11 model.
 */
#include "shm/registry.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#include "common/config.h"
#include "shm/layout_private.h"

/* The config validates against the layout: every worker string the loader
 * accepts must fit the slot that will hold it. */
_Static_assert(CFG_ID_MAX <= SHM_ID_MAX && CFG_URL_MAX <= SHM_URL_MAX &&
                   CFG_MODEL_MAX <= SHM_MODEL_MAX,
               "the config's worker limits must fit the segment's string fields");

static struct shm_worker_slot *shm_slot(const struct shm_segment *seg, uint32_t slot)
{
    return &seg->slots[slot];
}

_Static_assert(SHM_ALIASES_MAX <= SHM_URL_MAX, "shm_words_store's buffer holds every field");

static void shm_words_store(_Atomic uint64_t *words, size_t n_words, const char *text)
{
    char buf[SHM_URL_MAX] = {0};
    size_t cap = n_words * 8;
    size_t len = strnlen(text, cap - 1);
    memcpy(buf, text, len);
    for (size_t i = 0; i < n_words; i++) {
        uint64_t w;
        memcpy(&w, buf + i * 8, 8);
        atomic_store_explicit(&words[i], w, memory_order_relaxed);
    }
}

static void shm_words_load(const _Atomic uint64_t *words, size_t n_words, char *out)
{
    for (size_t i = 0; i < n_words; i++) {
        uint64_t w = atomic_load_explicit(&words[i], memory_order_relaxed);
        memcpy(out + i * 8, &w, 8);
    }
    /* Terminated even if the writer left garbage: the reader never overruns. */
    out[n_words * 8 - 1] = '\0';
}

static void shm_info_from_state(struct shm_worker_info *out, uint32_t state)
{
    out->healthy = (state & SHM_SLOT_HEALTHY) != 0;
    out->draining = (state & SHM_SLOT_DRAINING) != 0;
    out->resetting = (state & SHM_SLOT_RESETTING) != 0;
    out->sleeping = (state & SHM_SLOT_SLEEPING) != 0;
    out->source = (uint8_t)((state & SHM_SLOT_SOURCE_MASK) >> SHM_SLOT_SOURCE_SHIFT);
    out->from_api = (state & SHM_SLOT_SOURCE_MASK) == SHM_SLOT_FROM_API;
    out->role = (enum cfg_role)((state & SHM_SLOT_ROLE_MASK) >> SHM_SLOT_ROLE_SHIFT);
}

int shm_registry_read_slot(const struct shm_segment *seg, uint32_t slot,
                           struct shm_worker_info *out)
{
    if (slot >= seg->max_workers)
        return -ENOENT;
    struct shm_worker_slot *s = shm_slot(seg, slot);
    for (int attempt = 0; attempt < SHM_REGISTRY_READ_RETRIES; attempt++) {
        uint32_t seq1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (seq1 & 1u) {
            if (attempt > 16)
                sched_yield();
            continue;
        }
        uint32_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
        uint32_t gen = atomic_load_explicit(&s->generation, memory_order_relaxed);
        if (state & SHM_SLOT_IN_USE) {
            shm_words_load(s->id, SHM_ID_WORDS, out->id);
            shm_words_load(s->url, SHM_URL_WORDS, out->url);
            shm_words_load(s->model, SHM_MODEL_WORDS, out->model);
            shm_words_load(s->aliases, SHM_ALIASES_WORDS, out->aliases);
        }
        atomic_thread_fence(memory_order_acquire);
        uint32_t seq2 = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (seq1 != seq2)
            continue;
        if (!(state & SHM_SLOT_IN_USE))
            return -ENOENT;
        out->slot = slot;
        out->generation = gen;
        shm_info_from_state(out, state);
        return 0;
    }
    return -EAGAIN;
}

size_t shm_registry_snapshot(const struct shm_segment *seg, struct shm_worker_info *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < seg->max_workers && n < cap; i++) {
        /* Cheap pre-check: most slots of a large registry are free. */
        if (!(atomic_load_explicit(&seg->slots[i].state, memory_order_relaxed) & SHM_SLOT_IN_USE))
            continue;
        if (shm_registry_read_slot(seg, i, &out[n]) == 0)
            n++;
    }
    return n;
}

int shm_registry_find(const struct shm_segment *seg, const char *id, struct shm_worker_info *out)
{
    for (uint32_t i = 0; i < seg->max_workers; i++) {
        if (!(atomic_load_explicit(&seg->slots[i].state, memory_order_relaxed) & SHM_SLOT_IN_USE))
            continue;
        if (shm_registry_read_slot(seg, i, out) == 0 && strcmp(out->id, id) == 0)
            return 0;
    }
    return -ENOENT;
}

uint64_t shm_registry_changes(const struct shm_segment *seg)
{
    return atomic_load_explicit(&seg->hdr->registry_changes, memory_order_acquire);
}

uint32_t shm_registry_generation(const struct shm_segment *seg, uint32_t slot)
{
    return atomic_load_explicit(&seg->slots[slot].generation, memory_order_acquire);
}

bool shm_registry_is_synced(const struct shm_segment *seg)
{
    uint64_t synced = atomic_load_explicit(&seg->hdr->registry_synced_epoch, memory_order_acquire);
    return synced != 0 && synced == atomic_load_explicit(&seg->hdr->epoch, memory_order_acquire);
}

/* ---- writer --------------------------------------------------------------- */

void shm_registry_mark_synced(struct shm_segment *seg)
{
    uint64_t epoch = atomic_load_explicit(&seg->hdr->epoch, memory_order_relaxed);
    atomic_store_explicit(&seg->hdr->registry_synced_epoch, epoch, memory_order_release);
}

static void shm_write_begin(struct shm_worker_slot *s)
{
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void shm_write_end(struct shm_segment *seg, struct shm_worker_slot *s)
{
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_release);
    atomic_fetch_add_explicit(&seg->hdr->registry_changes, 1, memory_order_release);
}

static uint32_t shm_state_of(const struct shm_worker_info *in)
{
    uint32_t state = SHM_SLOT_IN_USE | ((uint32_t)in->role << SHM_SLOT_ROLE_SHIFT);
    if (in->healthy)
        state |= SHM_SLOT_HEALTHY;
    if (in->draining)
        state |= SHM_SLOT_DRAINING;
    if (in->from_api)
        state |= SHM_SLOT_FROM_API;
    state |= ((uint32_t)in->source << SHM_SLOT_SOURCE_SHIFT) & SHM_SLOT_SOURCE_MASK;
    return state;
}

int shm_registry_add(struct shm_segment *seg, const struct shm_worker_info *in,
                     struct shm_worker_info *out)
{
    uint32_t free_slot = UINT32_MAX;
    for (uint32_t i = 0; i < seg->max_workers; i++) {
        struct shm_worker_info cur;
        int rc = shm_registry_read_slot(seg, i, &cur);
        if (rc == -ENOENT) {
            if (free_slot == UINT32_MAX)
                free_slot = i;
            continue;
        }
        if (rc == 0 && (strcmp(cur.id, in->id) == 0 || strcmp(cur.url, in->url) == 0))
            return -EEXIST;
    }
    if (free_slot == UINT32_MAX)
        return -ENOSPC;

    struct shm_worker_slot *s = shm_slot(seg, free_slot);
    shm_write_begin(s);
    uint32_t gen = atomic_load_explicit(&s->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->generation, gen, memory_order_relaxed);
    shm_words_store(s->id, SHM_ID_WORDS, in->id);
    shm_words_store(s->url, SHM_URL_WORDS, in->url);
    shm_words_store(s->model, SHM_MODEL_WORDS, in->model);
    shm_words_store(s->aliases, SHM_ALIASES_WORDS, "");
    atomic_store_explicit(&s->state, shm_state_of(in), memory_order_relaxed);
    shm_write_end(seg, s);
    if (out != NULL) {
        *out = *in;
        out->aliases[0] = '\0';
        shm_info_from_state(out, shm_state_of(in)); /* flags as a reader will see them */
        out->slot = free_slot;
        out->generation = gen;
    }
    return 0;
}

static int shm_update_state(struct shm_segment *seg, uint32_t slot, uint32_t set, uint32_t clear)
{
    if (slot >= seg->max_workers)
        return -ENOENT;
    struct shm_worker_slot *s = shm_slot(seg, slot);
    uint32_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
    if (!(state & SHM_SLOT_IN_USE))
        return -ENOENT;
    uint32_t next = (state | set) & ~clear;
    if (next == state)
        return 0;
    shm_write_begin(s);
    atomic_store_explicit(&s->state, next, memory_order_relaxed);
    shm_write_end(seg, s);
    return 0;
}

int shm_registry_set_healthy(struct shm_segment *seg, uint32_t slot, bool healthy)
{
    return healthy ? shm_update_state(seg, slot, SHM_SLOT_HEALTHY, 0)
                   : shm_update_state(seg, slot, 0, SHM_SLOT_HEALTHY);
}

int shm_registry_set_sleeping(struct shm_segment *seg, uint32_t slot, bool sleeping)
{
    return sleeping ? shm_update_state(seg, slot, SHM_SLOT_SLEEPING, 0)
                    : shm_update_state(seg, slot, 0, SHM_SLOT_SLEEPING);
}

bool shm_registry_is_draining(const struct shm_segment *seg, uint32_t slot)
{
    if (slot >= seg->max_workers)
        return false;
    struct shm_worker_slot *s = shm_slot(seg, slot);
    return (atomic_load_explicit(&s->state, memory_order_seq_cst) & SHM_SLOT_DRAINING) != 0;
}

int shm_registry_set_draining(struct shm_segment *seg, uint32_t slot, bool draining)
{
    /* A drain set during a reset's is a real one: it outlives the reset. */
    int rc = draining ? shm_update_state(seg, slot, SHM_SLOT_DRAINING, SHM_SLOT_RESETTING)
                      : shm_update_state(seg, slot, 0, SHM_SLOT_DRAINING | SHM_SLOT_RESETTING);
    /* Orders the flag before whatever the caller does next (reset_load then
     * asks the dataplanes for their live guards): see shm_registry_is_draining. */
    atomic_thread_fence(memory_order_seq_cst);
    return rc;
}

int shm_registry_set_reset_drain(struct shm_segment *seg, uint32_t slot, bool on)
{
    if (slot >= seg->max_workers)
        return -ENOENT;
    const uint32_t both = SHM_SLOT_DRAINING | SHM_SLOT_RESETTING;
    uint32_t state = atomic_load_explicit(&shm_slot(seg, slot)->state, memory_order_relaxed);
    uint32_t set = 0, clear = 0;
    if (on && !(state & SHM_SLOT_DRAINING))
        set = both; /* not draining yet: the drain is the reset's */
    else if (!on && (state & SHM_SLOT_RESETTING))
        clear = both; /* still the reset's drain (a real one cleared RESETTING) */
    int rc = shm_update_state(seg, slot, set, clear); /* -ENOENT when not in use */
    atomic_thread_fence(memory_order_seq_cst);        /* as shm_registry_set_draining */
    return rc;
}

int shm_registry_end_interrupted_resets(struct shm_segment *seg)
{
    int ended = 0;
    for (uint32_t slot = 0; slot < seg->max_workers; slot++) {
        uint32_t state = atomic_load_explicit(&shm_slot(seg, slot)->state, memory_order_relaxed);
        if ((state & SHM_SLOT_IN_USE) && (state & SHM_SLOT_RESETTING) &&
            shm_registry_set_reset_drain(seg, slot, false) == 0)
            ended++;
    }
    return ended;
}

int shm_registry_set_names(struct shm_segment *seg, uint32_t slot, const char *model,
                           const char *aliases)
{
    if (strlen(model) >= SHM_MODEL_MAX || strlen(aliases) >= SHM_ALIASES_MAX)
        return -EINVAL;
    if (slot >= seg->max_workers)
        return -ENOENT;
    struct shm_worker_slot *s = shm_slot(seg, slot);
    if (!(atomic_load_explicit(&s->state, memory_order_relaxed) & SHM_SLOT_IN_USE))
        return -ENOENT;
    shm_write_begin(s);
    shm_words_store(s->model, SHM_MODEL_WORDS, model);
    shm_words_store(s->aliases, SHM_ALIASES_WORDS, aliases);
    shm_write_end(seg, s);
    return 0;
}

bool shm_worker_serves(const struct shm_worker_info *w, const char *model)
{
    if (strcmp(w->model, model) == 0)
        return true;
    size_t len = strlen(model);
    for (const char *p = w->aliases; *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len && memcmp(p, model, len) == 0)
            return true;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return false;
}

int shm_registry_remove(struct shm_segment *seg, uint32_t slot)
{
    return shm_update_state(seg, slot, 0, UINT32_MAX);
}

static bool shm_text_is_sane(const char *text)
{
    if (text[0] == '\0')
        return false;
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p < 0x20 || *p >= 0x7f)
            return false;
    }
    return true;
}

int shm_registry_repair(struct shm_segment *seg)
{
    int repaired = 0;
    for (uint32_t i = 0; i < seg->max_workers; i++) {
        struct shm_worker_slot *s = shm_slot(seg, i);
        uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (!(seq & 1u))
            continue;
        /* Close the half-write so readers stop spinning, then judge it. */
        atomic_store_explicit(&s->seq, seq + 1, memory_order_release);
        struct shm_worker_info info;
        if (shm_registry_read_slot(seg, i, &info) == 0 &&
            (!shm_text_is_sane(info.id) || !shm_text_is_sane(info.url)))
            shm_registry_remove(seg, i);
        atomic_fetch_add_explicit(&seg->hdr->registry_changes, 1, memory_order_release);
        repaired++;
    }
    return repaired;
}
