/*
 * The node's response table: which worker stores each Responses API id
 * created through this node (vLLM keeps a response only in the memory of
 * the server that made it, so a later request naming it must go there).
 * It is a shared-memory segment of its own, beside the registry segment:
 * every data plane of the node reads and writes it, and it outlives them,
 * so a hot restart (or a crash) keeps every conversation sticky.
 *
 * Shape: a fixed number of entries, grouped in sets of SHM_RESP_WAYS; an
 * id hashes (XXH3) to one set. An insert takes, in its set, the entry of
 * the same id, else an empty or expired one, else the least recently used
 * (so a full table forgets the conversations idle longest). Each entry is
 * a seqlock record of atomics: a writer takes it by moving its sequence
 * from even to odd with a compare-and-swap (several processes write), and
 * readers retry a torn read. An entry whose writer died mid-write stays odd
 * and unused until the segment is recreated: one entry per crash.
 *
 * The segment is created by the first data plane that needs it
 * (O_CREAT|O_EXCL, mode 0600, fchmod against the umask, sized, the header
 * filled, the magic published last) and adopted by the others only when it
 * belongs to this user with no group or other access, its layout version
 * and record sizes match this binary's, and its size matches its header. A
 * creator holds an OFD lock on the header while it builds, so a segment
 * left unpublished by a dead creator is told from one being built and
 * replaced. A segment of another layout version is refused.
 *
 * Each entry also names the tenant of the request that created it (a hash
 * of its name, 0 for the anonymous tenant: the caller's), so a request of
 * another tenant can be told apart; and holds the whole id, compared byte
 * for byte (the hash only picks the set). A live entry (younger than the
 * writer's TTL) is never moved to another worker, generation or tenant:
 * whatever answers with an id that exists cannot take its conversation.
 *
 * Entries name workers by registry slot and generation, which mean
 * something only in the registry they were read from: the table records
 * which one (registry_id, the registry segment's creation time), and an
 * opener for another registry (after a --fresh start) forgets every entry.
 *
 * Times are CLOCK_MONOTONIC milliseconds (one clock for every process of
 * the node); the TTL is the reader's: an entry older than it is absent.
 *
 * Threading: any thread of any process; struct shm_resp_table is caller
 * storage, read-only after shm_resp_open.
 */
#ifndef SY_SHM_RESPONSES_H
#define SY_SHM_RESPONSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_RESP_WAYS   8u
#define SHM_RESP_ID_MAX 160u /* bytes of an id, NUL excluded: longer ids are not kept */

struct shm_resp_header;
struct shm_resp_entry;

struct shm_resp_table {
    int fd;
    void *base;
    size_t size;
    struct shm_resp_header *hdr;
    struct shm_resp_entry *entries;
    uint64_t n_entries; /* a multiple of SHM_RESP_WAYS */
};

/* The segment name of the table beside registry segment `shm_name`
 * ("<shm_name>.responses"). 0 or -ENAMETOOLONG. */
int shm_resp_name(const char *shm_name, char *out, size_t cap);

/*
 * Opens (creating it when absent) the table `name` with room for
 * n_entries ids (rounded up to a multiple of SHM_RESP_WAYS), for the
 * registry registry_id (shm_segment_created_ms). An existing table keeps
 * its own size (*created false); one made for another registry is emptied
 * first (*forgot: how many entries went). 0, -EPERM (not ours, or open to
 * others), -EPROTO (another layout), or a negative errno; err says why.
 */
int shm_resp_open(struct shm_resp_table *t, const char *name, uint64_t n_entries,
                  uint64_t registry_id, bool *created, uint64_t *forgot, char *err, size_t err_len);

/* Unmaps and closes. NULL-safe; a closed table is a no-op. */
void shm_resp_close(struct shm_resp_table *t);

/* Who an id belongs to: the worker storing it and the tenant it was made for. */
struct shm_resp_owner {
    uint32_t slot;
    uint32_t generation;
    uint64_t tenant; /* the caller's hash of the tenant's name; 0 = anonymous */
};

/*
 * Remembers id (len bytes, 1..SHM_RESP_ID_MAX) as made for owner at
 * now_ms. 0 (stored, or refreshed when the owner is the same), -EINVAL
 * (bad id), -EEXIST (the id is held, younger than ttl_ms, by another
 * worker, generation or tenant: left as it is), -EBUSY (its set was being
 * written by others throughout).
 */
int shm_resp_put(struct shm_resp_table *t, const char *id, size_t len,
                 const struct shm_resp_owner *owner, uint64_t now_ms, uint64_t ttl_ms);

/* Looks id up: 0 with *owner when known and younger than ttl_ms, else
 * -ENOENT. A hit marks the entry used at now_ms (LRU). */
int shm_resp_get(struct shm_resp_table *t, const char *id, size_t len, uint64_t now_ms,
                 uint64_t ttl_ms, struct shm_resp_owner *owner);

/* Counters since the table was created. */
struct shm_resp_stats {
    uint64_t entries;
    uint64_t inserts;
    uint64_t evictions; /* entries taken over by another id (expired or least recently used) */
};
void shm_resp_stats(const struct shm_resp_table *t, struct shm_resp_stats *out);

#endif
