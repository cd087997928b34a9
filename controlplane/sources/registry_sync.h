/*
 * Applies what a worker source proposes (controlplane/sources/source.h) to the
 * segment's registry, touching only that source's workers (invariant 12).
 * The registry outlives both daemons (invariant 8), so a sync changes only
 * what the source's proposal changed:
 *  - a proposed worker already present with the same url and role (and
 *    model, unless the proposal leaves it to be learned) keeps its slot and
 *    generation (its in-flight load stays attached to it);
 *  - a proposed worker whose url, role or model changed is a new worker:
 *    removed and added again, with a new generation;
 *  - a worker of this source that is no longer proposed is removed;
 *  - a worker of another source is never touched, and a proposal that uses
 *    its id or url is refused before anything changes.
 * A source that cannot see its truth (an API server down) keeps what it
 * had by not calling the sync at all: its own work around the sync (the
 * Kubernetes source's retirements and drains) must wait too, so the guard
 * is the source's (source.h).
 * Sources that change one worker at a time (the admin API) use
 * cp_registry_add / cp_registry_retire, under the same ownership rule.
 *
 * What the writer keeps beside the segment (how new workers start, each
 * worker's KV-event endpoints) lives in struct cp_registry, which the
 * control plane owns and every source is handed; there is no state at
 * file scope. Control plane only (the registry's single writer, one
 * thread).
 */
#ifndef SY_CONTROLPLANE_REGISTRY_SYNC_H
#define SY_CONTROLPLANE_REGISTRY_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controlplane/sources/source.h"
#include "shm/registry.h"
#include "shm/segment.h"

struct cp_kv_slot;

/*
 * The registry's writer: the segment it writes, how workers added from now
 * on start, and each worker's KV-event endpoints as its source proposed
 * them (cp_registry_kv_events). Caller storage, owned by the control plane
 * (one per segment, cp_registry_init / cp_registry_fini), outliving every
 * source it is handed to; touched by the control plane's loop thread only.
 * Only seg is read outside registry_sync.c (the sources reach the segment
 * through it); the other fields are registry_sync.c's.
 */
struct cp_registry {
    struct shm_segment *seg;     /* borrowed */
    bool start_healthy;          /* cp_registry_set_start_healthy */
    struct cp_kv_slot *kv_slots; /* per slot, grown to the highest slot used */
    size_t kv_cap;
    uint64_t kv_version; /* cp_registry_kv_version */
};

/* Makes reg the writer of seg (borrowed; it may be opened later, before
 * the first call): no KV endpoints, workers starting healthy. */
void cp_registry_init(struct cp_registry *reg, struct shm_segment *seg);

/* Frees what reg holds; the registry in the segment stays as it is. */
void cp_registry_fini(struct cp_registry *reg);

/*
 * Reconciles set->kind's workers with set. Returns 0, or a negative errno
 * with a message in err naming the worker ("worker ID: ..."): -EEXIST (its
 * id or url belongs to another source's worker), -EINVAL (the set proposes
 * an id or url twice), -ENOSPC (registry full), -ENOMEM. A conflict is found
 * before any change; a full registry may stop it half-way (what was applied
 * stays applied, as with any later sync).
 */
int cp_registry_sync(struct cp_registry *reg, const struct cp_source_set *set, char *err,
                     size_t err_len);

/*
 * How workers added from now on start (cp_registry_add and the additions of
 * cp_registry_sync): healthy, or not healthy in their slot — "unknown", so
 * no data plane routes to them — until the health prober's first successful
 * probe (controlplane.health.initial). The control plane syncs its config
 * at start with the default, healthy, and then sets health.initial, so that
 * every worker added while it runs (admin API, discovery, a reload) obeys
 * it without each source having to know. One setting per writer, as the
 * registry has one writer, the control plane's thread.
 */
void cp_registry_set_start_healthy(struct cp_registry *reg, bool healthy);

/*
 * Adds one worker for source kind, starting as cp_registry_set_start_healthy
 * says (then as probes say), with a new generation; the placed copy goes to out (may be NULL).
 * Returns 0, -EEXIST (id or url already registered, by any source), -ENOSPC.
 */
int cp_registry_add(struct cp_registry *reg, enum cp_source_kind kind,
                    const struct cp_source_worker *w, struct shm_worker_info *out);

/* Removes worker id if source kind owns it. 0, -ENOENT, -EPERM (another
 * source's worker: left as it is). */
int cp_registry_retire(struct cp_registry *reg, enum cp_source_kind kind, const char *id);

/*
 * What the registry carries beside the segment, in the control plane's
 * memory: each worker's KV-event endpoints as its source proposed them
 * (the segment's slots are fixed-size and read by data planes, which have
 * no use for them). Set when a sync or an add places or keeps a worker,
 * cleared when it leaves; a control-plane restart learns them again from
 * the sources' first sync.
 *
 * cp_registry_kv_events: the endpoints of the worker in slot with that
 * generation, or NULL (none, or another occupant). cp_registry_kv_version:
 * changes whenever any of them changes, so a follower can skip rebuilding.
 */
const struct cfg_kv_events *cp_registry_kv_events(const struct cp_registry *reg, uint32_t slot,
                                                  uint32_t generation);
uint64_t cp_registry_kv_version(const struct cp_registry *reg);

#endif
