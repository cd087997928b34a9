/*
 * The static worker source (see source_static.h): copies the configured
 * workers into a proposal and hands it to the per-source sync.
 */
#include "controlplane/sources/source_static.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"

int cp_source_static_sync(struct cp_registry *reg, const struct cfg *cfg, char *err, size_t err_len)
{
    /* calloc(0) may return NULL: always ask for at least one entry. */
    struct cp_source_worker *ws = calloc(cfg->n_workers + 1, sizeof(*ws));
    if (ws == NULL) {
        snprintf(err, err_len, "%s: out of memory reading the workers", cfg->path);
        return -ENOMEM;
    }
    for (size_t i = 0; i < cfg->n_workers; i++) {
        const struct cfg_worker *c = &cfg->workers[i];
        snprintf(ws[i].id, sizeof(ws[i].id), "%s", c->id);
        snprintf(ws[i].url, sizeof(ws[i].url), "%s", c->url);
        snprintf(ws[i].model, sizeof(ws[i].model), "%s", c->model);
        ws[i].role = c->role;
        ws[i].kv_events = c->kv_events;
    }
    struct cp_source_set set = {.kind = CP_SOURCE_STATIC, .workers = ws, .n = cfg->n_workers};
    char why[512] = "";
    int rc = cp_registry_sync(reg, &set, why, sizeof(why));
    if (rc != 0)
        snprintf(err, err_len, "%s: %s", cfg->path, why);
    free(ws);
    return rc;
}
