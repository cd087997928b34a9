/*
 * The admission hub (see adm_hub.h): one mutex, a list of models, and per
 * model one ring of tenant entries per band. The entries are few (models
 * times bands times the tenants that asked recently), so "who is next" and
 * "is there room" are scans of one model's rings under the lock; they run
 * only while requests wait, once per request handed out or arriving. The
 * atomics beside the lock let the loops skip the hub entirely while
 * nothing waits anywhere, and look for evictions they owe only when they
 * owe some.
 *
 * Counts per tenant entry and loop: held (on_loop, what the loop's tenant
 * queue holds, a request being handed to a worker included) and doomed
 * (of those, the ones whose place an arrival took; at most held). The
 * places a loop's requests of the tenant have are held - doomed; the
 * tenant's, band's, model's and hub's "waiting" are sums of places. A
 * request that leaves takes a place while its loop has one for the
 * tenant, else a doom (it was one of the doomed).
 */
#include "dataplane/admission/adm_hub.h"

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
    uint32_t refs;                      /* loops' tenant queues naming it */
    uint32_t waiting;                   /* places on every loop */
    uint64_t served;                    /* handed out, floored at the band's most served - credit */
    uint64_t seen_ms;                   /* its tenant's last arrival at the queue, any loop */
    enum dp_adm_hub_evict doom_why;     /* the last doom's reason */
    uint32_t on_loop[DP_ADM_HUB_LOOPS]; /* held */
    uint32_t doomed[DP_ADM_HUB_LOOPS];  /* of those, doomed */
    uint64_t head_ms[DP_ADM_HUB_LOOPS]; /* its oldest's enqueue time there (on_loop > 0) */
    uint64_t tail_ms[DP_ADM_HUB_LOOPS]; /* its newest's */
    char tenant[DP_TENANT_NAME_MAX];
};

struct dp_adm_hub_model {
    struct list_node link; /* dp_adm_hub.models */
    uint32_t refs;
    _Atomic uint32_t waiting;       /* every band, every loop */
    uint32_t band_n[DP_PRIO_COUNT]; /* places in each band */
    struct list_node bands[DP_PRIO_COUNT];
    char name[CFG_MODEL_MAX];
};

struct dp_adm_hub {
    pthread_mutex_t mu;
    struct list_node models;
    _Atomic uint32_t waiting;                /* every model */
    unsigned n_loops;                        /* highest index attached + 1: what next() scans */
    _Atomic uint32_t owed[DP_ADM_HUB_LOOPS]; /* doomed requests each loop holds */
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
    for (unsigned k = 0; k < DP_ADM_HUB_LOOPS; k++)
        atomic_init(&hub->owed[k], 0);
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

/* The places of ht's requests on loop k. Under the lock. */
static uint32_t hub_places(const struct dp_adm_hub_tenant *ht, unsigned k)
{
    return ht->on_loop[k] - ht->doomed[k];
}

/* n places more (+) or fewer (-) for ht, its band, model and the hub. Under
 * the lock. */
static void hub_count(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, int n)
{
    struct dp_adm_hub_model *hm = ht->model;
    ht->waiting += (uint32_t)n;
    hm->band_n[ht->prio] += (uint32_t)n;
    atomic_fetch_add_explicit(&hm->waiting, (uint32_t)n, memory_order_relaxed);
    atomic_fetch_add_explicit(&hub->waiting, (uint32_t)n, memory_order_relaxed);
}

static void hub_seen_loop(struct dp_adm_hub *hub, unsigned index)
{
    if (index >= hub->n_loops)
        hub->n_loops = index + 1; /* a loop not attached (tests): still scanned */
}

/* One of ht's requests held on loop index leaves, from_newest-th from the
 * newest there. Under the lock. */
static void hub_leave(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                      uint32_t from_newest, uint64_t head_ms, uint64_t tail_ms)
{
    if (ht->on_loop[index] == 0)
        return;
    if (from_newest >= ht->doomed[index] && hub_places(ht, index) > 0) {
        hub_count(hub, ht, -1);
    } else {
        /* One of the doomed (the newest ones): its eviction, or it left
         * another way first (its client went, the loop drained). */
        ht->doomed[index]--;
        atomic_fetch_sub_explicit(&hub->owed[index], 1, memory_order_relaxed);
    }
    ht->on_loop[index]--;
    ht->head_ms[index] = head_ms;
    ht->tail_ms[index] = tail_ms;
}

void dp_adm_hub_left(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                     uint32_t from_newest, uint64_t head_ms, uint64_t tail_ms)
{
    if (index >= DP_ADM_HUB_LOOPS)
        return;
    pthread_mutex_lock(&hub->mu);
    hub_leave(hub, ht, index, from_newest, head_ms, tail_ms);
    pthread_mutex_unlock(&hub->mu);
}

/* Whether ht's tenant asks in its band at now_ms: requests waiting, or an
 * arrival within recent_ms (seen_ms may be later than now_ms: an arrival
 * on another loop that read the clock after this one). */
static bool hub_asking(const struct dp_adm_hub_tenant *ht, uint64_t now_ms, uint64_t recent_ms)
{
    return ht->waiting > 0 || ht->seen_ms >= now_ms || now_ms - ht->seen_ms < recent_ms;
}

/* The band's tenant with the most places, other than `not` (NULL: none
 * has any). Under the lock. */
static struct dp_adm_hub_tenant *hub_longest(const struct list_node *band,
                                             const struct dp_adm_hub_tenant * not )
{
    struct dp_adm_hub_tenant *longest = NULL;
    const struct list_node *it;
    list_foreach(it, band)
    {
        struct dp_adm_hub_tenant *o = list_entry(it, struct dp_adm_hub_tenant, ring_link);
        if (o != not &&o->waiting > 0 && (longest == NULL || o->waiting > longest->waiting))
            longest = o;
    }
    return longest;
}

/* Takes the place of victim's newest request (the newest among the loops
 * holding one with a place; loop me among equals): doomed, its loop owes
 * the eviction. Returns that loop. A loop that owes one already has its
 * newest doomed, and the hub knows no time of the next newest: its oldest
 * stands for it (so a second doom goes to another loop's newest rather
 * than to an older request). Under the lock. */
static unsigned hub_doom(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *victim, unsigned me,
                         enum dp_adm_hub_evict why)
{
    unsigned where = me;
    bool found = false;
    uint64_t newest = 0;
    for (unsigned k = 0; k < hub->n_loops; k++) {
        if (hub_places(victim, k) == 0)
            continue;
        uint64_t t = victim->doomed[k] > 0 ? victim->head_ms[k] : victim->tail_ms[k];
        if (!found || t > newest || (t == newest && k == me)) {
            found = true;
            newest = t;
            where = k;
        }
    }
    victim->doomed[where]++;
    victim->doom_why = why;
    hub_count(hub, victim, -1);
    atomic_fetch_add_explicit(&hub->owed[where], 1, memory_order_relaxed);
    return where;
}

void dp_adm_hub_admit(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned me,
                      uint32_t max_depth, uint64_t now_ms, uint64_t recent_ms, uint64_t head_ms,
                      uint64_t tail_ms, struct dp_adm_hub_admission *out)
{
    *out = (struct dp_adm_hub_admission){.verdict = DP_ADM_HUB_FULL, .victim_loop = me};
    if (me >= DP_ADM_HUB_LOOPS)
        return;
    pthread_mutex_lock(&hub->mu);
    hub_seen_loop(hub, me);
    struct dp_adm_hub_model *hm = ht->model;
    struct list_node *band = &hm->bands[ht->prio];
    /* The tenants sharing the band's room with ht, itself included. */
    uint32_t tenants = 1;
    const struct list_node *it;
    list_foreach(it, band)
    {
        const struct dp_adm_hub_tenant *o = list_entry(it, struct dp_adm_hub_tenant, ring_link);
        if (o != ht && hub_asking(o, now_ms, recent_ms))
            tenants++;
    }
    if (ht->seen_ms < now_ms)
        ht->seen_ms = now_ms;
    uint32_t share = (max_depth + tenants - 1) / tenants;
    uint32_t depth = atomic_load_explicit(&hm->waiting, memory_order_relaxed);
    out->mine = ht->waiting;
    out->tenants = tenants;
    out->depth = depth;
    if (tenants > 1 && ht->waiting >= share) {
        out->verdict = DP_ADM_HUB_OVER_SHARE;
        pthread_mutex_unlock(&hub->mu);
        return;
    }
    if (depth >= max_depth) {
        /* Full: a lower band's place first, then one of a tenant over its
         * share in ht's own (ht is under its share here, or alone). */
        struct dp_adm_hub_tenant *victim = NULL;
        enum dp_adm_hub_evict why = DP_ADM_HUB_EVICT_HIGHER;
        for (int p = DP_PRIO_COUNT - 1; p > (int)ht->prio && victim == NULL; p--)
            if (hm->band_n[p] > 0)
                victim = hub_longest(&hm->bands[p], NULL);
        if (victim == NULL) {
            struct dp_adm_hub_tenant *o = hub_longest(band, ht);
            if (o != NULL && o->waiting > share) {
                victim = o;
                why = DP_ADM_HUB_EVICT_SHARE;
            }
        }
        if (victim == NULL || max_depth == 0) {
            pthread_mutex_unlock(&hub->mu);
            return; /* DP_ADM_HUB_FULL */
        }
        out->evicted = why;
        out->victim_loop = hub_doom(hub, victim, me, why);
    }
    out->verdict = DP_ADM_HUB_ADMITTED;
    ht->on_loop[me]++;
    ht->head_ms[me] = head_ms;
    ht->tail_ms[me] = tail_ms;
    hub_count(hub, ht, +1);
    pthread_mutex_unlock(&hub->mu);
}

uint32_t dp_adm_hub_owed(const struct dp_adm_hub *hub, unsigned index)
{
    if (hub == NULL || index >= DP_ADM_HUB_LOOPS)
        return 0;
    return atomic_load_explicit(&hub->owed[index], memory_order_relaxed);
}

uint32_t dp_adm_hub_doomed(struct dp_adm_hub *hub, const struct dp_adm_hub_tenant *ht,
                           unsigned index, enum dp_adm_hub_evict *why)
{
    if (index >= DP_ADM_HUB_LOOPS)
        return 0;
    pthread_mutex_lock(&hub->mu);
    uint32_t n = ht->doomed[index];
    *why = ht->doom_why;
    pthread_mutex_unlock(&hub->mu);
    return n;
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
         * loop (no wake-up needed). A loop whose requests of it are all
         * doomed has none to hand out. */
        bool found = false;
        uint64_t oldest = 0;
        for (unsigned k = 0; k < hub->n_loops; k++) {
            if (hub_places(best, k) == 0)
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

void dp_adm_hub_served(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                       uint64_t head_ms, uint64_t tail_ms)
{
    if (index >= DP_ADM_HUB_LOOPS)
        return;
    pthread_mutex_lock(&hub->mu);
    hub_leave(hub, ht, index, UINT32_MAX, head_ms, tail_ms); /* the oldest with a place */
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
