/*
 * reset_load (see reset_load.h). State of the one running reset: the
 * worker, what the dataplanes answered, the deadline and the suspended
 * request. Request ids are unique per control-plane process so a late
 * answer to an earlier reset is ignored.
 */
#include "controlplane/admin/reset_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "controlplane/admin/admin_channel.h"
#include "shm/lease.h"
#include "shm/load.h"

enum cp_reset_answer {
    CP_RESET_ANSWER_UNSET = 0, /* lease not asked (not active) */
    CP_RESET_ANSWER_WAITING,
    CP_RESET_ANSWER_COUNT, /* answered with count */
    CP_RESET_ANSWER_NONE,  /* not connected, error, or went away */
};

/* Owned by controlplane.c; loop thread only. */
struct cp_reset {
    struct adm_ctx *ctx; /* borrowed */
    bool running;
    struct adm_reply_later later; /* fn != NULL while a request waits for the answer */
    struct shm_worker_info w;
    bool was_draining;
    uint64_t request_id;
    uint64_t next_request_id;
    uint64_t deadline_ms;
    enum cp_reset_answer answer[SHM_MAX_DATAPLANES_LIMIT];
    uint64_t count[SHM_MAX_DATAPLANES_LIMIT];
};

int cp_reset_create(struct adm_ctx *ctx, struct cp_reset **out)
{
    struct cp_reset *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->ctx = ctx;
    r->next_request_id = 1;
    *out = r;
    return 0;
}

/* Restores draining and builds the answer; ends the running reset. */
static void cp_reset_conclude(struct cp_reset *r, bool timed_out, struct adm_reply *reply)
{
    struct shm_segment *seg = r->ctx->seg;
    json_t *by_dp = json_object();
    bool all_zero = true;
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        if (r->answer[i] == CP_RESET_ANSWER_UNSET)
            continue;
        char key[40];
        shm_lease_holder_key(seg, i, key, sizeof(key));
        if (r->answer[i] == CP_RESET_ANSWER_COUNT) {
            json_object_set_new(by_dp, key, json_integer((json_int_t)r->count[i]));
            all_zero = all_zero && r->count[i] == 0;
        } else {
            json_object_set_new(by_dp, key, json_null());
            all_zero = false;
        }
    }
    struct shm_worker_info now;
    bool same_worker = shm_registry_read_slot(seg, r->w.slot, &now) == 0 &&
                       now.generation == r->w.generation && strcmp(now.id, r->w.id) == 0;
    if (!same_worker) {
        json_decref(by_dp);
        adm_reply_error(reply, 409, "worker '%s' was removed during the reset", r->w.id);
    } else if (all_zero) {
        uint64_t discarded = shm_load_reset(seg, r->w.slot, r->w.generation);
        log_warn("reset_load: worker %s: every dataplane reports 0 in flight; discarded %llu "
                 "counted requests",
                 r->w.id, (unsigned long long)discarded);
        adm_reply_json(reply, 200,
                       json_pack("{s:s, s:I, s:o}", "id", r->w.id, "discarded",
                                 (json_int_t)discarded, "inflight_by_dataplane", by_dp));
    } else {
        log_warn("reset_load: worker %s: refused, %s", r->w.id,
                 timed_out ? "a dataplane did not answer in time"
                           : "a dataplane reports requests in flight or is not connected");
        adm_reply_json(reply, 409,
                       json_pack("{s:s, s:s, s:o}", "error",
                                 "not every dataplane confirmed 0 requests in flight; load "
                                 "left unchanged",
                                 "id", r->w.id, "inflight_by_dataplane", by_dp));
    }
    if (same_worker && !r->was_draining)
        shm_registry_set_reset_drain(seg, r->w.slot, false);
    r->running = false;
    r->request_id = 0;
}

static bool cp_reset_all_answered(const struct cp_reset *r)
{
    for (uint32_t i = 0; i < r->ctx->seg->max_dataplanes; i++)
        if (r->answer[i] == CP_RESET_ANSWER_WAITING)
            return false;
    return true;
}

static void cp_reset_finish_async(struct cp_reset *r, bool timed_out)
{
    struct adm_reply reply = {0};
    cp_reset_conclude(r, timed_out, &reply);
    adm_reply_deliver(&r->later, &reply);
}

int cp_reset_start(struct cp_reset *r, const struct shm_worker_info *w,
                   const struct adm_reply_later *later, struct adm_reply *reply)
{
    if (r->running) {
        adm_reply_error(reply, 409, "a reset_load of worker '%s' is already running", r->w.id);
        return 1;
    }
    struct shm_segment *seg = r->ctx->seg;
    r->running = true;
    r->w = *w;
    r->was_draining = w->draining;
    r->request_id = r->next_request_id++;
    r->deadline_ms = proc_monotonic_ms() + r->ctx->cfg->controlplane.reset_load_timeout_ms;
    memset(r->answer, 0, sizeof(r->answer));
    memset(r->count, 0, sizeof(r->count));
    if (!w->draining)
        shm_registry_set_reset_drain(seg, w->slot, true);
    log_info("reset_load: worker %s (slot %u generation %u, load %llu): draining, asking the "
             "dataplanes",
             w->id, w->slot, w->generation,
             (unsigned long long)shm_load_of(seg, w->slot, w->generation));
    /* Mark every live lease first, then ask: an answer (or a failure) may
     * arrive synchronously while asking. */
    uint64_t nonce[SHM_MAX_DATAPLANES_LIMIT] = {0};
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        struct shm_lease_info l;
        shm_lease_snapshot(seg, i, &l);
        if (!l.active)
            continue;
        nonce[i] = l.nonce;
        r->answer[i] = CP_RESET_ANSWER_WAITING;
    }
    uint64_t rid = r->request_id;
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        if (r->answer[i] != CP_RESET_ANSWER_WAITING)
            continue;
        if (r->ctx->chan == NULL ||
            adm_chan_ask_inflight(r->ctx->chan, i, nonce[i], rid, w->slot, w->generation) != 0) {
            if (r->request_id == rid && r->answer[i] == CP_RESET_ANSWER_WAITING)
                r->answer[i] = CP_RESET_ANSWER_NONE;
        }
    }
    /* Nobody to wait for (no dataplane, or none connected): answer now. */
    if (cp_reset_all_answered(r)) {
        cp_reset_conclude(r, false, reply);
        return 1;
    }
    r->later = *later;
    return 0;
}

void cp_reset_on_reply(void *arg, uint32_t lease, uint64_t request_id, bool ok, uint64_t count)
{
    struct cp_reset *r = arg;
    if (r == NULL || !r->running || request_id != r->request_id ||
        lease >= SHM_MAX_DATAPLANES_LIMIT || r->answer[lease] != CP_RESET_ANSWER_WAITING)
        return;
    r->answer[lease] = ok ? CP_RESET_ANSWER_COUNT : CP_RESET_ANSWER_NONE;
    r->count[lease] = count;
    if (r->later.fn != NULL && cp_reset_all_answered(r))
        cp_reset_finish_async(r, false);
}

bool cp_reset_is_running_on(const struct cp_reset *r, uint32_t slot, uint32_t generation)
{
    return r != NULL && r->running && r->w.slot == slot && r->w.generation == generation;
}

int cp_reset_timeout_ms(const struct cp_reset *r, uint64_t now_ms)
{
    if (r == NULL || !r->running || r->later.fn == NULL)
        return -1;
    return r->deadline_ms > now_ms ? (int)(r->deadline_ms - now_ms) : 0;
}

void cp_reset_run(struct cp_reset *r, uint64_t now_ms)
{
    if (r == NULL || !r->running || r->later.fn == NULL || now_ms < r->deadline_ms)
        return;
    for (uint32_t i = 0; i < r->ctx->seg->max_dataplanes; i++)
        if (r->answer[i] == CP_RESET_ANSWER_WAITING)
            r->answer[i] = CP_RESET_ANSWER_NONE;
    cp_reset_finish_async(r, true);
}

void cp_reset_destroy(struct cp_reset *r)
{
    if (r == NULL)
        return;
    if (r->running && r->later.fn != NULL) {
        struct adm_reply reply = {0};
        if (!r->was_draining)
            shm_registry_set_reset_drain(r->ctx->seg, r->w.slot, false);
        r->running = false;
        adm_reply_error(&reply, 503, "the control plane is shutting down");
        adm_reply_deliver(&r->later, &reply);
    }
    free(r);
}
