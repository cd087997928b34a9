/*
 * Config -> registry reconciliation (see registry_sync.h). Removals run
 * before additions so that a worker renamed in the config (same url, new
 * id) does not collide with its own old entry.
 */
#include "controlplane/registry_sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "shm/registry.h"

static const struct cfg_worker *cp_find_configured(const struct cfg *cfg, const char *id)
{
    for (size_t i = 0; i < cfg->n_workers; i++) {
        if (strcmp(cfg->workers[i].id, id) == 0)
            return &cfg->workers[i];
    }
    return NULL;
}

/* Whether a slot still describes the configured worker (same occupant). */
static bool cp_same_worker(const struct shm_worker_info *slot, const struct cfg_worker *w)
{
    if (strcmp(slot->url, w->url) != 0 || slot->role != w->role)
        return false;
    /* An empty configured model means "learn it": a learned model is no change. */
    return w->model[0] == '\0' || strcmp(slot->model, w->model) == 0;
}

int cp_registry_sync(struct shm_segment *seg, const struct cfg *cfg, char *err, size_t err_len)
{
    struct shm_worker_info *cur = calloc(seg->max_workers, sizeof(*cur));
    if (cur == NULL) {
        snprintf(err, err_len, "out of memory reading the registry");
        return -ENOMEM;
    }
    int rc = 0;
    size_t n = shm_registry_snapshot(seg, cur, seg->max_workers);

    for (size_t i = 0; i < n; i++) {
        const struct cfg_worker *w = cp_find_configured(cfg, cur[i].id);
        bool keep = w != NULL ? cp_same_worker(&cur[i], w) : cur[i].from_api;
        if (keep)
            continue;
        shm_registry_remove(seg, cur[i].slot);
        log_info("registry: removed worker %s (%s), slot %u generation %u: %s", cur[i].id,
                 cur[i].url, cur[i].slot, cur[i].generation,
                 w != NULL ? "its configuration changed" : "no longer in the config");
    }

    for (size_t i = 0; i < cfg->n_workers; i++) {
        const struct cfg_worker *w = &cfg->workers[i];
        struct shm_worker_info have;
        if (shm_registry_find(seg, w->id, &have) == 0)
            continue;
        struct shm_worker_info add = {
            .role = w->role, .healthy = true, /* until probes say otherwise */
        };
        snprintf(add.id, sizeof(add.id), "%s", w->id);
        snprintf(add.url, sizeof(add.url), "%s", w->url);
        snprintf(add.model, sizeof(add.model), "%s", w->model);
        struct shm_worker_info placed;
        rc = shm_registry_add(seg, &add, &placed);
        if (rc == -EEXIST) {
            snprintf(err, err_len,
                     "%s: worker %s: url %s is already registered under another id (added "
                     "through the admin API?); remove that worker first",
                     cfg->path, w->id, w->url);
            goto out_free;
        }
        if (rc == -ENOSPC) {
            snprintf(err, err_len, "%s: worker %s: the registry is full (shm.max_workers = %u)",
                     cfg->path, w->id, seg->max_workers);
            goto out_free;
        }
        if (rc != 0) {
            snprintf(err, err_len, "%s: worker %s: %s", cfg->path, w->id, strerror(-rc));
            goto out_free;
        }
        log_info("registry: added worker %s (%s, model '%s', role %s) in slot %u generation %u",
                 placed.id, placed.url, placed.model, cfg_role_name(placed.role), placed.slot,
                 placed.generation);
    }

out_free:
    free(cur);
    return rc;
}
