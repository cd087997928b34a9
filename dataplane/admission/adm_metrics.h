/*
 * Admission control's metrics: rejections by reason and tenant, admitted
 * requests by tenant, queue depth and wait time per model and band, how
 * queued requests left, and the tenants' rate-limit tokens. Tenants and
 * models are names known only at run time, so each has a row in a small
 * process-wide table (DP_ADM_METRICS_ROWS rows of each; past that, the
 * name "_other" takes the rest). A row is added under a mutex, once per
 * name; its counters are relaxed atomics bumped by every loop.
 *
 * Threading: any thread.
 */
#ifndef SY_DATAPLANE_ADM_METRICS_H
#define SY_DATAPLANE_ADM_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/prom.h"
#include "dataplane/types/admission_types.h"

#define DP_ADM_METRICS_ROWS 256u

struct dp_adm_metrics;

struct dp_adm_metrics *dp_adm_metrics_create(void);
void dp_adm_metrics_destroy(struct dp_adm_metrics *m);

void dp_adm_metrics_rejected(struct dp_adm_metrics *m, const char *tenant, enum dp_adm_reason why);
void dp_adm_metrics_admitted(struct dp_adm_metrics *m, const char *tenant);
/* The buckets (NULL = none) whose available tokens the metrics show and
 * where queue depths are published for the control plane (lease's column). */
void dp_adm_metrics_set_buckets(struct dp_adm_metrics *m, struct shm_buckets *b, uint32_t lease);
/* Set once at start: true renders the tenant families summed, without
 * tenant names or bucket levels (dataplane.metrics_tenant_labels: false). */
void dp_adm_metrics_hide_tenants(struct dp_adm_metrics *m, bool hide);
/* A tenant's current limits (capacity 0 = no limit), for the available-tokens gauge. */
void dp_adm_metrics_limits(struct dp_adm_metrics *m, const char *tenant, uint64_t hash,
                           const struct shm_bucket_limit lim[SHM_BUCKET_KINDS]);
void dp_adm_metrics_depth(struct dp_adm_metrics *m, const char *model, enum dp_prio band,
                          int delta);
void dp_adm_metrics_wait(struct dp_adm_metrics *m, const char *model, enum dp_prio band,
                         uint64_t us);
void dp_adm_metrics_enqueued(struct dp_adm_metrics *m);
void dp_adm_metrics_left(struct dp_adm_metrics *m, enum dp_adm_left why);

/* Queue depth of model over every band and loop of this process. */
uint64_t dp_adm_metrics_model_depth(struct dp_adm_metrics *m, const char *model);

/* The labels: "unauthorized", "rate_limit", "queue_full", ...; "dispatched", ... */
const char *dp_adm_reason_name(enum dp_adm_reason why);
const char *dp_adm_left_name(enum dp_adm_left why);

/* Appends the admission families to w. NULL m: nothing. */
void dp_adm_metrics_render(const struct dp_adm_metrics *m, struct prom_writer *w);

#endif
