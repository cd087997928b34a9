/*
 * The Kubernetes source's registry side (see source_kubernetes_internal.h):
 * the table of pods, kept by the watch state machine (source_kubernetes.c),
 * becomes one proposal for the per-source registry sync (registry_sync.h),
 * and the drains the source owns follow it. Batched: the state machine
 * only marks the table dirty and calls kube_sync once per loop pass, so a
 * burst of events costs one registry pass; a sweep every KUBE_SWEEP_MS
 * re-syncs while a gone pod's worker still drains, to remove it once its
 * load is 0.
 *
 * What a proposal holds: every pod that is a worker, as it is; and every
 * registered worker whose pod is no longer one (NotReady, terminating, or
 * gone while load remains, up to dataplane.drain_timeout), as it is in its
 * slot, draining. Registered workers are placed first, so that when two
 * pods claim one url the worker already in its slot keeps it; a pod whose
 * id or url another source's worker (or a pod placed before it) uses
 * waits, counted once in the warning tally, instead of making the registry sync refuse the whole
 * set. The source clears only the drains it set itself (an operator's
 * drain stays), and sets its own on a worker drained only by a reset_load,
 * whose drain ends with the reset.
 *
 * Lookups go through a registry snapshot sorted by id (qsort_r: no state
 * at file scope). Threading: the control plane's loop thread only.
 */
#include "controlplane/sources/source_kubernetes_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_kubernetes_pod.h"
#include "shm/load.h"
#include "shm/registry.h"

#define KUBE_SWEEP_MS 500u /* how often gone workers are checked for idleness */

/* ---- the registry snapshot, sorted by id ----------------------------------- */

/* qsort_r comparator: arg is the snapshot the indices point into. */
static int kube_cmp_snap(const void *a, const void *b, void *arg)
{
    const struct shm_worker_info *snap = arg;
    return strcmp(snap[*(const size_t *)a].id, snap[*(const size_t *)b].id);
}

void kube_sync_snapshot(struct cp_kube *k)
{
    k->n_snap = shm_registry_snapshot(k->seg, k->snap, k->seg->max_workers);
    for (size_t i = 0; i < k->n_snap; i++)
        k->snap_ix[i] = i;
    qsort_r(k->snap_ix, k->n_snap, sizeof(*k->snap_ix), kube_cmp_snap, k->snap);
}

static const struct shm_worker_info *kube_snap_find(const struct cp_kube *k, const char *id)
{
    size_t lo = 0, hi = k->n_snap;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct shm_worker_info *w = &k->snap[k->snap_ix[mid]];
        int c = strcmp(w->id, id);
        if (c == 0)
            return w;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Another source's worker already holds this id or url (those are few:
 * the id through the index, the url by a scan of the others only). */
static const struct shm_worker_info *kube_conflict(const struct cp_kube *k, const char *id,
                                                   const char *url, bool any_other)
{
    const struct shm_worker_info *w = kube_snap_find(k, id);
    if (w != NULL && w->source != CP_SOURCE_KUBERNETES)
        return w;
    for (size_t i = 0; any_other && i < k->n_snap; i++) {
        w = &k->snap[i];
        if (w->source != CP_SOURCE_KUBERNETES && strcmp(w->url, url) == 0)
            return w;
    }
    return NULL;
}

/* ---- the proposal ---------------------------------------------------------- */

static int kube_reserve_proposal(struct cp_kube *k)
{
    if (k->proposal_cap >= k->n + 1)
        return 0;
    size_t cap = k->n + 64;
    struct cp_source_worker *p = realloc(k->proposal, cap * sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    k->proposal = p;
    bool *d = realloc(k->drain, cap * sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    k->drain = d;
    k->proposal_cap = cap;
    return 0;
}

/* Whether the first n proposed workers already use id or url. */
static bool kube_proposed(const struct cp_kube *k, size_t n, const char *id, const char *url)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k->proposal[i].id, id) == 0 || strcmp(k->proposal[i].url, url) == 0)
            return true;
    return false;
}

/*
 * Which entries are proposed, and drained: a worker pod is proposed as it
 * is; a registered one that is no longer a worker stays (draining) while
 * its pod exists, and after it went while load remains, up to
 * dataplane.drain_timeout.
 */
static size_t kube_build_proposal(struct cp_kube *k, uint64_t now_ms)
{
    bool any_other = false;
    for (size_t i = 0; i < k->n_snap && !any_other; i++)
        any_other = k->snap[i].source != CP_SOURCE_KUBERNETES;
    size_t np = 0;
    for (size_t i = 0; i < k->n; i++)
        k->entries[i].prop = -1;
    /* Registered workers first: when two pods claim one url (an IP reused
     * while the old pod still drains), the worker already in its slot keeps
     * it and the newcomer waits. A set naming a url twice is refused whole
     * by the registry sync, which would freeze every other change too, and
     * leave workers of pods already forgotten in the registry. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < k->n; i++) {
            struct kube_entry *e = &k->entries[i];
            bool worker = e->exists && kube_pod_is_worker(&e->pod);
            const struct shm_worker_info *have =
                e->registered ? kube_snap_find(k, e->pod.id) : NULL;
            if (have != NULL && have->source != CP_SOURCE_KUBERNETES)
                have = NULL;
            if ((have != NULL) != (pass == 0))
                continue;
            bool keep = false;
            if (!worker && have != NULL) {
                if (e->exists)
                    keep = true;
                else
                    keep = shm_load_of(k->seg, have->slot, have->generation) > 0 &&
                           now_ms < e->gone_ms + k->cfg->dataplane.drain_timeout_ms;
            }
            if (!worker && !keep)
                continue;
            struct cp_source_worker *w = &k->proposal[np];
            memset(w, 0, sizeof(*w));
            snprintf(w->id, sizeof(w->id), "%s", e->pod.id);
            if (worker) {
                snprintf(w->url, sizeof(w->url), "%s", e->pod.url);
                snprintf(w->model, sizeof(w->model), "%s", e->pod.model);
                w->role = e->pod.role;
                w->kv_events = e->pod.kv_events;
            } else {
                /* Draining: as it is in its slot, so nothing replaces it. */
                snprintf(w->url, sizeof(w->url), "%s", have->url);
                w->role = have->role;
            }
            const struct shm_worker_info *c = kube_conflict(k, w->id, w->url, any_other);
            if (c != NULL) {
                if (!e->warned)
                    kube_tally_add(k, KUBE_SKIP_CONFLICT, e->pod.name);
                e->warned = true;
                continue;
            }
            if (kube_proposed(k, np, w->id, w->url)) {
                if (!e->warned)
                    kube_tally_add(k, KUBE_SKIP_WAITING, e->pod.name);
                e->warned = true;
                continue;
            }
            k->drain[np] = !worker;
            e->prop = (long)np;
            np++;
        }
    }
    return np;
}

/* ---- applying it ----------------------------------------------------------- */

static void kube_apply_drains(struct cp_kube *k)
{
    kube_sync_snapshot(k);
    for (size_t i = 0; i < k->n; i++) {
        struct kube_entry *e = &k->entries[i];
        /* Registered is what the registry holds, proposed or not: a worker
         * the sync could not remove (a full registry stops it half-way)
         * keeps its entry, so a later sync removes it; forgotten, nothing
         * would. */
        const struct shm_worker_info *w = kube_snap_find(k, e->pod.id);
        e->registered = w != NULL && w->source == CP_SOURCE_KUBERNETES;
        if (!e->registered || e->prop < 0)
            continue;
        bool drain = k->drain[e->prop];
        if (drain && (!w->draining || w->resetting)) { /* a reset's drain ends with it */
            if (shm_registry_set_draining(k->seg, w->slot, true) == 0)
                e->drained_by_us = true;
        } else if (!drain && w->draining && e->drained_by_us) {
            if (shm_registry_set_draining(k->seg, w->slot, false) == 0)
                e->drained_by_us = false;
        } else if (drain && w->draining && !e->exists) {
            e->drained_by_us = true;
        }
    }
}

void kube_sync(struct cp_kube *k, uint64_t now_ms)
{
    k->dirty = false;
    k->next_sweep_ms = now_ms + KUBE_SWEEP_MS;
    /* Re-created pods: the old worker goes first, so the new one gets a new generation. */
    for (size_t i = 0; i < k->n; i++) {
        struct kube_entry *e = &k->entries[i];
        if (!e->replaced)
            continue;
        e->replaced = false;
        if (cp_registry_retire(k->reg, CP_SOURCE_KUBERNETES, e->pod.id) == 0)
            log_info("discovery: pod %s was re-created (uid %s): its old worker is retired",
                     e->pod.name, e->pod.uid);
        e->registered = false;
    }
    if (kube_reserve_proposal(k) != 0) {
        log_error("discovery: out of memory building the Kubernetes proposal");
        k->dirty = true;
        return;
    }
    kube_sync_snapshot(k);
    size_t np = kube_build_proposal(k, now_ms);
    struct cp_source_set set = {.kind = CP_SOURCE_KUBERNETES, .workers = k->proposal, .n = np};
    char err[512] = "";
    int rc = cp_registry_sync(k->reg, &set, err, sizeof(err));
    if (rc != 0)
        log_error("discovery: syncing the registry with Kubernetes: %s", err);
    kube_apply_drains(k);
    /* Forget pods that are gone and whose worker is gone too. */
    size_t j = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (!k->entries[i].exists && !k->entries[i].registered)
            continue;
        if (j != i)
            k->entries[j] = k->entries[i];
        j++;
    }
    k->n = j;
}

/* A worker whose pod went: removed by a later sync once idle. */
bool kube_sync_has_leaving(const struct cp_kube *k)
{
    for (size_t i = 0; i < k->n; i++)
        if (k->entries[i].registered && !k->entries[i].exists)
            return true;
    return false;
}
