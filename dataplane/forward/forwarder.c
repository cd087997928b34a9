/*
 * Forwarding state machine (see forwarder.h).
 *
 * A request is "forwarding" from the end of its upload until a response is
 * queued; during that time its MHD connection is suspended and its client
 * fd watched. Attempts move WAITING -> RELAYING (the client gets this body)
 * or WAITING -> DRAINING (retried: the body is discarded); a transfer's end
 * is the only place an attempt's guard is released, apart from aborts
 * (client gone, timeout, shutdown), which detach the transfer first.
 *
 * The request's relay buffer (relay.h) sits between curl's write callback
 * and MHD's content reader. When a chunk does not fit, the write callback
 * pauses the transfer; the reader unpauses it once a full curl chunk fits
 * again, so memory per stream is bounded and a slow client slows its worker.
 */
#include "dataplane/admission/adm_queue.h"
#include "dataplane/admission/admission.h"
#include "dataplane/forward/forwarder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/str.h"
#include "shm/effective_load.h"
#include "common/tls_client.h"
#include "dataplane/http/errors.h"
#include "dataplane/obs/journal.h"
#include "dataplane/policy/lora_affinity.h"
#include "dataplane/forward/priority_body.h"
#include "dataplane/forward/salt_body.h"
#include "dataplane/http/id_route.h"
#include "dataplane/http/listener.h"
#include "dataplane/core/loop.h"
#include "dataplane/admission/overload.h"
#include "dataplane/forward/legs.h"
#include "dataplane/forward/plan.h"
#include "dataplane/core/relay.h"
#include "dataplane/http/request.h"
#include "dataplane/forward/resp_affinity.h"
#include "dataplane/core/routes.h"
#include "dataplane/forward/tokenize.h"
#include "dataplane/forward/upstream.h"
#include "dataplane/core/sse_scan.h"
#include "common/list.h"

#define DP_UNPAUSE_ROOM CURL_MAX_WRITE_SIZE

/* ---- replies of our own ---------------------------------------------------- */

/* Answers req with status and body (owned; NULL = out of memory). */
static void fwd_reply_body(struct dp_request *req, int status, char *body)
{
    if (req->reply_status != 0 || req->relay_ready || req->client_gone || req->conn == NULL) {
        free(body);
        return;
    }
    /* Admission answers its own queued requests; the one reply that can
     * reach a queued request from here is the drain deadline's cut. */
    dp_adm_leave(req, DP_ADM_LEFT_SHUTDOWN);
    dp_legs_next(req, DP_LEG_EV_FAILED, NULL); /* an error answer ends the plan */
    req->reply_status = status;
    req->reply_body = body;
    dp_listener_wake(req);
}

static void fwd_reply(struct dp_request *req, int status, const char *code, const char *msg)
{
    bool anthropic = dp_route_row(req->route)->anthropic_errors;
    fwd_reply_body(req, status, dp_error_body_shaped(anthropic, status, code, msg));
}

/*
 * The fleet failed the request after attempts. Clients are not told which
 * worker failed or how (worker ids and slots are the operator's): the
 * detail, req->last_cause, goes to the log here, to the access log's
 * attempts and, with dataplane.debug_headers, to x-switchyard-error-cause.
 */
static void fwd_reply_attempts_failed(struct dp_request *req, int status, const char *code)
{
    log_info("request %s: failed after %u attempt%s: %s", req->request_id, req->attempts,
             req->attempts == 1 ? "" : "s", req->last_cause);
    char msg[CFG_MODEL_MAX + 96];
    snprintf(msg, sizeof(msg), "no worker available for model '%s' (%u attempt%s failed)",
             req->model, req->attempts, req->attempts == 1 ? "" : "s");
    fwd_reply(req, status, code, msg);
}

/* Every attempt ended in a worker's 429 or 503: say the fleet is
 * overloaded, with that status and the shortest Retry-After (overload.h). */
static bool fwd_reply_overloaded(struct dp_request *req)
{
    int status;
    if (!dp_overload_all(req, &status))
        return false;
    char msg[CFG_MODEL_MAX + 160];
    snprintf(msg, sizeof(msg),
             "the workers serving model '%s' are overloaded (%u attempt%s answered %d); retry "
             "after %u s",
             req->model, req->attempts, req->attempts == 1 ? "" : "s", status, req->retry_after_s);
    fwd_reply(req, status, "fleet_overloaded", msg);
    return true;
}

/* ---- attempts -------------------------------------------------------------- */

static struct dp_attempt *fwd_attempt_of_sibling(struct list_node *n)
{
    return list_entry(n, struct dp_attempt, sibling);
}

static void attempt_link(struct dp_attempt *a)
{
    struct dp_loop *loop = a->loop;
    list_push_front(&loop->fwd.attempts, &a->link);
    list_push_front(&a->req->attempt_list, &a->sibling);
}

static void attempt_unlink(struct dp_attempt *a)
{
    list_remove(&a->link);
    list_remove(&a->sibling);
}

/* Ends an attempt: its transfer detached, its guard released, its memory freed. */
static void attempt_end(struct dp_attempt *a)
{
    struct dp_request *req = a->req;
    dp_up_detach(a);
    if (dp_guard_is_held(&a->guard))
        dp_adm_slot_freed(a->loop);
    dp_guard_release(&a->loop->sh->guards, &a->guard);
    dp_journal_attempt_end(a);
    if (req->active == a)
        req->active = NULL;
    attempt_unlink(a);
    free(a);
    dp_request_unref(req);
}

/* Sets a's deadline, keeping the loop's floor a lower bound of all of them. */
static void fwd_set_deadline(struct dp_attempt *a, uint64_t deadline_ms)
{
    a->deadline_ms = deadline_ms;
    if (deadline_ms < a->loop->fwd.deadline_floor_ms)
        a->loop->fwd.deadline_floor_ms = deadline_ms;
}

static bool fwd_was_tried(const struct dp_request *req, uint32_t slot)
{
    for (size_t i = 0; i < req->n_tried; i++)
        if (req->tried[i] == slot)
            return true;
    return false;
}

static const char *fwd_header_lookup(void *ctx, const char *name)
{
    struct dp_request *req = ctx;
    return req->conn != NULL ? MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name) : NULL;
}

static bool fwd_can_retry(const struct dp_request *req)
{
    const struct dp_loop *loop = req->loop;
    return req->attempts < loop->sh->cfg->dataplane.retry.max_attempts && !req->client_gone &&
           req->conn != NULL && !req->relay_ready && req->reply_status == 0 &&
           atomic_load_explicit(&loop->cmd, memory_order_relaxed) != DP_CMD_STOP;
}

static void fwd_schedule_retry(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    const struct cfg_retry *rc = &loop->sh->cfg->dataplane.retry;
    req->retry_at_ms = proc_monotonic_ms() + req->backoff_ms;
    if (req->retry_at_ms == 0)
        req->retry_at_ms = 1;
    req->backoff_ms =
        req->backoff_ms * 2 > rc->backoff_max_ms ? rc->backoff_max_ms : req->backoff_ms * 2;
    list_push_front(&loop->fwd.retrying, &req->retry_link);
    dp_request_ref(req);
}

static void fwd_unschedule_retry(struct dp_request *req)
{
    if (req->retry_at_ms == 0)
        return;
    list_remove(&req->retry_link);
    req->retry_at_ms = 0;
    dp_request_unref(req);
}

/*
 * A failed attempt: retry when allowed and the plan agrees, else answer
 * with the last cause. unreached: the attempt provably never reached its
 * worker (a P/D decode may then be retried with the same params).
 */
static void fwd_failed(struct dp_request *req, int status, const char *code, bool unreached)
{
    if (fwd_can_retry(req)) {
        struct dp_leg_step step = {.unreached = unreached};
        enum dp_leg_action act = dp_legs_next(req, DP_LEG_EV_RETRY, &step);
        if (act == DP_LEG_ACT_NEXT) {
            /* The plan runs an earlier leg again: its attempts start afresh. */
            req->attempts = 0;
            req->n_tried = 0;
        }
        if (act != DP_LEG_ACT_FAIL) {
            dp_metrics_retry(&req->loop->sh->metrics);
            fwd_schedule_retry(req);
            return;
        }
    }
    if (fwd_reply_overloaded(req))
        return;
    fwd_reply_attempts_failed(req, status, code);
}

static bool fwd_slot_in(const uint32_t *slots, size_t n, uint32_t slot)
{
    for (size_t i = 0; i < n; i++)
        if (slots[i] == slot)
            return true;
    return false;
}

static void fwd_try(struct dp_request *req);

/* Whether w is a worker req may go to, eligibility aside: its pinned worker
 * (resp_affinity.h), or any worker serving its model. */
static bool fwd_may_serve(const struct dp_request *req, const struct shm_worker_info *w)
{
    if (req->pinned)
        return w->slot == req->pin_slot && w->generation == req->pin_generation;
    return req->model[0] == '\0' || shm_worker_serves(w, req->model);
}

/*
 * No worker can take req, but one would once a reset_load ends (reset_load
 * drains its worker for the reset's duration, usually a millisecond and at
 * most controlplane.reset_load_timeout): pick again at the next tick, holding
 * no load, so a reset stays invisible to clients even where it drains the
 * only worker of a model or the one holding a pinned conversation. Bounded
 * by the timeout plus a second, in case the control plane died mid-reset
 * (its successor ends the drain when it attaches). True when req waits.
 */
static bool fwd_wait_for_reset(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    uint64_t now = proc_monotonic_ms();
    if (req->reset_wait_until_ms != 0 && now >= req->reset_wait_until_ms)
        return false;
    if (!fwd_can_retry(req))
        return false; /* the client left, the loop stops, or no attempt is left */
    struct dp_workers *v = &loop->workers;
    dp_workers_refresh(v); /* a guard may have been refused since the snapshot */
    bool found = false;
    for (size_t i = 0; i < v->n && !found; i++)
        found = fwd_may_serve(req, &v->w[i]) &&
                dp_workers_back_after_reset(&v->w[i], req->leg->is_eligible);
    if (!found)
        return false;
    if (req->reset_wait_until_ms == 0)
        req->reset_wait_until_ms = now + loop->sh->cfg->controlplane.reset_load_timeout_ms + 1000;
    req->retry_at_ms = now + DP_TICK_MS;
    list_push_front(&loop->fwd.retrying, &req->retry_link);
    dp_request_ref(req);
    return true;
}

/* Routes whose prompt precise_cache_aware tokenizes (tokenize.h). */
static bool fwd_tokenizes(const struct dp_request *req)
{
    /* The parsed shape: an /invocations chat is tokenized as chat; token
     * ids (/inference/v1/generate) are chained as they are. */
    enum dp_body b = dp_request_shape(req);
    return b == DP_BODY_CHAT || b == DP_BODY_COMPLETION || b == DP_BODY_RESPONSES ||
           b == DP_BODY_MESSAGES || b == DP_BODY_GENERATE;
}

/* The tokens came (or were given up on): pick now. */
static void fwd_resume_tokenized(struct dp_request *req)
{
    fwd_try(req);
}

/*
 * One call of fwd_try's pick state: the loop's buffers (reused by every
 * pick, allocated at the first) and what this call learnt. refused holds
 * the workers that refused a guard in this call (draining since the
 * snapshot was taken, removed, or saturated by another loop): never picked
 * again by this call, which bounds its retries by the fleet's size.
 */
struct fwd_pick {
    struct pol_candidate *cands;
    uint32_t *slots, *gens; /* gens: the second half of the loop's pick_slots */
    uint64_t *loads;
    uint32_t *refused;
    size_t n_refused;
    bool saturated; /* a worker was refused as saturated (admission.h) */
    /* How own counts and reports combine: derived once from the config at
     * start (dataplane.c), not per request. */
    const struct shm_el_params *elp;
    uint64_t now_unix_ms;
};

/* Points p at the loop's pick buffers, sized for the snapshot's capacity.
 * 0, or -ENOMEM (the buffers are dropped, to be taken again next time). */
static int fwd_pick_init(struct dp_loop *loop, struct fwd_pick *p)
{
    struct dp_fwd *f = &loop->fwd;
    size_t cap = loop->workers.cap ? loop->workers.cap : 1; /* workers.n never exceeds it */
    if (f->pick_cands == NULL) {
        f->pick_cands = malloc(sizeof(*f->pick_cands) * cap);
        f->pick_slots = malloc(sizeof(*f->pick_slots) * cap * 2);
        f->pick_loads = malloc(sizeof(*f->pick_loads) * cap);
        f->pick_refused = malloc(sizeof(*f->pick_refused) * cap);
    }
    if (f->pick_cands == NULL || f->pick_slots == NULL || f->pick_loads == NULL ||
        f->pick_refused == NULL) {
        free(f->pick_cands);
        free(f->pick_slots);
        free(f->pick_loads);
        free(f->pick_refused);
        f->pick_cands = NULL;
        f->pick_slots = f->pick_refused = NULL;
        f->pick_loads = NULL;
        return -ENOMEM;
    }
    *p = (struct fwd_pick){
        .cands = f->pick_cands,
        .slots = f->pick_slots,
        .gens = f->pick_slots + cap,
        .loads = f->pick_loads,
        .refused = f->pick_refused,
        .elp = &loop->sh->metrics.load,
    };
    return 0;
}

/* The workers req may go to now, into p->cands: untried workers first, a
 * worker already tried only when none is left. Returns how many. */
static size_t fwd_gather(const struct dp_request *req, struct fwd_pick *p)
{
    const struct dp_workers *v = &req->loop->workers;
    size_t n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (size_t i = 0; i < v->n; i++) {
            const struct shm_worker_info *w = &v->w[i];
            if (!req->leg->is_eligible(w) || !fwd_may_serve(req, w))
                continue;
            if (pass == 0 && fwd_was_tried(req, w->slot))
                continue;
            if (fwd_slot_in(p->refused, p->n_refused, w->slot))
                continue;
            p->cands[n].worker = w;
            p->slots[n] = w->slot;
            p->gens[n] = w->generation;
            n++;
        }
    return n;
}

/* No worker can take req: it waits (for a slot, or the end of a reset_load)
 * holding no load, or is answered. */
static void fwd_no_candidate(struct dp_request *req, bool saturated)
{
    if (saturated) {
        dp_adm_wait(req);
        return;
    }
    if (fwd_wait_for_reset(req))
        return;
    if (req->attempts == 0) {
        req->retry_after_s = 1;
        char msg[CFG_MODEL_MAX + 64];
        snprintf(msg, sizeof(msg), "no healthy %sworker serves model '%s'", req->leg->label,
                 req->model);
        fwd_reply(req, 503, "no_healthy_worker", msg);
    } else if (!fwd_reply_overloaded(req)) {
        fwd_reply_attempts_failed(req, 502, "upstream_error");
    }
}

/* Gives each of the n candidates its effective load: this node's own count
 * combined with the worker's report (effective_load.h). */
static void fwd_rate(struct dp_loop *loop, struct fwd_pick *p, size_t n)
{
    shm_load_read_many(loop->sh->seg, p->slots, p->gens, n, p->loads);
    p->now_unix_ms = proc_wall_ms();
    for (size_t i = 0; i < n; i++) {
        struct shm_el_load el;
        shm_el_of(loop->sh->seg, p->elp, p->slots[i], p->gens[i], p->loads[i], p->now_unix_ms, &el);
        p->cands[i].load = el.effective;
        p->cands[i].kv_overloaded = el.kv_overloaded;
        if (el.stale)
            dp_metrics_report_stale(&loop->sh->metrics, p->slots[i]);
    }
}

/*
 * What stands between the candidates and the policy: admission's
 * saturation, LoRA adapters already running, and precise_cache_aware's
 * tokens. Narrows *n; false when req now waits (for a slot or its tokens),
 * holding no load.
 */
static bool fwd_gate(struct dp_request *req, struct fwd_pick *p, size_t *n)
{
    struct dp_loop *loop = req->loop;
    if (dp_adm_checks_saturation(loop)) {
        *n = dp_adm_filter_saturated(loop, p->cands, *n);
        if (*n == 0) {
            /* Every eligible worker is busy: wait for one, holding no load. */
            dp_adm_wait(req);
            return false;
        }
    }
    /* LoRA: prefer the workers already running the adapter (lora_affinity.h). */
    if (!req->pinned)
        *n = dp_lora_keep_running(loop->sh->seg, p->elp, &loop->sh->cfg->policy, req->model,
                                  p->cands, *n, p->now_unix_ms);
    /* precise_cache_aware routes on the prompt's tokens: fetched once,
     * before the first pick; the request waits for them holding no load. */
    struct pol_policy *policy = req->leg->policy(loop);
    if (!req->pinned && pol_needs_tokens(policy) && fwd_tokenizes(req) &&
        dp_tok_prepare(req, p->cands, *n, fwd_resume_tokenized))
        return false;
    return true;
}

/* Asks the leg's policy for one of the n candidates (a pinned request has
 * its one), journals and counts the decision. NULL when it chose none
 * (req is answered). */
static const struct shm_worker_info *fwd_choose(struct dp_request *req,
                                                const struct pol_candidate *cands, size_t n)
{
    struct dp_loop *loop = req->loop;
    struct pol_request pr = {
        .path = dp_route_row(req->route)->upstream_path,
        .model = req->model,
        .text = req->routing_text.data,
        .text_len = req->routing_text.len,
        .user = req->user,
        .salted = req->salted,
        .salt_hash = req->salt_hash,
        .header = fwd_header_lookup,
        .header_ctx = req,
    };
    dp_tok_fill(req, &pr);
    enum pol_decision decision = POL_DECISION_UNSET;
    uint64_t pick_ns = dp_journal_now_ns();
    /* A pinned request (resp_affinity.h) has its one candidate. */
    int pick = req->pinned ? 0 : pol_pick(req->leg->policy(loop), &pr, cands, n, &decision);
    if (req->pinned)
        decision = POL_DECISION_RESPONSE_AFFINITY;
    dp_journal_decision(req, decision, n, pick >= 0 ? cands[pick].worker->id : NULL, pick_ns);
    req->decision = decision;
    req->leg->count_decision(&loop->sh->metrics, decision);
    if (pick < 0) {
        fwd_reply(req, 503, "no_worker_selected", "the routing policy selected no worker");
        return NULL;
    }
    return cands[pick].worker;
}

/* Picks the worker for req's next attempt among those p has not seen
 * refuse. NULL when req was answered or now waits, holding no load. */
static const struct shm_worker_info *fwd_pick(struct dp_request *req, struct fwd_pick *p)
{
    size_t n = fwd_gather(req, p);
    if (n == 0) {
        fwd_no_candidate(req, p->saturated);
        return NULL;
    }
    fwd_rate(req->loop, p, n);
    if (!fwd_gate(req, p, &n))
        return NULL;
    return fwd_choose(req, p->cands, n);
}

/* What became of an attempt's guard on its picked worker. */
enum fwd_acquired {
    FWD_ACQ_UNSET = 0,
    FWD_ACQ_HELD,      /* counted: the attempt may start */
    FWD_ACQ_REFUSED,   /* draining or gone since the snapshot: nothing counted */
    FWD_ACQ_SATURATED, /* its last admission slot went elsewhere: nothing counted */
    FWD_ACQ_FAILED,    /* req was answered */
};

/*
 * A new attempt of req on w, with w's load counted in its guard (*out,
 * FWD_ACQ_HELD). A refused guard leaves nothing behind, for the caller to
 * pick among the rest; any other failure answers req.
 */
static enum fwd_acquired fwd_acquire(struct dp_request *req, const struct shm_worker_info *w,
                                     struct dp_attempt **out)
{
    struct dp_loop *loop = req->loop;
    struct dp_attempt *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return FWD_ACQ_FAILED;
    }
    a->loop = loop;
    a->req = req;
    a->slot = w->slot;
    a->generation = w->generation;
    str_copy(a->worker_id, sizeof(a->worker_id), w->id);
    str_copy(req->worker_id, sizeof(req->worker_id), w->id);
    a->state = DP_ATT_WAITING;
    a->leg = req->leg;
    req->leg->body(req, &a->body, &a->body_len);
    a->started_ms = proc_monotonic_ms();
    fwd_set_deadline(a, a->started_ms + loop->sh->cfg->dataplane.first_byte_timeout_ms);
    int rc = dp_guard_acquire(&loop->sh->guards, &a->guard, w->slot, w->generation);
    if (rc == -EBUSY || rc == -ESTALE) {
        /* The worker started draining (a reset_load) or left the registry
         * after our snapshot: nothing was counted, choose among the rest. */
        free(a);
        return FWD_ACQ_REFUSED;
    }
    if (rc == 0 && !dp_adm_confirm(loop, w->slot, w->generation)) {
        /* Another loop or data plane took the worker's last slot first. */
        dp_guard_release(&loop->sh->guards, &a->guard);
        free(a);
        return FWD_ACQ_SATURATED;
    }
    if (rc != 0) {
        free(a);
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s: %s", req->leg->label,
                 w->id, strerror(-rc));
        log_info("request %s: %s", req->request_id, req->last_cause);
        char msg[CFG_MODEL_MAX + 64];
        snprintf(msg, sizeof(msg), "no worker available for model '%s'", req->model);
        fwd_reply(req, 503, "no_healthy_worker", msg);
        return FWD_ACQ_FAILED;
    }
    *out = a;
    return FWD_ACQ_HELD;
}

/* Starts the transfer of a (its guard held) to w; on failure a ends and
 * req is answered. */
static void fwd_launch(struct dp_request *req, struct dp_attempt *a,
                       const struct shm_worker_info *w)
{
    struct dp_loop *loop = req->loop;
    char url[CFG_URL_MAX + DP_RESP_ID_MAX + 512]; /* + id and query of an id route */
    int rc = 0;
    if (dp_route_row(req->route)->id_suffix != NULL)
        rc = dp_id_route_url(req, w->url, url, sizeof(url));
    else {
        size_t at = str_copy(url, sizeof(url), w->url);
        str_copy(url + at, sizeof(url) - at, dp_route_row(req->route)->upstream_path);
    }
    if (rc != 0) {
        dp_guard_release(&loop->sh->guards, &a->guard);
        free(a);
        fwd_reply(req, 414, "uri_too_long", "the request's path and query are too long");
        return;
    }
    dp_request_ref(req);
    attempt_link(a);
    req->attempts++;
    if (req->n_tried < DP_MAX_TRIED)
        req->tried[req->n_tried++] = w->slot;
    req->active = a;
    dp_journal_attempt_start(a);
    rc = dp_up_start(a, url);
    if (rc != 0) {
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s: cannot start transfer: %s",
                 a->leg->label, a->worker_id, strerror(-rc));
        attempt_end(a);
        log_warn("request %s: %s", req->request_id, req->last_cause);
        fwd_reply(req, 500, "internal_error", "the router could not start the request");
    }
}

/* Picks a worker and starts an attempt on it; on failure answers req. */
static void fwd_try(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    /* A new request does not overtake those already waiting for its
     * model (adm_queue.h). This comes before the pick's buffers (the
     * loop's, reused by every pick) are filled, since the queue's
     * dispatches pick too; those come back here dispatching, which
     * before_pick lets through at once, so it nests one level at most
     * (the arrival itself among them, when the queue keeps it and it is
     * next: the inner call is then its whole pick). */
    if (req->attempts == 0 && dp_adm_checks_saturation(loop) && dp_adm_before_pick(req))
        return; /* queued behind the waiting, or answered */
    dp_workers_refresh(&loop->workers);
    struct fwd_pick p;
    if (fwd_pick_init(loop, &p) != 0) {
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    }
    /* A worker that refuses the guard is dropped and the pick runs again
     * among the rest; each round refuses a new worker or ends. */
    for (;;) {
        const struct shm_worker_info *w = fwd_pick(req, &p);
        if (w == NULL)
            return; /* answered, or waiting */
        struct dp_attempt *a = NULL;
        enum fwd_acquired got = fwd_acquire(req, w, &a);
        if (got == FWD_ACQ_HELD) {
            fwd_launch(req, a, w);
            return;
        }
        if (got == FWD_ACQ_FAILED)
            return;
        p.refused[p.n_refused++] = w->slot;
        p.saturated = p.saturated || got == FWD_ACQ_SATURATED;
    }
}

/* ---- the request's start --------------------------------------------------- */

void dp_fwd_begin(struct dp_request *req)
{
    struct dp_loop *loop = req->loop;
    req->phase = DP_REQ_FORWARDING;
    req->backoff_ms = loop->sh->cfg->dataplane.retry.backoff_ms;
    if (req->body_too_large) {
        char msg[96];
        snprintf(msg, sizeof(msg), "request body exceeds the limit of %llu bytes",
                 (unsigned long long)loop->sh->cfg->dataplane.max_body);
        fwd_reply(req, 413, "request_too_large", msg);
        return;
    }
    if (!dp_adm_authenticate(req))
        return;
    enum dp_parse_result pr = dp_request_parse(req);
    dp_workers_refresh(&loop->workers);
    bool by_id = dp_route_row(req->route)->body == DP_BODY_ID;
    if (by_id && req->model[0] == '\0')
        /* No model: the id decides (resp_affinity.h), else any worker
         * (the single model's, when the fleet serves one). */
        (void)dp_workers_single_model(&loop->workers, req->model, sizeof(req->model));
    switch (pr) {
    case DP_PARSE_OK:
        break;
    case DP_PARSE_NO_MODEL:
        if (dp_workers_single_model(&loop->workers, req->model, sizeof(req->model)))
            break;
        fwd_reply(req, 400, "model_required", "the request has no 'model'");
        return;
    case DP_PARSE_NO_MEMORY:
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    case DP_PARSE_BAD_FIELD:
        fwd_reply(req, 400, "invalid_field",
                  "'model' must be a non-empty string and 'stream' a boolean");
        return;
    default:
        fwd_reply(req, 400, "invalid_json",
                  req->parse_error[0] != '\0' ? req->parse_error
                                              : "the request body is not a JSON object");
        return;
    }
    if (!by_id && !dp_workers_has_model(&loop->workers, req->model)) {
        char msg[CFG_MODEL_MAX + 64];
        snprintf(msg, sizeof(msg), "the model '%s' does not exist", req->model);
        fwd_reply(req, 404, "model_not_found", msg);
        return;
    }
    if (dp_request_prepare_upstream(req) != 0) {
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    }
    if (!dp_adm_limit(req))
        return;
    /* Before a plan: both P/D legs and every retry start from this body. */
    switch (dp_salt_body_apply(req)) {
    case 0:
        break;
    case -EINVAL:
        fwd_reply(req, 400, "invalid_field", "'cache_salt' must be a non-empty string");
        return;
    case -E2BIG:
        fwd_reply(req, 413, "request_too_large",
                  "the request body with its cache_salt exceeds the router's limit");
        return;
    case -ENOMEM:
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    default:
        fwd_reply(req, 500, "cache_isolation_unavailable",
                  "the router cannot isolate this tenant's cache");
        return;
    }
    switch (dp_priority_body_apply(req)) {
    case 0:
        break;
    case -E2BIG:
        fwd_reply(req, 413, "request_too_large",
                  "the request body with its priority exceeds the router's limit");
        return;
    default:
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return;
    }
    /* A request naming a stored response goes to the worker storing it. */
    char *pin_body = NULL;
    int pin_status = dp_resp_pin(req, &pin_body);
    if (pin_status != 0) {
        fwd_reply_body(req, pin_status, pin_body);
        return;
    }
    /* The plan (one leg, or prefill then decode) is chosen here, once. */
    struct dp_leg_step step = {0};
    if (dp_plan_begin(req, &step) == DP_LEG_ACT_ANSWER) {
        fwd_reply_body(req, step.reply_status, step.reply_body);
        return;
    }
    fwd_try(req);
}

/* ---- curl callbacks ---------------------------------------------------------- */

static bool fwd_status_is_retryable(const struct dp_loop *loop, long status)
{
    const struct cfg_retry *rc = &loop->sh->cfg->dataplane.retry;
    for (size_t i = 0; i < rc->n_on_status; i++)
        if (rc->on_status[i] == status)
            return true;
    return false;
}

static void fwd_keep_header(struct dp_request *req, const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    const char *colon = memchr(line, ':', len);
    if (colon == NULL || colon == line)
        return;
    size_t name_len = (size_t)(colon - line);
    if (dp_header_is_hop_by_hop(line, name_len))
        return;
    if (name_len == 12 && strncasecmp(line, "content-type", 12) == 0) {
        const char *v = colon + 1;
        size_t vl = len - name_len - 1;
        while (vl > 0 && *v == ' ') {
            v++;
            vl--;
        }
        req->sse = vl >= 17 && strncasecmp(v, "text/event-stream", 17) == 0;
    }
    if (req->resp_hdrs == NULL && (req->resp_hdrs = malloc(DP_RESP_HDRS_CAP)) == NULL)
        return; /* out of memory: the client gets the body without them */
    if (req->resp_hdrs_len + len + 2 > DP_RESP_HDRS_CAP)
        return; /* bounded: drop what does not fit */
    memcpy(req->resp_hdrs + req->resp_hdrs_len, line, len);
    req->resp_hdrs_len += len;
    req->resp_hdrs[req->resp_hdrs_len++] = '\n';
    req->resp_hdrs[req->resp_hdrs_len] = '\0';
}

/*
 * Relaying has begun, so no attempt will be made again: the routing text
 * goes, and so do the request's bodies (the client's and the plan's) and
 * curl's upload buffer and the upstream header list once curl has sent
 * all of this attempt's (dp_up_request_sent). A held stream then costs the
 * same whatever the size of its prompt.
 */
static void fwd_drop_request_copies(struct dp_request *req, struct dp_attempt *a)
{
    buf_fini(&req->routing_text);
    curl_off_t sent = -1;
    if (curl_easy_getinfo(a->easy, CURLINFO_SIZE_UPLOAD_T, &sent) != CURLE_OK ||
        sent != (curl_off_t)a->body_len)
        return; /* the worker answered before reading it all: curl may still send */
    a->body = NULL;
    a->body_len = 0;
    buf_fini(&req->body);
    dp_up_request_sent(a);
    dp_legs_next(req, DP_LEG_EV_SENT, NULL);
}

static size_t fwd_on_header(struct dp_attempt *a, const char *line, size_t len)
{
    struct dp_request *req = a->req;
    if (a->state != DP_ATT_WAITING)
        return len;
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue, say): forget earlier headers. */
        req->resp_hdrs_len = 0;
        if (req->resp_hdrs != NULL)
            req->resp_hdrs[0] = '\0';
        req->sse = false;
        return len;
    }
    if (!(len <= 2 && (line[0] == '\r' || line[0] == '\n'))) {
        fwd_keep_header(req, line, len);
        return len;
    }
    long status = 0;
    curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200)
        return len;
    a->status = status;
    struct dp_loop *loop = a->loop;
    uint64_t now = proc_monotonic_ms();
    fwd_set_deadline(a, now + loop->sh->cfg->dataplane.idle_timeout_ms);
    if (req->client_gone || req->conn == NULL || req->active != a) {
        a->state = DP_ATT_DRAINING;
        return len;
    }
    bool retryable = fwd_status_is_retryable(loop, status);
    if (retryable)
        dp_overload_note(req, status);
    if (retryable && !fwd_can_retry(req) && dp_overload_all(req, &(int){0})) {
        /* The last attempt, and all of them overloaded: our own answer. */
        dp_metrics_upstream_error(&loop->sh->metrics, a->slot, DP_UPERR_STATUS);
        a->state = DP_ATT_DRAINING;
        req->active = NULL;
        fwd_reply_overloaded(req);
        return len;
    }
    if (retryable && a->leg->relays_last_error && !fwd_can_retry(req)) {
        /* The last attempt: the client gets the worker's own error answer
         * (its message, in whichever shape the worker writes errors). */
        dp_metrics_upstream_error(&loop->sh->metrics, a->slot, DP_UPERR_STATUS);
        log_info("request %s: %sworker %s answered HTTP %ld, relayed (attempt %u, no retry left)",
                 req->request_id, a->leg->label, a->worker_id, status, req->attempts);
        retryable = false;
    }
    if (retryable) {
        dp_journal_attempt_outcome(a, DP_JOUT_STATUS);
        a->state = DP_ATT_DRAINING;
        req->active = NULL;
        req->last_status = (int)status;
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s answered HTTP %ld",
                 a->leg->label, a->worker_id, status);
        dp_metrics_upstream_error(&loop->sh->metrics, a->slot, DP_UPERR_STATUS);
        log_info("request %s: %s (attempt %u)", req->request_id, req->last_cause, req->attempts);
        fwd_failed(req, 502, "upstream_error", false);
        return len;
    }
    if (a->leg->collects) {
        /* The plan reads this answer; the client never sees it. */
        dp_legs_next(req, DP_LEG_EV_RESPONSE, NULL);
        a->state = DP_ATT_COLLECTING;
        return len;
    }
    if (dp_relay_open(&req->relay, !req->sse) != 0) {
        req->active = NULL;
        a->state = DP_ATT_DRAINING;
        fwd_reply(req, 500, "out_of_memory", "the router is out of memory");
        return 0; /* aborts the transfer; its end releases the guard */
    }
    a->state = DP_ATT_RELAYING;
    dp_sse_scan_init(&req->sse_scan);
    req->relay_status = status;
    req->relay_ready = !dp_relay_is_whole(&req->relay);
    fwd_drop_request_copies(req, a);
    if (req->relay_ready)
        dp_listener_wake(req);
    return len;
}

static size_t fwd_on_body(struct dp_attempt *a, const char *data, size_t len)
{
    struct dp_request *req = a->req;
    /* The pass's clock, not a reading per chunk; kept only when later than
     * before, so the floor stays a lower bound. */
    uint64_t idle_until = a->loop->pass_ms + a->loop->sh->cfg->dataplane.idle_timeout_ms;
    if (idle_until > a->deadline_ms)
        a->deadline_ms = idle_until;
    if (a->state == DP_ATT_COLLECTING && req->active == a) {
        a->leg->collect(req, data, len);
        return len;
    }
    if (a->state != DP_ATT_RELAYING || req->client_gone || !dp_relay_is_open(&req->relay))
        return len;
    const char *out = data;
    size_t out_len = len;
    if (a->leg->filter != NULL)
        a->leg->filter(req, data, len, &out, &out_len);
    if (dp_relay_append(&req->relay, out, out_len) != 0) {
        if (dp_relay_is_whole(&req->relay)) {
            /* Too large to send in one piece: relay it as it comes. */
            dp_relay_stream(&req->relay);
            req->relay_ready = true;
            dp_listener_wake(req);
        }
        a->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (req->sse && !req->in_band_error && dp_sse_scan_feed(&req->sse_scan, data, len)) {
        /* Relayed as sent; counted as the worker's failure. */
        req->in_band_error = true;
        dp_journal_attempt_outcome(a, DP_JOUT_IN_BAND);
        dp_metrics_upstream_error(&a->loop->sh->metrics, a->slot, DP_UPERR_IN_BAND);
        log_info("request %s: worker %s sent an error event in its stream", req->request_id,
                 a->worker_id);
    }
    if (a->leg->filter_commit != NULL)
        a->leg->filter_commit(req, data, len);
    if (req->first_byte_ms == 0 && len > 0) {
        req->first_byte_ms = proc_monotonic_ms();
        dp_metrics_ttfb(&a->loop->sh->metrics, req->route, req->model,
                        (req->first_byte_ms - req->start_ms) * 1000);
    }
    if (!dp_relay_is_whole(&req->relay))
        dp_listener_wake(req);
    return len;
}

/* Ends a relayed stream abnormally: an SSE error event when it is a stream. */
static void fwd_cut_stream(struct dp_request *req, int status, const char *code, const char *msg)
{
    dp_legs_next(req, DP_LEG_EV_CUT, NULL);
    if (dp_relay_is_whole(&req->relay)) {
        /* Nothing reached the client yet: an error answer, not a cut body. */
        dp_relay_stream(&req->relay);
        fwd_reply(req, status, code, msg);
        return;
    }
    req->up_done = true;
    req->up_failed = true;
    if (req->sse && dp_relay_is_open(&req->relay)) {
        char ev[512];
        size_t n = dp_error_sse_event_shaped(dp_route_row(req->route)->anthropic_errors, ev,
                                             sizeof(ev), status, code, msg);
        if (n > 0)
            (void)dp_relay_append(&req->relay, ev, n); /* no room: the stream is cut anyway */
    }
    dp_listener_wake(req);
}

/*
 * A collecting leg's transfer ended (its guard already released) and a is
 * still the request's current attempt. A broken transfer is retried like a
 * connect failure; a whole response goes to the plan, which answers the
 * client or starts the next leg, whose attempts start afresh.
 */
static void fwd_collected(struct dp_attempt *a, CURLcode result)
{
    struct dp_request *req = a->req;
    struct dp_loop *loop = a->loop;
    char worker_id[CFG_ID_MAX];
    snprintf(worker_id, sizeof(worker_id), "%s", a->worker_id);
    if (result != CURLE_OK) {
        dp_metrics_upstream_error(&loop->sh->metrics, a->slot, DP_UPERR_TRANSFER);
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s: %s", a->leg->label,
                 worker_id, curl_easy_strerror(result));
        log_info("request %s: %s (attempt %u)", req->request_id, req->last_cause, req->attempts);
        attempt_end(a);
        fwd_failed(req, 502, "upstream_error", false);
        return;
    }
    struct dp_leg_step step = {.status = a->status, .worker_id = worker_id};
    attempt_end(a);
    switch (dp_legs_next(req, DP_LEG_EV_COLLECTED, &step)) {
    case DP_LEG_ACT_ANSWER:
        fwd_reply_body(req, step.reply_status, step.reply_body);
        return;
    case DP_LEG_ACT_NEXT:
        /* The next leg has its own attempts, workers and backoff. */
        req->attempts = 0;
        req->n_tried = 0;
        req->backoff_ms = loop->sh->cfg->dataplane.retry.backoff_ms;
        req->last_status = 0;
        req->last_cause[0] = '\0';
        if (!req->client_gone && req->conn != NULL)
            fwd_try(req);
        return;
    default:
        return;
    }
}

static void fwd_on_done(struct dp_attempt *a, CURLcode result)
{
    struct dp_request *req = a->req;
    struct dp_metrics *m = &a->loop->sh->metrics;
    enum dp_attempt_state state = a->state;
    dp_journal_attempt_done(a, result);
    /* The transfer is over: release now, whatever the request does next. */
    dp_up_detach(a);
    if (dp_guard_is_held(&a->guard))
        dp_adm_slot_freed(a->loop);
    dp_guard_release(&a->loop->sh->guards, &a->guard);
    if (state == DP_ATT_RELAYING) {
        if (result != CURLE_OK) {
            dp_metrics_upstream_error(m, a->slot, DP_UPERR_TRANSFER);
            char msg[DP_CAUSE_MAX];
            snprintf(msg, sizeof(msg), "worker %s: %s", a->worker_id, curl_easy_strerror(result));
            log_info("request %s: stream cut: %s", req->request_id, msg);
            fwd_cut_stream(req, 502, "upstream_error", "the worker's stream broke off");
        } else {
            dp_legs_next(req, DP_LEG_EV_DONE, NULL);
            req->up_done = true;
            req->relay_ready = true; /* a buffered answer is whole now */
            dp_listener_wake(req);
        }
    } else if (state == DP_ATT_COLLECTING && req->active == a) {
        req->active = NULL;
        dp_request_ref(req);
        fwd_collected(a, result);
        dp_request_unref(req);
        return;
    } else if (state == DP_ATT_WAITING && req->active == a) {
        bool connect = result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST ||
                       (result == CURLE_OPERATION_TIMEDOUT);
        /* A failed handshake or certificate: the request never reached the
         * worker, and it is never retried on the same worker in plain HTTP. */
        bool tls = tls_client_is_tls_error(result);
        dp_metrics_upstream_error(m, a->slot,
                                  tls       ? DP_UPERR_TLS
                                  : connect ? DP_UPERR_CONNECT
                                            : DP_UPERR_TRANSFER);
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s: %s", a->leg->label,
                 a->worker_id, curl_easy_strerror(result != CURLE_OK ? result : CURLE_GOT_NOTHING));
        log_info("request %s: %s (attempt %u)", req->request_id, req->last_cause, req->attempts);
        req->active = NULL;
        dp_request_ref(req);
        attempt_end(a);
        fwd_failed(req, 502, "upstream_error",
                   tls || result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST);
        dp_request_unref(req);
        return;
    }
    attempt_end(a);
}

const struct dp_up_handlers dp_fwd_up_handlers = {
    .on_header = fwd_on_header,
    .on_body = fwd_on_body,
    .on_done = fwd_on_done,
};

/* ---- the client side --------------------------------------------------------- */

ssize_t dp_fwd_read(struct dp_request *req, char *buf, size_t max)
{
    if (req->client_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (dp_relay_pending(&req->relay) > 0) {
        size_t n = dp_relay_read(&req->relay, buf, max);
        dp_journal_sent(req, n);
        struct dp_attempt *a = req->active;
        if (a != NULL && a->paused && dp_relay_has_room(&req->relay, DP_UNPAUSE_ROOM))
            dp_up_unpause(a);
        return (ssize_t)n;
    }
    if (req->up_done && req->up_failed) {
        /* With MHD_USE_TURBO, MHD closes a connection whose reader failed
         * only at a later pass over it, which after a resume may not come
         * until the header deadline: the client would wait 30 s on a cut
         * stream. Shutting the socket down ends it now (what was written
         * is still delivered); MHD's own close follows. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci != NULL)
            shutdown(ci->connect_fd, SHUT_RDWR);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (req->up_done)
        return MHD_CONTENT_READER_END_OF_STREAM;
    dp_listener_watch_soon(req);
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    return 0;
}

void dp_fwd_cancel(struct dp_request *req, bool count_disconnect)
{
    if (req->client_gone)
        return;
    req->client_gone = true;
    dp_adm_leave(req, count_disconnect ? DP_ADM_LEFT_GONE : DP_ADM_LEFT_SHUTDOWN);
    dp_legs_next(req, DP_LEG_EV_ABORTED, NULL);
    if (count_disconnect) {
        enum dp_phase phase =
            req->relay_ready || dp_relay_is_whole(&req->relay) ? DP_PHASE_STREAM : DP_PHASE_HEADERS;
        dp_metrics_disconnect(&req->loop->sh->metrics, phase);
        dp_journal_disconnect(req, phase);
    }
    fwd_unschedule_retry(req);
    dp_request_ref(req);
    dp_tok_cancel(req); /* a pending tokenize holds a reference */
    while (!list_is_empty(&req->attempt_list))
        attempt_end(fwd_attempt_of_sibling(list_first(&req->attempt_list)));
    dp_listener_wake(req);
    dp_request_unref(req);
}

void dp_fwd_abort_all(struct dp_loop *loop)
{
    struct list_node *it;
    list_foreach(it, &loop->requests)
        dp_fwd_cancel(list_entry(it, struct dp_request, req_link), false);
    while (!list_is_empty(&loop->fwd.attempts))
        attempt_end(list_entry(list_first(&loop->fwd.attempts), struct dp_attempt, link));
}

void dp_fwd_cut_all(struct dp_loop *loop, const char *msg)
{
    struct list_node *it;
    list_foreach(it, &loop->requests)
    {
        struct dp_request *r = list_entry(it, struct dp_request, req_link);
        if (r->client_gone || r->conn == NULL)
            continue;
        bool relaying = r->relay_ready && !r->up_done;
        dp_request_ref(r);
        fwd_unschedule_retry(r);
        while (!list_is_empty(&r->attempt_list))
            attempt_end(fwd_attempt_of_sibling(list_first(&r->attempt_list)));
        if (relaying)
            fwd_cut_stream(r, 503, "shutting_down", msg);
        else if (!r->relay_ready)
            fwd_reply(r, 503, "shutting_down", msg);
        dp_request_unref(r);
    }
    while (!list_is_empty(&loop->fwd.attempts))
        attempt_end(list_entry(list_first(&loop->fwd.attempts), struct dp_attempt, link));
}

/* ---- timers -------------------------------------------------------------------- */

static void fwd_timeout(struct dp_attempt *a)
{
    struct dp_request *req = a->req;
    struct dp_loop *loop = a->loop;
    enum dp_attempt_state state = a->state;
    bool active = req->active == a;
    const char *label = a->leg->label; /* static: outlives a */
    char worker_id[CFG_ID_MAX];
    snprintf(worker_id, sizeof(worker_id), "%s", a->worker_id);
    dp_metrics_upstream_error(&loop->sh->metrics, a->slot, DP_UPERR_TIMEOUT);
    dp_journal_attempt_outcome(a, DP_JOUT_TIMEOUT);
    dp_request_ref(req);
    attempt_end(a);
    if (active && state == DP_ATT_COLLECTING) {
        snprintf(req->last_cause, sizeof(req->last_cause), "%sworker %s was silent for %llu ms",
                 label, worker_id, (unsigned long long)loop->sh->cfg->dataplane.idle_timeout_ms);
        log_info("request %s: %s", req->request_id, req->last_cause);
        char msg[96];
        snprintf(msg, sizeof(msg), "the %sworker was silent for %llu ms", label,
                 (unsigned long long)loop->sh->cfg->dataplane.idle_timeout_ms);
        fwd_reply(req, 504, "upstream_timeout", msg);
    } else if (active && state == DP_ATT_WAITING) {
        snprintf(req->last_cause, sizeof(req->last_cause),
                 "%sworker %s sent no response headers within %llu ms", label, worker_id,
                 (unsigned long long)loop->sh->cfg->dataplane.first_byte_timeout_ms);
        log_info("request %s: %s", req->request_id, req->last_cause);
        char msg[96];
        snprintf(msg, sizeof(msg), "the %sworker sent no response headers within %llu ms", label,
                 (unsigned long long)loop->sh->cfg->dataplane.first_byte_timeout_ms);
        fwd_reply(req, 504, "upstream_timeout", msg);
    } else if (state == DP_ATT_RELAYING) {
        unsigned long long idle = (unsigned long long)loop->sh->cfg->dataplane.idle_timeout_ms;
        log_info("request %s: stream cut: worker %s was silent for %llu ms", req->request_id,
                 worker_id, idle);
        /* The id stays in the log: the client's stream says what, not who. */
        char msg[DP_CAUSE_MAX];
        snprintf(msg, sizeof(msg), "the worker was silent for %llu ms", idle);
        fwd_cut_stream(req, 504, "upstream_timeout", msg);
    }
    dp_request_unref(req);
}

void dp_fwd_tick(struct dp_loop *loop, uint64_t now_ms)
{
    if (now_ms >= loop->fwd.deadline_floor_ms) {
        /* Deadlines set during the walk (a timeout's retry) lower it. */
        loop->fwd.deadline_floor_ms = UINT64_MAX;
        uint64_t floor = UINT64_MAX;
        struct list_node *it, *next;
        list_foreach_safe(it, next, &loop->fwd.attempts)
        {
            struct dp_attempt *a = list_entry(it, struct dp_attempt, link);
            if (a->deadline_ms != 0 && now_ms >= a->deadline_ms)
                fwd_timeout(a);
            else if (a->deadline_ms != 0 && a->deadline_ms < floor)
                floor = a->deadline_ms;
        }
        if (floor < loop->fwd.deadline_floor_ms)
            loop->fwd.deadline_floor_ms = floor;
    }
    /* fwd_timeout ends only `a`, so the saved next stays valid. */
    struct list_node *it, *next;
    list_foreach_safe(it, next, &loop->fwd.retrying)
    {
        struct dp_request *r = list_entry(it, struct dp_request, retry_link);
        if (now_ms >= r->retry_at_ms) {
            dp_request_ref(r);
            fwd_unschedule_retry(r);
            if (r->conn != NULL && !r->client_gone)
                fwd_try(r);
            dp_request_unref(r);
        }
    }
}

/* ---- the loop's state ------------------------------------------------------------ */

void dp_fwd_release(struct dp_request *req)
{
    dp_tok_release(req);
    dp_relay_fini(&req->relay);
    dp_legs_next(req, DP_LEG_EV_FREE, NULL);
}

/* A request the admission queue hands back: it picks again (fwd_try). */
static void fwd_dispatch_queued(struct dp_request *req)
{
    if (req->client_gone || req->conn == NULL || req->reply_status != 0)
        return;
    fwd_try(req);
}

static void fwd_adm_reply(struct dp_request *req, int status, const char *code, const char *msg)
{
    fwd_reply(req, status, code, msg);
}

const struct dp_adm_ops dp_fwd_adm_ops = {
    .dispatch = fwd_dispatch_queued,
    .reply = fwd_adm_reply,
};

static bool fwd_screen(struct dp_request *req)
{
    return dp_adm_screen(req);
}

const struct dp_lst_handlers dp_fwd_lst_handlers = {
    .screen = fwd_screen,
    .begin = dp_fwd_begin,
    .cancel = dp_fwd_cancel,
    .read = dp_fwd_read,
    .release = dp_fwd_release,
};

bool dp_fwd_has_attempts(const struct dp_loop *loop)
{
    return !list_is_empty(&loop->fwd.attempts);
}

void dp_fwd_fini(struct dp_loop *loop)
{
    struct dp_fwd *f = &loop->fwd;
    free(f->pick_cands);
    free(f->pick_slots);
    free(f->pick_loads);
    free(f->pick_refused);
    f->pick_cands = NULL;
    f->pick_slots = f->pick_refused = NULL;
    f->pick_loads = NULL;
}
