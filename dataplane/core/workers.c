/*
 * Per-loop registry copy (see workers.h). Reads registry_changes before the
 * snapshot: a write racing the snapshot moves the counter again, so the
 * next refresh rescans instead of keeping a half-new copy forever.
 */
#include "dataplane/core/workers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dp_workers_init(struct dp_workers *v, const struct shm_segment *seg)
{
    memset(v, 0, sizeof(*v));
    v->seg = seg;
    v->cap = seg->max_workers;
    v->w = calloc(v->cap, sizeof(*v->w));
    return v->w != NULL ? 0 : -ENOMEM;
}

void dp_workers_fini(struct dp_workers *v)
{
    free(v->w);
    v->w = NULL;
    v->n = 0;
}

void dp_workers_refresh(struct dp_workers *v)
{
    uint64_t now = shm_registry_changes(v->seg);
    if (v->loaded && now == v->changes)
        return;
    v->n = shm_registry_snapshot(v->seg, v->w, v->cap);
    v->changes = now;
    v->loaded = true;
}

bool dp_workers_has_model(const struct dp_workers *v, const char *model)
{
    for (size_t i = 0; i < v->n; i++)
        if (shm_worker_serves(&v->w[i], model))
            return true;
    return false;
}

bool dp_workers_single_model(const struct dp_workers *v, char *model, size_t len)
{
    const char *first = NULL;
    for (size_t i = 0; i < v->n; i++) {
        if (v->w[i].model[0] == '\0')
            continue;
        if (first == NULL)
            first = v->w[i].model;
        else if (strcmp(first, v->w[i].model) != 0)
            return false;
    }
    if (first == NULL || strlen(first) >= len)
        return false;
    strcpy(model, first);
    return true;
}

bool dp_workers_is_eligible(const struct shm_worker_info *w)
{
    return w->healthy && !w->draining && !w->sleeping &&
           (w->role == CFG_ROLE_REGULAR || w->role == CFG_ROLE_UNSET);
}

bool dp_workers_back_after_reset(const struct shm_worker_info *w,
                                 bool (*is_eligible)(const struct shm_worker_info *w))
{
    if (!w->resetting || !w->draining)
        return false;
    struct shm_worker_info back = *w;
    back.draining = false;
    return is_eligible(&back);
}
