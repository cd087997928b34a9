/*
 * Rendezvous ranking (see rendezvous.h). A walk scores every candidate once
 * (n hashes of a short key), cheaper than sorting them and the same answer:
 * the first acceptable worker of the ranking is the acceptable one with
 * the highest score.
 */
#include "dataplane/policy/rendezvous.h"

#include <string.h>

#include <xxhash.h>

uint64_t rdv_worker_seed(const char *id)
{
    return XXH3_64bits(id, strlen(id));
}

uint64_t rdv_score(const void *key, size_t len, uint64_t worker_seed)
{
    return XXH3_64bits_withSeed(key, len, worker_seed);
}

long rdv_first(const void *key, size_t len, size_t n, rdv_candidate_fn accept, const void *ctx)
{
    long best = -1;
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t seed = 0;
        if (!accept(ctx, i, &seed))
            continue;
        uint64_t score = rdv_score(key, len, seed);
        if (best < 0 || score > best_score) {
            best = (long)i;
            best_score = score;
        }
    }
    return best;
}

bool rdv_within_bound(uint64_t load, uint64_t total, size_t n, double factor)
{
    if (n == 0)
        return false;
    return (double)load <= factor * ((double)total / (double)n) + 1.0;
}
