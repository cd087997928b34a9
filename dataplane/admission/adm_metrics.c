/*
 * Admission metrics (see adm_metrics.h). Rows are published by storing
 * the row count with release after the row's name is written, so a
 * lock-free reader that sees a count sees every name below it.
 */
#include "dataplane/admission/adm_metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/histogram.h"
#include "shm/buckets.h"
#include "dataplane/admission/api_keys.h"

#define DP_ADM_WAIT_BUCKETS 8

static const double adm_wait_bounds_s[DP_ADM_WAIT_BUCKETS] = {0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60};

struct adm_tenant_row {
    char name[DP_TENANT_NAME_MAX];
    _Atomic uint64_t admitted;
    _Atomic uint64_t rejected[DP_ADM_REASON_COUNT];
    /* The tenant's limits as last seen (0 capacity = none), for the gauge. */
    _Atomic uint64_t hash;
    _Atomic uint64_t interval_us[SHM_BUCKET_KINDS];
    _Atomic uint64_t capacity[SHM_BUCKET_KINDS];
};

struct adm_model_row {
    char name[CFG_MODEL_MAX];
    _Atomic int shm_row; /* its depth row in the buckets object plus 1; 0 = not yet */
    _Atomic int64_t depth[DP_PRIO_COUNT];
    struct histogram wait[DP_PRIO_COUNT]; /* time in the queue, by band */
};

struct dp_adm_metrics {
    pthread_mutex_t lock; /* adding rows only */
    struct adm_tenant_row tenants[DP_ADM_METRICS_ROWS];
    _Atomic size_t n_tenants;
    struct adm_model_row models[DP_ADM_METRICS_ROWS];
    _Atomic size_t n_models;
    _Atomic uint64_t enqueued;
    _Atomic uint64_t left[DP_ADM_LEFT_COUNT];
    struct shm_buckets *buckets; /* borrowed; NULL = none (no keys, no admission limits) */
    uint32_t lease;
    bool hide_tenants; /* dataplane.metrics_tenant_labels: false */
};

static const char *const reason_names[DP_ADM_REASON_COUNT] = {
    [DP_ADM_REASON_UNSET] = "unset",
    [DP_ADM_REASON_UNAUTHORIZED] = "unauthorized",
    [DP_ADM_REASON_RATE_LIMIT] = "rate_limit",
    [DP_ADM_REASON_QUEUE_FULL] = "queue_full",
    [DP_ADM_REASON_QUEUE_TIMEOUT] = "queue_timeout",
    [DP_ADM_REASON_SHUTTING_DOWN] = "shutting_down",
};

static const char *const left_names[DP_ADM_LEFT_COUNT] = {
    [DP_ADM_LEFT_UNSET] = "unset",      [DP_ADM_LEFT_DISPATCHED] = "dispatched",
    [DP_ADM_LEFT_TIMEOUT] = "timeout",  [DP_ADM_LEFT_FULL] = "evicted",
    [DP_ADM_LEFT_GONE] = "client_gone", [DP_ADM_LEFT_SHUTDOWN] = "shutdown",
};

const char *dp_adm_reason_name(enum dp_adm_reason why)
{
    return why > DP_ADM_REASON_UNSET && why < DP_ADM_REASON_COUNT ? reason_names[why] : "unset";
}

const char *dp_adm_left_name(enum dp_adm_left why)
{
    return why > DP_ADM_LEFT_UNSET && why < DP_ADM_LEFT_COUNT ? left_names[why] : "unset";
}

struct dp_adm_metrics *dp_adm_metrics_create(void)
{
    struct dp_adm_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    for (size_t i = 0; i < DP_ADM_METRICS_ROWS; i++)
        for (int p = 0; p < DP_PRIO_COUNT; p++)
            histogram_init(&m->models[i].wait[p], adm_wait_bounds_s, DP_ADM_WAIT_BUCKETS);
    return m;
}

void dp_adm_metrics_destroy(struct dp_adm_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The row of name in a table of rows of stride bytes (name first), added
 * when absent; the last row stands for every name past the table's end. */
static void *adm_row(struct dp_adm_metrics *m, void *rows, size_t stride, size_t name_cap,
                     _Atomic size_t *count, const char *name)
{
    size_t n = atomic_load_explicit(count, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        char *row = (char *)rows + i * stride;
        if (strcmp(row, name) == 0)
            return row;
    }
    pthread_mutex_lock(&m->lock);
    n = atomic_load_explicit(count, memory_order_relaxed);
    char *found = NULL;
    for (size_t i = 0; i < n && found == NULL; i++)
        if (strcmp((char *)rows + i * stride, name) == 0)
            found = (char *)rows + i * stride;
    if (found == NULL) {
        if (n < DP_ADM_METRICS_ROWS - 1) {
            found = (char *)rows + n * stride;
            snprintf(found, name_cap, "%s", name);
            atomic_store_explicit(count, n + 1, memory_order_release);
        } else {
            found = (char *)rows + (DP_ADM_METRICS_ROWS - 1) * stride;
            if (found[0] == '\0') {
                snprintf(found, name_cap, "%s", "_other");
                atomic_store_explicit(count, DP_ADM_METRICS_ROWS, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

static struct adm_tenant_row *adm_tenant(struct dp_adm_metrics *m, const char *name)
{
    return adm_row(m, m->tenants, sizeof(m->tenants[0]), DP_TENANT_NAME_MAX, &m->n_tenants,
                   name[0] != '\0' ? name : "unknown");
}

static struct adm_model_row *adm_model(struct dp_adm_metrics *m, const char *name)
{
    return adm_row(m, m->models, sizeof(m->models[0]), CFG_MODEL_MAX, &m->n_models, name);
}

void dp_adm_metrics_rejected(struct dp_adm_metrics *m, const char *tenant, enum dp_adm_reason why)
{
    if (m == NULL || why <= DP_ADM_REASON_UNSET || why >= DP_ADM_REASON_COUNT)
        return;
    atomic_fetch_add_explicit(&adm_tenant(m, tenant)->rejected[why], 1, memory_order_relaxed);
}

void dp_adm_metrics_admitted(struct dp_adm_metrics *m, const char *tenant)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&adm_tenant(m, tenant)->admitted, 1, memory_order_relaxed);
}

void dp_adm_metrics_set_buckets(struct dp_adm_metrics *m, struct shm_buckets *b, uint32_t lease)
{
    if (m == NULL)
        return;
    m->buckets = b;
    m->lease = lease;
}

void dp_adm_metrics_limits(struct dp_adm_metrics *m, const char *tenant, uint64_t hash,
                           const struct shm_bucket_limit lim[SHM_BUCKET_KINDS])
{
    if (m == NULL)
        return;
    struct adm_tenant_row *r = adm_tenant(m, tenant);
    atomic_store_explicit(&r->hash, hash, memory_order_relaxed);
    for (int k = 0; k < SHM_BUCKET_KINDS; k++) {
        atomic_store_explicit(&r->interval_us[k], lim[k].interval_us, memory_order_relaxed);
        atomic_store_explicit(&r->capacity[k], lim[k].capacity, memory_order_relaxed);
    }
}

void dp_adm_metrics_depth(struct dp_adm_metrics *m, const char *model, enum dp_prio band, int delta)
{
    if (m == NULL || band <= DP_PRIO_UNSET || band >= DP_PRIO_COUNT)
        return;
    struct adm_model_row *r = adm_model(m, model);
    atomic_fetch_add_explicit(&r->depth[band], delta, memory_order_relaxed);
    if (m->buckets == NULL)
        return;
    /* Published for the control plane's /status (shm/buckets.h). Rows are
     * found once per model; 0 means "not looked up" (calloc), so the row
     * is stored plus one. */
    int row = atomic_load_explicit(&r->shm_row, memory_order_relaxed) - 1;
    if (row < 0) {
        row = shm_buckets_model(m->buckets, model);
        if (row < 0)
            return;
        atomic_store_explicit(&r->shm_row, row + 1, memory_order_relaxed);
    }
    shm_buckets_depth_add(m->buckets, row, m->lease, delta);
}

void dp_adm_metrics_wait(struct dp_adm_metrics *m, const char *model, enum dp_prio band,
                         uint64_t us)
{
    if (m == NULL || band <= DP_PRIO_UNSET || band >= DP_PRIO_COUNT)
        return;
    histogram_observe(&adm_model(m, model)->wait[band], (double)us / 1e6);
}

void dp_adm_metrics_enqueued(struct dp_adm_metrics *m)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->enqueued, 1, memory_order_relaxed);
}

void dp_adm_metrics_left(struct dp_adm_metrics *m, enum dp_adm_left why)
{
    if (m != NULL && why > DP_ADM_LEFT_UNSET && why < DP_ADM_LEFT_COUNT)
        atomic_fetch_add_explicit(&m->left[why], 1, memory_order_relaxed);
}

void dp_adm_metrics_hide_tenants(struct dp_adm_metrics *m, bool hide)
{
    m->hide_tenants = hide;
}

uint64_t dp_adm_metrics_model_depth(struct dp_adm_metrics *m, const char *model)
{
    struct adm_model_row *r = adm_model(m, model);
    int64_t sum = 0;
    for (int p = DP_PRIO_UNSET + 1; p < DP_PRIO_COUNT; p++)
        sum += atomic_load_explicit(&r->depth[p], memory_order_relaxed);
    return sum > 0 ? (uint64_t)sum : 0;
}

/* The per-tenant families, one series per tenant. */
static void adm_render_tenants(struct dp_adm_metrics *m, size_t nt, struct prom_writer *w)
{
    prom_family(w, "switchyard_admission_admitted_total", PROM_COUNTER,
                "Requests admitted (key and rate limits passed), by tenant.");
    for (size_t i = 0; i < nt; i++)
        prom_sample_u64(w, NULL, &(struct prom_label){"tenant", m->tenants[i].name}, 1,
                        atomic_load_explicit(&m->tenants[i].admitted, memory_order_relaxed));
    prom_family(w, "switchyard_admission_rejected_total", PROM_COUNTER,
                "Requests refused by admission control, by reason and tenant.");
    for (size_t i = 0; i < nt; i++)
        for (int r = DP_ADM_REASON_UNSET + 1; r < DP_ADM_REASON_COUNT; r++) {
            uint64_t v = atomic_load_explicit(&m->tenants[i].rejected[r], memory_order_relaxed);
            if (v == 0)
                continue;
            const struct prom_label labels[] = {
                {"reason", dp_adm_reason_name((enum dp_adm_reason)r)},
                {"tenant", m->tenants[i].name},
            };
            prom_sample_u64(w, NULL, labels, 2, v);
        }
    prom_family(w, "switchyard_admission_ratelimit_available", PROM_GAUGE,
                "Units a tenant's rate-limit bucket holds now (requests, or estimated tokens), "
                "shared by every data plane of the node.");
    static const char *const kinds[SHM_BUCKET_KINDS] = {"requests", "tokens"};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    for (size_t i = 0; i < nt && m->buckets != NULL; i++)
        for (int k = 0; k < SHM_BUCKET_KINDS; k++) {
            struct shm_bucket_limit lim = {
                .interval_us =
                    atomic_load_explicit(&m->tenants[i].interval_us[k], memory_order_relaxed),
                .capacity = atomic_load_explicit(&m->tenants[i].capacity[k], memory_order_relaxed),
            };
            if (lim.capacity == 0)
                continue;
            uint64_t hash = atomic_load_explicit(&m->tenants[i].hash, memory_order_relaxed);
            const struct prom_label labels[] = {
                {"tenant", m->tenants[i].name},
                {"limit", kinds[k]},
            };
            prom_sample_u64(
                w, NULL, labels, 2,
                shm_buckets_available(m->buckets, hash, (enum shm_bucket_kind)k, &lim, now_us));
        }
}

/*
 * The same families without tenant names (dataplane.metrics_tenant_labels:
 * false): whoever reads /metrics learns neither who the tenants are nor how
 * full their buckets are, only the fleet's sums.
 */
static void adm_render_tenants_summed(struct dp_adm_metrics *m, size_t nt, struct prom_writer *w)
{
    uint64_t admitted = 0, rejected[DP_ADM_REASON_COUNT] = {0};
    for (size_t i = 0; i < nt; i++) {
        admitted += atomic_load_explicit(&m->tenants[i].admitted, memory_order_relaxed);
        for (int r = DP_ADM_REASON_UNSET + 1; r < DP_ADM_REASON_COUNT; r++)
            rejected[r] += atomic_load_explicit(&m->tenants[i].rejected[r], memory_order_relaxed);
    }
    prom_family(w, "switchyard_admission_admitted_total", PROM_COUNTER,
                "Requests admitted (key and rate limits passed), summed over tenants.");
    prom_sample_u64(w, NULL, NULL, 0, admitted);
    prom_family(w, "switchyard_admission_rejected_total", PROM_COUNTER,
                "Requests refused by admission control, by reason, summed over tenants.");
    for (int r = DP_ADM_REASON_UNSET + 1; r < DP_ADM_REASON_COUNT; r++)
        if (rejected[r] != 0)
            prom_sample_u64(
                w, NULL, &(struct prom_label){"reason", dp_adm_reason_name((enum dp_adm_reason)r)},
                1, rejected[r]);
}

void dp_adm_metrics_render(const struct dp_adm_metrics *cm, struct prom_writer *w)
{
    if (cm == NULL)
        return;
    struct dp_adm_metrics *m = (struct dp_adm_metrics *)cm; /* atomics are read only */
    size_t nt = atomic_load_explicit(&m->n_tenants, memory_order_acquire);
    size_t nm = atomic_load_explicit(&m->n_models, memory_order_acquire);
    if (m->hide_tenants)
        adm_render_tenants_summed(m, nt, w);
    else
        adm_render_tenants(m, nt, w);
    prom_family(w, "switchyard_admission_queue_depth", PROM_GAUGE,
                "Requests waiting for a worker, by model and priority band.");
    for (size_t i = 0; i < nm; i++)
        for (int p = DP_PRIO_UNSET + 1; p < DP_PRIO_COUNT; p++) {
            int64_t v = atomic_load_explicit(&m->models[i].depth[p], memory_order_relaxed);
            const struct prom_label labels[] = {
                {"model", m->models[i].name},
                {"band", dp_prio_name((enum dp_prio)p)},
            };
            prom_sample_u64(w, NULL, labels, 2, v > 0 ? (uint64_t)v : 0);
        }
    prom_family(w, "switchyard_admission_queue_wait_seconds", PROM_HISTOGRAM,
                "Time requests waited in the queue, by model and band (counted when they leave).");
    for (size_t i = 0; i < nm; i++)
        for (int p = DP_PRIO_UNSET + 1; p < DP_PRIO_COUNT; p++) {
            const struct histogram *h = &m->models[i].wait[p];
            if (histogram_count(h) == 0)
                continue;
            const struct prom_label labels[] = {
                {"model", m->models[i].name},
                {"band", dp_prio_name((enum dp_prio)p)},
            };
            histogram_write(h, w, labels, 2);
        }
    prom_family(w, "switchyard_admission_queued_total", PROM_COUNTER,
                "Requests that entered the queue.");
    prom_sample_u64(w, NULL, NULL, 0, atomic_load_explicit(&m->enqueued, memory_order_relaxed));
    prom_family(w, "switchyard_admission_queue_left_total", PROM_COUNTER,
                "Requests that left the queue, by how: queued_total equals the sum of these plus "
                "the depth.");
    for (int r = DP_ADM_LEFT_UNSET + 1; r < DP_ADM_LEFT_COUNT; r++)
        prom_sample_u64(w, NULL,
                        &(struct prom_label){"reason", dp_adm_left_name((enum dp_adm_left)r)}, 1,
                        atomic_load_explicit(&m->left[r], memory_order_relaxed));
}
