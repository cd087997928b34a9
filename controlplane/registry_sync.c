/*
 * Per-source reconciliation of the registry (see registry_sync.h). Checks
 * run first, on a snapshot, so a refused proposal changes nothing. Then
 * removals run before additions, so that a worker renamed by its source
 * (same url, new id) does not collide with its own old entry.
 */
#include "controlplane/registry_sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

_Static_assert(CP_SOURCE_COUNT <= 32, "a source kind is a 5-bit tag in the slot");

/* See cp_registry_set_start_healthy: the control plane's thread only. */
static bool cp_start_healthy = true;

void cp_registry_set_start_healthy(bool healthy)
{
    cp_start_healthy = healthy;
}

static const struct cp_source_worker *cp_find_proposed(const struct cp_source_set *set,
                                                       const char *id)
{
    for (size_t i = 0; i < set->n; i++) {
        if (strcmp(set->workers[i].id, id) == 0)
            return &set->workers[i];
    }
    return NULL;
}

/* Whether a slot still describes the proposed worker (same occupant). */
static bool cp_same_worker(const struct shm_worker_info *slot, const struct cp_source_worker *w)
{
    if (strcmp(slot->url, w->url) != 0 || slot->role != w->role)
        return false;
    /* An empty proposed model means "learn it": a learned model is no change. */
    return w->model[0] == '\0' || strcmp(slot->model, w->model) == 0;
}

/* Refuses a set that names an id or url twice, or uses another source's. */
static int cp_check_set(const struct cp_source_set *set, const struct shm_worker_info *cur,
                        size_t n_cur, char *err, size_t err_len)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct cp_source_worker *w = &set->workers[i];
        for (size_t j = 0; j < i; j++) {
            if (strcmp(set->workers[j].id, w->id) == 0 ||
                strcmp(set->workers[j].url, w->url) == 0) {
                snprintf(err, err_len, "worker %s: its id or url %s is proposed twice by the %s",
                         w->id, w->url, cp_source_name(set->kind));
                return -EINVAL;
            }
        }
        for (size_t j = 0; j < n_cur; j++) {
            const struct shm_worker_info *c = &cur[j];
            if (c->source == set->kind)
                continue;
            if (strcmp(c->id, w->id) == 0) {
                snprintf(err, err_len,
                         "worker %s: this id is already used by a worker of the %s (url %s); "
                         "remove that worker first",
                         w->id, cp_source_name(c->source), c->url);
                return -EEXIST;
            }
            if (strcmp(c->url, w->url) == 0) {
                snprintf(err, err_len,
                         "worker %s: url %s is already registered under another id (%s, added "
                         "by the %s); remove that worker first",
                         w->id, w->url, c->id, cp_source_name(c->source));
                return -EEXIST;
            }
        }
    }
    return 0;
}

int cp_registry_add(struct shm_segment *seg, enum cp_source_kind kind,
                    const struct cp_source_worker *w, struct shm_worker_info *out)
{
    struct shm_worker_info add = {
        .role = w->role,
        .healthy = cp_start_healthy, /* until probes say otherwise */
        .source = (uint8_t)kind,
    };
    snprintf(add.id, sizeof(add.id), "%s", w->id);
    snprintf(add.url, sizeof(add.url), "%s", w->url);
    snprintf(add.model, sizeof(add.model), "%s", w->model);
    return shm_registry_add(seg, &add, out);
}

int cp_registry_retire(struct shm_segment *seg, enum cp_source_kind kind, const char *id)
{
    struct shm_worker_info w;
    if (shm_registry_find(seg, id, &w) != 0)
        return -ENOENT;
    if (w.source != kind)
        return -EPERM;
    return shm_registry_remove(seg, w.slot);
}

int cp_registry_sync(struct shm_segment *seg, const struct cp_source_set *set, char *err,
                     size_t err_len)
{
    if (set->stale)
        return 0; /* it cannot see its truth: what it had stays */
    struct shm_worker_info *cur = calloc(seg->max_workers, sizeof(*cur));
    if (cur == NULL) {
        snprintf(err, err_len, "out of memory reading the registry");
        return -ENOMEM;
    }
    size_t n = shm_registry_snapshot(seg, cur, seg->max_workers);
    const char *name = cp_source_name(set->kind);
    int rc = cp_check_set(set, cur, n, err, err_len);
    if (rc != 0)
        goto out_free;

    for (size_t i = 0; i < n; i++) {
        if (cur[i].source != set->kind)
            continue; /* invariant 12: never another source's worker */
        const struct cp_source_worker *w = cp_find_proposed(set, cur[i].id);
        if (w != NULL && cp_same_worker(&cur[i], w))
            continue;
        shm_registry_remove(seg, cur[i].slot);
        log_info("registry: removed worker %s (%s), slot %u generation %u: %s %s", cur[i].id,
                 cur[i].url, cur[i].slot, cur[i].generation,
                 w != NULL ? "changed by the" : "no longer proposed by the", name);
    }

    for (size_t i = 0; i < set->n; i++) {
        const struct cp_source_worker *w = &set->workers[i];
        struct shm_worker_info placed;
        if (shm_registry_find(seg, w->id, &placed) == 0)
            continue; /* unchanged: checked above that it is ours */
        rc = cp_registry_add(seg, set->kind, w, &placed);
        if (rc == -ENOSPC) {
            snprintf(err, err_len, "worker %s: the registry is full (shm.max_workers = %u)", w->id,
                     seg->max_workers);
            goto out_free;
        }
        if (rc != 0) {
            snprintf(err, err_len, "worker %s: %s", w->id, strerror(-rc));
            goto out_free;
        }
        log_info("registry: added worker %s (%s, model '%s', role %s) from the %s in slot %u "
                 "generation %u",
                 placed.id, placed.url, placed.model, cfg_role_name(placed.role), name, placed.slot,
                 placed.generation);
    }

out_free:
    free(cur);
    return rc;
}
