/*
 * The POSIX shared-memory objects of a node, as one primitive: the registry
 * segment, the prefix index, the Responses table and the rate-limit buckets
 * are each created and opened the same way, because each is reachable by
 * anyone on the host who can run as our user (docs/security.md):
 *
 *  - created with O_CREAT|O_EXCL and mode exactly 0600 (fchmod: the umask
 *    only narrows at creation), optionally holding an OFD write lock over a
 *    range while it is sized and filled, so a concurrent opener can tell a
 *    live creator from a dead one's leftovers;
 *  - opened only when it belongs to the effective uid and gives nothing to
 *    group or other, and only mapped once its size is known to hold at
 *    least a header; what the header says is the caller's to check.
 *
 * Each module keeps its own layout, header checks and publishing (a magic
 * written last, with release order). Functions return 0 or a negative errno
 * and write a sentence into err that names the object as `what`.
 */
#ifndef SY_SHM_OBJECT_H
#define SY_SHM_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A mapped object. Caller storage; shm_object_unmap releases it. */
struct shm_object {
    int fd; /* -1 when none */
    void *base;
    size_t size;
};

/*
 * Creates name of size bytes (zero-filled) and maps it. With lock_len > 0,
 * an OFD write lock over [lock_off, lock_off + lock_len) is taken before
 * the object is sized and is still held on return (shm_object_unlock once
 * published). -EEXIST is returned without a message, so the caller may open
 * the existing one; on any other failure nothing is left behind.
 */
int shm_object_create(const char *name, const char *what, size_t size, uint64_t lock_off,
                      uint64_t lock_len, struct shm_object *out, char *err, size_t err_len);

/*
 * Opens the existing object name, checks its owner and mode, and maps all
 * of it. Returns -ENOENT when absent, -EPERM when it is not ours alone,
 * -ENODATA when it is smaller than min_size (being sized, or a creator
 * died), another negative errno otherwise.
 */
int shm_object_open(const char *name, const char *what, size_t min_size, struct shm_object *out,
                    char *err, size_t err_len);

/* 0 when fd (of name) belongs to the effective uid with no group or other bits, else -EPERM
 * (or fstat's error) with err. */
int shm_object_check_owner(int fd, const char *name, const char *what, char *err, size_t err_len);

/* OFD locks over a byte range: take a write lock without waiting (0, or
 * -EBUSY when another open file description holds it), release it, or ask
 * whether another holds it (true when it cannot tell: a false "nobody" could
 * make a live creator's object look abandoned). */
int shm_object_lock(int fd, uint64_t off, uint64_t len);
int shm_object_unlock(int fd, uint64_t off, uint64_t len);
bool shm_object_locked_by_other(int fd, uint64_t off, uint64_t len);

/* "<shm_name><suffix>" into out (a companion object of the registry
 * segment): 0, or -ENAMETOOLONG when it would not fit out or NAME_MAX. */
int shm_object_suffixed_name(const char *shm_name, const char *suffix, char *out, size_t len);

/* Checks a self-describing header against the object's size: 0, or a
 * negative errno with err. hdr points at file_size readable bytes (at
 * least the header's). */
typedef int (*shm_object_validate_fn)(const void *hdr, uint64_t file_size, char *err,
                                      size_t err_len);

/*
 * Maps the open object fd (of name) whose header says how big it is: its
 * owner and mode checked, -EAGAIN while it is smaller than header_bytes (not
 * sized yet), the header mapped alone and validated against the object's
 * size before that size is believed, then the whole object mapped
 * read-write and validated again (the numbers indexed with must be the ones
 * validated, even if the object was replaced in between). 0 with *base and
 * *size (munmap them), or a negative errno with err.
 */
int shm_object_map_checked(int fd, const char *name, const char *what, size_t header_bytes,
                           shm_object_validate_fn validate, void **base, size_t *size, char *err,
                           size_t err_len);

/* shm_object_map_checked on the existing object name (shm_open'ed and
 * closed again: the mapping keeps the object). -ENOENT when absent. */
int shm_object_attach_checked(const char *name, const char *what, size_t header_bytes,
                              shm_object_validate_fn validate, void **base, size_t *size, char *err,
                              size_t err_len);

/*
 * A rebuildable object (the prefix index, the KV holder index): what it
 * holds can be lost without harm, so an existing one that is unusable (a
 * creator that died half-way, another layout version) or of another size
 * is unlinked and made anew instead of refused. One owner (the control
 * plane) opens it this way; everyone else attaches.
 */
struct shm_rebuildable {
    const char *what;    /* for messages: "prefix index segment" */
    size_t size;         /* the size this owner wants */
    size_t header_bytes; /* the self-describing header, as map_checked reads it */
    shm_object_validate_fn validate;
    /* Writes the header of a new, zero-filled object of `size` bytes. */
    void (*init)(void *base, size_t size, void *arg);
    /* Optional: called on every existing valid object mapped (kept or about
     * to be replaced) before the decision, e.g. to clear facts no one can
     * withdraw any more; others may still have it mapped. */
    void (*adopt)(void *base, size_t size, void *arg);
    void *arg;
};

enum shm_rebuildable_outcome {
    SHM_REBUILDABLE_UNSET = 0,
    SHM_REBUILDABLE_CREATED,
    SHM_REBUILDABLE_REATTACHED, /* an existing one of the wanted size, kept */
    SHM_REBUILDABLE_REPLACED,   /* err says what was replaced and why */
};

/*
 * Creates name, re-attaches the existing one when it is valid and of the
 * wanted size, or replaces it (bounded: a few rounds, each creating,
 * keeping, failing for good or removing one unusable object). An object
 * that is not ours alone is refused (-EPERM), never replaced. 0 with *base
 * and *size mapped read-write (munmap them) and *outcome, or a negative
 * errno with err.
 */
int shm_object_open_rebuildable(const char *name, const struct shm_rebuildable *r, void **base,
                                size_t *size, enum shm_rebuildable_outcome *outcome, char *err,
                                size_t err_len);

/* Unmaps and closes; safe on a zeroed or already released object. */
void shm_object_unmap(struct shm_object *o);

#endif
