/*
 * The mock worker's KV-cache event publisher: what vLLM sends with
 * --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}',
 * from the mock's own LRU (cost_model.h's observer), so the router's
 * subscriber is tested against a real publisher on real sockets.
 *
 * Wire (as vLLM's ZmqEventPublisher):
 *  - PUB socket (--kv-events-endpoint): multipart (topic "", sequence
 *    number as 8 bytes big-endian from 0, msgpack batch).
 *  - The batch is [ts, events, data_parallel_rank] in both formats
 *    (vLLM's EventBatch is an array_like msgspec struct). Format "map"
 *    (vLLM now: its events are tagged structs without array_like) sends
 *    events as maps tagged "type": BlockStored {block_hashes,
 *    parent_block_hash (nil for a prompt's first block), token_ids,
 *    block_size, lora_id: nil, medium: "GPU", lora_name: nil, extra_keys
 *    (one entry per hash: [cache_salt] for a salted prompt's first block,
 *    else nil), group_idx, kv_cache_spec_kind ("full_attention",
 *    "sliding_window"), kv_cache_spec_sliding_window (sliding group only:
 *    msgspec's omit_defaults leaves out a nil)}, BlockRemoved
 *    {block_hashes, medium, group_idx}, AllBlocksCleared {}. Format
 *    "array" (vLLM before groups and extra keys) sends events as
 *    positional arrays whose first element is the tag, with the older
 *    fields only (BlockStored's 7, BlockRemoved's 2).
 *  - hybrid (--kv-groups hybrid, map format only): a hybrid model's two
 *    KV-cache groups, as vLLM's block pool reports them. Group 0
 *    (full_attention) stores every block; group 1 (sliding_window, a
 *    window of 2 blocks) stores, for each run of blocks, only the run's
 *    last 2 under the same hashes, while its token_ids cover the whole run
 *    (the masked blocks are skipped, their tokens are not), and its own
 *    small pool (4 blocks) evicts its oldest block when full: a
 *    BlockRemoved of group 1 for a block group 0 still holds. A block the
 *    main LRU evicts is removed from group 0, and from group 1 if there.
 *  - Block hashes are ints (the default) or, with --kv-events-hash bytes,
 *    32-byte digests whose last 8 bytes big-endian are the int.
 *  - ROUTER socket (--kv-events-replay-endpoint): a request is the start
 *    sequence as 8 bytes big-endian (after the REQ/DEALER empty delimiter,
 *    which is echoed back); the answer is every buffered batch with
 *    seq >= start, then an end marker with seq -1. Format "map" answers
 *    (topic, seq8, payload) and end (empty, -1, empty), as vLLM now does;
 *    format "array" answers (seq8, payload) and end (-1, empty), as the
 *    older vLLM that sent arrays did. The last --kv-events-buffer-steps
 *    batches are kept (default 10000, as vLLM).
 *
 * One batch per engine step that changed the cache: an admission's
 * evictions and stores, or a reset's AllBlocksCleared.
 *
 * Faults (POST /mock/faults, faults.h): drop the next K batches from PUB
 * (they are still buffered, so replay can fill the gap), swap the next two
 * batches on PUB, or leave replay requests unanswered.
 *
 * Threading: the observer callbacks run under the engine lock (one at a
 * time, in cache order) and only build the batch and queue it; one
 * publisher thread owns both sockets, sends, buffers and answers replays.
 * mw_kv_events_set_faults from any thread.
 */
#ifndef SY_TESTS_MOCKWORKER_KV_EVENTS_H
#define SY_TESTS_MOCKWORKER_KV_EVENTS_H

#include "tests/mockworker/cost_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mw_kv_events;

struct mw_kv_events_config {
    const char *endpoint;        /* PUB, bound (e.g. tcp://127.0.0.1:P) */
    const char *replay_endpoint; /* ROUTER, bound; NULL or "" = no replay */
    bool array_format;           /* vLLM's older positional arrays */
    bool hash_bytes;             /* hashes as 32-byte digests instead of ints */
    bool hybrid;                 /* two KV-cache groups (full + sliding window); map format */
    uint32_t buffer_steps;       /* batches kept for replay, >= 1 */
    uint32_t block_tokens;       /* block_size of BlockStored */
    int dp_rank;                 /* data_parallel_rank of every batch */
};

/* Binds the sockets and starts the publisher thread. 0 or -errno with err. */
int mw_kv_events_create(const struct mw_kv_events_config *cfg, struct mw_kv_events **out, char *err,
                        size_t err_len);

/* Stops the thread, closes the sockets. NULL is a no-op. */
void mw_kv_events_destroy(struct mw_kv_events *ev);

/* The engine observer that feeds ev (valid as long as ev). */
const struct mw_kv_observer *mw_kv_events_observer(struct mw_kv_events *ev);

/*
 * Fault knobs, each left as it is when negative: the next drop_batches
 * batches are not sent on PUB (still buffered); reorder (0/1): the next
 * batch is held and sent after the one that follows it; replay_off (0/1):
 * replay requests get no answer until cleared.
 */
void mw_kv_events_set_faults(struct mw_kv_events *ev, int64_t drop_batches, int reorder,
                             int replay_off);

/* Batches queued so far (the next sequence number). */
uint64_t mw_kv_events_batches(struct mw_kv_events *ev);

#endif
