/*
 * The admission queue (see adm_queue.h). A model's queue is a small
 * struct with one ring of tenant queues per band; a tenant queue exists
 * while it holds a request and for a while after its tenant last asked
 * (DP_ADM_RECENT_MS, or max_wait if longer): a tenant between two
 * arrivals keeps its place, its service count and its room.
 *
 * Who goes next is the process's choice, not the loop's: each model and
 * tenant queue holds a reference to its entry in the hub (adm_hub.h),
 * which counts what waits on every loop and what was served, and answers
 * "next": the head of the waiting tenant served least over all loops
 * (with every tenant backlogged a plain round robin; a tenant that was
 * absent for a moment catches up by a few requests at most). When that
 * tenant waits here, this loop hands its head out; when it waits only on
 * another loop, this loop wakes that one and stops, leaving the free slot
 * to it. The room is the hub's too: an arrival is admitted there, and when
 * it takes the place of a request held by another loop, that loop is woken
 * to answer it (queue_reap; the loop's own requests are touched by its
 * thread only). The loop keeps every queued request on one more list in
 * arrival order, so the TTL check (one max_wait for all) only looks at the
 * oldest.
 */
#include "dataplane/admission/adm_queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "dataplane/admission/adm_hub.h"
#include "dataplane/admission/adm_metrics.h"
#include "dataplane/core/loop.h"
#include "dataplane/http/request.h"
#include "common/list.h"

/* How long a tenant counts as asking after its last arrival at the queue
 * (max_wait when longer): its share of the room is kept for it between
 * two of its requests, so a flood cannot take the place in the gap. */
#define DP_ADM_RECENT_MS 1000u

struct dp_adm_tq {
    struct list_node ring_link; /* its band's list in the model */
    struct list_node reqs;      /* FIFO (dp_adm_req.tq_link) */
    uint32_t n;
    uint64_t seen_ms;             /* its tenant's last arrival at the queue */
    struct dp_adm_hub_tenant *ht; /* its entry in the hub (a reference) */
    struct dp_adm_model *model;
    enum dp_prio prio;
    char tenant[DP_TENANT_NAME_MAX];
};

struct dp_adm_model {
    struct list_node link; /* dp_adm_loop.models */
    struct list_node bands[DP_PRIO_COUNT];
    uint32_t depth;              /* requests this loop holds (the doomed included) */
    struct dp_adm_hub_model *hm; /* its entry in the hub (a reference) */
    char name[CFG_MODEL_MAX];
};

/* Why a model's dispatch stopped. */
enum queue_stop {
    QUEUE_STOP_EMPTY = 1, /* nothing of the model waits on any loop */
    QUEUE_STOP_NO_SLOT,   /* a head came back: no worker takes one now */
    QUEUE_STOP_ELSEWHERE, /* the next waits on another loop, woken for it */
};

static uint64_t queue_recent_ms(const struct dp_loop *loop)
{
    uint64_t w = loop->sh->cfg->admission.queue.max_wait_ms;
    return w > DP_ADM_RECENT_MS ? w : DP_ADM_RECENT_MS;
}

static struct dp_adm_model *queue_model(struct dp_loop *loop, const char *name, bool create)
{
    struct list_node *it;
    list_foreach(it, &loop->adm.models)
    {
        struct dp_adm_model *m = list_entry(it, struct dp_adm_model, link);
        if (strcmp(m->name, name) == 0)
            return m;
    }
    if (!create)
        return NULL;
    struct dp_adm_model *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->hm = dp_adm_hub_model_get(loop->sh->adm.hub, name);
    if (m->hm == NULL) {
        free(m);
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "%s", name);
    for (int p = 0; p < DP_PRIO_COUNT; p++)
        list_init(&m->bands[p]);
    list_push_back(&loop->adm.models, &m->link);
    return m;
}

/* The tenant's queue in band prio of m, created (with its hub entry) when
 * it has none; NULL: no memory. */
static struct dp_adm_tq *queue_tenant(struct dp_loop *loop, struct dp_adm_model *m,
                                      enum dp_prio prio, const char *tenant)
{
    struct list_node *it;
    list_foreach(it, &m->bands[prio])
    {
        struct dp_adm_tq *tq = list_entry(it, struct dp_adm_tq, ring_link);
        if (strcmp(tq->tenant, tenant) == 0)
            return tq;
    }
    struct dp_adm_tq *tq = calloc(1, sizeof(*tq));
    if (tq == NULL)
        return NULL;
    tq->ht = dp_adm_hub_tenant_get(loop->sh->adm.hub, m->hm, prio, tenant);
    if (tq->ht == NULL) {
        free(tq);
        return NULL;
    }
    list_init(&tq->reqs);
    tq->model = m;
    tq->prio = prio;
    snprintf(tq->tenant, sizeof(tq->tenant), "%s", tenant);
    list_push_back(&m->bands[prio], &tq->ring_link);
    return tq;
}

/* When the oldest / newest request of tq was queued (0 when it holds none). */
static uint64_t queue_head_ms(const struct dp_adm_tq *tq)
{
    if (tq->n == 0)
        return 0;
    return list_entry(list_first(&tq->reqs), struct dp_request, adm.tq_link)->adm.enqueued_ms;
}

static uint64_t queue_tail_ms(const struct dp_adm_tq *tq)
{
    if (tq->n == 0)
        return 0;
    return list_entry(list_last(&tq->reqs), struct dp_request, adm.tq_link)->adm.enqueued_ms;
}

/* req's place from the newest of its tenant queue (0: the newest) when it
 * is among the first `owed` (the most this loop has doomed), else
 * UINT32_MAX: the hub's doomed are the newest of a tenant's requests. */
static uint32_t queue_from_newest(const struct dp_request *req, uint32_t owed)
{
    const struct list_node *head = &req->adm.tq->reqs;
    uint32_t k = 0;
    for (const struct list_node *it = head->prev; it != head && k < owed; it = it->prev, k++)
        if (it == &req->adm.tq_link)
            return k;
    return UINT32_MAX;
}

/* Unlinks req from its tenant queue (freed when empty) and the age list.
 * The hub is told, except for a request being handed to a worker: it
 * keeps its place there until it has one (dp_adm_hub_served), or is back
 * in the queue, so that no other loop can take the place meanwhile and
 * leave it none to come back to. */
static void queue_unlink(struct dp_request *req)
{
    struct dp_adm_req *r = &req->adm;
    struct dp_adm_tq *tq = r->tq;
    struct dp_loop *loop = req->loop;
    uint32_t from_newest = UINT32_MAX;
    if (!r->dispatching) {
        uint32_t owed = dp_adm_hub_owed(loop->sh->adm.hub, loop->index);
        if (owed > 0)
            from_newest = queue_from_newest(req, owed);
    }
    list_remove(&r->tq_link);
    list_remove(&r->age_link);
    tq->n--;
    tq->model->depth--;
    loop->adm.queued--;
    if (!r->dispatching)
        dp_adm_hub_left(loop->sh->adm.hub, tq->ht, loop->index, from_newest, queue_head_ms(tq),
                        queue_tail_ms(tq));
    dp_adm_metrics_depth(loop->sh->adm.metrics, tq->model->name, tq->prio, -1);
    /* An empty tenant queue stays (its tenant's place and service count)
     * until dp_adm_queue_expire finds it idle. */
    if (!r->dispatching)
        r->tq = NULL; /* while dispatching it names the place to come back to */
    r->queued = false;
}

/* req leaves the queue (it is in it), for why. */
static void queue_leave(struct dp_request *req, enum dp_adm_left why)
{
    struct dp_adm_req *r = &req->adm;
    struct dp_adm_metrics *mx = req->loop->sh->adm.metrics;
    uint64_t waited_us = (proc_monotonic_ms() - r->enqueued_ms) * 1000;
    dp_adm_metrics_wait(mx, r->tq->model->name, r->tq->prio, waited_us);
    dp_adm_metrics_left(mx, why);
    queue_unlink(req);
}

void dp_adm_leave(struct dp_request *req, enum dp_adm_left why)
{
    if (req->adm.queued)
        queue_leave(req, why);
}

/* Answers a queued request. */
static void queue_answer(struct dp_request *req, enum dp_adm_left why, int status,
                         enum dp_adm_reason reason, uint32_t retry_after_s, const char *msg)
{
    if (req->adm.queued)
        queue_leave(req, why);
    req->adm.rejected = dp_adm_reason_name(reason);
    req->retry_after_s = retry_after_s;
    dp_adm_metrics_rejected(req->loop->sh->adm.metrics, req->adm.tenant, reason);
    req->loop->adm.ops->reply(req, status, dp_adm_reason_name(reason), msg);
}

/* Answers the doomed requests of tq (adm_hub.h: another's arrival took
 * their places), newest first: 429 queue_full. */
static void queue_evict(struct dp_loop *loop, struct dp_adm_tq *tq)
{
    enum dp_adm_hub_evict why = DP_ADM_HUB_EVICT_NONE;
    uint32_t n = dp_adm_hub_doomed(loop->sh->adm.hub, tq->ht, loop->index, &why);
    const char *msg = why == DP_ADM_HUB_EVICT_HIGHER
                          ? "the queue of this model is full (a request of a higher priority took "
                            "the place)"
                          : "the queue of this model is full (another tenant under its share took "
                            "the place)";
    for (; n > 0 && tq->n > 0; n--) {
        struct dp_request *victim =
            list_entry(list_last(&tq->reqs), struct dp_request, adm.tq_link);
        queue_answer(victim, DP_ADM_LEFT_FULL, 429, DP_ADM_REASON_QUEUE_FULL, 1, msg);
    }
}

/* Answers every request of this loop the hub doomed (a no-op while it
 * owes none, the common case). Never during a dispatch of this loop's. */
static void queue_reap(struct dp_loop *loop)
{
    if (dp_adm_hub_owed(loop->sh->adm.hub, loop->index) == 0)
        return;
    struct list_node *mi;
    list_foreach(mi, &loop->adm.models)
    {
        struct dp_adm_model *m = list_entry(mi, struct dp_adm_model, link);
        for (int p = 0; p < DP_PRIO_COUNT; p++) {
            struct list_node *it;
            list_foreach(it, &m->bands[p])
            {
                struct dp_adm_tq *tq = list_entry(it, struct dp_adm_tq, ring_link);
                if (tq->n > 0)
                    queue_evict(loop, tq);
            }
        }
    }
}

static void queue_refuse_full(struct dp_request *req, const char *msg)
{
    struct dp_loop *loop = req->loop;
    req->adm.rejected = dp_adm_reason_name(DP_ADM_REASON_QUEUE_FULL);
    req->retry_after_s = 1;
    dp_adm_metrics_rejected(loop->sh->adm.metrics, req->adm.tenant, DP_ADM_REASON_QUEUE_FULL);
    loop->adm.ops->reply(req, 429, "queue_full", msg);
}

/* Back into the age list at its arrival's place, so the oldest stays first. */
static void queue_age_insert(struct dp_loop *loop, struct dp_request *req)
{
    struct list_node *it;
    list_foreach(it, &loop->adm.by_age)
    {
        const struct dp_request *o = list_entry(it, struct dp_request, adm.age_link);
        if (o->adm.enqueued_ms > req->adm.enqueued_ms)
            break;
    }
    list_insert_before(it, &req->adm.age_link);
}

static void queue_wake(struct dp_loop *loop, unsigned where)
{
    struct dp_loop *o = dp_adm_hub_loop(loop->sh->adm.hub, where);
    if (o != NULL && o->adm.wake != NULL)
        o->adm.wake(o);
}

void dp_adm_wait(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    struct dp_adm_req *r = &req->adm;
    const struct cfg_admission_queue *qc = &loop->sh->cfg->admission.queue;
    if (r->dispatching) {
        /* Handed over by the queue and still no worker: back to its place,
         * which the hub kept for it (queue_unlink). */
        struct dp_adm_tq *tq = r->tq;
        r->requeued = true;
        r->queued = true;
        list_push_front(&tq->reqs, &r->tq_link);
        queue_age_insert(loop, req);
        tq->n++;
        tq->model->depth++;
        loop->adm.queued++;
        dp_adm_metrics_depth(loop->sh->adm.metrics, tq->model->name, tq->prio, +1);
        return;
    }
    if (r->queued)
        return;
    if (loop->draining || loop->cutting) {
        dp_adm_metrics_rejected(loop->sh->adm.metrics, r->tenant, DP_ADM_REASON_SHUTTING_DOWN);
        r->rejected = dp_adm_reason_name(DP_ADM_REASON_SHUTTING_DOWN);
        req->retry_after_s = 1;
        loop->adm.ops->reply(req, 503, "shutting_down", "the router is shutting down");
        return;
    }
    enum dp_prio prio =
        r->prio > DP_PRIO_UNSET && r->prio < DP_PRIO_COUNT ? r->prio : DP_PRIO_NORMAL;
    struct dp_adm_model *m = queue_model(loop, req->model, true);
    if (m != NULL && qc->max_depth == 0) {
        queue_refuse_full(req, "every worker of this model is busy and admission.queue.max_depth "
                               "is 0 (no queue)");
        return;
    }
    /* The tenant's queue, even for an arrival refused below: it is asking,
     * so its share of the room is kept for it (NULL: no memory). */
    uint64_t now_ms = proc_monotonic_ms();
    struct dp_adm_tq *tq = m != NULL ? queue_tenant(loop, m, prio, r->tenant) : NULL;
    if (tq == NULL) {
        loop->adm.ops->reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    }
    tq->seen_ms = now_ms;
    /* The room is the data plane's: max_depth places per model over all
     * its loops, and while several tenants ask in a band, each may hold
     * its share of them (adm_hub.h). A flood past its share is refused on
     * arrival (at once, as every rejection should be), which keeps room
     * for the others, also in the moments they have nothing queued; a
     * tenant under its share that finds the queue full (a tenant new to
     * the band) takes the place of the newest request of the longest
     * queue, which can only be over its share, and a higher band that of
     * a lower one. Without the shares, a flood fills the queue and the
     * dispatch has nothing of the other tenants to alternate with. */
    struct dp_adm_hub_admission adm;
    dp_adm_hub_admit(loop->sh->adm.hub, tq->ht, loop->index, qc->max_depth, now_ms,
                     queue_recent_ms(loop), tq->n > 0 ? queue_head_ms(tq) : now_ms, now_ms, &adm);
    if (adm.verdict != DP_ADM_HUB_ADMITTED) {
        char msg[CFG_MODEL_MAX + 160];
        if (adm.verdict == DP_ADM_HUB_OVER_SHARE)
            snprintf(msg, sizeof(msg),
                     "every worker of model '%s' is busy and this tenant holds its share of the "
                     "queue (%u of %u waiting; %u tenants share %u places)",
                     req->model, adm.mine, adm.depth, adm.tenants, qc->max_depth);
        else
            snprintf(msg, sizeof(msg),
                     "every worker of model '%s' is busy and its queue is full (%u waiting)",
                     req->model, adm.depth);
        queue_refuse_full(req, msg);
        return;
    }
    r->tq = tq;
    r->queued = true;
    r->enqueued_ms = now_ms;
    list_push_back(&tq->reqs, &r->tq_link);
    list_push_back(&loop->adm.by_age, &r->age_link);
    tq->n++;
    m->depth++;
    loop->adm.queued++;
    dp_adm_metrics_depth(loop->sh->adm.metrics, m->name, prio, +1);
    dp_adm_metrics_enqueued(loop->sh->adm.metrics);
    if (adm.evicted != DP_ADM_HUB_EVICT_NONE) {
        /* The request whose place it took: answered here at once when this
         * loop holds it, else by its loop, woken for it. */
        if (adm.victim_loop == loop->index)
            queue_reap(loop);
        else
            queue_wake(loop, adm.victim_loop);
    }
}

bool dp_adm_queue_has(struct dp_loop *loop, const char *model)
{
    if (loop->adm.queued == 0)
        return false;
    const struct dp_adm_model *m = queue_model(loop, model, false);
    return m != NULL && m->depth > 0;
}

/* This loop's queue of the tenant entry ht, or NULL. */
static struct dp_adm_tq *queue_local(struct dp_adm_model *m, const struct dp_adm_hub_tenant *ht)
{
    for (int p = DP_PRIO_UNSET + 1; p < DP_PRIO_COUNT; p++) {
        struct list_node *it;
        list_foreach(it, &m->bands[p])
        {
            struct dp_adm_tq *tq = list_entry(it, struct dp_adm_tq, ring_link);
            if (tq->ht == ht)
                return tq;
        }
    }
    return NULL;
}

/* Hands out the requests the hub names next, while they wait here and a
 * worker takes them. */
static enum queue_stop queue_dispatch_model(struct dp_loop *loop, struct dp_adm_model *m)
{
    struct dp_adm_hub *hub = loop->sh->adm.hub;
    for (;;) {
        unsigned where = loop->index;
        struct dp_adm_hub_tenant *ht = dp_adm_hub_next(hub, m->hm, loop->index, &where);
        if (ht == NULL)
            return QUEUE_STOP_EMPTY;
        if (where != loop->index) {
            /* The slot is that loop's to take: a dispatch of our own here
             * would serve a tenant ahead of one served less. */
            queue_wake(loop, where);
            return QUEUE_STOP_ELSEWHERE;
        }
        struct dp_adm_tq *tq = queue_local(m, ht);
        if (tq == NULL || tq->n == 0) {
            /* The hub counts exactly what the loops hold: cannot be. */
            log_error("admission: the hub names a request of '%s' this loop does not hold",
                      m->name);
            return QUEUE_STOP_EMPTY;
        }
        struct dp_request *req = list_entry(list_first(&tq->reqs), struct dp_request, adm.tq_link);
        struct dp_adm_req *r = &req->adm;
        uint64_t waited_us = (proc_monotonic_ms() - r->enqueued_ms) * 1000;
        r->dispatching = true;
        r->requeued = false;
        queue_unlink(req); /* tq stays while dispatching, even empty */
        dp_request_ref(req);
        loop->adm.ops->dispatch(req);
        r->dispatching = false;
        bool back = r->requeued;
        if (!back)
            r->tq = NULL;
        if (back) {
            r->requeued = false; /* back at its tenant's head; the order unchanged */
        } else {
            dp_adm_metrics_wait(loop->sh->adm.metrics, m->name, tq->prio, waited_us);
            dp_adm_metrics_left(loop->sh->adm.metrics, DP_ADM_LEFT_DISPATCHED);
            dp_adm_hub_served(hub, ht, loop->index, queue_head_ms(tq), queue_tail_ms(tq));
        }
        dp_request_unref(req);
        if (back)
            return QUEUE_STOP_NO_SLOT;
    }
}

bool dp_adm_before_pick(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    if (req->adm.dispatching || req->adm.queued || loop->draining || loop->cutting)
        return false;
    if (!dp_adm_hub_any_waiting(loop->sh->adm.hub))
        return false; /* the common case: nothing waits anywhere */
    struct dp_adm_model *m = queue_model(loop, req->model, true);
    if (m == NULL || dp_adm_hub_model_waiting(m->hm) == 0)
        return false;
    /* The waiting go first: they take what is free now. */
    enum queue_stop why = queue_dispatch_model(loop, m);
    if (why == QUEUE_STOP_EMPTY)
        return false; /* all of them went, and a worker may be left for this one */
    /* Workers are busy, or the next slot is another loop's request's: this
     * one waits behind, in the same order as everyone. It may itself be
     * next (its tenant served least): one more look. */
    dp_adm_wait(req);
    if (why == QUEUE_STOP_ELSEWHERE && req->adm.queued)
        (void)queue_dispatch_model(loop, m);
    return true;
}

void dp_adm_queue_dispatch(struct dp_loop *loop)
{
    /* Evictions another loop's arrival asked of this one first: their
     * places are already another's. */
    queue_reap(loop);
    if (!dp_adm_hub_any_waiting(loop->sh->adm.hub))
        return;
    struct list_node *it, *next;
    list_foreach_safe(it, next, &loop->adm.models)
    {
        struct dp_adm_model *m = list_entry(it, struct dp_adm_model, link);
        if (dp_adm_hub_model_waiting(m->hm) > 0)
            (void)queue_dispatch_model(loop, m);
    }
}

/* Frees the tenant queues that hold nothing and whose tenant has not asked
 * for recent_ms. Never during a dispatch (a dispatching request points to
 * its tenant queue): called from the tick only. */
static void queue_sweep(struct dp_loop *loop, uint64_t now_ms)
{
    uint64_t recent = queue_recent_ms(loop);
    struct list_node *mi;
    list_foreach(mi, &loop->adm.models)
    {
        struct dp_adm_model *m = list_entry(mi, struct dp_adm_model, link);
        for (int p = 0; p < DP_PRIO_COUNT; p++) {
            struct list_node *it, *next;
            list_foreach_safe(it, next, &m->bands[p])
            {
                struct dp_adm_tq *tq = list_entry(it, struct dp_adm_tq, ring_link);
                /* seen_ms may be later than the pass's now_ms (an arrival
                 * earlier in this pass): not idle, then. */
                if (tq->n == 0 && tq->seen_ms <= now_ms && now_ms - tq->seen_ms >= recent) {
                    list_remove(&tq->ring_link);
                    dp_adm_hub_tenant_put(loop->sh->adm.hub, tq->ht);
                    free(tq);
                }
            }
        }
    }
}

void dp_adm_queue_expire(struct dp_loop *loop, uint64_t now_ms)
{
    queue_sweep(loop, now_ms);
    uint64_t ttl = loop->sh->cfg->admission.queue.max_wait_ms;
    while (!list_is_empty(&loop->adm.by_age)) {
        struct dp_request *req =
            list_entry(list_first(&loop->adm.by_age), struct dp_request, adm.age_link);
        /* A request queued earlier in this pass has enqueued_ms > now_ms. */
        if (req->adm.enqueued_ms > now_ms || now_ms - req->adm.enqueued_ms < ttl)
            return;
        char msg[96];
        snprintf(msg, sizeof(msg),
                 "no worker became free within admission.queue.max_wait (%llu ms)",
                 (unsigned long long)ttl);
        queue_answer(req, DP_ADM_LEFT_TIMEOUT, 429, DP_ADM_REASON_QUEUE_TIMEOUT, 1, msg);
    }
}

void dp_adm_queue_flush(struct dp_loop *loop)
{
    while (!list_is_empty(&loop->adm.by_age)) {
        struct dp_request *req =
            list_entry(list_first(&loop->adm.by_age), struct dp_request, adm.age_link);
        queue_answer(req, DP_ADM_LEFT_SHUTDOWN, 503, DP_ADM_REASON_SHUTTING_DOWN, 1,
                     "the router is shutting down; retry (a restarted router takes new requests)");
    }
}

void dp_adm_queue_fini(struct dp_loop *loop)
{
    if (loop->adm.models.next == NULL)
        return; /* never initialised */
    while (!list_is_empty(&loop->adm.models)) {
        struct dp_adm_model *m =
            list_entry(list_pop_front(&loop->adm.models), struct dp_adm_model, link);
        for (int p = 0; p < DP_PRIO_COUNT; p++)
            while (!list_is_empty(&m->bands[p])) {
                struct dp_adm_tq *tq =
                    list_entry(list_pop_front(&m->bands[p]), struct dp_adm_tq, ring_link);
                dp_adm_hub_tenant_put(loop->sh->adm.hub, tq->ht);
                free(tq);
            }
        dp_adm_hub_model_put(loop->sh->adm.hub, m->hm);
        free(m);
    }
}
