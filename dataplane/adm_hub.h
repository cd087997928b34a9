/*
 * The admission queue's process-wide part: which tenant goes next, over
 * every event loop of the data plane. Each loop keeps its own queued
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
 * Entries: a hub model per model, referenced by each loop's queue of that
 * model; a hub tenant per (model, band, tenant), referenced by each loop's
 * tenant queue of it, freed when the last reference goes (its service
 * count with it). What the hub counts as waiting is exactly what the
 * loops' queues hold: each loop adds and removes its own under the lock.
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

#include "dataplane/api_keys.h"

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

/* One request of ht more (+1) or less (-1) waiting on loop `index`;
 * head_ms: when the oldest of ht's requests still waiting there was
 * queued (ignored when none is left). */
void dp_adm_hub_waiting(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht, unsigned index,
                        int delta, uint64_t head_ms);

/* Who is next for hm's workers: the tenant entry (NULL when nothing
 * waits), and in *where the loop whose queue holds its oldest request. */
struct dp_adm_hub_tenant *dp_adm_hub_next(struct dp_adm_hub *hub, struct dp_adm_hub_model *hm,
                                          unsigned me, unsigned *where);

/* ht's request was given a worker: one more served. */
void dp_adm_hub_served(struct dp_adm_hub *hub, struct dp_adm_hub_tenant *ht);

/* Lock-free reads for the hot path (a snapshot): requests waiting on any
 * loop, for any model / for hm. */
bool dp_adm_hub_any_waiting(const struct dp_adm_hub *hub);
uint32_t dp_adm_hub_model_waiting(const struct dp_adm_hub_model *hm);

#endif
