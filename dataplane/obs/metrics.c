/*
 * Prometheus text exposition of the dataplane (see metrics.h), written
 * through the project's one writer (common/prom.h: HELP/TYPE once per
 * family, escaped labels, the %g/%.6f histogram spelling) into a buffer
 * capped at DP_METRICS_MAX, so a huge fleet cannot make a scrape allocate
 * without bound.
 */
#include "dataplane/admission/adm_metrics.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/policy.h"
#include "dataplane/core/routes.h"
#include "dataplane/policy/tokenize_stats.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/proc.h"
#include "common/prom.h"
#include "shm/load.h"
#include "shm/load_report.h"

#define DP_METRICS_MAX (16u << 20)

static const double dp_buckets_s[DP_HIST_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
};

static const char *const dp_uperr_names[DP_UPERR_COUNT] = {
    [DP_UPERR_CONNECT] = "connect", [DP_UPERR_STATUS] = "status",
    [DP_UPERR_TIMEOUT] = "timeout", [DP_UPERR_TRANSFER] = "transfer",
    [DP_UPERR_IN_BAND] = "in_band", [DP_UPERR_TLS] = "tls",
};

static const char *const dp_phase_names[DP_PHASE_COUNT] = {
    [DP_PHASE_HEADERS] = "waiting_headers",
    [DP_PHASE_STREAM] = "streaming",
};

static void hist_init(struct histogram *h)
{
    histogram_init(h, dp_buckets_s, DP_HIST_BUCKETS);
}

static void hist_observe(struct histogram *h, uint64_t us)
{
    histogram_observe(h, (double)us / 1e6);
}

int dp_metrics_init(struct dp_metrics *m, uint32_t max_workers)
{
    m->max_workers = max_workers;
    for (int r = 0; r < DP_ROUTE_COUNT; r++)
        for (int s = 0; s < DP_STATUS_MAX; s++)
            atomic_init(&m->requests[r][s], 0);
    m->upstream_errors = calloc((size_t)max_workers * DP_UPERR_COUNT, sizeof(*m->upstream_errors));
    if (m->upstream_errors == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < (size_t)max_workers * DP_UPERR_COUNT; i++)
        atomic_init(&m->upstream_errors[i], 0);
    m->reports_stale = calloc(max_workers, sizeof(*m->reports_stale));
    if (m->reports_stale == NULL) {
        free(m->upstream_errors);
        m->upstream_errors = NULL;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < max_workers; i++)
        atomic_init(&m->reports_stale[i], 0);
    atomic_init(&m->retries, 0);
    for (int d = 0; d < POL_DECISION_COUNT; d++)
        atomic_init(&m->decisions[d], 0);
    for (int p = 0; p < DP_PHASE_COUNT; p++)
        atomic_init(&m->disconnects[p], 0);
    for (int k = 0; k < 2; k++)
        atomic_init(&m->slow_clients[k], 0);
    for (int k = 0; k < 2; k++)
        atomic_init(&m->conns_shed[k], 0);
    m->latency = calloc(DP_MODEL_SERIES + 1, sizeof(*m->latency));
    if (m->latency == NULL) {
        free(m->upstream_errors);
        m->upstream_errors = NULL;
        return -ENOMEM;
    }
    for (int s = 0; s <= DP_MODEL_SERIES; s++)
        for (int r = 0; r < DP_ROUTE_COUNT; r++) {
            hist_init(&m->latency[s].duration[r]);
            hist_init(&m->latency[s].ttfb[r]);
        }
    snprintf(m->latency[DP_MODEL_SERIES].model, CFG_MODEL_MAX, "other");
    atomic_init(&m->n_models, 0);
    pthread_mutex_init(&m->models_lock, NULL);
    for (int o = 0; o < DP_PD_OUT_COUNT; o++)
        atomic_init(&m->pd_outcomes[o], 0);
    for (int p = 0; p <= DP_PD_DECODE; p++) {
        m->pd_policy[p] = NULL;
        for (int d = 0; d < POL_DECISION_COUNT; d++)
            atomic_init(&m->pd_decisions[p][d], 0);
    }
    for (int p = 0; p <= DP_PD_DECODE; p++)
        hist_init(&m->pd_phase[p]);
    atomic_init(&m->access_log_dropped, 0);
    atomic_init(&m->resp_id_conflicts, 0);
    atomic_init(&m->trace_spans_dropped, 0);
    atomic_init(&m->trace_spans_exported, 0);
    atomic_init(&m->trace_export_failures, 0);
    return 0;
}

void dp_metrics_fini(struct dp_metrics *m)
{
    free(m->upstream_errors);
    m->upstream_errors = NULL;
    free(m->reports_stale);
    m->reports_stale = NULL;
    free(m->latency);
    m->latency = NULL;
    pthread_mutex_destroy(&m->models_lock);
}

/*
 * The latency series of model: found among the published slots without a
 * lock (a slot's name is written before n_models publishes it); a model
 * seen for the first time takes a slot under models_lock, the "other" slot
 * once DP_MODEL_SERIES are taken. Only models that passed routing's check
 * against the registry get here (a 404 never does), so the slots hold the
 * fleet's models, not whatever clients send.
 */
static struct dp_model_latency *latency_of(struct dp_metrics *m, const char *model)
{
    uint32_t n = atomic_load_explicit(&m->n_models, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->latency[i].model, model) == 0)
            return &m->latency[i];
    pthread_mutex_lock(&m->models_lock);
    struct dp_model_latency *l = &m->latency[DP_MODEL_SERIES];
    n = atomic_load_explicit(&m->n_models, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->latency[i].model, model) == 0)
            l = &m->latency[i];
    if (l == &m->latency[DP_MODEL_SERIES] && n < DP_MODEL_SERIES) {
        l = &m->latency[n];
        snprintf(l->model, sizeof(l->model), "%s", model);
        atomic_store_explicit(&m->n_models, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&m->models_lock);
    return l;
}

/* Inference routes (forwarded to workers) with a model: what users feel. */
static bool latency_counts(enum dp_route route, const char *model)
{
    return route > DP_ROUTE_UNSET && route < DP_ROUTE_COUNT &&
           dp_route_row(route)->serve == DP_SERVE_PROXY && model != NULL && model[0] != '\0';
}

void dp_metrics_request(struct dp_metrics *m, enum dp_route route, const char *model, int status,
                        uint64_t dur_us)
{
    if (route <= DP_ROUTE_UNSET || route >= DP_ROUTE_COUNT)
        route = DP_ROUTE_OTHER;
    if (status < 0 || status >= DP_STATUS_MAX)
        status = 0;
    atomic_fetch_add_explicit(&m->requests[route][status], 1, memory_order_relaxed);
    if (status != 404 && latency_counts(route, model))
        hist_observe(&latency_of(m, model)->duration[route], dur_us);
}

void dp_metrics_ttfb(struct dp_metrics *m, enum dp_route route, const char *model, uint64_t us)
{
    if (latency_counts(route, model))
        hist_observe(&latency_of(m, model)->ttfb[route], us);
}

void dp_metrics_upstream_error(struct dp_metrics *m, uint32_t slot, enum dp_up_error kind)
{
    if (slot >= m->max_workers || kind <= DP_UPERR_UNSET || kind >= DP_UPERR_COUNT)
        return;
    atomic_fetch_add_explicit(&m->upstream_errors[(size_t)slot * DP_UPERR_COUNT + kind], 1,
                              memory_order_relaxed);
}

void dp_metrics_report_stale(struct dp_metrics *m, uint32_t slot)
{
    if (slot < m->max_workers)
        atomic_fetch_add_explicit(&m->reports_stale[slot], 1, memory_order_relaxed);
}

void dp_metrics_retry(struct dp_metrics *m)
{
    atomic_fetch_add_explicit(&m->retries, 1, memory_order_relaxed);
}

/* A decision out of range counts as "other" (POL_DECISION_UNSET). */
static int decision_index(enum pol_decision decision)
{
    return decision > POL_DECISION_UNSET && decision < POL_DECISION_COUNT ? (int)decision : 0;
}

void dp_metrics_decision(struct dp_metrics *m, enum pol_decision decision)
{
    atomic_fetch_add_explicit(&m->decisions[decision_index(decision)], 1, memory_order_relaxed);
}

void dp_metrics_pd_decision(struct dp_metrics *m, enum dp_pd_phase phase,
                            enum pol_decision decision)
{
    if (phase != DP_PD_PREFILL && phase != DP_PD_DECODE)
        return;
    atomic_fetch_add_explicit(&m->pd_decisions[phase][decision_index(decision)], 1,
                              memory_order_relaxed);
}

static const char *const dp_pd_outcome_names[DP_PD_OUT_COUNT] = {
    [DP_PD_OUT_OK] = "ok",
    [DP_PD_OUT_PREFILL_ERROR] = "prefill_error",
    [DP_PD_OUT_BAD_KV_PARAMS] = "bad_kv_params",
    [DP_PD_OUT_DECODE_ERROR] = "decode_error",
    [DP_PD_OUT_ABORTED_PREFILL] = "aborted_prefill",
    [DP_PD_OUT_ABORTED_DECODE] = "aborted_decode",
    [DP_PD_OUT_FALLBACK] = "pd_fallback",
};

void dp_metrics_pd_outcome(struct dp_metrics *m, enum dp_pd_outcome outcome)
{
    if (outcome <= DP_PD_OUT_UNSET || outcome >= DP_PD_OUT_COUNT)
        return;
    atomic_fetch_add_explicit(&m->pd_outcomes[outcome], 1, memory_order_relaxed);
}

void dp_metrics_pd_phase(struct dp_metrics *m, enum dp_pd_phase phase, uint64_t us)
{
    if (phase != DP_PD_PREFILL && phase != DP_PD_DECODE)
        return;
    hist_observe(&m->pd_phase[phase], us);
}

void dp_metrics_response_id_conflict(struct dp_metrics *m)
{
    atomic_fetch_add_explicit(&m->resp_id_conflicts, 1, memory_order_relaxed);
}

void dp_metrics_connection_shed(struct dp_metrics *m, bool refused)
{
    atomic_fetch_add_explicit(&m->conns_shed[refused ? 1 : 0], 1, memory_order_relaxed);
}

void dp_metrics_slow_client(struct dp_metrics *m, bool in_body)
{
    atomic_fetch_add_explicit(&m->slow_clients[in_body ? 1 : 0], 1, memory_order_relaxed);
}

void dp_metrics_disconnect(struct dp_metrics *m, enum dp_phase phase)
{
    if (phase <= DP_PHASE_UNSET || phase >= DP_PHASE_COUNT)
        return;
    atomic_fetch_add_explicit(&m->disconnects[phase], 1, memory_order_relaxed);
}

/* One latency family: a series per (route, model) that observed anything;
 * ttfb selects which histogram of each model. */
static void render_latency(struct prom_writer *w, const struct dp_metrics *m, const char *name,
                           const char *help, bool ttfb)
{
    prom_family(w, name, PROM_HISTOGRAM, help);
    uint32_t n = atomic_load_explicit(&m->n_models, memory_order_acquire);
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++)
        for (uint32_t i = 0; i <= DP_MODEL_SERIES; i++) {
            if (i >= n && i != DP_MODEL_SERIES)
                continue;
            const struct dp_model_latency *l = &m->latency[i];
            const struct histogram *h = ttfb ? &l->ttfb[r] : &l->duration[r];
            if (histogram_count(h) == 0)
                continue;
            const struct prom_label labels[] = {
                {"route", dp_route_row((enum dp_route)r)->label},
                {"model", l->model},
            };
            histogram_write(h, w, labels, 2);
        }
}

/* Per-phase load (every lease) and in-flight (this dataplane), outcomes, durations. */
static void render_pd(struct prom_writer *w, const struct dp_metrics *m,
                      const struct shm_worker_info *workers, size_t n,
                      const struct dp_guards *guards)
{
    static const char *const phases[] = {[DP_PD_PREFILL] = "prefill", [DP_PD_DECODE] = "decode"};
    uint64_t load[DP_PD_DECODE + 1] = {0}, inflight[DP_PD_DECODE + 1] = {0};
    for (size_t i = 0; i < n; i++) {
        int p = workers[i].role == CFG_ROLE_PREFILL  ? DP_PD_PREFILL
                : workers[i].role == CFG_ROLE_DECODE ? DP_PD_DECODE
                                                     : DP_PD_NONE;
        if (p == DP_PD_NONE)
            continue;
        load[p] += shm_load_of(guards->seg, workers[i].slot, workers[i].generation);
        inflight[p] += dp_guards_live(guards, workers[i].slot, workers[i].generation);
    }
    prom_family(w, "switchyard_pd_load", PROM_GAUGE,
                "In-flight requests on prefill and decode workers, summed over every live "
                "dataplane lease.");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        prom_sample_u64(w, NULL, &(struct prom_label){"phase", phases[p]}, 1, load[p]);
    prom_family(w, "switchyard_pd_inflight", PROM_GAUGE,
                "In-flight requests on prefill and decode workers counted by this dataplane's "
                "live guards.");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        prom_sample_u64(w, NULL, &(struct prom_label){"phase", phases[p]}, 1, inflight[p]);
    prom_family(w, "switchyard_pd_requests_total", PROM_COUNTER,
                "Prefill/decode requests by outcome.");
    for (int o = DP_PD_OUT_UNSET + 1; o < DP_PD_OUT_COUNT; o++)
        prom_sample_u64(w, NULL, &(struct prom_label){"outcome", dp_pd_outcome_names[o]}, 1,
                        atomic_load_explicit(&m->pd_outcomes[o], memory_order_relaxed));
    prom_family(w, "switchyard_pd_routing_decisions_total", PROM_COUNTER,
                "Routing decisions of prefill/decode legs by phase, policy and reason.");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        for (int d = 0; d < POL_DECISION_COUNT; d++) {
            uint64_t v = atomic_load_explicit(&m->pd_decisions[p][d], memory_order_relaxed);
            if (v == 0)
                continue;
            const struct prom_label labels[] = {
                {"phase", phases[p]},
                {"policy", m->pd_policy[p] != NULL ? m->pd_policy[p] : ""},
                {"decision", pol_decision_name((enum pol_decision)d)},
            };
            prom_sample_u64(w, NULL, labels, 3, v);
        }
    prom_family(w, "switchyard_pd_phase_duration_seconds", PROM_HISTOGRAM,
                "Duration of completed prefill and decode phases.");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        histogram_write(&m->pd_phase[p], w, &(struct prom_label){"phase", phases[p]}, 1);
}

/* The workers' own reports (only workers that have one), the load routing
 * sees, and how often a report was stale. */
static void render_reports(struct prom_writer *w, const struct dp_metrics *m,
                           const struct shm_worker_info *workers, size_t n,
                           const struct dp_guards *guards)
{
    uint64_t now = proc_wall_ms();
    static const char *const names[] = {
        "switchyard_worker_reported_running",
        "switchyard_worker_reported_waiting",
        "switchyard_worker_reported_kv_cache_usage",
        "switchyard_worker_report_age_seconds",
    };
    static const char *const helps[] = {
        "The worker's vllm:num_requests_running in its last load report.",
        "The worker's vllm:num_requests_waiting in its last load report.",
        "The worker's vllm:kv_cache_usage_perc (0..1) in its last load report.",
        "Age of the worker's last load report.",
    };
    for (int f = 0; f < 4; f++) {
        prom_family(w, names[f], PROM_GAUGE, helps[f]);
        for (size_t i = 0; i < n; i++) {
            struct shm_load_report r;
            if (shm_load_report_read(guards->seg, workers[i].slot, workers[i].generation, &r) != 0)
                continue;
            const struct prom_label l = {"worker", workers[i].id};
            if (f == 0)
                prom_sample_u64(w, NULL, &l, 1, r.running);
            else if (f == 1)
                prom_sample_u64(w, NULL, &l, 1, r.waiting);
            else if (f == 2)
                prom_sample_f64(w, NULL, &l, 1, r.kv_cache_usage);
            else
                prom_sample_f64(w, NULL, &l, 1,
                                now > r.unix_ms ? (double)(now - r.unix_ms) / 1000.0 : 0.0);
        }
    }
    prom_family(w, "switchyard_worker_effective_load", PROM_GAUGE,
                "The load routing sees: own in-flight combined with a fresh load report.");
    for (size_t i = 0; i < n; i++) {
        struct shm_el_load el;
        uint64_t own = shm_load_of(guards->seg, workers[i].slot, workers[i].generation);
        shm_el_of(guards->seg, &m->load, workers[i].slot, workers[i].generation, own, now, &el);
        prom_sample_u64(w, NULL, &(struct prom_label){"worker", workers[i].id}, 1, el.effective);
    }
    prom_family(w, "switchyard_load_reports_stale_total", PROM_COUNTER,
                "Routing candidates whose load report was stale or missing (own count used).");
    for (size_t i = 0; i < n; i++) {
        if (workers[i].slot >= m->max_workers)
            continue;
        prom_sample_u64(
            w, NULL, &(struct prom_label){"worker", workers[i].id}, 1,
            atomic_load_explicit(&m->reports_stale[workers[i].slot], memory_order_relaxed));
    }
}

/* The access log's and the span exporter's counters. */
static void render_obs(struct prom_writer *w, const struct dp_metrics *m)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } rows[] = {
        {"switchyard_access_log_dropped_total",
         "Access-log lines dropped: an event loop's buffer was full, or the write failed.",
         offsetof(struct dp_metrics, access_log_dropped)},
        {"switchyard_trace_spans_dropped_total",
         "Spans dropped before export: an event loop's queue was full (the collector is slow "
         "or down), or an export request failed.",
         offsetof(struct dp_metrics, trace_spans_dropped)},
        {"switchyard_trace_spans_exported_total", "Spans the OTLP collector accepted.",
         offsetof(struct dp_metrics, trace_spans_exported)},
        {"switchyard_trace_export_failures_total",
         "OTLP export requests that failed (no answer in time, or not a 2xx).",
         offsetof(struct dp_metrics, trace_export_failures)},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const _Atomic uint64_t *v = (const _Atomic uint64_t *)((const char *)m + rows[i].off);
        prom_family(w, rows[i].name, PROM_COUNTER, rows[i].help);
        prom_sample_u64(w, NULL, NULL, 0, atomic_load_explicit(v, memory_order_relaxed));
    }
}

int dp_metrics_render(const struct dp_metrics *m, const struct shm_worker_info *workers, size_t n,
                      const struct dp_guards *guards, char **out, size_t *out_len)
{
    struct buf text = BUF_INIT(DP_METRICS_MAX);
    struct prom_writer pw;
    struct prom_writer *w = &pw;
    prom_init(w, &text);

    prom_family(w, "switchyard_worker_load", PROM_GAUGE,
                "In-flight requests per worker summed over every live dataplane lease (what "
                "routing sees).");
    for (size_t i = 0; i < n; i++)
        prom_sample_u64(w, NULL, &(struct prom_label){"worker", workers[i].id}, 1,
                        shm_load_of(guards->seg, workers[i].slot, workers[i].generation));
    prom_family(w, "switchyard_worker_inflight", PROM_GAUGE,
                "In-flight requests per worker counted by this dataplane's live guards.");
    for (size_t i = 0; i < n; i++)
        prom_sample_u64(w, NULL, &(struct prom_label){"worker", workers[i].id}, 1,
                        dp_guards_live(guards, workers[i].slot, workers[i].generation));
    render_reports(w, m, workers, n, guards);

    prom_family(w, "switchyard_requests_total", PROM_COUNTER,
                "Client requests answered, by route and HTTP status.");
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++)
        for (int s = 0; s < DP_STATUS_MAX; s++) {
            uint64_t v = atomic_load_explicit(&m->requests[r][s], memory_order_relaxed);
            if (v == 0)
                continue;
            char code[12]; /* any int, as -Wformat-truncation checks at -O1 */
            snprintf(code, sizeof(code), "%d", s);
            const struct prom_label labels[] = {
                {"route", dp_route_row((enum dp_route)r)->label},
                {"code", code},
            };
            prom_sample_u64(w, NULL, labels, 2, v);
        }

    prom_family(w, "switchyard_upstream_errors_total", PROM_COUNTER,
                "Failed attempts, by worker and kind.");
    for (size_t i = 0; i < n; i++) {
        if (workers[i].slot >= m->max_workers)
            continue;
        for (int k = DP_UPERR_UNSET + 1; k < DP_UPERR_COUNT; k++) {
            const struct prom_label labels[] = {
                {"worker", workers[i].id},
                {"kind", dp_uperr_names[k]},
            };
            prom_sample_u64(w, NULL, labels, 2,
                            atomic_load_explicit(
                                &m->upstream_errors[(size_t)workers[i].slot * DP_UPERR_COUNT + k],
                                memory_order_relaxed));
        }
    }

    prom_family(w, "switchyard_retries_total", PROM_COUNTER,
                "Attempts started again on another worker.");
    prom_sample_u64(w, NULL, NULL, 0, atomic_load_explicit(&m->retries, memory_order_relaxed));

    prom_family(w, "switchyard_routing_decisions_total", PROM_COUNTER,
                "Routing decisions by policy and reason.");
    for (int d = 0; d < POL_DECISION_COUNT; d++) {
        uint64_t v = atomic_load_explicit(&m->decisions[d], memory_order_relaxed);
        if (v == 0)
            continue;
        const struct prom_label labels[] = {
            {"policy", m->policy != NULL ? m->policy : ""},
            {"decision", pol_decision_name((enum pol_decision)d)},
        };
        prom_sample_u64(w, NULL, labels, 2, v);
    }
    prom_family(w, "switchyard_response_id_conflicts_total", PROM_COUNTER,
                "Responses a worker answered with an id another worker or tenant holds (left "
                "bound to its holder).");
    prom_sample_u64(w, NULL, NULL, 0,
                    atomic_load_explicit(&m->resp_id_conflicts, memory_order_relaxed));
    prom_family(w, "switchyard_prefix_index_bytes", PROM_GAUGE,
                "Bytes mapped by cache_aware's prefix index (shared by the node's data planes).");
    prom_sample_u64(w, NULL, NULL, 0, pol_shared_prefix_bytes(m->policies));
    dp_tok_metrics_write(w);

    prom_family(w, "switchyard_client_disconnects_total", PROM_COUNTER,
                "Clients gone before their response ended, by phase.");
    for (int p = DP_PHASE_UNSET + 1; p < DP_PHASE_COUNT; p++)
        prom_sample_u64(w, NULL, &(struct prom_label){"phase", dp_phase_names[p]}, 1,
                        atomic_load_explicit(&m->disconnects[p], memory_order_relaxed));

    prom_family(w, "switchyard_slow_clients_total", PROM_COUNTER,
                "Client connections shut down as too slow, by phase.");
    static const char *const slow_phase[2] = {"headers", "body"};
    for (int k = 0; k < 2; k++)
        prom_sample_u64(w, NULL, &(struct prom_label){"phase", slow_phase[k]}, 1,
                        atomic_load_explicit(&m->slow_clients[k], memory_order_relaxed));

    prom_family(w, "switchyard_connections_shed_total", PROM_COUNTER,
                "Client connections closed to stay within dataplane.max_connections: an idle "
                "one evicted for a new one, or the new one refused when none was idle.");
    static const char *const shed_reason[2] = {"idle_evicted", "refused"};
    for (int k = 0; k < 2; k++)
        prom_sample_u64(w, NULL, &(struct prom_label){"reason", shed_reason[k]}, 1,
                        atomic_load_explicit(&m->conns_shed[k], memory_order_relaxed));

    prom_family(w, "switchyard_load_underflows_total", PROM_COUNTER,
                "Load releases at zero in this dataplane's lease.");
    prom_sample_u64(w, NULL, NULL, 0, shm_load_underflows_in_lease(guards->seg, guards->lease));

    render_latency(w, m, "switchyard_request_duration_seconds",
                   "Time from request arrival to the end of its response, by inference route and "
                   "model.",
                   false);
    render_latency(w, m, "switchyard_time_to_first_byte_seconds",
                   "Time from request arrival to the first response body byte from a worker, by "
                   "inference route and model.",
                   true);
    render_pd(w, m, workers, n, guards);
    render_obs(w, m);
    dp_adm_metrics_render(m->adm, w);
    int rc = prom_error(w);
    if (rc != 0) {
        buf_fini(&text);
        return rc;
    }
    *out = buf_detach(&text, out_len);
    return *out != NULL ? 0 : -ENOMEM;
}
