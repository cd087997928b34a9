/*
 * The one load a routing policy sees for a worker, from two truths
 * (invariant 10, docs/routing.md "Two truths"):
 *
 *  - own: this node's exact in-flight count to the worker, the sum over the
 *    live leases of the node's segment (shm_load_read_many). Exact, but
 *    blind to what other router nodes send the same worker.
 *  - the worker's report (shm/load_report.h): running + waiting from its
 *    /metrics as the control plane last scraped it, and own_at_report,
 *    this node's in-flight count at that scrape.
 *
 * With a fresh report (age <= stale_after):
 *
 *     others    = max(0, reported - own_at_report)
 *     effective = own + others
 *
 * `others` is what the worker was doing for everyone but this node at the
 * report; `own` is this node's share now, which already counts exactly
 * what this node dispatched since the report and is still in flight, and
 * forgets what finished. So effective = max(own, reported + dispatched
 * since the report), with "dispatched since" = own - own_at_report
 * (net of what finished), and effective >= own always. With one router
 * node the worker's count is this node's (reported ~ own_at_report):
 * others ~ 0 and routing is what it was before reports existed.
 *
 * A stale or missing report, or load_signal: own, gives effective = own
 * (never fail closed). kv_overloaded says the fresh report's KV-cache usage
 * is above policy.kv_overload; balance gates count such a worker as
 * overloaded.
 *
 * Why a routing rule sits in shm/: both daemons apply it and must agree.
 * The data plane routes with it (forwarder, admission, LoRA affinity) and
 * publishes it (switchyard_worker_effective_load); the control plane shows
 * it (GET /workers' effective_load). Of the layers both daemons link, only
 * shm/ may read a load report (common/ never includes shm/, and neither
 * daemon includes the other's folder), and the rule is a function of that
 * one segment record and the config, so it lives beside the record. It
 * holds no policy: what a policy does with the load is dataplane/policy's.
 *
 * Pure functions plus one segment read; callable from any thread.
 */
#ifndef SY_SHM_EFFECTIVE_LOAD_H
#define SY_SHM_EFFECTIVE_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/load_report.h"
#include "shm/segment.h"

/* From the config; plain value. */
struct shm_el_params {
    enum cfg_load_signal signal;
    bool reports_on;         /* controlplane.load_reports.interval > 0 */
    uint64_t stale_after_ms; /* controlplane.load_reports.stale_after */
    double kv_overload;      /* policy.kv_overload */
};

/* What one worker's load is for one decision. */
struct shm_el_load {
    uint64_t effective;
    bool fresh;         /* a fresh report took part */
    bool stale;         /* combined signal, reports on, but no fresh report: fell back to own */
    bool kv_overloaded; /* fresh report with kv_cache_usage > kv_overload */
};

void shm_el_params_from_cfg(const struct cfg *cfg, struct shm_el_params *out);

/*
 * Combines own with report r (NULL = none) at wall-clock now_unix_ms.
 * A report from the future (a clock step) counts as age 0.
 */
void shm_el_combine(const struct shm_el_params *p, uint64_t own, const struct shm_load_report *r,
                    uint64_t now_unix_ms, struct shm_el_load *out);

/* Reads (slot, generation)'s report from seg and combines it with own. */
void shm_el_of(const struct shm_segment *seg, const struct shm_el_params *p, uint32_t slot,
               uint32_t generation, uint64_t own, uint64_t now_unix_ms, struct shm_el_load *out);

#endif
