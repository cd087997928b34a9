/*
 * Dataplane leases. Each dataplane claims one lease and counts its in-flight
 * requests per worker in that lease's counters; a worker's load is the sum
 * over live leases. When a dataplane dies its lease is reaped and its load
 * disappears with it, and nothing else is touched (invariant 7).
 *
 * Liveness of a lease holder does not rest on pids (the two processes may
 * live in different PID namespaces). A holder is dead when any of these
 * says so:
 *  1. the OFD lock it holds on its lease's bytes is gone: the kernel drops
 *     it when the process dies, even by SIGKILL, in any namespace;
 *  2. it recorded a pid in our PID namespace and that pid is gone, a
 *     zombie, or now a different process (start time differs);
 *  3. its heartbeat counter has not moved for heartbeat_timeout_ms (a hung
 *     holder). A holder reaped this way finds out at its next heartbeat
 *     (shm_lease_is_mine turns false) and must stop using the lease; it
 *     still holds the lock, so nobody can claim the lease until it exits.
 * The admin channel's connection adds a fourth signal in the control plane.
 *
 * Claiming: take the lease's lock first (exclusive among live processes),
 * then move FREE -> CLAIMING, zero its counters, fill in identity, bump the
 * nonce, then ACTIVE and set its bit in header.active_leases.
 */
#ifndef SY_SHM_LEASE_H
#define SY_SHM_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/segment.h"

/* A dataplane's hold on its lease. Caller storage; one per process. */
struct shm_lease_handle {
    struct shm_segment *seg; /* borrowed */
    uint32_t index;
    uint64_t nonce;
    bool held;
};

/* Claims a free lease. 0, -EBUSY (none free) or a negative errno. */
int shm_lease_claim(struct shm_segment *seg, struct shm_lease_handle *out, char *err,
                    size_t err_len);

/* One heartbeat; call every shm_segment_heartbeat_interval_ms(seg). */
void shm_lease_heartbeat(const struct shm_lease_handle *h);

/* False once the control plane has reaped this holding of the lease. */
bool shm_lease_is_mine(const struct shm_lease_handle *h);

/* Gives the lease back: counters zeroed, bit cleared, FREE, lock dropped.
 * Idempotent. In-flight guards must be released or abandoned before. */
void shm_lease_release(struct shm_lease_handle *h);

/* True while lease i is ACTIVE. */
bool shm_lease_is_active(const struct shm_segment *seg, uint32_t index);

/* A reader's copy of one lease. Plain caller storage. */
struct shm_lease_info {
    uint32_t index;
    bool active; /* ACTIVE when read; the other fields are meaningful only then */
    int32_t pid; /* in the holder's PID namespace */
    uint64_t start_time;
    uint64_t pid_namespace;
    uint64_t nonce; /* names one holding of the lease */
    uint64_t heartbeat;
    uint64_t claimed_unix_ms;
    uint64_t underflows;
    uint64_t stale_releases;
};

/*
 * Copies lease `index` (< seg->max_dataplanes) into out. The state is read
 * first (acquire), then the nonce (acquire), then the rest (relaxed); each
 * field is read on its own, so a holding that changes meanwhile may show a
 * mix. Callers that act on a holding name it by (index, nonce), which the
 * lease's owner checks again (shm_lease_reap, the admin channel's hello).
 */
void shm_lease_snapshot(const struct shm_segment *seg, uint32_t index, struct shm_lease_info *out);

/*
 * A printable name for the holder of lease `index` (inflight_by_dataplane's
 * key in the admin API): the holder's pid, or "<pid>@<index>" when another
 * active lease has the same pid (dataplanes in separate PID namespaces,
 * e.g. sidecar containers, are all pid 1), so no holder's name hides
 * another's. Writes at most len bytes, NUL-terminated.
 */
void shm_lease_holder_key(const struct shm_segment *seg, uint32_t index, char *buf, size_t len);

/* ---- control plane: judging and reaping ----------------------------------- */

enum shm_lease_verdict {
    SHM_LEASE_VERDICT_UNSET = 0,
    SHM_LEASE_VERDICT_FREE,
    SHM_LEASE_VERDICT_ALIVE,
    SHM_LEASE_VERDICT_DEAD_NO_LOCK,
    SHM_LEASE_VERDICT_DEAD_PID,
    SHM_LEASE_VERDICT_DEAD_HEARTBEAT,
};

/* What the control plane remembers of a lease between two looks. */
struct shm_lease_watch {
    uint64_t nonce;
    uint64_t heartbeat;
    uint64_t heartbeat_seen_ms; /* monotonic ms when heartbeat last moved */
};

/* Judges lease i at monotonic time now_ms, updating watch. */
enum shm_lease_verdict shm_lease_judge(const struct shm_segment *seg, uint32_t index,
                                       struct shm_lease_watch *watch, uint64_t now_ms);

/* Reaps lease i if it still holds the holding named by nonce: zeroes its
 * counters, clears its bit, marks it FREE. Returns 0 or -ESTALE. */
int shm_lease_reap(struct shm_segment *seg, uint32_t index, uint64_t nonce);

const char *shm_lease_verdict_name(enum shm_lease_verdict verdict);

/* Byte range of lease i in the segment file (for its OFD lock). */
uint64_t shm_lease_offset(const struct shm_segment *seg, uint32_t index);

#endif
