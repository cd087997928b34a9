/*
 * The administrative load reset (invariant 4), POST /workers/{id}/reset_load:
 *   1. mark the worker draining so no dataplane picks it any more (a
 *      reset drain, shm_registry_set_reset_drain: requests only this worker
 *      may serve wait for its end instead of failing);
 *   2. ask every live dataplane (every ACTIVE lease) over the admin channel
 *      how many requests it has in flight on (slot, generation): its own
 *      count of live guards, not the shared counter;
 *   3. if all answer 0 within controlplane.reset_load_timeout (2 s), shm_load_reset and
 *      answer 200 with the discarded amount; if any reports work, is not
 *      connected to the channel, or does not answer in time, change nothing
 *      and answer 409 with the per-dataplane counts;
 *   4. either way restore the worker's previous draining state; a drain or
 *      un-drain of that worker meanwhile is refused (409), so the state the
 *      reset restores is always the operator's latest.
 * The HTTP request is suspended while the answers come in (the answer goes
 * out through the completion the caller registered): the loop never blocks.
 * One reset runs at a time; a second one gets 409 meanwhile.
 *
 * Threading: the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_RESET_LOAD_H
#define SY_CONTROLPLANE_RESET_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_reply.h"
#include "shm/registry.h"

int cp_reset_create(struct adm_ctx *ctx, struct cp_reset **out);

/* Finishes a running reset with 503 (shutting down) and frees. NULL-safe. */
void cp_reset_destroy(struct cp_reset *r);

/*
 * Starts a reset of worker w. Returns 0 when the answer will come later
 * through a copy of *later (called exactly once, also on cp_reset_destroy),
 * or fills reply (409 when a reset is already running, or an immediate
 * 409/200) and returns 1.
 */
int cp_reset_start(struct cp_reset *r, const struct shm_worker_info *w,
                   const struct adm_reply_later *later, struct adm_reply *reply);

/*
 * True while a reset of worker (slot, generation) runs. The drain route
 * refuses to change such a worker's draining flag (409): the reset sets it
 * and restores it at the end, so a change in between would either be
 * overwritten or, an un-drain, let requests start after a data plane
 * answered 0 and have their load zeroed.
 */
bool cp_reset_is_running_on(const struct cp_reset *r, uint32_t slot, uint32_t generation);

/* Channel answers land here (adm_chan_reply_fn). */
void cp_reset_on_reply(void *arg, uint32_t lease, uint64_t request_id, bool ok, uint64_t count);

/* Milliseconds until the running reset times out (-1 when none). */
int cp_reset_timeout_ms(const struct cp_reset *r, uint64_t now_ms);

/* Times out a reset whose deadline passed. Call on every loop pass. */
void cp_reset_run(struct cp_reset *r, uint64_t now_ms);

#endif
