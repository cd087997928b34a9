/*
 * The exact index behind precise_cache_aware: for each block of KV cache,
 * keyed by the router's token chain (common/token_chain.h), the workers
 * whose KV-cache events say they hold it now. Unlike cache_aware's index
 * (prefix_index.h), which guesses from where requests were sent, an entry
 * here appears when a worker reports BlockStored and goes when it reports
 * BlockRemoved, AllBlocksCleared, or when the control plane forgets the
 * worker (a gap replay could not cover, a restart, the worker leaving).
 *
 * One writer, many readers: only the control plane's event path writes
 * (kvh_add, kvh_remove, kvh_forget_slot); every data plane of the node
 * reads (kvh_longest_match). Readers never see a torn entry; a reader racing
 * a write sees the state before or after it, which for routing is a hint
 * either way.
 *
 * Bounded: sized at creation (shm.kv_index_blocks); when full, entries make
 * room, so the index degrades to "not known to be held", never to a wrong
 * holder. Which ones is fair between workers: each slot's share is the
 * capacity divided by the slots holding facts (the whole index for a
 * single worker). A slot may fill free room beyond its share, but once
 * over it, a new fact of its own that meets a full bucket replaces its own
 * oldest fact there, or is refused: it never takes another worker's. Under
 * its share, a full bucket gives up the oldest fact of the biggest holder
 * among its facts. One worker flooding stores therefore ends up recycling
 * its own facts, and a worker within its share keeps what it reported.
 *
 * It lives in a POSIX shared-memory segment of its own, "<shm.name>.kvholders",
 * created (or kept) by the control plane right after the registry segment
 * whose slot numbers it records, attached by the data planes, replaced (never
 * adopted) when its layout or size differ, under the same ownership and mode
 * rules as the registry segment. kvh_create makes the same structure in
 * private memory for tests, benches and a data plane that cannot attach.
 */
#ifndef SY_SHM_KV_HOLDERS_H
#define SY_SHM_KV_HOLDERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/prefix_index.h" /* struct pix_slot_set, the candidate set */

#define KVH_NAME_SUFFIX ".kvholders"

struct kvh_index;

/* Private memory holding at least capacity_blocks (block, holder) facts
 * (rounded up to a power of two of 15-fact buckets, within 4 Ki .. 256 Mi
 * facts; 16 bytes a fact plus a 512 KiB slot table). NULL on allocation
 * failure. */
struct kvh_index *kvh_create(size_t capacity_blocks);

/* Unmaps (a shared segment stays). NULL-safe. */
void kvh_destroy(struct kvh_index *ix);

/* "<shm_name>.kvholders" into out: 0 or -ENAMETOOLONG. */
int kvh_segment_name(const char *shm_name, char *out, size_t len);

/* Control plane: create segment `name` (O_EXCL, 0600) or keep a valid one
 * of the same layout and size; as pix_open_owner (call it holding the
 * registry's owner lock). *replaced tells whether an existing one of
 * another layout or size was replaced (err then says why). A kept segment
 * starts empty (kvh_forget_all): the previous writer's map from the
 * workers' hashes died with it, so nothing could withdraw its facts; one
 * being replaced is emptied before it is unlinked, so data planes still
 * mapping it see nothing rather than frozen facts. 0 or a negative errno
 * with err. */
int kvh_open_owner(const char *name, size_t capacity_blocks, struct kvh_index **out, bool *replaced,
                   char *err, size_t err_len);

/* Data plane: attach the existing segment after checking owner, mode,
 * header and size. 0, -ENOENT, -EAGAIN, -EPROTO, -EPERM or another
 * negative errno, with err. */
int kvh_attach(const char *name, struct kvh_index **out, char *err, size_t err_len);

/* What kvh_add did with a fact. */
enum kvh_add_result {
    KVH_ADD_STORED = 1,   /* in a free way */
    KVH_ADD_REFRESHED,    /* the slot already held it: its age only */
    KVH_ADD_EVICTED,      /* a full bucket gave up another slot's oldest fact */
    KVH_ADD_SELF_EVICTED, /* a full bucket gave up this slot's own oldest fact */
    KVH_ADD_REFUSED,      /* over its share, and no fact of its own to replace there */
};

/* Writer side (control plane only). slot: a registry slot below
 * PIX_SLOT_LIMIT (others are ignored, as refused). */
enum kvh_add_result kvh_add(struct kvh_index *ix, uint64_t key, uint32_t slot);
void kvh_remove(struct kvh_index *ix, uint64_t key, uint32_t slot);
/* Every fact about slot goes; cost bounded by the index's size, not by the
 * number of facts (forgetting must be cheap enough to do on every gap). */
void kvh_forget_slot(struct kvh_index *ix, uint32_t slot);
/* kvh_forget_slot for every slot. */
void kvh_forget_all(struct kvh_index *ix);

/* Reader side. */
bool kvh_has(const struct kvh_index *ix, uint64_t key, uint32_t slot);

/*
 * Longest held prefix over the candidates: the largest m such that some
 * candidate holds block chain[m-1] (0 when none), found by bisection in
 * O(log n) bucket reads. A block's key covers the whole prefix before it,
 * and vLLM frees a request's blocks tail first, so a holder of block m-1
 * holds the blocks before it but for rare holes (which cost it a shorter
 * real hit, never a wrong holder). holders[0..*n_holders) (at most
 * max_holders) are the candidates holding block m-1.
 */
size_t kvh_longest_match(const struct kvh_index *ix, const uint64_t *chain, size_t n,
                         const struct pix_slot_set *candidates, uint32_t *holders,
                         size_t max_holders, size_t *n_holders);

/* Facts currently held (for metrics and tests; the writer's count, which a
 * reader may see a write behind), of one slot, and the bound. */
size_t kvh_count(const struct kvh_index *ix);
size_t kvh_slot_count(const struct kvh_index *ix, uint32_t slot);
size_t kvh_capacity(const struct kvh_index *ix);
/* The writer's share of slot (see above): capacity / slots holding facts,
 * slot counted even while it holds none. 0 for a slot never recorded. */
size_t kvh_share(const struct kvh_index *ix, uint32_t slot);

/* Bytes mapped (header, slot table, buckets); pages become resident only
 * when first written. True when ix lives in a shared segment. */
size_t kvh_memory_bytes(const struct kvh_index *ix);
bool kvh_is_shared(const struct kvh_index *ix);

/* Checks a header against this binary's layout and the object's size: 0,
 * -EAGAIN (magic not published) or -EPROTO, with err. */
int kvh_validate(const void *hdr, uint64_t file_size, char *err, size_t err_len);

#endif
