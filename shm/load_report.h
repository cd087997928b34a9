/*
 * A worker's own report of its load, kept in its registry slot: what the
 * worker's /metrics said (requests running, waiting, KV-cache usage) when
 * the control plane last scraped it, when that was, and how many requests
 * this node had in flight to the worker at that moment. The data plane
 * combines it with its exact in-flight count (shm/effective_load.h);
 * this module only stores and reads it.
 *
 * The report is one multi-field record behind a seqlock of its own (not
 * the slot's), written by the control plane only, read by anyone. It is
 * tagged with the slot generation it describes, so a reader asking for
 * (slot, generation) never sees the report of the slot's previous
 * occupant. Writing a report never touches a lease, a load counter, the
 * slot's registry fields or registry_changes (invariant 10): a report is
 * advice, the leases are the truth.
 */
#ifndef SY_SHM_LOAD_REPORT_H
#define SY_SHM_LOAD_REPORT_H

#include <stdint.h>

#include "shm/adapter_set.h"
#include "shm/segment.h"

/* One report. Caller storage. */
struct shm_load_report {
    uint32_t running;      /* vllm:num_requests_running, summed over engines */
    uint32_t waiting;      /* vllm:num_requests_waiting, summed over engines */
    double kv_cache_usage; /* vllm:kv_cache_usage_perc, 0..1 (stored in millionths) */
    uint32_t own_inflight; /* this node's in-flight to the worker when scraped */
    uint64_t unix_ms;      /* when scraped (wall clock, ms); never 0 in a report */
    /* vllm:lora_requests_info's running_lora_adapters (newest sample per
     * engine, united); empty when the worker runs none or reports none. */
    struct shm_adapter_set running_adapters;
};

/* How many times a reader retries a report the writer keeps changing. */
#define SHM_LOAD_REPORT_READ_RETRIES 64

/*
 * Control plane: publishes r for (slot, generation). Returns 0, -EINVAL
 * (slot out of range, r->unix_ms == 0), -ESTALE (the slot holds another
 * generation now: the worker was replaced while it was scraped).
 */
int shm_load_report_write(struct shm_segment *seg, uint32_t slot, uint32_t generation,
                          const struct shm_load_report *r);

/*
 * Reads the report of (slot, generation). Returns 0, -ENOENT (no report for
 * that generation), -EAGAIN (torn after all retries: use none).
 */
int shm_load_report_read(const struct shm_segment *seg, uint32_t slot, uint32_t generation,
                         struct shm_load_report *out);

/*
 * After a control-plane restart: a report left with an odd seq was being
 * written when the previous writer died; it is dropped (its slot has no
 * report until the next scrape). Returns how many were dropped.
 */
int shm_load_report_repair(struct shm_segment *seg);

#endif
