/*
 * The prefix index behind cache_aware routing: which workers recently
 * received each block of routing text. A request's text is cut into
 * PIX_BLOCK_BYTES blocks with chained hashes (block i's hash covers blocks
 * 0..i), so a hit on block i means the worker saw a prompt whose first i+1
 * blocks equal ours — the part a worker's prefix cache can reuse.
 *
 * Bounded and pointer-free: a versioned header, then a fixed array of 4-way
 * buckets (one cache line each) of 16-byte entries {key, meta}; meta packs
 * the three most recent workers (registry slot + 1, 16 bits each) and a
 * 16-bit age stamp. A full bucket evicts its oldest entry. Memory never
 * grows after creation.
 *
 * It lives in a POSIX shared-memory segment of its own, "<shm.name>.prefix",
 * so that every data plane on the node shares one index and it survives a
 * hot restart or a data-plane crash: the control plane creates (or keeps)
 * it at startup, right after the registry segment whose slot numbers it
 * records, and the data planes attach it. It is a cache: a segment of
 * another layout or size is replaced by the control plane, never adopted,
 * and a data plane that cannot attach it routes with a private index.
 * pix_create makes the same structure in private memory (tests, benches,
 * that fallback).
 *
 * Threading and processes: all fields are relaxed atomics, so any number of
 * threads in any number of processes may record and look up at once.
 * Concurrent updates of one bucket can at worst lose a record or yield a
 * stale hint (a routing preference, never a correctness matter), and never
 * a torn pointer or an out-of-bounds access: every index into the table is
 * masked by the bucket count validated on attach, and a recorded slot is
 * only ever compared with the caller's candidates. Whoever can write the
 * segment can therefore steer cache_aware's preferences, nothing more; it is
 * created and attached under the same ownership and mode rules as the
 * registry segment.
 *
 * Models are kept apart by seeding each chain with the model's hash: every
 * model has its own key space in the shared table.
 */
#ifndef SY_SHM_PREFIX_INDEX_H
#define SY_SHM_PREFIX_INDEX_H

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

/* The segment's identity: "SYPFXIX1" and the layout of its bytes, bumped
 * whenever they (or the meaning of a hash: PIX_BLOCK_BYTES, the chaining)
 * change. */
#define PIX_MAGIC          UINT64_C(0x3158495846505953)
#define PIX_LAYOUT_VERSION 1u

/* Bounds of shm.prefix_index_blocks (4 Ki blocks = 64 KiB of table; 256 Mi
 * blocks = 4 GiB), enforced again on attach so that a header written by
 * someone else cannot make us map more than this. */
#define PIX_MIN_BLOCKS          (UINT64_C(1) << 12)
#define PIX_MAX_CAPACITY_BLOCKS (UINT64_C(1) << 28)

/* What a segment name gets appended: "/switchyard" -> "/switchyard.prefix". */
#define PIX_NAME_SUFFIX ".prefix"

struct pix_index;

/* Creates an index in private memory holding at least capacity_blocks
 * blocks (rounded up to a power of two, within [PIX_MIN_BLOCKS,
 * PIX_MAX_CAPACITY_BLOCKS]). NULL on allocation failure. Thread-safe
 * afterwards. */
struct pix_index *pix_create(size_t capacity_blocks);

/* Unmaps an index (private or shared; a shared segment stays). NULL-safe. */
void pix_destroy(struct pix_index *ix);

/* Writes the prefix segment's name for registry segment `shm_name` into
 * out. 0, or -ENAMETOOLONG when it would not fit out or NAME_MAX. */
int pix_segment_name(const char *shm_name, char *out, size_t len);

enum pix_open_outcome {
    PIX_OPEN_UNSET = 0,
    PIX_OPEN_CREATED,    /* no segment existed */
    PIX_OPEN_REATTACHED, /* a valid one of this size existed: its contents kept */
    PIX_OPEN_REPLACED,   /* one of another layout or size (or half-created) was replaced */
};

/*
 * Control plane: creates segment `name` sized for capacity_blocks (O_EXCL,
 * mode 0600), or keeps a valid existing one of the same size. An existing
 * one that is ours but of another layout or size is unlinked and created
 * anew (err says why); data planes still mapping it keep using it until
 * they restart. Call it only while holding the registry segment's owner
 * lock: that is what keeps two control planes from replacing each other's.
 * 0 with *out and *outcome, or a negative errno with err (-EPERM: the name
 * belongs to another user or is open to group or other).
 */
int pix_open_owner(const char *name, size_t capacity_blocks, struct pix_index **out,
                   enum pix_open_outcome *outcome, char *err, size_t err_len);

/*
 * Data plane: attaches the existing segment `name` after checking its owner,
 * mode, header and size against fstat. 0 with *out; -ENOENT (absent),
 * -EAGAIN (not published yet), -EPROTO (another layout, or sizes that do not
 * add up), -EPERM (ownership), or another negative errno; err says which.
 */
int pix_attach(const char *name, struct pix_index **out, char *err, size_t err_len);

/* Checks a header against this binary's layout and the object's size:
 * 0, -EAGAIN (magic not published) or -EPROTO, with err. hdr points at
 * file_size readable bytes (at least the header's). */
int pix_validate(const void *hdr, uint64_t file_size, char *err, size_t err_len);

/* True when ix lives in a shared segment (not pix_create's private memory). */
bool pix_is_shared(const struct pix_index *ix);

/* Bytes mapped (header and table), and the number of blocks it can hold.
 * Pages of either kind become resident only when first written. */
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

/* Inline: a decision adds and clears every candidate (256 calls of each
 * were a fifth of an 8K-token cache_aware decision's instructions). */

/* Adds slot (ignored at or above PIX_SLOT_LIMIT: such slots are never recorded). */
static inline void pix_slots_add(struct pix_slot_set *set, uint32_t slot)
{
    if (slot < PIX_SLOT_LIMIT)
        set->bits[slot / 64] |= 1ull << (slot % 64);
}

static inline bool pix_slots_has(const struct pix_slot_set *set, uint32_t slot)
{
    return slot < PIX_SLOT_LIMIT && (set->bits[slot / 64] >> (slot % 64)) & 1u;
}

/* Removes the n slots listed (those added): cheaper than clearing 8 KiB. */
static inline void pix_slots_clear(struct pix_slot_set *set, const uint32_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (slots[i] < PIX_SLOT_LIMIT)
            set->bits[slots[i] / 64] = 0;
}

/*
 * Longest matched prefix over the candidate slots: the largest m such that
 * block m-1 was recorded for one of the candidates (0 when none): the
 * last block first (one lookup for a prompt sent before), then a binary
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
