/*
 * Applies decoded KV-cache events (kv_events.h) to the node's exact holder
 * index (shm/kv_holders.h): the kv_event_sink the subscriber calls.
 *
 * vLLM's block hashes cannot be recomputed outside the worker (a random
 * seed per process, a configurable hash function), so for each worker this
 * keeps a bounded map from the worker's block hash to the router's chain
 * hash (common/token_chain.h) of the same block, built from BlockStored's
 * token ids and parent hash: a stored block's key is tkc_next over its
 * tokens from its parent's key (from the map) or, for a chain's first
 * block, from the chain's seed (tkc_seed of the event's lora_name, else of
 * the worker's model). BlockRemoved looks the key up to withdraw the fact;
 * AllBlocksCleared and on_forget drop all of the worker's facts at once.
 *
 * What is skipped, and counted by reason: blocks of another block size than
 * the configured one (their keys would never equal a request's), blocks
 * whose parent is not in the map (stored before we listened, or evicted
 * from the map: their keys cannot be computed), blocks not on the GPU (a
 * CPU or storage copy must be loaded before it helps a prefill, and vLLM
 * reports it as separate events; only GPU blocks make a worker the cheap
 * place to send a prefix), events of a worker whose model is not known, and
 * events whose token count does not match their blocks (or whose salt the
 * decoder could not keep).
 *
 * Hybrid models: only one KV-cache group is routed on, the first
 * full-attention group a worker stores in (every event, for a publisher
 * without groups); events of other groups (sliding-window, chunked-local,
 * mamba, a second full-attention group) are skipped and counted by kind
 * (switchyard_kv_events_group_skipped_total), BlockRemoved included, so a
 * removal in one group never withdraws what the routed group holds.
 *
 * A chain's first block (no parent) whose extra keys carry the request's
 * cache_salt is keyed from the salted seed (tkc_salt_seed), as the data
 * plane keys a salted request: salted blocks match only their salt.
 *
 * Bounds: each worker's map holds at most map_blocks entries; when full,
 * its oldest entry goes and so does that block's fact in the index (a fact
 * whose removal could no longer be applied must not stay).
 *
 * Which facts a full index gives up is the index's fair-share rule
 * (kv_holders.h); the blocks it held back from a worker over its share are
 * counted here per worker (switchyard_kv_share_limited_total).
 *
 * Threading: the sink's callbacks run on the subscriber's one thread, which
 * owns the maps; kva_metrics_write may run on any thread (the counters are
 * relaxed atomics, the fact count lives in the index).
 */
#ifndef SY_CONTROLPLANE_KV_APPLY_H
#define SY_CONTROLPLANE_KV_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"
#include "controlplane/kv/kv_events.h"
#include "shm/kv_holders.h"

/* The worker's model name into out (its registry name, the chain seed of
 * its base-model blocks): 0, or a negative errno when not known. */
typedef int (*kva_model_fn)(void *arg, uint32_t slot, const char *worker_id, char *out, size_t len);

enum kva_skip {
    KVA_SKIP_BLOCK_SIZE,     /* block_size differs from the configured one */
    KVA_SKIP_UNKNOWN_PARENT, /* parent hash not in the worker's map */
    KVA_SKIP_MEDIUM,         /* not a GPU block */
    KVA_SKIP_UNKNOWN_MODEL,  /* the worker's model is not known */
    KVA_SKIP_MALFORMED,      /* token ids do not fill the blocks; slot out of range */
    KVA_SKIP_COUNT,
};

struct kva_stats {
    uint64_t applied[3]; /* by enum kv_event_kind */
    uint64_t skipped[KVA_SKIP_COUNT];
    uint64_t blocks_stored;                /* facts added */
    uint64_t blocks_removed;               /* facts withdrawn */
    uint64_t map_evictions;                /* map entries (and their facts) dropped for the bound */
    uint64_t forgets;                      /* AllBlocksCleared and on_forget */
    uint64_t group_skipped[KV_SPEC_COUNT]; /* events of groups not routed on, by kind */
};

struct kv_apply;

/*
 * ix: the index written (borrowed, outlives this). block_size: the token
 * block size the data planes hash with (policy.precise_cache_aware.
 * block_size). max_slots: registry slots (shm.max_workers); events of
 * higher slots are skipped. map_blocks: the bound of each worker's map.
 * model_of: resolves a worker's model (called on the sink's thread).
 * NULL on allocation failure.
 */
struct kv_apply *kva_create(struct kvh_index *ix, uint32_t block_size, uint32_t max_slots,
                            size_t map_blocks, kva_model_fn model_of, void *model_arg);
void kva_destroy(struct kv_apply *a);

/* The sink to give the subscriber; its ctx is a. */
struct kv_event_sink kva_sink(struct kv_apply *a);

/* Entries in slot's map (sink thread only; for tests). */
size_t kva_map_size(const struct kv_apply *a, uint32_t slot);

void kva_stats(const struct kv_apply *a, struct kva_stats *out);

/* The control plane's families: switchyard_kv_index_facts and
 * switchyard_kv_index_capacity, switchyard_kv_events_applied_total{type},
 * switchyard_kv_events_skipped_total{reason},
 * switchyard_kv_events_group_skipped_total{kind}, switchyard_kv_blocks_total{op},
 * switchyard_kv_map_evictions_total, switchyard_kv_worker_forgets_total,
 * switchyard_kv_share_limited_total{worker,action}. arg is the struct kv_apply (adm_metrics_fn's
 * shape). */
void kva_metrics_write(const void *arg, struct prom_writer *w);

#endif
