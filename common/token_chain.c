/*
 * The router's chained hash over token blocks (see token_chain.h). XXH3
 * with the previous block's hash as its seed both hashes a block and chains
 * it; the tokens are hashed as little-endian 32-bit values so that every
 * process of the node (and every build) gets the same keys for the same
 * ids.
 */
#include "common/token_chain.h"

#include <string.h>

/* For a stack XXH3_state_t: no allocation per block. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* Domain separation from the text chain of cache_aware's index, which seeds
 * with XXH3 of the model name alone: a token chain never collides with a
 * text chain by construction of its seed. */
#define TKC_DOMAIN UINT64_C(0x6b762d746f6b656e) /* "kv-token" */

/* Keeps a salt's hash apart from any model's seed. */
#define TKC_SALT_DOMAIN UINT64_C(0x63616368652d736c) /* "cache-sl" */

uint64_t tkc_seed(const char *model)
{
    return XXH3_64bits_withSeed(model, strlen(model), TKC_DOMAIN);
}

uint64_t tkc_salt_hash(const char *salt, size_t len)
{
    return XXH3_64bits_withSeed(salt, len, TKC_SALT_DOMAIN);
}

uint64_t tkc_salt_seed(uint64_t seed, uint64_t salt_hash)
{
    unsigned char le[8];
    for (size_t i = 0; i < sizeof le; i++)
        le[i] = (unsigned char)(salt_hash >> (8 * i));
    return XXH3_64bits_withSeed(le, sizeof le, seed);
}

uint64_t tkc_next(uint64_t prev, const uint32_t *tokens, size_t n)
{
    /* Little-endian on every host: copy through a bounded stack buffer in
     * chunks rather than allocate, since blocks are small (vLLM's default is
     * 16 tokens) but not bounded by us. */
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, prev);
    unsigned char le[256];
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        for (; i < n && k + 4 <= sizeof le; i++, k += 4) {
            uint32_t t = tokens[i];
            le[k] = (unsigned char)t;
            le[k + 1] = (unsigned char)(t >> 8);
            le[k + 2] = (unsigned char)(t >> 16);
            le[k + 3] = (unsigned char)(t >> 24);
        }
        XXH3_64bits_update(&st, le, k);
    }
    return XXH3_64bits_digest(&st);
}

size_t tkc_chain(uint64_t seed, const uint32_t *tokens, size_t n_tokens, size_t block_size,
                 uint64_t *out, size_t max_out)
{
    if (block_size == 0)
        return 0;
    size_t blocks = n_tokens / block_size;
    if (blocks > max_out)
        blocks = max_out;
    uint64_t h = seed;
    for (size_t b = 0; b < blocks; b++) {
        h = tkc_next(h, tokens + b * block_size, block_size);
        out[b] = h;
    }
    return blocks;
}
