/*
 * The fault timeline (see timeline.h). Matching is deliberately plain: a
 * fault explains a failure when their intervals overlap (the fault's end
 * widened by SK_SLACK_MS, for a response already on the wire when the
 * fault was lifted) and the fault touched the request's data plane or its
 * worker. A router's error response without a worker (it gave up before
 * naming one) may be explained by a fault on any worker: it may have tried
 * them; unless the request was pinned to one.
 */
#include "tests/soak/timeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SK_SLACK_MS 500
/* A worker is routable again only once probed healthy success_threshold
 * times after its flap (and the control plane that probes may be dead
 * meanwhile): how long after a flap a pinned request may still be refused. */
#define SK_PIN_SLACK_MS 3000

static const char *const sk_names[SK_F_N] = {
    [SK_F_DP_KILL] = "dp_kill",
    [SK_F_HOT_RESTART] = "hot_restart",
    [SK_F_CP_KILL] = "cp_kill",
    [SK_F_WORKER_5XX] = "worker_5xx",
    [SK_F_STALL_HEADERS] = "stall_before_headers",
    [SK_F_STALL_CHUNKS] = "stall_after_chunks",
    [SK_F_RESET] = "worker_reset",
    [SK_F_HEALTH_FLAP] = "health_flap",
    [SK_F_ADD] = "worker_add",
    [SK_F_DRAIN] = "worker_drain",
    [SK_F_REMOVE] = "worker_remove",
    [SK_F_RESET_LOAD] = "reset_load",
};

const char *sk_fault_name(enum sk_fault_kind k)
{
    return k < SK_F_N ? sk_names[k] : "?";
}

bool sk_fault_may_fail(enum sk_fault_kind k)
{
    switch (k) {
    case SK_F_DP_KILL:
    case SK_F_WORKER_5XX:
    case SK_F_STALL_HEADERS:
    case SK_F_STALL_CHUNKS:
    case SK_F_RESET:
    case SK_F_HEALTH_FLAP:
    case SK_F_REMOVE:
        return true;
    default:
        return false;
    }
}

long sk_timeline_add(struct sk_timeline *tl, enum sk_fault_kind kind, int dp, const char *worker,
                     int64_t t0)
{
    if (tl->n == tl->cap) {
        size_t cap = tl->cap != 0 ? tl->cap * 2 : 256;
        struct sk_fault *f = realloc(tl->f, cap * sizeof(*f));
        if (f == NULL)
            return -ENOMEM;
        tl->f = f;
        tl->cap = cap;
    }
    struct sk_fault *f = &tl->f[tl->n];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->dp = dp;
    snprintf(f->worker, sizeof(f->worker), "%s", worker != NULL ? worker : "");
    f->t0 = t0;
    f->t1 = -1;
    tl->count[kind]++;
    return (long)tl->n++;
}

void sk_timeline_end(struct sk_timeline *tl, long idx, int64_t t1)
{
    if (idx >= 0 && (size_t)idx < tl->n && tl->f[idx].t1 < 0)
        tl->f[idx].t1 = t1;
}

void sk_timeline_skip(struct sk_timeline *tl, long idx)
{
    if (idx < 0 || (size_t)idx >= tl->n || tl->f[idx].skipped)
        return;
    tl->f[idx].skipped = true;
    tl->count[tl->f[idx].kind]--;
    tl->skipped[tl->f[idx].kind]++;
}

static bool sk_touches(const struct sk_fault *f, const struct sk_failure *fr)
{
    if (f->dp >= 0)
        return f->dp == fr->dp;
    if (f->worker[0] == '\0' || fr->status == 0)
        return false;
    /* A pinned request can only have gone to its worker. */
    const char *w = fr->worker[0] != '\0' ? fr->worker : fr->pinned;
    return w[0] == '\0' || strcmp(f->worker, w) == 0;
}

static bool sk_overlaps(const struct sk_fault *f, const struct sk_failure *fr, int64_t now)
{
    int64_t end = (f->t1 >= 0 ? f->t1 : now) + SK_SLACK_MS;
    return fr->t0 <= end && fr->t1 >= f->t0;
}

/* Whether a fault of this kind produces this outcome by itself: a cut or
 * incomplete 200 comes from a reset; an error status from a 5xx, a reset
 * before any byte, no routable worker (a health flap, a removal) or a
 * stall; a client timeout from a stall. Used to pick the best explanation
 * among the overlapping ones, not to refuse one. */
static bool sk_fits(enum sk_fault_kind k, const struct sk_failure *fr)
{
    if (fr->status == 200)
        return k == SK_F_RESET;
    if (fr->status >= 400)
        return k != SK_F_STALL_CHUNKS;
    return k == SK_F_STALL_HEADERS || k == SK_F_STALL_CHUNKS;
}

/*
 * A continued Responses request is pinned to the worker that made its
 * response, and the router refuses it (404 when that worker is gone, 503
 * when it is unhealthy or draining) rather than send it elsewhere: a
 * removal of that worker at any time before the request ended (a removed
 * worker's responses are lost for good), a drain of it (a drain lasts
 * until the removal), or a health flap of it not long before, explains
 * the refusal. A 404 needs a removal; a 503 any of the three (a removal
 * drains first).
 */
static bool sk_pinned_refusal(const struct sk_fault *f, const struct sk_failure *fr, int64_t now)
{
    if (fr->pinned[0] == '\0' || (fr->status != 404 && fr->status != 503) || f->skipped ||
        strcmp(f->worker, fr->pinned) != 0)
        return false;
    if (f->kind == SK_F_REMOVE || (f->kind == SK_F_DRAIN && fr->status == 503))
        return f->t0 <= fr->t1;
    if (f->kind != SK_F_HEALTH_FLAP || fr->status != 503)
        return false;
    int64_t end = (f->t1 >= 0 ? f->t1 : now) + SK_PIN_SLACK_MS;
    return fr->t0 <= end && fr->t1 >= f->t0;
}

bool sk_timeline_explain(const struct sk_timeline *tl, struct sk_failure *fr, int64_t now)
{
    fr->explained_by = -1;
    /* The latest fault that explains a pinned refusal is named: a spare
     * is removed and added back many times, and the refusal comes from
     * the last thing done to it, not the first. */
    for (size_t i = tl->n; i-- > 0;)
        if (sk_pinned_refusal(&tl->f[i], fr, now)) {
            fr->explained_by = (long)i;
            return true;
        }
    /* Data-plane faults first, then a worker fault that produces this
     * outcome, then any worker fault that touched the request. */
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < tl->n; i++) {
            const struct sk_fault *f = &tl->f[i];
            if ((f->dp >= 0) != (pass == 0) || (pass == 1 && !sk_fits(f->kind, fr)))
                continue;
            if (f->skipped || !sk_fault_may_fail(f->kind) || !sk_touches(f, fr) ||
                !sk_overlaps(f, fr, now))
                continue;
            fr->explained_by = (long)i;
            return true;
        }
    return false;
}

void sk_timeline_free(struct sk_timeline *tl)
{
    free(tl->f);
    memset(tl, 0, sizeof(*tl));
}
