/*
 * The admission hub (see adm_hub.h): one mutex, a list of models, and per
 * model one ring of tenant entries per band. The entries are few (models
 * times bands times the tenants that asked recently), so "who is next" is
 * a scan of one band's ring under the lock; it runs only while requests
 * wait, once per request handed out. The atomics beside the lock let the
 * loops skip the hub entirely while nothing waits anywhere.
 */
#include "dataplane/adm_hub.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/list.h"

/* How far behind the most served tenant of a band another may fall, in
 * requests: what it may catch up, in a row, after an absence. Small, so a
 * tenant that was idle for long cannot hold the others back for long. */
#define DP_ADM_HUB_CREDIT 4u

struct dp_adm_hub_tenant {
    struct list_node ring_link; /* its band's ring in the model */
    struct dp_adm_hub_model *model;
    enum dp_prio prio;
    uint32_t refs;    /* loops' tenant queues naming it */
    uint32_t waiting; /* on every loop */
    uint64_t served;  /* handed out, floored at the band's most served - credit */
    uint32_t on_loop[DP_ADM_HUB_LOOPS];
    uint64_t head_ms[DP_ADM_HUB_LOOPS]; /* its oldest's enqueue time there (on_loop > 0) */
    char tenant[DP_TENANT_NAME_MAX];
};

struct dp_adm_hub_model {
    struct list_node link; /* dp_adm_hub.models */
    uint32_t refs;
    _Atomic uint32_t waiting; /* every band, every loop */
    uint32_t band_n[DP_PRIO_COUNT];
    struct list_node bands[DP_PRIO_COUNT];
    char name[CFG_MODEL_MAX];
};

struct dp_adm_hub {
    pthread_mutex_t mu;
    struct list_node models;
    _Atomic uint32_t waiting; /* every model */
    unsigned n_loops;         /* highest index attached + 1: what next() scans */
    struct dp_loop *loops[DP_ADM_HUB_LOOPS];
};

struct dp_adm_hub *dp_adm_hub_create(void)
{
    struct dp_adm_hub *hub = calloc(1, sizeof(*hub));
    if (hub == NULL)
        return NULL;
    if (pthread_mutex_init(&hub->mu, NULL) != 0) {
        free(hub);
        return NULL;
    }
    list_init(&hub->models);
    atomic_init(&hub->waiting, 0);
    return hub;
}

void dp_adm_hub_destroy(struct dp_adm_hub *hub)
{
    if (hub == NULL)
        return;
    /* Every loop put its entries back at its fini; what a failed start
     * left is freed here. */
    while (!list_is_empty(&hub->models)) {
        struct dp_adm_hub_model *hm =
            list_entry(list_pop_front(&hub->models), struct dp_adm_hub_model, link);
        for (int p = 0; p < DP_PRIO_COUNT; p++)
            while (!list_is_empty(&hm->bands[p]))
                free(
                    list_entry(list_pop_front(&hm->bands[p]), struct dp_adm_hub_tenant, ring_link));
        free(hm);
    }
    pthread_mutex_destroy(&hub->mu);
    free(hub);
}

void dp_adm_hub_attach(struct dp_adm_hub *hub, unsigned index, struct dp_loop *loop)
{
    if (index >= DP_ADM_HUB_LOOPS)
        return;
    pthread_mutex_lock(&hub->mu);
    hub->loops[index] = loop;
    if (loop != NULL && index >= hub->n_loops)
        hub->n_loops = index + 1;
    pthread_mutex_unlock(&hub->mu);
}

struct dp_loop *dp_adm_hub_loop(const struct dp_adm_hub *hub, unsigned index)
{
    return index < DP_ADM_HUB_LOOPS ? hub->loops[index] : NULL;
}

struct dp_adm_hub_model *dp_adm_hub_model_get(struct dp_adm_hub *hub, const char *model)
{
    struct dp_adm_hub_model *found = NULL;
    pthread_mutex_lock(&hub->mu);
    struct list_node *it;
    list_foreach(it, &hub->models)
    {
        struct dp_adm_hub_model *hm = list_entry(it, struct dp_adm_hub_model, link);
        if (strcmp(hm->name, model) == 0) {
            found = hm;
            break;
        }
    }
    if (found == NULL) {
        found = calloc(1, sizeof(*found));
        if (found != NULL) {
            snprintf(found->name, sizeof(found->name), "%s", model);
            atomic_init(&found->waiting, 0);
            for (int p = 0; p < DP_PRIO_COUNT; p++)
                list_init(&found->bands[p]);
            list_push_back(&hub->models, &found->link);
        }
    }
    if (found != NULL)
        found->refs++;
    pthread_mutex_unlock(&hub->mu);
    return found;
}

void dp_adm_hub_model_put(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm)
{
    if (hm == NULL)
        return;
    pthread_mutex_lock(&hub->mu);
    /* Its tenant entries are referenced by the same loops' tenant queues,
     * which each loop puts back before its model: empty bands here. */
    if (--hm->refs == 0) {
        list_remove(&hm->link);
        free(hm);
    }
    pthread_mutex_unlock(&hub->mu);
}

/* The most served entry's count in a band (0 when none). Under the lock. */
static uint64_t hub_band_leader(const struct list_node *band)
{
    uint64_t top = 0;
    const struct list_node *it;
    list_foreach(it, band)
    {
        const struct dp_adm_hub_tenant *ht = list_entry(it, struct dp_adm_hub_tenant, ring_link);
        if (ht->served > top)
            top = ht->served;
    }
    return top;
}

struct dp_adm_hub_tenant *dp_adm_hub_tenant_get(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm,
                                                enum dp_prio prio, const char *tenant)
{
    struct dp_adm_hub_tenant *found = NULL;
    pthread_mutex_lock(&hub->mu);
    struct list_node *it;
    list_foreach(it, &hm->bands[prio])
    {
        struct dp_adm_hub_tenant *ht = list_entry(it, struct dp_adm_hub_tenant, ring_link);
        if (strcmp(ht->tenant, tenant) == 0) {
            found = ht;
            break;
        }
    }
    if (found == NULL) {
        found = calloc(1, sizeof(*found));
        if (found != NULL) {
            found->model = hm;
            found->prio = prio;
            uint64_t top = hub_band_leader(&hm->bands[prio]);
            found->served = top > DP_ADM_HUB_CREDIT ? top - DP_ADM_HUB_CREDIT : 0;
            snprintf(found->tenant, sizeof(found->tenant), "%s", tenant);
            list_push_back(&hm->bands[prio], &found->ring_link);
        }
    }
    if (found != NULL)
        found->refs++;
    pthread_mutex_unlock(&hub->mu);
    return found;
}

void dp_adm_hub_tenant_put(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht)
{
    if (ht == NULL)
        return;
    pthread_mutex_lock(&hub->mu);
    /* A loop puts its tenant queue back only when it holds nothing, so an
     * entry that goes has nothing waiting. */
    if (--ht->refs == 0) {
        list_remove(&ht->ring_link);
        free(ht);
    }
    pthread_mutex_unlock(&hub->mu);
}

void dp_adm_hub_waiting(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                        int delta, uint64_t head_ms)
{
    if (index >= DP_ADM_HUB_LOOPS)
        return;
    pthread_mutex_lock(&hub->mu);
    struct dp_adm_hub_model *hm = ht->model;
    if (delta > 0) {
        ht->on_loop[index]++;
        ht->waiting++;
        hm->band_n[ht->prio]++;
        atomic_fetch_add_explicit(&hm->waiting, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&hub->waiting, 1, memory_order_relaxed);
    } else if (ht->on_loop[index] > 0) {
        ht->on_loop[index]--;
        ht->waiting--;
        hm->band_n[ht->prio]--;
        atomic_fetch_sub_explicit(&hm->waiting, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&hub->waiting, 1, memory_order_relaxed);
    }
    ht->head_ms[index] = head_ms;
    if (index >= hub->n_loops)
        hub->n_loops = index + 1; /* a loop not attached (tests): still scanned */
    pthread_mutex_unlock(&hub->mu);
}

struct dp_adm_hub_tenant *dp_adm_hub_next(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm,
                                          unsigned me, unsigned *where)
{
    struct dp_adm_hub_tenant *best = NULL;
    pthread_mutex_lock(&hub->mu);
    for (int p = DP_PRIO_UNSET + 1; p < DP_PRIO_COUNT && best == NULL; p++) {
        if (hm->band_n[p] == 0)
            continue;
        struct list_node *it;
        list_foreach(it, &hm->bands[p])
        {
            struct dp_adm_hub_tenant *ht = list_entry(it, struct dp_adm_hub_tenant, ring_link);
            if (ht->waiting > 0 && (best == NULL || ht->served < best->served))
                best = ht;
        }
    }
    if (best != NULL) {
        /* The loop holding the tenant's oldest: FIFO within a tenant over
         * the loops, so its requests on a loop that frees few slots do not
         * time out behind younger ones elsewhere. Among equals the asking
         * loop (no wake-up needed). */
        bool found = false;
        uint64_t oldest = 0;
        for (unsigned k = 0; k < hub->n_loops; k++) {
            if (best->on_loop[k] == 0)
                continue;
            if (!found || best->head_ms[k] < oldest || (best->head_ms[k] == oldest && k == me)) {
                found = true;
                oldest = best->head_ms[k];
                *where = k;
            }
        }
    }
    pthread_mutex_unlock(&hub->mu);
    return best;
}

void dp_adm_hub_served(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht)
{
    pthread_mutex_lock(&hub->mu);
    struct list_node *band = &ht->model->bands[ht->prio];
    ht->served++;
    /* To the ring's end: among equals, another is first next time. */
    list_remove(&ht->ring_link);
    list_push_back(band, &ht->ring_link);
    uint64_t top = hub_band_leader(band);
    struct list_node *it;
    list_foreach(it, band)
    {
        struct dp_adm_hub_tenant *o = list_entry(it, struct dp_adm_hub_tenant, ring_link);
        if (o->served + DP_ADM_HUB_CREDIT < top)
            o->served = top - DP_ADM_HUB_CREDIT;
    }
    pthread_mutex_unlock(&hub->mu);
}

bool dp_adm_hub_any_waiting(const struct dp_adm_hub *hub)
{
    return hub != NULL && atomic_load_explicit(&hub->waiting, memory_order_relaxed) > 0;
}

uint32_t dp_adm_hub_model_waiting(const struct dp_adm_hub_model *hm)
{
    return hm != NULL ? atomic_load_explicit(&hm->waiting, memory_order_relaxed) : 0;
}
