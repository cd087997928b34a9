/* The types of buckets.h: types only, including only types headers. */
#ifndef SY_SHM_BUCKETS_TYPES_H
#define SY_SHM_BUCKETS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_BUCKET_SLOTS 4096u

#define SHM_BUCKET_MODELS 256u /* models whose queue depth is published */

#define SHM_BUCKET_LEASES 64u /* columns per model: shm.max_dataplanes at most */

#define SHM_BUCKET_NAME 128u /* a model name, NUL included */

#define SHM_BUCKET_VERSION 2u

/* Caller storage; shm_buckets_open / shm_buckets_close. */
struct shm_buckets {
    int fd;
    void *base;
    size_t size;
    struct shm_bucket_header *hdr;
    struct shm_bucket_slot *slots;
    struct shm_bucket_model *models;
};

enum shm_bucket_kind {
    SHM_BUCKET_REQUESTS = 0, /* requests_per_s with burst */
    SHM_BUCKET_TOKENS = 1,   /* tokens_per_min */
    SHM_BUCKET_KINDS = 2,
};

/* A limit: interval_us per unit, capacity in units (> 0). */
struct shm_bucket_limit {
    uint64_t interval_us;
    uint64_t capacity;
};

#endif
