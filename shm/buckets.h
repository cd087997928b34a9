/*
 * Rate-limit buckets of the node: a small shared-memory object of its own
 * (`<shm.name>-ratelimit`), apart from the registry segment so that its
 * layout can change without touching the control plane's, and so that
 * the data planes, which alone use it, can create it. Every event loop of
 * every data plane on the node takes from the same buckets, and a hot
 * restart finds them as they were: the object outlives any process.
 *
 * A bucket is a GCRA ("theoretical arrival time"): one 64-bit word per
 * limit, the monotonic time in microseconds at which the bucket would be
 * full again. Taking cost c from a bucket of emission interval T and
 * capacity B*T moves the word to max(word, now) + c*T if that is at most
 * now + B*T, with one compare-and-swap: no lock, exact across processes
 * (CLOCK_MONOTONIC is one clock for the whole host). Slots are keyed by a
 * 64-bit hash of the tenant name and claimed with a CAS; open addressing,
 * never freed (SHM_BUCKET_SLOTS tenants at most per node).
 *
 * Creation is safe against other users (docs/security.md): O_CREAT|O_EXCL,
 * mode 0600 set with fchmod, and an existing object is used only when it
 * is ours and closed to group and other. The creator holds an OFD lock on
 * the header while it sizes and fills it and publishes the magic last; an
 * object left unpublished with nobody holding that lock is a dead
 * creator's, and is replaced. Attaching validates magic, version and every
 * size against fstat before a slot is read.
 *
 * The same object carries the admission queues' depth per model, one
 * counter per (model, lease), so the control plane's GET /status can show
 * how many requests wait on the node without asking each data plane: it
 * sums the columns of live leases. A data plane zeroes its lease's column
 * when it starts (a crashed predecessor's queue died with it).
 *
 * Threading: any thread; every access to a slot is atomic.
 */
#ifndef SY_SHM_BUCKETS_H
#define SY_SHM_BUCKETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "shm/buckets_types.h"

struct shm_bucket_header;
struct shm_bucket_slot;
struct shm_bucket_model;

/* The object's name for a segment name ("/switchyard" -> "/switchyard-ratelimit").
 * 0 or -ENAMETOOLONG. */
int shm_buckets_name(const char *segment_name, char *out, size_t cap);

/* Creates or attaches the object `name`. 0, or a negative errno with err:
 * -EPERM (not ours), -EPROTO (another layout), -ETIMEDOUT (its creator is
 * still at work after a second). */
int shm_buckets_open(struct shm_buckets *b, const char *name, char *err, size_t err_len);

/* Attaches an existing object only (the control plane, which never creates
 * it). 0, -ENOENT when no data plane created it, or as shm_buckets_open. */
int shm_buckets_attach(struct shm_buckets *b, const char *name, char *err, size_t err_len);

void shm_buckets_close(struct shm_buckets *b);

/* Removes the name (tests, tools). */
int shm_buckets_unlink(const char *name);

/*
 * Takes cost units (clamped to the capacity, so a request larger than the
 * whole bucket passes when the bucket is full) from the tenant's bucket of
 * kind at now_us. Returns 0 when taken, else the microseconds until it
 * could be (> 0). A full slot table takes nothing and returns 0 (fail open;
 * counted by the caller through shm_buckets_slot).
 */
uint64_t shm_buckets_take(struct shm_buckets *b, uint64_t tenant_hash, enum shm_bucket_kind kind,
                          const struct shm_bucket_limit *lim, uint64_t cost, uint64_t now_us);

/* Gives back what a take of cost took (the other limit refused the request). */
void shm_buckets_refund(struct shm_buckets *b, uint64_t tenant_hash, enum shm_bucket_kind kind,
                        const struct shm_bucket_limit *lim, uint64_t cost);

/* Units the bucket holds now (capacity when the tenant has no slot yet). */
uint64_t shm_buckets_available(const struct shm_buckets *b, uint64_t tenant_hash,
                               enum shm_bucket_kind kind, const struct shm_bucket_limit *lim,
                               uint64_t now_us);

/* The hash buckets are keyed by (never 0). */
uint64_t shm_buckets_key(const char *tenant_name);

/* The model's depth row, claimed when absent: its index, or -ENOSPC. */
int shm_buckets_model(struct shm_buckets *b, const char *model);

/* Adds delta to (row, lease)'s queue depth. */
void shm_buckets_depth_add(struct shm_buckets *b, int row, uint32_t lease, int delta);

/* Zeroes lease's column (a data plane starting on that lease). */
void shm_buckets_lease_reset(struct shm_buckets *b, uint32_t lease);

/* Calls fn for each model with its depth summed over the leases in
 * live_mask (bit i = lease i). */
void shm_buckets_depths(const struct shm_buckets *b, uint64_t live_mask,
                        void (*fn)(void *arg, const char *model, uint64_t depth), void *arg);

#endif
