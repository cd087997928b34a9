/*
 * Publishes the configured workers into the segment's registry, reconciling
 * with what a previous control plane left there. The registry outlives both
 * daemons (invariant 8), so a restart must change only what the config
 * changed:
 *  - a configured worker already present with the same url and role keeps
 *    its slot and generation (its in-flight load stays attached to it);
 *  - a configured worker whose url or role changed is a new worker: removed
 *    and added again, with a new generation;
 *  - a worker that came from the config and is no longer in it is removed;
 *  - a worker added through the admin API is kept.
 * Control plane only (the registry's single writer).
 */
#ifndef SY_CONTROLPLANE_REGISTRY_SYNC_H
#define SY_CONTROLPLANE_REGISTRY_SYNC_H

#include <stddef.h>

#include "common/config.h"
#include "shm/segment.h"

/* Returns 0 or a negative errno with a message in err. */
int cp_registry_sync(struct shm_segment *seg, const struct cfg *cfg, char *err, size_t err_len);

#endif
