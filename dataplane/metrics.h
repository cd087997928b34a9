/*
 * The dataplane's Prometheus metrics (each one documented in
 * docs/metrics.md): request counts by route (the route table's label,
 * routes.h) and status, upstream errors by worker and kind, retries, routing
 * decisions by reason (policy.h's enum pol_decision), client disconnects by
 * phase, load underflows, per-worker load (what routing sees) and this
 * dataplane's own in-flight, two latency histograms, and the prefill/decode
 * metrics (per-phase load and durations, outcomes). Counters are
 * process-wide relaxed atomics bumped by every loop; rendering reads them
 * without stopping anyone, so a scrape is a consistent-enough snapshot, as
 * Prometheus expects.
 */
#ifndef SY_DATAPLANE_METRICS_H
#define SY_DATAPLANE_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dataplane/guard.h"
#include "dataplane/policy.h"
#include "dataplane/types.h"
#include "shm/registry.h"
#include "shm/segment.h"

#define DP_HIST_BUCKETS 16
#define DP_STATUS_MAX   600

struct dp_histogram {
    _Atomic uint64_t bucket[DP_HIST_BUCKETS + 1]; /* last = +Inf */
    _Atomic uint64_t sum_us;
    _Atomic uint64_t count;
};

/* Process-wide; dp_metrics_init / dp_metrics_fini. */
struct dp_adm_metrics;

struct dp_metrics {
    uint32_t max_workers;
    const struct dp_adm_metrics *adm; /* borrowed (adm_metrics.h); NULL = none */
    _Atomic uint64_t requests[DP_ROUTE_COUNT][DP_STATUS_MAX];
    _Atomic uint64_t *upstream_errors; /* max_workers x DP_UPERR_COUNT */
    _Atomic uint64_t retries;
    _Atomic uint64_t disconnects[DP_PHASE_COUNT];
    _Atomic uint64_t slow_clients[2]; /* shut down: [0] headers, [1] body (listener.c) */
    struct dp_histogram duration;
    struct dp_histogram ttfb;
    const char *policy; /* policy.name, for the decisions' label */
    _Atomic uint64_t decisions[POL_DECISION_COUNT];
    _Atomic uint64_t pd_outcomes[DP_PD_OUT_COUNT];
    const char *pd_policy[DP_PD_DECODE + 1]; /* policy.prefill/decode names, by phase */
    _Atomic uint64_t pd_decisions[DP_PD_DECODE + 1][POL_DECISION_COUNT];
    struct dp_histogram pd_phase[DP_PD_DECODE + 1]; /* by enum dp_pd_phase */
};

int dp_metrics_init(struct dp_metrics *m, uint32_t max_workers);
void dp_metrics_fini(struct dp_metrics *m);

void dp_metrics_request(struct dp_metrics *m, enum dp_route route, int status, uint64_t dur_us);
void dp_metrics_ttfb(struct dp_metrics *m, uint64_t us);
void dp_metrics_upstream_error(struct dp_metrics *m, uint32_t slot, enum dp_up_error kind);
void dp_metrics_retry(struct dp_metrics *m);
void dp_metrics_disconnect(struct dp_metrics *m, enum dp_phase phase);
/* Counts a connection shut down as a slow client: in_body false while its
 * headers were due (header_timeout), true for a body under upload_min_rate. */
void dp_metrics_slow_client(struct dp_metrics *m, bool in_body);
/* Counts one routing decision of a regular request. */
void dp_metrics_decision(struct dp_metrics *m, enum pol_decision decision);
/* Counts one routing decision of a P/D leg (phase PREFILL or DECODE). */
void dp_metrics_pd_decision(struct dp_metrics *m, enum dp_pd_phase phase,
                            enum pol_decision decision);
/* Counts a P/D request's outcome (pd.h). */
void dp_metrics_pd_outcome(struct dp_metrics *m, enum dp_pd_outcome outcome);
/* Observes the duration of a completed P/D phase (prefill or decode). */
void dp_metrics_pd_phase(struct dp_metrics *m, enum dp_pd_phase phase, uint64_t us);

/*
 * Renders the exposition text for the n workers of a registry snapshot.
 * Returns 0 and a malloc'd text in *out (caller frees), -E2BIG when the
 * page would pass its cap, or -ENOMEM.
 */
int dp_metrics_render(const struct dp_metrics *m, const struct shm_worker_info *workers, size_t n,
                      const struct dp_guards *guards, char **out, size_t *out_len);

#endif
