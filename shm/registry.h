/*
 * The worker registry in the segment: max_workers slots, each a multi-field
 * record behind a seqlock. The control plane is the only writer; dataplanes
 * and tools read. Readers copy a slot out (shm_worker_info) and retry while
 * the writer is mid-write, a bounded number of times.
 *
 * A slot's generation is bumped whenever it changes hands (a worker is
 * placed in a free slot), never on health or draining changes and never on
 * removal: load guards from the removed worker still release against the
 * old generation until the slot is reused (invariant 6).
 *
 * header.registry_changes is bumped after every write, so a reader that
 * remembers the last value it saw can skip a rescan.
 */
#ifndef SY_SHM_REGISTRY_H
#define SY_SHM_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/segment.h"

/* A reader's copy of one slot. Plain caller storage. */
struct shm_worker_info {
    uint32_t slot;
    uint32_t generation;
    enum cfg_role role;
    bool healthy;
    bool draining;
    bool resetting; /* draining only while a reset_load runs (set_reset_drain) */
    bool sleeping;  /* the worker's engine sleeps (its /metrics said so) */
    bool from_api;  /* read side: source == 1 (the admin API) */
    uint8_t source; /* tag of the worker source that added it, 0..31; 0 = the config */
    char id[SHM_ID_MAX];
    char url[SHM_URL_MAX];
    char model[SHM_MODEL_MAX];
    /* The worker's other names ('\n'-separated, "" = none): read side only;
     * shm_registry_add leaves them empty, shm_registry_set_names sets them. */
    char aliases[SHM_ALIASES_MAX];
};

/* How many times a reader retries a slot the writer keeps changing. */
#define SHM_REGISTRY_READ_RETRIES 1000

/* Reads one slot. 0, -ENOENT (slot not in use), -EAGAIN (torn after all retries). */
int shm_registry_read_slot(const struct shm_segment *seg, uint32_t slot,
                           struct shm_worker_info *out);

/* Copies every in-use slot into out (up to cap); returns how many. */
size_t shm_registry_snapshot(const struct shm_segment *seg, struct shm_worker_info *out,
                             size_t cap);

/* Finds an in-use worker by id. 0 or -ENOENT. */
int shm_registry_find(const struct shm_segment *seg, const char *id, struct shm_worker_info *out);

uint64_t shm_registry_changes(const struct shm_segment *seg);

/* The slot's current generation, read without the seqlock. */
uint32_t shm_registry_generation(const struct shm_segment *seg, uint32_t slot);

/*
 * The slot's draining flag, read with a sequentially consistent load. The
 * dataplane calls it after announcing a guard (dataplane/core/guard.c) and the
 * control plane sets the flag before asking the dataplanes what they hold
 * (controlplane/admin/reset_load.c): of the two, at least one sees the other.
 */
bool shm_registry_is_draining(const struct shm_segment *seg, uint32_t slot);

/* True once the current control plane (epoch) has synced the configured
 * workers into the registry (shm_registry_mark_synced). */
bool shm_registry_is_synced(const struct shm_segment *seg);

/* ---- writer side: the control plane only --------------------------------- */

/* Publishes that the registry holds the configured workers for this epoch. */
void shm_registry_mark_synced(struct shm_segment *seg);

/*
 * Places a worker in a free slot with a new generation. in->slot and
 * in->generation are ignored; the assigned ones are written to out (may be
 * NULL). Returns 0, -EEXIST (id or url already present), -ENOSPC.
 */
int shm_registry_add(struct shm_segment *seg, const struct shm_worker_info *in,
                     struct shm_worker_info *out);

/* Sets/clears SHM_SLOT_HEALTHY / SHM_SLOT_DRAINING on an in-use slot. Both
 * directions of draining clear RESETTING (the drain is the operator's). */
int shm_registry_set_healthy(struct shm_segment *seg, uint32_t slot, bool healthy);
int shm_registry_set_draining(struct shm_segment *seg, uint32_t slot, bool draining);

/* Sets/clears SHM_SLOT_SLEEPING: the load-report scraper, from the
 * worker's vllm:engine_sleep_state. A new slot starts awake. 0 or -ENOENT. */
int shm_registry_set_sleeping(struct shm_segment *seg, uint32_t slot, bool sleeping);

/*
 * The drain of a reset_load: on sets DRAINING and RESETTING in one write
 * unless the worker already drains (then the reset leaves it as it is);
 * off clears both, only while RESETTING is still set: a real drain set
 * meanwhile (shm_registry_set_draining clears RESETTING) outlives the
 * reset. Readers route as for any drain; a request that only this worker
 * may serve waits for the reset to end instead of failing
 * (dataplane/forward/forwarder.c). 0 or -ENOENT.
 */
int shm_registry_set_reset_drain(struct shm_segment *seg, uint32_t slot, bool on);

/*
 * Ends the reset drains a control plane left when it died mid-reset (it had
 * changed nothing else: the load is reset only as the reset concludes, and
 * the drain is cleared in the same step). Call on re-attaching. Returns how
 * many slots it cleared.
 */
int shm_registry_end_interrupted_resets(struct shm_segment *seg);

/*
 * Sets the model and the other names of an in-use slot (both learned from
 * the worker's /v1/models). aliases: names separated by '\n', "" for none;
 * at most SHM_ALIASES_MAX - 1 bytes. 0, -ENOENT, -EINVAL (too long).
 */
int shm_registry_set_names(struct shm_segment *seg, uint32_t slot, const char *model,
                           const char *aliases);

/* True when w serves model under its name or one of its aliases. */
bool shm_worker_serves(const struct shm_worker_info *w, const char *model);

/* Marks the slot free. Its generation stays until the slot is reused. */
int shm_registry_remove(struct shm_segment *seg, uint32_t slot);

/*
 * After a control-plane restart: a slot left with an odd seq was being
 * written when the previous owner died. Its fields may be torn; a slot whose
 * strings do not check out is freed, the rest are kept. Returns how many
 * slots were repaired.
 */
int shm_registry_repair(struct shm_segment *seg);

#endif
