/*
 * Admission control: who may send (client API keys), how fast (per-tenant
 * rate limits in the node's shared buckets, shm/buckets.h), and when a
 * worker can take one more request (saturation); what waits when none
 * can is the queue (adm_queue.h). The forwarder asks at three points:
 * when a request's upload is complete (dp_adm_authenticate before the body
 * is parsed, dp_adm_limit after), when it has candidate workers
 * (dp_adm_filter_saturated, then dp_adm_confirm once a guard is taken), and
 * when a guard is released (dp_adm_slot_freed).
 *
 * Keys: each loop holds its own copy of the keys file and re-reads it when
 * its identity (inode, size, mtime) changes (checked every second) or on
 * SIGHUP (dp_adm_request_reload); a file that does not parse is refused,
 * the loop keeps the keys it had, and loop 0 logs why (file, line,
 * column, field; never a key or a hash). Loops may disagree for up to a
 * second after a change. The worker key file (upstream_api_key_file) is
 * re-read the same way.
 *
 * Threading: dp_adm_shared_* on the main thread before the loops start and
 * after they end; dp_adm_request_reload from any thread; everything else
 * on the request's loop thread.
 */
#ifndef SY_DATAPLANE_ADMISSION_H
#define SY_DATAPLANE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "dataplane/types/admission_types.h"
#include "dataplane/core/policy.h"
#include "shm/load_report.h"

struct dp_loop;
struct dp_request;
struct dp_shared;
struct shm_worker_info;

/* Main thread: the metrics, and, when keys or admission limits are
 * configured, the node's rate-limit buckets and queue depths (next to the
 * segment; this data plane's column is lease's). 0, or a negative errno
 * after logging why. */
int dp_adm_shared_init(struct dp_adm_shared *s, const struct cfg *cfg, uint32_t lease);
void dp_adm_shared_fini(struct dp_adm_shared *s);

/* Any thread (the main thread on SIGHUP): every loop re-reads its files. */
void dp_adm_request_reload(struct dp_adm_shared *s);

/* Loop setup: reads the key files (a bad one at start is an error: the
 * data plane must not serve without the keys it was told to use). */
int dp_adm_loop_init(struct dp_loop *loop, const struct dp_adm_ops *ops);
void dp_adm_loop_fini(struct dp_loop *loop);

/* Loop tick: key files, queue timeouts, the drain, and a periodic try of
 * the queue (slots freed by other loops and data planes). */
void dp_adm_tick(struct dp_loop *loop, uint64_t now_ms);

/* End of a loop pass: tries the queue when a guard was released in it. */
void dp_adm_after_pass(struct dp_loop *loop);

/* A guard was released on this loop. */
void dp_adm_slot_freed(struct dp_loop *loop);

/* The loop's eventfd was written: another loop may have left a free slot
 * to a request queued here (adm_hub.h); the queue is tried at the end of
 * the pass. */
void dp_adm_woken(struct dp_loop *loop);

/* Before parsing: the client's key. False when answered (401). Once a
 * request is authenticated, later calls return true at once. */
bool dp_adm_authenticate(struct dp_request *req);

/* When the headers are complete, before a body byte is buffered: the key,
 * and a tenant whose rate bucket is empty (429). False when answered. */
bool dp_adm_screen(struct dp_request *req);

/* After parsing: the tenant's rate limits (429), and the upstream
 * Authorization (the client's removed with a keys file; the worker key
 * set with upstream_api_key_file). False when answered. */
bool dp_adm_limit(struct dp_request *req);

/* True when admission.* asks for saturation checks at all. */
bool dp_adm_checks_saturation(const struct dp_loop *loop);

/*
 * The single saturation test of a worker: the load routing sees (this
 * node's exact count, combined with a fresh report when policy.load_signal
 * is combined) against max_inflight_per_worker, and the worker's own fresh
 * report (NULL when it has none) against max_waiting_per_worker and
 * max_kv_usage.
 */
bool dp_adm_worker_is_saturated(const struct cfg_admission *a, uint64_t load,
                                const struct shm_load_report *fresh);

/* Drops the saturated candidates (order kept); returns how many remain. */
size_t dp_adm_filter_saturated(const struct dp_loop *loop, struct pol_candidate *cands, size_t n);

/*
 * After a guard on (slot, generation) was taken: true when the worker's
 * load, this guard included, is within max_inflight_per_worker. False:
 * the caller releases the guard and treats the worker as saturated. See
 * admission.c for why this makes the limit exact across loops and data
 * planes.
 */
bool dp_adm_confirm(const struct dp_loop *loop, uint32_t slot, uint32_t generation);

#endif
