/*
 * The health prober: GETs every registered worker's controlplane.health.path
 * in parallel (one libcurl multi handle driven by curl_multi_socket_action
 * from the control plane's epoll loop), each worker on its own schedule of
 * health.interval with +-10% jitter and each probe bounded by
 * health.timeout. failure_threshold consecutive failures mark a worker
 * unhealthy in the registry, success_threshold consecutive successes mark
 * it healthy again; each transition is logged once. Every worker's names
 * come from GET /v1/models, read again each health.models_interval (and at
 * once after hc_refresh_models): a worker registered without a model
 * learns it there, and its other names (served model names, LoRA adapters)
 * become its aliases.
 *
 * The polling itself (registry following, handles, schedules, timeouts)
 * is controlplane/probes/worker_poller.h's; this module says what results mean.
 *
 * Invariant 3: the prober writes health (and a learned model) to the
 * registry and never reads or writes a load counter; it does not include
 * shm/load.h.
 *
 * Threading: owned by the control plane's loop thread; every function runs
 * there. The prober exposes one descriptor (an inner epoll set holding
 * curl's sockets) for the loop's epoll set, and a timeout for epoll_wait.
 */
#ifndef SY_CONTROLPLANE_HEALTH_PROBER_H
#define SY_CONTROLPLANE_HEALTH_PROBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "controlplane/probes/worker_poller.h"
#include "shm/segment.h"

struct hc_prober;

/* Creates the prober. seg and health are borrowed and must outlive it. */
int hc_create(struct shm_segment *seg, const struct cfg_health *health, struct hc_prober **out);
void hc_destroy(struct hc_prober *p);

/*
 * Switches to new health settings (a reload): path, interval, timeout,
 * thresholds. health is borrowed like hc_create's and must outlive the
 * prober or the next call. A shorter interval takes effect at once; probes
 * in flight finish under the old timeout; consecutive counts carry over.
 */
void hc_set_health(struct hc_prober *p, const struct cfg_health *health);

/* Probes of https:// workers use tls (dataplane.upstream_tls, borrowed; it
 * must outlive p) from the next handle made on; before, curl's defaults. */
void hc_set_upstream_tls(struct hc_prober *p, const struct cfg_upstream_tls *tls);

/* The descriptor to watch for EPOLLIN in the loop's epoll set. */
int hc_fd(const struct hc_prober *p);

/* Milliseconds until hc_run has work at now_ms (0 = now, -1 = none). */
int hc_timeout_ms(const struct hc_prober *p, uint64_t now_ms);

/* Follows registry changes, drives transfers, starts due probes and applies
 * results. Call on every loop pass. */
void hc_run(struct hc_prober *p, uint64_t now_ms);

/*
 * For a worker that is not healthy in the registry: true while it was added
 * at run time with health.initial unknown and no probe has answered yet (or
 * the prober has not seen it yet), i.e. not routed but not judged unhealthy
 * either (GET /workers says "health": "unknown"). False once judged.
 */
bool hc_is_unknown(const struct hc_prober *p, uint32_t slot, uint32_t generation);

/* Reads the names of the worker in slot again at the next pass (after a
 * LoRA adapter was loaded or unloaded there). A lookup already under way
 * left before the change: its answer is dropped, not applied over it. */
void hc_refresh_models(struct hc_prober *p, uint32_t slot);

/* Copies per-worker health-probe counters (up to cap); returns how many. */
size_t hc_stats(const struct hc_prober *p, struct wp_worker_stats *out, size_t cap);

#endif
