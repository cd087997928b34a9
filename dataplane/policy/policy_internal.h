/*
 * The inside of struct pol_shared (dataplane/core/policy.h): what the
 * policies keep per data plane rather than per loop. policy.c creates and
 * destroys it; cache_aware (its prefix index, made on first use when the
 * node has none) and precise_cache_aware (the KV holder index, and its
 * speculative entries shared per TTL) read and change it under its lock.
 * Only the policies of this folder include this header.
 */
#ifndef SY_DATAPLANE_POLICY_POLICY_INTERNAL_H
#define SY_DATAPLANE_POLICY_POLICY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dataplane/core/policy.h"

struct pca_spec;

/* Speculative entries shared by the loops: one per TTL in use (every
 * policy of a config normally has the same); more TTLs get private ones. */
#define POL_SHARED_SPECS 4u

/* Owned by the data plane's main thread (pol_shared_create/destroy);
 * touched by every loop thread under lock. */
struct pol_shared {
    pthread_mutex_t lock; /* guards prefix, prefix_owned and specs */
    /* cache_aware's: the node's (borrowed), else a private one made on
     * first use (prefix_owned: freed with this), NULL until then. */
    struct pix_index *prefix;
    bool prefix_owned;
    /* precise_cache_aware's: the node's, borrowed, fixed at creation;
     * NULL routes by approximate match only. */
    struct kvh_index *kv_holders;
    /* refs == 0: free entry. Every entry is free again once the last
     * policy holding it is destroyed (pca_spec_put). */
    struct {
        struct pca_spec *spec;
        uint64_t ttl_ms;
        unsigned refs;
    } specs[POL_SHARED_SPECS];
};

#endif
