/*
 * The admission queue's process-wide part: which tenant goes next, and
 * whether an arrival may wait at all, over every event loop of the data
 * plane. Each loop keeps its own queued
 * requests (a request never leaves the loop that accepted it: its client
 * connection lives in that loop's HTTP daemon), but the order in which
 * they get workers is one order for the process: for each model, band and
 * tenant the hub counts the requests waiting on each loop and the
 * requests served, and a loop with a free slot asks it who is next. When
 * the answer waits on another loop, the asking loop wakes that one (its
 * eventfd) and leaves the slot to it, instead of giving it to its own
 * queue. Without this, fairness held per loop only: a slot freed on loop A
 * went to A's queue although a tenant served less waited on loop B.
 *
 * The rule (as in adm_queue.h): strict bands; in a band, the waiting
 * tenant served least (ties: the first in the band's ring, and a tenant
 * served moves to the ring's end); a tenant new to the band, or back after
 * its entry was freed, starts DP_ADM_HUB_CREDIT behind the most served,
 * and nobody falls further behind than that. Among the loops where the
 * chosen tenant waits, the one holding its oldest request (FIFO within a
 * tenant over all loops; the asking loop among equals).
 *
 * The room is the process's too: admission.queue.max_depth places per
 * model over all the loops, and each asking tenant's share of them, are
 * decided here under the lock (dp_adm_hub_admit), so two loops admitting
 * at once cannot both take the last place. When a full queue gives the
 * place of another tenant's newest request to an arrival, that request may
 * wait on another loop, which alone may touch it: the hub takes its place
 * at once (it is "doomed": counted as held by its loop, no longer as
 * waiting) and the owning loop, woken through its eventfd, answers it
 * 429 queue_full at its next pass (dp_adm_hub_doomed). So the places never
 * exceed max_depth; for the moment between the decision and that pass,
 * the loop still holds the doomed request, which never gets a worker.
 *
 * Entries: a hub model per model, referenced by each loop's queue of that
 * model; a hub tenant per (model, band, tenant), referenced by each loop's
 * tenant queue of it, freed when the last reference goes (its service
 * count and its last arrival with it). What the hub counts as held on a
 * loop is exactly what that loop's queues hold (a request being handed to
 * a worker included, until it has one): each loop adds and removes its own
 * under the lock; what it counts as waiting is that less the doomed.
 *
 * Threading: every function may be called from any loop thread; one mutex
 * guards the hub, held for a scan of one model's tenants at most. The
 * counts read without it (dp_adm_hub_any_waiting, dp_adm_hub_model_waiting)
 * are atomics, for the hot path's "does anything wait at all". The loops
 * array is written before the loops start and after they end only.
 */
#ifndef SY_DATAPLANE_ADM_HUB_H
#define SY_DATAPLANE_ADM_HUB_H

#include <stdbool.h>
#include <stdint.h>

#include "dataplane/admission/api_keys.h"

/* As many as the data plane runs event loops at most (dataplane.threads). */
#define DP_ADM_HUB_LOOPS 256u

struct dp_adm_hub;
struct dp_adm_hub_model;
struct dp_adm_hub_tenant;
struct dp_loop;

/* Heap object; NULL when out of memory. destroy(NULL) is a no-op; every
 * entry must have been put back. */
struct dp_adm_hub *dp_adm_hub_create(void);
void dp_adm_hub_destroy(struct dp_adm_hub *hub);

/* Loop setup and teardown (before the loops run, after they end): loop
 * `index` is `loop` (NULL: gone), so that others can wake it. */
void dp_adm_hub_attach(struct dp_adm_hub *hub, unsigned index, struct dp_loop *loop);
/* The loop attached at index, or NULL. */
struct dp_loop *dp_adm_hub_loop(const struct dp_adm_hub *hub, unsigned index);

/* The model's entry, referenced (created on first use); NULL: no memory. */
struct dp_adm_hub_model *dp_adm_hub_model_get(struct dp_adm_hub *hub, const char *model);
void dp_adm_hub_model_put(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm);

/* The tenant's entry in band prio of hm, referenced (created at the ring's
 * end with the credit of a tenant just behind); NULL: no memory. */
struct dp_adm_hub_tenant *dp_adm_hub_tenant_get(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm,
                                                enum dp_prio prio, const char *tenant);
void dp_adm_hub_tenant_put(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht);

/* The room's verdict on an arrival (dp_adm_hub_admit). */
enum dp_adm_hub_verdict {
    DP_ADM_HUB_ADMITTED = 0, /* a place is counted for it on the asking loop */
    DP_ADM_HUB_OVER_SHARE,   /* refused: its tenant holds its share */
    DP_ADM_HUB_FULL,         /* refused: the model's places are taken */
};

/* Why an admitted arrival's place was another request's. */
enum dp_adm_hub_evict {
    DP_ADM_HUB_EVICT_NONE = 0,
    DP_ADM_HUB_EVICT_HIGHER, /* the arrival's band is higher than the victim's */
    DP_ADM_HUB_EVICT_SHARE,  /* the arrival's tenant is under its share */
};

struct dp_adm_hub_admission {
    enum dp_adm_hub_verdict verdict;
    enum dp_adm_hub_evict evicted; /* admitted in the place of another request */
    unsigned victim_loop;          /* the loop holding it (evicted): wake it unless me */
    uint32_t mine;                 /* the tenant's requests waiting in its band, before */
    uint32_t tenants;              /* tenants sharing the band's room, itself included */
    uint32_t depth;                /* the model's requests waiting (every band), before */
};

/* An arrival of ht on loop `me` at now_ms, whose every worker is
 * saturated: may it wait? The room is max_depth places per model over all
 * loops; while several tenants ask in ht's band (requests waiting, or an
 * arrival within recent_ms, on any loop), each may hold
 * ceil(max_depth / tenants) of them. A full model gives an arrival of a
 * higher band than the lowest waiting, or of a tenant under its share
 * when another is over it, the place of the newest request of that band's
 * (or its own band's) tenant with the most waiting: that request is doomed
 * (see above; the newest among the loops, the asking loop among equals).
 * Admitted: counted as waiting on `me` with its head and newest request's
 * times head_ms and tail_ms. Refused or not, the arrival counts as ht's
 * tenant asking. */
void dp_adm_hub_admit(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned me,
                      uint32_t max_depth, uint64_t now_ms, uint64_t recent_ms, uint64_t head_ms,
                      uint64_t tail_ms, struct dp_adm_hub_admission *out);

/* A request of ht held on loop `index` leaves it (timed out, client gone,
 * answered at drain, or evicted for a doom of dp_adm_hub_doomed), the
 * from_newest-th of ht's requests there counting from the newest (0; or
 * UINT32_MAX: not known to be among the newest). The doomed are the newest:
 * one of them takes a doom with it (nothing more is owed for it), another
 * its place (a doom when the loop's requests of ht have no place left).
 * head_ms, tail_ms: when the
 * oldest and the newest of ht's requests still held there were queued
 * (ignored when none is left). A request handed to a worker leaves by
 * dp_adm_hub_served instead; one handed over and back (no worker) never
 * left. */
void dp_adm_hub_left(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                     uint32_t from_newest, uint64_t head_ms, uint64_t tail_ms);

/* Evictions loop `index` owes over all its tenant entries: a lock-free
 * snapshot (0: nothing to look for, the common case). */
uint32_t dp_adm_hub_owed(const struct dp_adm_hub *hub, unsigned index);

/* How many of ht's requests on loop `index` are doomed (each to be
 * answered 429 queue_full by that loop, its newest first, and then left
 * with dp_adm_hub_left), and in *why the last reason given. */
uint32_t dp_adm_hub_doomed(struct dp_adm_hub *hub, const struct dp_adm_hub_tenant *ht,
                           unsigned index, enum dp_adm_hub_evict *why);

/* Who is next for hm's workers: the tenant entry (NULL when nothing
 * waits), and in *where the loop whose queue holds its oldest request
 * that is not doomed. */
struct dp_adm_hub_tenant *dp_adm_hub_next(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm,
                                          unsigned me, unsigned *where);

/* ht's request held on loop `index` was given a worker: it leaves (as in
 * dp_adm_hub_left, with the times of what is left) and ht has one more
 * served. */
void dp_adm_hub_served(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                       uint64_t head_ms, uint64_t tail_ms);

/* Lock-free reads for the hot path (a snapshot): requests waiting on any
 * loop (the doomed not included), for any model / for hm. */
bool dp_adm_hub_any_waiting(const struct dp_adm_hub *hub);
uint32_t dp_adm_hub_model_waiting(const struct dp_adm_hub_model *hm);

#endif
