/*
 * LoRA affinity (see lora_affinity.h). Two passes over the candidates: the
 * least load (for the balance gate), then the running test, which reads
 * each candidate's report once. The model's hash is taken only when some
 * candidate could be running it as an adapter, so requests for a base
 * model pay one string compare per candidate and nothing else.
 */
#include "dataplane/policy/lora_affinity.h"

#include <stdbool.h>
#include <string.h>

#include "dataplane/policy/cache_aware.h"
#include "shm/adapter_set.h"
#include "shm/load_report.h"

static bool dp_lora_runs(const struct shm_segment *seg, const struct shm_el_params *elp,
                         const struct pol_candidate *c, uint64_t hash, uint64_t now_unix_ms)
{
    struct shm_load_report r;
    if (shm_load_report_read(seg, c->worker->slot, c->worker->generation, &r) != 0)
        return false;
    /* A report from the future (a clock step) counts as fresh, as in
     * effective_load.h. */
    if (now_unix_ms > r.unix_ms && now_unix_ms - r.unix_ms > elp->stale_after_ms)
        return false;
    return shm_adapter_set_may_have(&r.running_adapters, hash);
}

size_t dp_lora_keep_running(const struct shm_segment *seg, const struct shm_el_params *elp,
                            const struct cfg_policy *pol, const char *model,
                            struct pol_candidate *cands, size_t n, uint64_t now_unix_ms)
{
    if (n < 2 || !elp->reports_on || model == NULL || model[0] == '\0')
        return n;
    bool adapter = false;
    uint64_t min_load = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(cands[i].worker->model, model) != 0)
            adapter = true;
        if (cands[i].load < min_load)
            min_load = cands[i].load;
    }
    if (!adapter)
        return n;
    uint64_t hash = shm_adapter_hash(model, strlen(model));
    /* The same overload gate as cache_aware's affinity: one formula. */
    struct ca_params gate = ca_params_from_cfg(pol);
    /* Compacts in place: k <= i, so what is read was never written, and
     * when none is kept nothing was written at all. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct pol_candidate c = cands[i];
        if (strcmp(c.worker->model, model) != 0 && !c.kv_overloaded &&
            !ca_is_overloaded(&gate, c.load, min_load) &&
            dp_lora_runs(seg, elp, &c, hash, now_unix_ms))
            cands[k++] = c;
    }
    return k == 0 ? n : k;
}
