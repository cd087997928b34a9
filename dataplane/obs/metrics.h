/*
 * The dataplane's Prometheus metrics (each one documented in
 * docs/metrics.md): request counts by route (the route table's label,
 * routes.h) and status, upstream errors by worker and kind, retries, routing
 * decisions by reason (policy.h's enum pol_decision), client disconnects by
 * phase, load underflows, per-worker load (what routing sees) and this
 * dataplane's own in-flight, two latency histograms by route and model
 * (inference routes only: probes, scrapes and 404s are not latency a user
 * feels; models are those the registry served, at most DP_MODEL_SERIES of
 * them, the rest as "other"), and the prefill/decode
 * metrics (per-phase load and durations, outcomes). Counters are
 * process-wide relaxed atomics bumped by every loop; rendering reads them
 * without stopping anyone, so a scrape is a consistent-enough snapshot, as
 * Prometheus expects.
 */
#ifndef SY_DATAPLANE_METRICS_H
#define SY_DATAPLANE_METRICS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/histogram.h"
#include "shm/effective_load.h"
#include "dataplane/core/guard.h"
#include "dataplane/core/policy.h"
#include "dataplane/types/request_types.h"
#include "shm/registry.h"
#include "shm/segment.h"

#define DP_HIST_BUCKETS 16
#define DP_STATUS_MAX   600
#define DP_MODEL_SERIES 64 /* models with latency series of their own; the rest are "other" */

/* The latency histograms of one model, by route. */
struct dp_model_latency {
    char model[CFG_MODEL_MAX]; /* written once, before the slot is published */
    struct histogram duration[DP_ROUTE_COUNT];
    struct histogram ttfb[DP_ROUTE_COUNT];
};

/* Process-wide; dp_metrics_init / dp_metrics_fini. */
struct dp_adm_metrics;

struct dp_metrics {
    uint32_t max_workers;
    const struct dp_adm_metrics *adm; /* borrowed (adm_metrics.h); NULL = none */
    _Atomic uint64_t requests[DP_ROUTE_COUNT][DP_STATUS_MAX];
    _Atomic uint64_t *upstream_errors; /* max_workers x DP_UPERR_COUNT */
    _Atomic uint64_t *reports_stale;   /* max_workers: decisions without a fresh report */
    struct shm_el_params load;         /* how the effective load is combined (set by main) */
    _Atomic uint64_t retries;
    _Atomic uint64_t disconnects[DP_PHASE_COUNT];
    _Atomic uint64_t slow_clients[2];   /* shut down: [0] headers, [1] body (listener.c) */
    _Atomic uint64_t conns_shed[2];     /* at the cap: [0] idle evicted, [1] new refused */
    _Atomic uint64_t resp_id_conflicts; /* live response ids a worker answered again */
    /* DP_MODEL_SERIES + 1 slots, the last one "other"; slots below
     * n_models are published (a loop adds one under models_lock). */
    struct dp_model_latency *latency;
    _Atomic uint32_t n_models;
    pthread_mutex_t models_lock;
    const char *policy;          /* policy.name, for the decisions' label */
    struct pol_shared *policies; /* borrowed (policy.h), for the prefix index's size; set by main */
    _Atomic uint64_t decisions[POL_DECISION_COUNT];
    _Atomic uint64_t pd_outcomes[DP_PD_OUT_COUNT];
    const char *pd_policy[DP_PD_DECODE + 1]; /* policy.prefill/decode names, by phase */
    _Atomic uint64_t pd_decisions[DP_PD_DECODE + 1][POL_DECISION_COUNT];
    struct histogram pd_phase[DP_PD_DECODE + 1]; /* by enum dp_pd_phase */
    /* Observability (access_log.h, trace_export.h): bumped by the loops and
     * by the access-log writer and span exporter threads. */
    _Atomic uint64_t access_log_dropped;
    _Atomic uint64_t trace_spans_dropped;
    _Atomic uint64_t trace_spans_exported;
    _Atomic uint64_t trace_export_failures;
};

int dp_metrics_init(struct dp_metrics *m, uint32_t max_workers);
void dp_metrics_fini(struct dp_metrics *m);

/* A request ended with status after dur_us: counted by route and status;
 * its duration is observed by route and model for inference routes
 * (never /health, /metrics, /v1/models, unknown paths or a 404), when it
 * had a model. */
void dp_metrics_request(struct dp_metrics *m, enum dp_route route, const char *model, int status,
                        uint64_t dur_us);
/* The first body byte of a request of route and model reached the relay us
 * after its arrival (observed as dp_metrics_request's duration). */
void dp_metrics_ttfb(struct dp_metrics *m, enum dp_route route, const char *model, uint64_t us);
void dp_metrics_upstream_error(struct dp_metrics *m, uint32_t slot, enum dp_up_error kind);
void dp_metrics_retry(struct dp_metrics *m);
/* Counts a candidate of one routing decision whose load report was stale or
 * missing, so its own in-flight count was used. */
void dp_metrics_report_stale(struct dp_metrics *m, uint32_t slot);
void dp_metrics_disconnect(struct dp_metrics *m, enum dp_phase phase);
/* Counts a connection shut down as a slow client: in_body false while its
 * headers were due (header_timeout), true for a body under upload_min_rate. */
void dp_metrics_slow_client(struct dp_metrics *m, bool in_body);
/* A connection closed to keep the loop within its cap: an idle one evicted,
 * or (refused) the new one itself when none was idle. */
void dp_metrics_connection_shed(struct dp_metrics *m, bool refused);
/* A worker answered with a response id another worker or tenant holds
 * (resp_affinity.h): the id was left where it was. */
void dp_metrics_response_id_conflict(struct dp_metrics *m);
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
