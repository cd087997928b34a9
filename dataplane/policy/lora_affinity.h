/*
 * LoRA affinity: a request for an adapter goes only to workers that have
 * it loaded (the registry's names, filtered before this); among those,
 * the workers already running it are preferred, as the workers report in
 * vllm:lora_requests_info's running_lora_adapters. A worker running an
 * adapter has its weights in a GPU slot and batches the new request with
 * the others on it; another worker may first have to swap the adapter in
 * (and out of its max_loras slots), which costs time and evicts another.
 *
 * The rule, per request, over the candidates the forwarder built (healthy,
 * eligible, serving the model, not saturated):
 *  - a candidate "runs" the adapter when the request's model is not its
 *    base model, its report is fresh (controlplane.load_reports.stale_after)
 *    and the report's running set may hold the name (a Bloom set: a false
 *    positive is possible, a false negative is not; shm/adapter_set.h);
 *  - a running candidate whose KV cache is over policy.kv_overload, or that
 *    is overloaded by the balance gate of cache_aware (load > least load of
 *    all candidates + policy.balance_abs_threshold and >
 *    policy.balance_rel_threshold x it), is not preferred: affinity never
 *    piles a hot adapter onto one worker while others that have it idle;
 *  - when some but not all candidates run it, only those are kept, and the
 *    policy picks among them as usual; otherwise the candidates are left
 *    as they are (no report, a stale one, nobody running it: by policy).
 *
 * Pure over its inputs plus report reads from the segment; any loop thread.
 */
#ifndef SY_DATAPLANE_LORA_AFFINITY_H
#define SY_DATAPLANE_LORA_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "dataplane/core/policy.h"
#include "shm/effective_load.h"
#include "shm/segment.h"

/*
 * Keeps in cands[0..n) the candidates preferred for model (in their
 * order) and returns how many; returns n, cands untouched, when none is
 * (and n when all are).
 * elp says whether reports are on and when they go stale; pol gives the
 * balance gate; now_unix_ms is the wall clock the reports are aged by.
 */
size_t dp_lora_keep_running(const struct shm_segment *seg, const struct shm_el_params *elp,
                            const struct cfg_policy *pol, const char *model,
                            struct pol_candidate *cands, size_t n, uint64_t now_unix_ms);

#endif
