/*
 * The combination of own in-flight and a worker's report (see
 * effective_load.h). Kept apart from the forwarder so the rule is one
 * function with a unit test, and the /metrics page, the control plane's
 * GET /workers and the routing decision cannot disagree about it.
 */
#include "shm/effective_load.h"

#include <stddef.h>

void shm_el_params_from_cfg(const struct cfg *cfg, struct shm_el_params *out)
{
    out->signal = cfg->policy.load_signal;
    out->reports_on = cfg->controlplane.load_reports.interval_ms > 0;
    out->stale_after_ms = cfg->controlplane.load_reports.stale_after_ms;
    out->kv_overload = cfg->policy.kv_overload;
}

void shm_el_combine(const struct shm_el_params *p, uint64_t own, const struct shm_load_report *r,
                    uint64_t now_unix_ms, struct shm_el_load *out)
{
    *out = (struct shm_el_load){.effective = own};
    if (p->signal == CFG_LOAD_SIGNAL_OWN || !p->reports_on)
        return;
    uint64_t age = r != NULL && now_unix_ms > r->unix_ms ? now_unix_ms - r->unix_ms : 0;
    if (r == NULL || age > p->stale_after_ms) {
        out->stale = true;
        return;
    }
    uint64_t reported = (uint64_t)r->running + r->waiting;
    uint64_t others = reported > r->own_inflight ? reported - r->own_inflight : 0;
    out->effective = own + others;
    out->fresh = true;
    out->kv_overloaded = r->kv_cache_usage > p->kv_overload;
}

void shm_el_of(const struct shm_segment *seg, const struct shm_el_params *p, uint32_t slot,
               uint32_t generation, uint64_t own, uint64_t now_unix_ms, struct shm_el_load *out)
{
    struct shm_load_report r;
    bool have = p->signal != CFG_LOAD_SIGNAL_OWN && p->reports_on &&
                shm_load_report_read(seg, slot, generation, &r) == 0;
    shm_el_combine(p, own, have ? &r : NULL, now_unix_ms, out);
}
