/*
 * Creating, re-attaching and attaching the shared-memory segment (its public
 * numbers in shm/layout.h, its bytes in the shm/-private
 * shm/layout_private.h). The control plane is the segment's owner: it creates it, or
 * re-attaches after a restart, and holds an exclusive OFD lock on the header
 * for its lifetime so a second control plane on the same segment is refused.
 * Dataplanes attach to a segment that is already valid and never create one.
 *
 * Attaching validates magic, layout version and every size against fstat
 * before anything else is read, and refuses a mismatch with a message naming
 * both versions. A segment is never shrunk or truncated while mapped.
 *
 * A struct shm_segment is caller storage; its mapping and fd live until
 * shm_segment_close. The descriptor must stay open: the OFD locks that prove
 * a lease holder alive hang on it. Outside shm/ its fields are read-only and
 * the pointers into the mapping are opaque (their types are shm/-private):
 * the header's values come from shm_segment_stats.
 */
#ifndef SY_SHM_SEGMENT_H
#define SY_SHM_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/layout.h"

/* The segment's records; defined in shm/layout_private.h, opaque elsewhere. */
struct shm_header;
struct shm_worker_slot;
struct shm_lease;
struct shm_load_line;

struct shm_segment {
    int fd;
    void *base;
    size_t size;
    struct shm_header *hdr;
    struct shm_worker_slot *slots;
    struct shm_lease *leases;
    struct shm_load_line *loads;
    uint32_t max_workers;
    uint32_t max_dataplanes;
    uint32_t lines_per_worker;
    bool owner; /* holds the control-plane lock */
    char name[CFG_PATH_MAX];
};

enum shm_open_outcome {
    SHM_OPEN_UNSET = 0,
    SHM_OPEN_CREATED,    /* no segment existed */
    SHM_OPEN_REATTACHED, /* a valid segment existed: registry and leases kept */
    SHM_OPEN_REPLACED,   /* a half-created segment (its creator died) was replaced */
};

/* Total bytes of a segment with these capacities. */
size_t shm_segment_size_for(uint32_t max_workers, uint32_t max_dataplanes);

/*
 * Control plane: creates the segment `name` (O_EXCL, mode 0600) or
 * re-attaches to a valid one, then takes the owner lock. Re-attaching bumps
 * the epoch and never touches a lease or a counter; the caller repairs
 * half-written slots (shm_registry_repair). Returns 0, -EBUSY when another
 * control plane holds the segment, -EPROTO on a layout or capacity mismatch,
 * or another negative errno; err says which in words.
 */
int shm_segment_open_owner(struct shm_segment *seg, const char *name, uint32_t max_workers,
                           uint32_t max_dataplanes, enum shm_open_outcome *outcome, char *err,
                           size_t err_len);

/*
 * Dataplane (and tools): attaches an existing, fully created segment.
 * Returns 0, -ENOENT when it does not exist yet, -EAGAIN when it exists but
 * is not published yet, -EPROTO on a layout mismatch, or a negative errno.
 */
int shm_segment_attach(struct shm_segment *seg, const char *name, char *err, size_t err_len);

/*
 * Checks a header against this binary's layout and the object's real size.
 * Returns 0, -EAGAIN (magic not published yet) or -EPROTO with err.
 */
int shm_segment_validate(const struct shm_header *hdr, uint64_t file_size, char *err,
                         size_t err_len);

/*
 * Refuses an object that someone else could have prepared: it must belong to
 * the effective uid and give nothing to group or other. 0, or -EPERM (owner
 * and mode in err) or another negative errno. Used for every shm object the
 * daemons open (this segment and the prefix index's).
 */
int shm_segment_check_owner(int fd, const char *name, char *err, size_t err_len);

/* Unmaps and closes (dropping every lock this process holds on it). NULL-safe. */
void shm_segment_close(struct shm_segment *seg);

/* Removes the name; mappings stay valid until closed. */
int shm_segment_unlink(const char *name);

/*
 * Removes segment `name` if nobody uses it: it must be ours (owner and mode
 * as attaching requires) and no process may hold a lock on any of its
 * bytes (a control plane holds the owner lock, every data plane its
 * lease's). Works whatever the segment's layout version, so it is also how
 * a segment of an older layout is cleared. 0 when removed or absent;
 * -EBUSY when in use; another negative errno; err says why.
 */
int shm_segment_remove_unused(const char *name, char *err, size_t err_len);

/* Control plane: one heartbeat (+1 on cp_heartbeat). */
void shm_segment_heartbeat(struct shm_segment *seg);

/* A reader's copy of the header's values. Each field is read on its own
 * (relaxed, active_leases with acquire): a consistent set is not promised,
 * and none is needed by status pages and metrics. Plain caller storage. */
struct shm_segment_stats {
    uint32_t layout_version;
    uint32_t heartbeat_interval_ms;
    uint32_t heartbeat_timeout_ms;
    uint64_t epoch;            /* +1 at each control-plane (re)attach */
    int32_t cp_pid;            /* in the control plane's PID namespace */
    uint64_t cp_pid_namespace; /* inode of that namespace */
    uint64_t cp_heartbeat;
    uint64_t registry_changes;
    uint64_t leases_reaped; /* since the segment was created */
    uint64_t active_leases; /* bit i set while lease i is ACTIVE */
};

void shm_segment_stats(const struct shm_segment *seg, struct shm_segment_stats *out);

/* When the segment was created (Unix ms): it names this registry among
 * the segments ever made under the same name (a --fresh start makes a new
 * one, whose slots and generations start over). */
uint64_t shm_segment_created_ms(const struct shm_segment *seg);

/* The control plane's epoch (relaxed). */
uint64_t shm_segment_epoch(const struct shm_segment *seg);

/* How often lease holders and the control plane beat, as the segment says. */
uint32_t shm_segment_heartbeat_interval_ms(const struct shm_segment *seg);

/*
 * Byte-range OFD locks on the segment file: the proof of life of a lease
 * holder and of the owner. Locks belong to the open file description, so
 * they vanish when the holding process dies, in any PID namespace.
 */
int shm_segment_try_lock(const struct shm_segment *seg, uint64_t offset, uint64_t len);
int shm_segment_unlock(const struct shm_segment *seg, uint64_t offset, uint64_t len);
/* True when some other open file description holds a lock on the range. */
bool shm_segment_is_locked_by_other(const struct shm_segment *seg, uint64_t offset, uint64_t len);

#endif
