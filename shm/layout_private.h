/*
 * The bytes of the shared-memory segment: one per router instance, created by
 * the control plane, mapped by it and by every dataplane. docs/shm-layout.md
 * describes every field, its writer and its ordering rules; this header is
 * the source of truth and SHM_LAYOUT_VERSION (shm/layout.h) changes whenever
 * these bytes do.
 *
 * PRIVATE to shm/: no file outside shm/ includes it (unit tests of shm/
 * excepted). Everyone else reads the segment through shm/'s functions and
 * snapshots (shm_segment_stats, shm_lease_snapshot, shm_registry_*,
 * shm_load_*), so the bytes can change without touching a daemon.
 *
 *   [header | worker slots x max_workers | leases x max_dataplanes |
 *    load lines x max_workers x ceil(max_dataplanes / 8)]
 *
 * Rules that keep two processes (possibly in different PID namespaces, and
 * different builds during a hot restart) honest:
 *  - Pointer-free, fixed-size records; every shared field is a lock-free
 *    atomic (checked at compile time below) and every access names its order.
 *  - One writer per region: the header and the worker slots are written by
 *    the control plane only; a lease and its counters by the dataplane that
 *    holds it, except that the control plane may reap a dead holder's lease
 *    and (administratively) reset a counter with a CAS.
 *  - Worker slots are multi-field records behind a seqlock; readers retry a
 *    bounded number of times and keep their last good copy.
 *  - A load counter packs (generation << 32 | count) in one 64-bit word, so
 *    a guard from a removed worker's generation can never touch the next
 *    occupant of the slot (invariant 6).
 *  - Counters of different workers never share a cache line: a worker owns
 *    whole 64-byte load lines holding the counters of 8 leases each.
 */
#ifndef SY_SHM_LAYOUT_PRIVATE_H
#define SY_SHM_LAYOUT_PRIVATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "shm/adapter_set.h"
#include "shm/layout.h"

#define SHM_MAGIC           0x3159524459575331ULL /* "1SWYDRY1" little-endian */
#define SHM_CACHE_LINE      64u
#define SHM_LEASES_PER_LINE 8u

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free across processes");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free across processes");

/* Fixed string fields of a worker slot, stored as relaxed-atomic words so a
 * seqlock reader racing the writer never performs a data race. */
#define SHM_ID_WORDS      (SHM_ID_MAX / 8)
#define SHM_URL_WORDS     (SHM_URL_MAX / 8)
#define SHM_MODEL_WORDS   (SHM_MODEL_MAX / 8)
#define SHM_ALIASES_WORDS (SHM_ALIASES_MAX / 8)

struct shm_header {
    /* Written once at creation, before magic is published (release). */
    _Atomic uint64_t magic;
    uint32_t layout_version;
    uint32_t header_size;
    uint32_t slot_size;
    uint32_t lease_size;
    uint32_t load_line_size;
    uint32_t max_workers;
    uint32_t max_dataplanes;
    uint32_t lines_per_worker;
    uint32_t heartbeat_interval_ms;
    uint32_t heartbeat_timeout_ms;
    uint64_t total_size;
    uint64_t slots_offset;
    uint64_t leases_offset;
    uint64_t loads_offset;
    uint64_t created_unix_ms;

    /* Control plane: writer is the control plane holding the segment lock. */
    _Atomic uint64_t epoch; /* +1 at each control-plane (re)attach */
    _Atomic int32_t cp_pid; /* in the control plane's PID namespace */
    _Atomic uint64_t cp_start_time;
    _Atomic uint64_t cp_pid_namespace;
    _Atomic uint64_t cp_heartbeat;     /* +1 every heartbeat interval */
    _Atomic uint64_t registry_changes; /* +1 after every slot write: lets readers skip rescans */
    _Atomic uint64_t leases_reaped;    /* total leases reaped since creation */
    /* The epoch whose control plane has written the configured workers: a
     * dataplane starting between segment creation and that sync would see
     * an empty registry and answer 503 (equal to epoch once synced). */
    _Atomic uint64_t registry_synced_epoch;

    /* Bit i set while lease i is ACTIVE. Set by the claimer, cleared by the
     * releaser or the reaper (atomic RMW: two writers by design). Lets a
     * routing decision sum only live leases without reading every lease. */
    _Atomic uint64_t active_leases;

} __attribute__((aligned(SHM_CACHE_LINE)));

/* Slot state word: bit flags plus the role in bits 8..15. */
#define SHM_SLOT_IN_USE     (1u << 0)
#define SHM_SLOT_HEALTHY    (1u << 1)
#define SHM_SLOT_DRAINING   (1u << 2)
#define SHM_SLOT_FROM_API   (1u << 3) /* added through the admin API, not the config */
#define SHM_SLOT_ROLE_SHIFT 8u
#define SHM_SLOT_ROLE_MASK  (0xffu << SHM_SLOT_ROLE_SHIFT)
/* Set with DRAINING by a reset_load of a worker that was not draining:
 * the drain is the reset's, not the operator's, and ends with it. A reader
 * that does not know the bit sees a drain, which is what it must see. */
#define SHM_SLOT_RESETTING (1u << 16)
/* The worker's engine sleeps (vLLM's /sleep, read from its
 * vllm:engine_sleep_state): it answers /health but queues every request
 * until woken, so routing leaves it out. A reader that does not know the
 * bit routes to it as before the bit existed: slower, never wrong. */
#define SHM_SLOT_SLEEPING (1u << 17)

/* Bits 3..7 of the state word: the tag of the worker source that added the
 * slot (the control plane names them; 0 = the config). Tag 1 is the admin
 * API, i.e. the FROM_API bit slots carried before tags existed: same bytes. */
#define SHM_SLOT_SOURCE_SHIFT 3u
#define SHM_SLOT_SOURCE_MASK  (0x1fu << SHM_SLOT_SOURCE_SHIFT)

struct shm_worker_slot {
    _Atomic uint32_t seq;        /* seqlock: odd while the control plane writes */
    _Atomic uint32_t generation; /* +1 whenever the slot changes hands */
    _Atomic uint32_t state;      /* SHM_SLOT_* flags and role */
    uint32_t pad0;
    _Atomic uint64_t id[SHM_ID_WORDS];
    _Atomic uint64_t url[SHM_URL_WORDS];
    _Atomic uint64_t model[SHM_MODEL_WORDS];
    _Atomic uint64_t aliases[SHM_ALIASES_WORDS]; /* learned with model; "" when none */

    /* The worker's own load report (shm/load_report.h), written by the
     * control plane's scraper behind report_seq, a seqlock of its own: a
     * report never waits for a registry write and never bumps seq or
     * registry_changes. report_generation names the occupant it describes. */
    _Atomic uint32_t report_seq;
    _Atomic uint32_t report_generation;
    _Atomic uint32_t report_running;
    _Atomic uint32_t report_waiting;
    _Atomic uint32_t report_kv_ppm;  /* kv_cache_usage in millionths */
    _Atomic uint32_t report_own;     /* this node's in-flight to the worker at the scrape */
    _Atomic uint64_t report_unix_ms; /* when it was scraped; 0 = no report */
    /* The LoRA adapters the worker reported running (shm/adapter_set.h: a
     * Bloom filter of name hashes), part of the same report. */
    _Atomic uint64_t report_adapters[SHM_ADAPTER_SET_WORDS];
} __attribute__((aligned(SHM_CACHE_LINE)));

enum shm_lease_state {
    SHM_LEASE_FREE = 0,
    SHM_LEASE_CLAIMING,
    SHM_LEASE_ACTIVE,
};

struct shm_lease {
    _Atomic uint32_t state;      /* enum shm_lease_state */
    _Atomic int32_t pid;         /* in the holder's PID namespace */
    _Atomic uint64_t start_time; /* holder's start time, clock ticks since boot */
    _Atomic uint64_t pid_namespace;
    _Atomic uint64_t nonce;     /* +1 at every claim: names one holding of the lease */
    _Atomic uint64_t heartbeat; /* +1 by the holder every heartbeat interval */
    _Atomic uint64_t claimed_unix_ms;
    _Atomic uint64_t underflows;     /* decrements at zero (invariant 5) */
    _Atomic uint64_t stale_releases; /* releases whose generation had moved on */
} __attribute__((aligned(SHM_CACHE_LINE)));

/* The counters of one worker for leases [8k, 8k+8): generation << 32 | count. */
struct shm_load_line {
    _Atomic uint64_t counter[SHM_LEASES_PER_LINE];
} __attribute__((aligned(SHM_CACHE_LINE)));

_Static_assert(sizeof(struct shm_header) % SHM_CACHE_LINE == 0, "header size");
_Static_assert(sizeof(struct shm_worker_slot) == 768, "slot size");
_Static_assert(sizeof(struct shm_lease) % SHM_CACHE_LINE == 0, "lease size");
_Static_assert(sizeof(struct shm_load_line) == SHM_CACHE_LINE, "load line size");
_Static_assert(SHM_ID_MAX % 8 == 0 && SHM_URL_MAX % 8 == 0 && SHM_MODEL_MAX % 8 == 0 &&
                   SHM_ALIASES_MAX % 8 == 0,
               "string fields are stored as 64-bit words");

#endif
