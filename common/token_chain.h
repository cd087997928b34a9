/*
 * The router's own chained hash over blocks of token ids: the key under
 * which precise_cache_aware's index records which workers hold a block of
 * KV cache, and under which a request's prompt is looked up.
 *
 * vLLM's own block hashes cannot be recomputed outside the worker (their
 * seed is random per process unless PYTHONHASHSEED is set, and the hash
 * function is a worker flag), so the control plane maps each hash a worker
 * reports to this chain, using the token ids and the parent hash that the
 * worker's BlockStored events carry, and the data plane hashes a request's
 * token ids (from a tokenizer) the same way. Both sides must agree on the
 * block size (the worker's --block-size) and on the seed of a chain.
 *
 * A chain is seeded per model (the model or LoRA adapter name the tokens
 * belong to), so different models never share keys; block i's hash covers
 * blocks 0..i, so equal hashes mean equal prefixes, as in vLLM.
 *
 * A request's cache_salt (vLLM mixes it into the first block's hash as an
 * extra key, so requests of different salts never share a block) is mixed
 * into the seed instead: tkc_salt_seed(seed, tkc_salt_hash(salt)). Every
 * block of the chain then differs from the unsalted one's, as every block
 * of vLLM's does (each hash covers the first). cache_aware's text chain is
 * salted the same way, so a salt has one definition for both indexes.
 */
#ifndef SY_COMMON_TOKEN_CHAIN_H
#define SY_COMMON_TOKEN_CHAIN_H

#include <stddef.h>
#include <stdint.h>

/* The seed of every chain for `model` (NUL-terminated; "" is allowed). */
uint64_t tkc_seed(const char *model);

/* The hash of a cache_salt's bytes salt[0..len) (as the worker receives
 * them, JSON escapes decoded). */
uint64_t tkc_salt_hash(const char *salt, size_t len);

/* The seed of a salted chain: `seed` (of the unsalted chain) and the
 * salt's tkc_salt_hash. Never equal to `seed` but by a 64-bit collision. */
uint64_t tkc_salt_seed(uint64_t seed, uint64_t salt_hash);

/* The hash of the block `tokens[0..n)` that follows the block hashed
 * `prev` (or starts the chain when prev is tkc_seed's value). n is the
 * block size; callers hash full blocks only, as vLLM does. */
uint64_t tkc_next(uint64_t prev, const uint32_t *tokens, size_t n);

/* Hashes the n_tokens / block_size full blocks of `tokens` into
 * out[0..), chained from `seed`; returns how many it wrote (at most
 * max_out). A partial last block is not hashed. */
size_t tkc_chain(uint64_t seed, const uint32_t *tokens, size_t n_tokens, size_t block_size,
                 uint64_t *out, size_t max_out);

#endif
