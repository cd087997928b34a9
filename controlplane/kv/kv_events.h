/*
 * vLLM's KV-cache events as the control plane sees them once decoded: the
 * contract between the subscriber (ZeroMQ transport, msgpack decoding,
 * sequence gaps and replay: kv_subscriber.c, kv_event_decode.c) and the
 * index that applies them (kv_index.c). Neither side knows the other's
 * internals; they meet in these structs and the sink below.
 *
 * Wire facts (vLLM's --kv-events-config publisher): multipart PUB messages
 * (topic, 8-byte big-endian sequence number, msgpack batch); a batch is
 * [ts, events, data_parallel_rank]; events are tagged maps (since 2026-06)
 * or tagged positional arrays (before), BlockStored / BlockRemoved /
 * AllBlocksCleared. Block hashes arrive as 64-bit ints by default or as raw
 * digest bytes; bytes are reduced here to the same 64-bit value vLLM's int
 * form uses (the digest's last 8 bytes, big-endian), so one worker's
 * hashes compare equal whichever form it sends.
 *
 * Hybrid models (vllm/v1/core/block_pool.py): one BlockStored per KV-cache
 * group, naming its group_idx and kv_cache_spec_kind; a sliding-window (or
 * mamba) group leaves its null or masked blocks out of block_hashes while
 * token_ids still covers the whole range, so there token ids are not
 * hashes x block size. BlockRemoved names only its group_idx.
 */
#ifndef SY_CONTROLPLANE_KV_EVENTS_H
#define SY_CONTROLPLANE_KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kv_event_kind {
    KV_EVENT_BLOCK_STORED,
    KV_EVENT_BLOCK_REMOVED,
    KV_EVENT_ALL_BLOCKS_CLEARED,
};

/* Where the blocks live; only GPU blocks make a prefill cheaper at once,
 * the others are reported so the index can decide. */
enum kv_medium {
    KV_MEDIUM_GPU, /* also when the field is absent (its default) */
    KV_MEDIUM_CPU,
    KV_MEDIUM_STORAGE,
    KV_MEDIUM_OTHER,
};

/* A KV-cache group's kind (BlockStored's kv_cache_spec_kind). Only a
 * full-attention group's blocks say which prefix a worker can skip
 * computing: a sliding-window or state group keeps only a prompt's tail. */
enum kv_spec_kind {
    KV_SPEC_UNSET,          /* absent: a publisher without groups (one group) */
    KV_SPEC_FULL_ATTENTION, /* full_attention, mla_attention, sink_full_attention */
    KV_SPEC_SLIDING_WINDOW, /* sliding_window, sliding_window_mla */
    KV_SPEC_CHUNKED_LOCAL,  /* chunked_local_attention */
    KV_SPEC_MAMBA,          /* mamba (state) */
    KV_SPEC_OTHER,          /* cross / encoder-only attention, names not known */
    KV_SPEC_COUNT,
};

/* One event. Pointers are valid only during the sink call that passes it. */
struct kv_event {
    enum kv_event_kind kind;
    const uint64_t *block_hashes; /* Stored, Removed: in chain order */
    size_t n_block_hashes;
    bool has_parent; /* Stored: false for a chain's first block */
    uint64_t parent_block_hash;
    /* Stored: n_block_hashes * block_size ids for a full group; more for
     * a group that skipped masked blocks (not checked by the decoder). */
    const uint32_t *token_ids;
    size_t n_token_ids;
    uint32_t block_size; /* Stored */
    enum kv_medium medium;
    const char *lora_name; /* Stored: NULL for the base model */
    bool has_group;        /* group_idx present (Stored, Removed) */
    uint32_t group_idx;
    enum kv_spec_kind spec_kind; /* Stored */
    /* Stored: the request's cache_salt, read from extra_keys[0] (vLLM mixes
     * it into the first block's hash only, so only an event without a
     * parent carries it); NULL when none. salt_unreadable: extra_keys[0]
     * held a salt this decoder could not keep (too long): the event's keys
     * cannot be computed. */
    const char *salt;
    size_t salt_len;
    bool salt_unreadable;
};

/* One published batch, after sequence checking. */
struct kv_event_batch {
    uint64_t seq;
    double ts;
    int dp_rank; /* -1 when the worker sent nil */
    const struct kv_event *events;
    size_t n_events;
};

/* What the subscriber tells the index, per worker. `slot` is the worker's
 * registry slot (shm/registry.h), `worker_id` its registry id. */
struct kv_event_sink {
    void *ctx;
    /* A batch in sequence order, after any replay has filled a gap. */
    void (*on_batch)(void *ctx, uint32_t slot, const char *worker_id,
                     const struct kv_event_batch *batch);
    /* Everything known about the worker is void: a gap that replay could
     * not cover, a restarted engine (its sequence went back or its engine
     * id changed), the worker leaving the registry. The index forgets the
     * worker's blocks; later batches rebuild them. */
    void (*on_forget)(void *ctx, uint32_t slot, const char *worker_id);
};

#endif
