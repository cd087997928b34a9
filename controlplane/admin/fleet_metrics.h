/*
 * Control-plane metrics about the fleet as a whole rather than one worker:
 * switchyard_model_healthy_workers{model}, the workers a data plane may
 * route a model's requests to (healthy, not draining). It is what an alert
 * on "a model nobody can serve" needs: per-worker health series cannot be
 * grouped by model in PromQL, since they carry no model label. The label's
 * values come from the registry, so they are bounded by shm.max_workers.
 * Control plane only; reads a registry snapshot the caller took.
 */
#ifndef SY_CONTROLPLANE_FLEET_METRICS_H
#define SY_CONTROLPLANE_FLEET_METRICS_H

#include <stddef.h>

#include "common/prom.h"
#include "shm/registry.h"

/* Appends the fleet families for the n workers of all (a registry snapshot;
 * its order is changed). Workers whose model is not known yet are left out. */
void cp_fleet_metrics_write(struct prom_writer *w, struct shm_worker_info *all, size_t n);

#endif
