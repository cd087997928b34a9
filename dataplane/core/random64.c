/*
 * Per-thread blocks of kernel randomness (see random64.h).
 */
#include "dataplane/core/random64.h"

#include <stddef.h>

#include "common/proc.h"
#include "common/rng.h"

#define DP_RANDOM_BLOCK 64u /* values per getrandom call */

uint64_t dp_random64(void)
{
    static _Thread_local uint64_t block[DP_RANDOM_BLOCK];
    static _Thread_local size_t left;
    static _Thread_local uint64_t fallback;
    if (left == 0) {
        if (rng_fill_random(block, sizeof(block)) != 0) {
            /* getrandom cannot fail on the kernels we run on; should it,
             * ids stay unique (not unguessable) rather than the request fail. */
            return rng_mix64(proc_monotonic_ns() ^ ++fallback);
        }
        left = DP_RANDOM_BLOCK;
    }
    uint64_t v = block[--left];
    block[left] = 0;
    return v;
}
