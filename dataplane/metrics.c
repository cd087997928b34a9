/*
 * Prometheus text exposition of the dataplane (see metrics.h). Written by
 * hand: Debian has no C client library. Output is built in a buffer that
 * doubles up to a fixed cap (DP_METRICS_MAX), so a huge fleet cannot make a
 * scrape allocate without bound.
 */
#include "dataplane/metrics.h"
#include "dataplane/policy.h"
#include "dataplane/routes.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/load.h"

#define DP_METRICS_MAX (16u << 20)

static const double dp_buckets_s[DP_HIST_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
};

static const char *const dp_uperr_names[DP_UPERR_COUNT] = {
    [DP_UPERR_CONNECT] = "connect", [DP_UPERR_STATUS] = "status",
    [DP_UPERR_TIMEOUT] = "timeout", [DP_UPERR_TRANSFER] = "transfer",
    [DP_UPERR_IN_BAND] = "in_band",
};

static const char *const dp_phase_names[DP_PHASE_COUNT] = {
    [DP_PHASE_HEADERS] = "waiting_headers",
    [DP_PHASE_STREAM] = "streaming",
};

static void hist_init(struct dp_histogram *h)
{
    for (int i = 0; i <= DP_HIST_BUCKETS; i++)
        atomic_init(&h->bucket[i], 0);
    atomic_init(&h->sum_us, 0);
    atomic_init(&h->count, 0);
}

static void hist_observe(struct dp_histogram *h, uint64_t us)
{
    int i = 0;
    while (i < DP_HIST_BUCKETS && (double)us > dp_buckets_s[i] * 1e6)
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
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
    atomic_init(&m->retries, 0);
    for (int d = 0; d < POL_DECISION_COUNT; d++)
        atomic_init(&m->decisions[d], 0);
    for (int p = 0; p < DP_PHASE_COUNT; p++)
        atomic_init(&m->disconnects[p], 0);
    hist_init(&m->duration);
    hist_init(&m->ttfb);
    for (int o = 0; o < DP_PD_OUT_COUNT; o++)
        atomic_init(&m->pd_outcomes[o], 0);
    for (int p = 0; p <= DP_PD_DECODE; p++) {
        m->pd_policy[p] = NULL;
        for (int d = 0; d < POL_DECISION_COUNT; d++)
            atomic_init(&m->pd_decisions[p][d], 0);
    }
    for (int p = 0; p <= DP_PD_DECODE; p++)
        hist_init(&m->pd_phase[p]);
    return 0;
}

void dp_metrics_fini(struct dp_metrics *m)
{
    free(m->upstream_errors);
    m->upstream_errors = NULL;
}

void dp_metrics_request(struct dp_metrics *m, enum dp_route route, int status, uint64_t dur_us)
{
    if (route <= DP_ROUTE_UNSET || route >= DP_ROUTE_COUNT)
        route = DP_ROUTE_OTHER;
    if (status < 0 || status >= DP_STATUS_MAX)
        status = 0;
    atomic_fetch_add_explicit(&m->requests[route][status], 1, memory_order_relaxed);
    hist_observe(&m->duration, dur_us);
}

void dp_metrics_ttfb(struct dp_metrics *m, uint64_t us)
{
    hist_observe(&m->ttfb, us);
}

void dp_metrics_upstream_error(struct dp_metrics *m, uint32_t slot, enum dp_up_error kind)
{
    if (slot >= m->max_workers || kind <= DP_UPERR_UNSET || kind >= DP_UPERR_COUNT)
        return;
    atomic_fetch_add_explicit(&m->upstream_errors[(size_t)slot * DP_UPERR_COUNT + kind], 1,
                              memory_order_relaxed);
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

void dp_metrics_disconnect(struct dp_metrics *m, enum dp_phase phase)
{
    if (phase <= DP_PHASE_UNSET || phase >= DP_PHASE_COUNT)
        return;
    atomic_fetch_add_explicit(&m->disconnects[phase], 1, memory_order_relaxed);
}

/* A bounded, doubling text buffer. */
struct dp_text {
    char *buf;
    size_t len, cap;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void text_add(struct dp_text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t ncap = t->cap * 2;
        char *nb = ncap <= DP_METRICS_MAX ? realloc(t->buf, ncap) : NULL;
        if (nb == NULL) {
            t->failed = true;
            return;
        }
        t->buf = nb;
        t->cap = ncap;
    }
}

static void render_hist(struct dp_text *t, const char *name, const char *help,
                        const struct dp_histogram *h)
{
    text_add(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < DP_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        text_add(t, "%s_bucket{le=\"%g\"} %llu\n", name, dp_buckets_s[i], (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&h->bucket[DP_HIST_BUCKETS], memory_order_relaxed);
    text_add(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    text_add(t, "%s_sum %.6f\n", name,
             (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    text_add(t, "%s_count %llu\n", name, (unsigned long long)cum);
}

/* One series of a histogram family whose HELP/TYPE lines are already out. */
static void render_hist_series(struct dp_text *t, const char *name, const char *label,
                               const struct dp_histogram *h)
{
    uint64_t cum = 0;
    for (int i = 0; i < DP_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        text_add(t, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label, dp_buckets_s[i],
                 (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&h->bucket[DP_HIST_BUCKETS], memory_order_relaxed);
    text_add(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
    text_add(t, "%s_sum{%s} %.6f\n", name, label,
             (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    text_add(t, "%s_count{%s} %llu\n", name, label, (unsigned long long)cum);
}

/* Per-phase load (every lease) and in-flight (this dataplane), outcomes, durations. */
static void render_pd(struct dp_text *t, const struct dp_metrics *m,
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
    text_add(t, "# HELP switchyard_pd_load In-flight requests on prefill and decode workers, "
                "summed over every live dataplane lease.\n# TYPE switchyard_pd_load gauge\n");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        text_add(t, "switchyard_pd_load{phase=\"%s\"} %llu\n", phases[p],
                 (unsigned long long)load[p]);
    text_add(t, "# HELP switchyard_pd_inflight In-flight requests on prefill and decode workers "
                "counted by this dataplane's live guards.\n# TYPE switchyard_pd_inflight gauge\n");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        text_add(t, "switchyard_pd_inflight{phase=\"%s\"} %llu\n", phases[p],
                 (unsigned long long)inflight[p]);
    text_add(t, "# HELP switchyard_pd_requests_total Prefill/decode requests by outcome.\n"
                "# TYPE switchyard_pd_requests_total counter\n");
    for (int o = DP_PD_OUT_UNSET + 1; o < DP_PD_OUT_COUNT; o++)
        text_add(
            t, "switchyard_pd_requests_total{outcome=\"%s\"} %llu\n", dp_pd_outcome_names[o],
            (unsigned long long)atomic_load_explicit(&m->pd_outcomes[o], memory_order_relaxed));
    text_add(t, "# HELP switchyard_pd_routing_decisions_total Routing decisions of prefill/decode "
                "legs by phase, policy and reason.\n"
                "# TYPE switchyard_pd_routing_decisions_total counter\n");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++)
        for (int d = 0; d < POL_DECISION_COUNT; d++) {
            uint64_t v = atomic_load_explicit(&m->pd_decisions[p][d], memory_order_relaxed);
            if (v != 0)
                text_add(t,
                         "switchyard_pd_routing_decisions_total{phase=\"%s\",policy=\"%s\","
                         "decision=\"%s\"} %llu\n",
                         phases[p], m->pd_policy[p] != NULL ? m->pd_policy[p] : "",
                         pol_decision_name((enum pol_decision)d), (unsigned long long)v);
        }
    text_add(t, "# HELP switchyard_pd_phase_duration_seconds Duration of completed prefill and "
                "decode phases.\n# TYPE switchyard_pd_phase_duration_seconds histogram\n");
    for (int p = DP_PD_PREFILL; p <= DP_PD_DECODE; p++) {
        char label[32];
        snprintf(label, sizeof(label), "phase=\"%s\"", phases[p]);
        render_hist_series(t, "switchyard_pd_phase_duration_seconds", label, &m->pd_phase[p]);
    }
}

int dp_metrics_render(const struct dp_metrics *m, const struct shm_worker_info *workers, size_t n,
                      const struct dp_guards *guards, char **out, size_t *out_len)
{
    struct dp_text t = {.cap = 16384};
    t.buf = malloc(t.cap);
    if (t.buf == NULL)
        return -ENOMEM;
    t.buf[0] = '\0';

    text_add(&t, "# HELP switchyard_worker_load In-flight requests per worker summed over every "
                 "live dataplane lease (what routing sees).\n"
                 "# TYPE switchyard_worker_load gauge\n");
    for (size_t i = 0; i < n; i++)
        text_add(
            &t, "switchyard_worker_load{worker=\"%s\"} %llu\n", workers[i].id,
            (unsigned long long)shm_load_of(guards->seg, workers[i].slot, workers[i].generation));
    text_add(&t, "# HELP switchyard_worker_inflight In-flight requests per worker counted by this "
                 "dataplane's live guards.\n"
                 "# TYPE switchyard_worker_inflight gauge\n");
    for (size_t i = 0; i < n; i++)
        text_add(&t, "switchyard_worker_inflight{worker=\"%s\"} %u\n", workers[i].id,
                 dp_guards_live(guards, workers[i].slot, workers[i].generation));

    text_add(&t, "# HELP switchyard_requests_total Client requests answered, by route and HTTP "
                 "status.\n# TYPE switchyard_requests_total counter\n");
    for (int r = DP_ROUTE_UNSET + 1; r < DP_ROUTE_COUNT; r++)
        for (int s = 0; s < DP_STATUS_MAX; s++) {
            uint64_t v = atomic_load_explicit(&m->requests[r][s], memory_order_relaxed);
            if (v != 0)
                text_add(&t, "switchyard_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                         dp_route_row((enum dp_route)r)->label, s, (unsigned long long)v);
        }

    text_add(&t, "# HELP switchyard_upstream_errors_total Failed attempts, by worker and kind.\n"
                 "# TYPE switchyard_upstream_errors_total counter\n");
    for (size_t i = 0; i < n; i++) {
        if (workers[i].slot >= m->max_workers)
            continue;
        for (int k = DP_UPERR_UNSET + 1; k < DP_UPERR_COUNT; k++)
            text_add(&t, "switchyard_upstream_errors_total{worker=\"%s\",kind=\"%s\"} %llu\n",
                     workers[i].id, dp_uperr_names[k],
                     (unsigned long long)atomic_load_explicit(
                         &m->upstream_errors[(size_t)workers[i].slot * DP_UPERR_COUNT + k],
                         memory_order_relaxed));
    }

    text_add(&t,
             "# HELP switchyard_retries_total Attempts started again on another worker.\n"
             "# TYPE switchyard_retries_total counter\nswitchyard_retries_total %llu\n",
             (unsigned long long)atomic_load_explicit(&m->retries, memory_order_relaxed));

    text_add(&t, "# HELP switchyard_routing_decisions_total Routing decisions by policy and "
                 "reason.\n# TYPE switchyard_routing_decisions_total counter\n");
    for (int d = 0; d < POL_DECISION_COUNT; d++) {
        uint64_t v = atomic_load_explicit(&m->decisions[d], memory_order_relaxed);
        if (v != 0)
            text_add(&t, "switchyard_routing_decisions_total{policy=\"%s\",decision=\"%s\"} %llu\n",
                     m->policy != NULL ? m->policy : "", pol_decision_name((enum pol_decision)d),
                     (unsigned long long)v);
    }
    text_add(&t,
             "# HELP switchyard_prefix_index_bytes Memory of cache_aware's prefix index.\n"
             "# TYPE switchyard_prefix_index_bytes gauge\nswitchyard_prefix_index_bytes %zu\n",
             pol_cache_aware_index_bytes());

    text_add(&t, "# HELP switchyard_client_disconnects_total Clients gone before their response "
                 "ended, by phase.\n# TYPE switchyard_client_disconnects_total counter\n");
    for (int p = DP_PHASE_UNSET + 1; p < DP_PHASE_COUNT; p++)
        text_add(
            &t, "switchyard_client_disconnects_total{phase=\"%s\"} %llu\n", dp_phase_names[p],
            (unsigned long long)atomic_load_explicit(&m->disconnects[p], memory_order_relaxed));

    text_add(&t,
             "# HELP switchyard_load_underflows_total Load releases at zero in this "
             "dataplane's lease.\n# TYPE switchyard_load_underflows_total counter\n"
             "switchyard_load_underflows_total %llu\n",
             (unsigned long long)shm_load_underflows_in_lease(guards->seg, guards->lease));

    render_hist(&t, "switchyard_request_duration_seconds",
                "Time from request arrival to the end of its response.", &m->duration);
    render_hist(&t, "switchyard_time_to_first_byte_seconds",
                "Time from request arrival to the first response body byte from a worker.",
                &m->ttfb);
    render_pd(&t, m, workers, n, guards);
    if (t.failed) {
        free(t.buf);
        return -ENOMEM;
    }
    *out = t.buf;
    *out_len = t.len;
    return 0;
}
