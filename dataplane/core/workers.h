/*
 * A loop's private copy of the worker registry (shm/registry.h), re-read
 * only when header.registry_changes moves, so routing a request costs one
 * atomic load plus a scan of the copy. Health and draining flips bump the
 * counter too, so the copy is never older than one change.
 *
 * Threading: one per event loop; never shared.
 */
#ifndef SY_DATAPLANE_WORKERS_H
#define SY_DATAPLANE_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/registry.h"
#include "shm/segment.h"

struct dp_workers {
    const struct shm_segment *seg; /* borrowed */
    struct shm_worker_info *w;     /* owned; cap = max_workers */
    size_t n, cap;
    uint64_t changes;
    bool loaded;
};

int dp_workers_init(struct dp_workers *v, const struct shm_segment *seg);
void dp_workers_fini(struct dp_workers *v);

/* Re-snapshots the registry if it changed since the last look. */
void dp_workers_refresh(struct dp_workers *v);

/* True when some in-use worker serves model (healthy or not). */
bool dp_workers_has_model(const struct dp_workers *v, const char *model);

/* True when in-use workers serve exactly one distinct model; copies it. */
bool dp_workers_single_model(const struct dp_workers *v, char *model, size_t len);

/* A worker that may take new requests: healthy, not draining, regular role. */
bool dp_workers_is_eligible(const struct shm_worker_info *w);

/* True when w is out of the pick only because a reset_load drains it for
 * the reset's duration (shm_registry_set_reset_drain): is_eligible (a leg's
 * rule, legs.h) would take it once the reset ends. */
bool dp_workers_back_after_reset(const struct shm_worker_info *w,
                                 bool (*is_eligible)(const struct shm_worker_info *w));

#endif
