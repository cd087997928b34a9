/*
 * The static worker source: the config file's workers: list. It proposes
 * the whole list when the control plane starts and at every reload
 * (controlplane/admin/reload.h), and owns exactly the workers it put in the registry: workers added
 * through the admin API (or any other source) are left alone, and a
 * configured id or url that another source already uses is an error.
 * Control plane only.
 */
#ifndef SY_CONTROLPLANE_SOURCE_STATIC_H
#define SY_CONTROLPLANE_SOURCE_STATIC_H

#include <stddef.h>

#include "common/config.h"
#include "controlplane/sources/registry_sync.h"

/* Syncs cfg's workers into reg's registry (see registry_sync.h). Returns 0
 * or a negative errno with a message in err that starts with the config's
 * path. */
int cp_source_static_sync(struct cp_registry *reg, const struct cfg *cfg, char *err,
                          size_t err_len);

#endif
