/*
 * The simulated engine behind the mock worker: what a request costs and when
 * it may run. Three parts, each the smallest honest model of what vLLM does:
 *
 *  - Tokens and blocks. A prompt of B bytes is ceil(B/4) tokens. Its text is
 *    cut into full blocks of block_tokens*4 bytes (a partial tail block is
 *    never cached, as in vLLM); block i's hash is
 *    h_i = XXH3_64bits_withSeed(block_i bytes, seed = h_{i-1}), h_{-1} = 0,
 *    so a block hash names the whole prefix up to and including it. A
 *    request's cache_salt enters the first block's hash (as vLLM's extra
 *    keys do): h_{-1} is then XXH3 of the salt seeded with the unsalted
 *    h_{-1}, so salted chains share no block with unsalted ones.
 *
 *  - KV cache (struct mw_kv_cache). A fixed number of block slots with LRU
 *    eviction. The prefix hit of a prompt is the run of its leading block
 *    hashes already present. A request's blocks are touched from last to
 *    first, so the first block is the most recently used and a prefix's tail
 *    is evicted before its head (vLLM frees blocks in that order too). A
 *    block's id is its slot index, which is what a prefill worker reports as
 *    remote_block_ids.
 *
 *  - Scheduler (struct mw_engine). At most max_running requests run; the
 *    rest wait in one FIFO shared by all event loops. A request's prefix
 *    lookup and cache insertion happen when it is admitted (as vLLM looks up
 *    the cache when it schedules), and the request then holds
 *    ceil(prompt_tokens/block_tokens) blocks until it finishes: the sum of
 *    held blocks over kv capacity is kv_cache_usage_perc.
 *
 * Threading: struct mw_kv_cache is not thread-safe (pure, unit-tested on its
 * own). struct mw_engine is: one mutex guards the cache, the FIFO, the
 * per-owner ready lists and the counters. An entry admitted out of the FIFO
 * by another thread is put on its owner's ready list; the caller that caused
 * the admission learns which owners to wake (a bitmask) and the owner takes
 * its entries with mw_engine_take_ready. Only the owner frees an entry, and
 * only after mw_engine_finish, so an entry never dangles in a list.
 */
#ifndef SY_TESTS_MOCKWORKER_COST_MODEL_H
#define SY_TESTS_MOCKWORKER_COST_MODEL_H

#include "common/list.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MW_BYTES_PER_TOKEN   4
#define MW_ENGINE_MAX_OWNERS 64
#define MW_KV_NONE           UINT32_MAX

/* ceil(bytes / 4). */
uint64_t mw_prompt_tokens(size_t bytes);

/* Number of full blocks of block_tokens tokens in bytes of text. */
size_t mw_full_blocks(size_t bytes, uint32_t block_tokens);

/*
 * Writes the chained hashes of the first n full blocks of text (n must not
 * exceed mw_full_blocks(len, block_tokens)) into out[0..n).
 */
void mw_block_hashes(const char *text, size_t len, uint32_t block_tokens, uint64_t *out, size_t n);

/*
 * As mw_block_hashes, with h_{-1} = none_hash instead of 0: the server seeds
 * its chains with a random value per process, as vLLM's NONE_HASH, so that
 * nothing outside the worker can compute its block hashes (a router must
 * learn them from the KV events, as it must with vLLM).
 */
void mw_block_hashes_from(uint64_t none_hash, const char *text, size_t len, uint32_t block_tokens,
                          uint64_t *out, size_t n);

/* The h_{-1} of a chain salted by salt[0..salt_len) (see above); none_hash
 * itself when salt_len is 0. */
uint64_t mw_salted_seed(uint64_t none_hash, const char *salt, size_t salt_len);

/* ---- KV cache ------------------------------------------------------------ */

/* One block slot of struct mw_kv_cache (index = block id). */
struct mw_kv_slot {
    uint64_t hash;
    uint32_t lru_prev; /* towards the most recently used end */
    uint32_t lru_next; /* towards the least recently used end */
    uint32_t chain;    /* next slot in the same hash bucket */
    bool used;
};

/* Caller storage (mw_kv_init/mw_kv_fini); owns its arrays. Not thread-safe. */
struct mw_kv_cache {
    uint32_t capacity;
    uint32_t used;
    uint32_t mask; /* buckets - 1 */
    uint32_t *buckets;
    struct mw_kv_slot *slots;
    uint32_t lru_head; /* most recently used, MW_KV_NONE when empty */
    uint32_t lru_tail; /* least recently used: evicted first */
    uint32_t free_top; /* never-used slots are handed out in index order */
    uint64_t evictions;
    /* While not NULL, the hash of each evicted block is appended here (at
     * most evict_cap; the engine sets it around one insert for its observer). */
    uint64_t *evict_log;
    size_t evict_n;
    size_t evict_cap;
};

/* capacity >= 1. Returns 0 or -ENOMEM. */
int mw_kv_init(struct mw_kv_cache *kv, uint32_t capacity);
void mw_kv_fini(struct mw_kv_cache *kv);

/* Forgets every block (ids start again from 0). */
void mw_kv_clear(struct mw_kv_cache *kv);

/* Slot of hash, or MW_KV_NONE. Does not change recency. */
uint32_t mw_kv_find(const struct mw_kv_cache *kv, uint64_t hash);

/* Leading blocks of hashes[0..n) present in the cache. Does not change recency. */
size_t mw_kv_match_prefix(const struct mw_kv_cache *kv, const uint64_t *hashes, size_t n);

/*
 * Makes every block of hashes[0..n) present, touching them from last to
 * first (see the file comment) and evicting the least recently used slots
 * as needed. When ids is not NULL, writes each block's slot id (with more
 * blocks than capacity, the ids of evicted tail blocks are stale).
 */
void mw_kv_insert(struct mw_kv_cache *kv, const uint64_t *hashes, size_t n, uint32_t *ids);

/* ---- scheduler ------------------------------------------------------------ */

enum mw_sched_state {
    MW_SCHED_NONE = 0, /* not submitted, or finished */
    MW_SCHED_WAITING,  /* in the FIFO */
    MW_SCHED_READY,    /* admitted by another thread, on the owner's ready list */
    MW_SCHED_RUNNING,  /* admitted and taken by its owner */
};

/*
 * One request as the engine sees it: embedded in the request, owned by the
 * owner loop's thread. The engine links it into its lists between
 * mw_engine_submit and mw_engine_finish; inputs must stay valid meanwhile.
 */
struct mw_sched_entry {
    struct list_node link;       /* on the engine's wait or ready list; engine lock */
    struct mw_sched_entry *next; /* mw_engine_take_ready's hand-off chain; owner only */
    enum mw_sched_state state;   /* engine lock */
    unsigned owner;              /* event loop index < MW_ENGINE_MAX_OWNERS */
    /* Inputs. */
    const uint64_t *hashes; /* full-block hashes of the prompt (may be NULL if n_hashes 0) */
    size_t n_hashes;
    const char *text; /* the prompt text (n_hashes full blocks at least), for the observer */
    const char *salt; /* the request's cache_salt (NULL = none), for the observer */
    size_t salt_len;
    uint32_t *block_ids; /* NULL, or n_hashes slots to receive block ids */
    uint64_t prompt_tokens;
    uint64_t remote_tokens; /* tokens whose KV arrives from a prefill worker */
    bool use_prefix_cache;  /* false: no lookup, no insertion (embeddings) */
    /* Outputs, valid once admitted. */
    uint64_t hit_tokens;     /* local prefix cache hit */
    uint64_t compute_tokens; /* tokens to prefill locally */
    uint64_t held_blocks;
};

/* A consistent copy of the engine's gauges and counters; caller storage. */
struct mw_engine_snapshot {
    uint64_t running;
    uint64_t waiting;
    uint64_t kv_capacity;
    uint64_t kv_used_blocks; /* blocks present in the cache */
    uint64_t held_blocks;    /* blocks held by running requests */
    double kv_usage;         /* min(held, capacity) / capacity, 0..1 */
    uint64_t prefix_query_tokens;
    uint64_t prefix_hit_tokens;
    uint64_t prompt_tokens;     /* of admitted requests */
    uint64_t generation_tokens; /* reported through mw_engine_finish */
    uint32_t sleep_level;       /* 0 awake; vLLM's /sleep level while asleep */
};

/*
 * Who hears of the cache's changes (the KV-events publisher, kv_events.h).
 * Every call is made under the engine lock, in the order of the changes;
 * the pointers are valid during the call only. Each admission and each
 * reset ends with flush: what came since the last flush is one batch (as
 * vLLM publishes one batch per engine step). The changes are net: a block
 * stored and evicted again by the same admission is reported by neither.
 */
struct mw_kv_observer {
    void *ctx;
    /* n consecutive blocks of a prompt, newly cached; parent is the hash
     * of the block before them (NULL for a prompt's first block); text
     * holds their n * block_tokens * 4 bytes; salt is the request's
     * cache_salt (NULL when none), which a prompt's first block carries in
     * its extra keys. */
    void (*stored)(void *ctx, const uint64_t *hashes, size_t n, const uint64_t *parent,
                   const char *text, const char *salt, size_t salt_len);
    void (*removed)(void *ctx, const uint64_t *hashes, size_t n); /* evicted */
    void (*cleared)(void *ctx);                                   /* the whole cache */
    void (*flush)(void *ctx);
};

/* Caller storage; mw_engine_init / mw_engine_fini. Thread-safe after init. */
struct mw_engine {
    const struct mw_kv_observer *observer; /* NULL = nobody; set before any request */
    pthread_mutex_t lock;
    struct mw_kv_cache kv;
    uint32_t block_tokens;
    uint32_t max_running;
    uint64_t running; /* RUNNING + READY */
    uint64_t waiting;
    uint64_t held_blocks;
    struct list_node waiting_list;                     /* FIFO of WAITING entries */
    struct list_node ready_list[MW_ENGINE_MAX_OWNERS]; /* READY entries, per owner */
    uint64_t prefix_query_tokens;
    uint64_t prefix_hit_tokens;
    uint64_t prompt_tokens;
    uint64_t generation_tokens;
    uint32_t sleep_level; /* 0 awake */
    unsigned asleep_tags; /* MW_SLEEP_TAG_* still asleep; 0 when awake */
};

/* What vLLM's /wake_up?tags= wakes: the weights, the KV cache. */
#define MW_SLEEP_TAG_WEIGHTS  1u
#define MW_SLEEP_TAG_KV_CACHE 2u
#define MW_SLEEP_TAGS_ALL     (MW_SLEEP_TAG_WEIGHTS | MW_SLEEP_TAG_KV_CACHE)

/* Returns 0, -EINVAL or -ENOMEM. */
int mw_engine_init(struct mw_engine *e, uint32_t kv_blocks, uint32_t block_tokens,
                   uint32_t max_running);
void mw_engine_fini(struct mw_engine *e);

/*
 * Submits entry (state must be NONE, inputs set). Returns true when it was
 * admitted at once (state RUNNING, outputs valid); false when it waits: the
 * owner is woken later (see mw_engine_finish) and takes it from its ready
 * list.
 */
bool mw_engine_submit(struct mw_engine *e, struct mw_sched_entry *entry);

/*
 * Ends entry in whatever state it is (waiting, ready, running: a cancel is
 * the same call), adds generated tokens to the counters, and admits waiting
 * entries into the freed slots. Returns the bitmask of owners whose ready
 * list got entries and who must be woken. A NONE entry is a no-op.
 */
uint64_t mw_engine_finish(struct mw_engine *e, struct mw_sched_entry *entry,
                          uint64_t generated_tokens);

/*
 * Takes every entry admitted for owner, oldest first, as a list linked by
 * ->next (NULL when none). Their state becomes RUNNING.
 */
struct mw_sched_entry *mw_engine_take_ready(struct mw_engine *e, unsigned owner);

void mw_engine_snapshot(struct mw_engine *e, struct mw_engine_snapshot *out);

/* Clears the cache and the counters; running and waiting requests stay.
 * The observer hears cleared then flush. */
void mw_engine_reset(struct mw_engine *e);

/*
 * vLLM's sleep mode (POST /sleep?level=N): the prefix cache is dropped (as
 * vLLM resets it before sleeping; the observer hears cleared then flush)
 * and nothing more is admitted: new requests wait, as they do in a
 * sleeping vLLM, until every tag is woken. Requests already running finish
 * (vLLM's mode=wait; its default mode=abort would abort them). level >= 1.
 */
void mw_engine_sleep(struct mw_engine *e, uint32_t level);

/*
 * POST /wake_up: wakes tags (MW_SLEEP_TAG_*; 0 = all). Once none sleeps,
 * admits waiting entries and returns the owners to wake (as
 * mw_engine_finish); 0 otherwise.
 */
uint64_t mw_engine_wake(struct mw_engine *e, unsigned tags);

/* Sets the observer (borrowed, outlives the engine) before requests arrive. */
void mw_engine_set_observer(struct mw_engine *e, const struct mw_kv_observer *obs);

#endif
