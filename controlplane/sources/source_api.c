/*
 * The admin-API worker source (see source_api.h): one worker at a time,
 * through the registry sync's per-worker add and retire, so ownership is
 * checked in one place.
 */
#include "controlplane/sources/source_api.h"

#include <stdio.h>

#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"

int cp_source_api_add(struct cp_registry *reg, const struct shm_worker_info *in,
                      struct shm_worker_info *placed)
{
    struct cp_source_worker w = {.role = in->role};
    snprintf(w.id, sizeof(w.id), "%s", in->id);
    snprintf(w.url, sizeof(w.url), "%s", in->url);
    snprintf(w.model, sizeof(w.model), "%s", in->model);
    return cp_registry_add(reg, CP_SOURCE_API, &w, placed);
}

int cp_source_api_delete(struct cp_registry *reg, const struct shm_worker_info *w)
{
    if (w->source == CP_SOURCE_API)
        return cp_registry_retire(reg, CP_SOURCE_API, w->id);
    /* Not ours: the operator's override (see source_api.h), by slot. */
    return shm_registry_remove(reg->seg, w->slot);
}
