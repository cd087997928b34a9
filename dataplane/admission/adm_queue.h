/*
 * The admission queue of a loop: requests whose model has no unsaturated
 * worker wait here, holding no worker load, until a slot frees, their TTL
 * (admission.queue.max_wait) passes, their client leaves or the data plane
 * drains. One queue per model; in it, strict priority bands (high, then
 * normal, then low); in a band, the waiting tenant served least goes
 * next (a round robin while all are backlogged; one back from a pause
 * catches up a few requests at most), so one tenant's flood cannot starve
 * another; FIFO within a tenant. That order is the data plane's, over all
 * its loops (adm_hub.h): a slot seen free by one loop goes to the request
 * next by it even when that request waits on another loop, which is woken
 * to take it.
 *
 * Depth: admission.queue.max_depth counts per model over all the data
 * plane's loops (a request never leaves the loop that accepted it, but its
 * place is counted in the hub, which admits under one lock). While several
 * tenants ask in a band (have requests waiting, or arrived within the last
 * second or max_wait, on any loop), each may hold its share,
 * ceil(max_depth / tenants), of it: a tenant at its share is refused 429
 * queue_full on arrival, also while the others' places are empty. When a
 * model's queue is full, a request of a higher band than the lowest one
 * waiting, or of a tenant under its share, takes the place of the newest
 * request of the longest tenant queue (of that lower band, or of its own
 * band), which is answered 429 queue_full, by its own loop (woken for it
 * when that is another); otherwise the arrival is.
 *
 * The fourth accounting state: a request is queued at most once at a
 * time, never holds a guard while queued, and leaves exactly once, by one
 * of enum dp_adm_left, each counted. So at any time
 *   enqueued_total == sum over reasons of left_total + depth.
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_ADM_QUEUE_H
#define SY_DATAPLANE_ADM_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "dataplane/types/admission_types.h"

struct dp_loop;
struct dp_request;

/* Every eligible worker of req's model is saturated: queue it, or answer
 * it (429 queue_full, 503 shutting_down while draining). */
void dp_adm_wait(struct dp_request *req);

/* req leaves the queue if it is in it (a no-op otherwise), for why. */
void dp_adm_leave(struct dp_request *req, enum dp_adm_left why);

/* Hands the requests next by the process's order to the forwarder while
 * they wait on this loop and workers take them; wakes the loop that holds
 * the next one when that is another. */
void dp_adm_queue_dispatch(struct dp_loop *loop);

/* A request about to pick a worker for the first time (not one the queue
 * hands out): when requests of its model wait on any loop, the queue goes
 * first, so the waiting take the workers free now and the arrival gets
 * only what they leave. When they leave nothing, or the next slot belongs
 * to a request waiting on another loop, the arrival joins the queue (or
 * is refused by it) in the same order as everyone: true, and the caller
 * stops there (the request is queued, dispatched or answered). False: the
 * caller picks a worker as usual. A slot freed by another data plane is
 * seen by the queue at its next tick only; without this, an arrival in
 * between would take it out of order (priority, tenant fairness, FIFO). */
bool dp_adm_before_pick(struct dp_request *req);

/* Answers requests queued longer than max_wait: 429 queue_timeout. */
void dp_adm_queue_expire(struct dp_loop *loop, uint64_t now_ms);

/* Answers every queued request 503 shutting_down (the loop drains). */
void dp_adm_queue_flush(struct dp_loop *loop);

/* Frees the queue's structures (the loop ends; nothing is queued). */
void dp_adm_queue_fini(struct dp_loop *loop);

#endif
