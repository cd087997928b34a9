/*
 * The admin-API worker source: POST /workers adds one worker to its set,
 * DELETE /workers/{id} takes one out. Its set has no copy of its own: the
 * registry is its truth (the slots tagged with this source), which is why
 * API-added workers survive control-plane restarts and the static config's
 * sync never touches them (invariant 12). Control plane only, on the admin
 * API's thread (the control plane's one thread).
 */
#ifndef SY_CONTROLPLANE_SOURCE_API_H
#define SY_CONTROLPLANE_SOURCE_API_H

#include "controlplane/sources/registry_sync.h"
#include "shm/registry.h"

/*
 * Adds in (its id, url, model and role; the rest is ignored) as a worker
 * of this source, through reg (the control plane's registry writer). The
 * placed copy goes to placed (may be NULL). Returns 0, -EEXIST (id or url
 * already registered), -ENOSPC (registry full).
 */
int cp_source_api_add(struct cp_registry *reg, const struct shm_worker_info *in,
                      struct shm_worker_info *placed);

/*
 * Removes worker w (a copy read from the registry). A worker of this source
 * leaves its set. A worker of another source is removed too: DELETE has
 * always been the operator's override for any worker, and its source adds it
 * back at its next sync (the config: at the next control-plane start).
 * Returns 0 or -ENOENT.
 */
int cp_source_api_delete(struct cp_registry *reg, const struct shm_worker_info *w);

#endif
