/*
 * The prefix index behind cache_aware routing: which workers recently
 * received each block of routing text. A request's text is cut into
 * PIX_BLOCK_BYTES blocks with chained hashes (block i's hash covers blocks
 * 0..i), so a hit on block i means the worker saw a prompt whose first i+1
 * blocks equal ours — the part a worker's prefix cache can reuse.
 *
 * Bounded and pointer-free by design, so it could later move into the shared
 * segment and survive a dataplane restart: a fixed array of 4-way buckets
 * (one cache line each) of 16-byte entries {key, meta}; meta packs the three
 * most recent workers (slot + 1, 16 bits each) and a 16-bit age stamp. A
 * full bucket evicts its oldest entry. Memory never grows after creation.
 *
 * One index is shared by every event loop of a dataplane (a request's
 * affinity must not depend on which thread accepted it). All fields are
 * relaxed atomics: concurrent updates of one bucket can at worst lose a
 * record or yield a stale hint (a routing preference, never a correctness
 * matter), and never a torn pointer or an out-of-bounds access.
 *
 * Models are kept apart by seeding each chain with the model's hash: every
 * model has its own key space in the shared table.
 */
#ifndef SY_DATAPLANE_POLICY_PREFIX_INDEX_H
#define SY_DATAPLANE_POLICY_PREFIX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ~60 tokens at 4 bytes per token. 240 is XXH3's largest short input: a
 * seeded hash of it needs no per-call secret, so one call per block both
 * hashes the block and chains it to the previous one. */
#define PIX_BLOCK_BYTES 240u
#define PIX_MAX_BLOCKS  4096u /* 1 MiB of routing text */
#define PIX_WAYS        4u
#define PIX_REFS        3u     /* workers remembered per block */
#define PIX_SLOT_LIMIT  65535u /* slots >= this are not recorded (16-bit refs) */

struct pix_index;

/* Creates an index holding at least capacity_blocks blocks (rounded up to a
 * power of two). NULL on allocation failure. Thread-safe afterwards. */
struct pix_index *pix_create(size_t capacity_blocks);
void pix_destroy(struct pix_index *ix);

/* Bytes allocated, and the number of blocks it can hold. */
size_t pix_memory_bytes(const struct pix_index *ix);
size_t pix_capacity(const struct pix_index *ix);

/* The chain seed for a model name. */
uint64_t pix_model_seed(const char *model);

/*
 * Hashes the full blocks of text (a partial tail block is not hashed: a
 * worker caches whole blocks only) into out[0..cap). Returns the number of
 * blocks hashed.
 */
size_t pix_hash_blocks(uint64_t seed, const char *text, size_t len, uint64_t *out, size_t cap);

/*
 * The set of candidate slots a match may name: one bit per slot below
 * PIX_SLOT_LIMIT (8 KiB), so that judging an index entry costs its three
 * refs, not a scan of every candidate. Caller storage; start from all zero
 * and clear what you set (pix_slots_clear) so it can be reused.
 */
#define PIX_SLOT_WORDS ((PIX_SLOT_LIMIT + 64u) / 64u)
struct pix_slot_set {
    uint64_t bits[PIX_SLOT_WORDS];
};

/* Adds slot (ignored at or above PIX_SLOT_LIMIT: such slots are never recorded). */
void pix_slots_add(struct pix_slot_set *set, uint32_t slot);
bool pix_slots_has(const struct pix_slot_set *set, uint32_t slot);
/* Removes the n slots listed (those added): cheaper than clearing 8 KiB. */
void pix_slots_clear(struct pix_slot_set *set, const uint32_t *slots, size_t n);

/*
 * Longest matched prefix over the candidate slots: the largest m such that
 * block m-1 was recorded for one of the candidates (0 when none). Binary
 * search over block positions, so a match costs O(log n) lookups. When m >
 * 0, holders[0..*n_holders) are the candidates that hold block m-1 (up to
 * PIX_REFS, most recent first): each has the whole matched prefix.
 */
size_t pix_longest_match(struct pix_index *ix, const uint64_t *hashes, size_t n,
                         const struct pix_slot_set *candidates, uint32_t holders[PIX_REFS],
                         size_t *n_holders);

/* Whether block hash h was recorded for slot (for tests and metrics). */
bool pix_has(struct pix_index *ix, uint64_t h, uint32_t slot);

/* Records blocks hashes[from..n) as received by slot. */
void pix_record(struct pix_index *ix, const uint64_t *hashes, size_t from, size_t n, uint32_t slot);

#endif
