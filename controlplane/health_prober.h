/*
 * The health prober: GETs every registered worker's controlplane.health.path
 * in parallel (one libcurl multi handle driven by curl_multi_socket_action
 * from the control plane's epoll loop), each worker on its own schedule of
 * health.interval with +-10% jitter and each probe bounded by
 * health.timeout. failure_threshold consecutive failures mark a worker
 * unhealthy in the registry, success_threshold consecutive successes mark
 * it healthy again; each transition is logged once. A worker registered
 * without a model learns it from GET /v1/models.
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
#include "shm/segment.h"

struct hc_prober;

/* Per-worker counters for /metrics; caller storage. */
struct hc_worker_stats {
    char id[CFG_ID_MAX];
    uint64_t checks_ok;
    uint64_t checks_failed;
};

/* Creates the prober. seg and health are borrowed and must outlive it. */
int hc_create(struct shm_segment *seg, const struct cfg_health *health, struct hc_prober **out);
void hc_destroy(struct hc_prober *p);

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

/* Copies per-worker check counters (up to cap); returns how many. */
size_t hc_stats(const struct hc_prober *p, struct hc_worker_stats *out, size_t cap);

#endif
