/*
 * Block hashes of recent prompts, kept per thread so that a prompt sharing
 * its head with one seen shortly before (a system prompt, tool
 * definitions, an earlier turn of the conversation) does not hash that
 * head again. Hashing is most of a cache_aware decision: 3.2 of its 4.5
 * µs for an 8K-token prompt (the chain of 136 XXH3 calls cannot be run in
 * parallel: each block's seed is the previous block's hash).
 *
 * Exact, not approximate: a block's chained hash depends only on the
 * model's seed and the bytes of its block and of every block before it, so
 * a hash is reused only for a block whose bytes, and all before it, equal
 * the remembered prompt's (memcmp, about a sixth of hashing's cost); the
 * rest is hashed as pix_hash_blocks does. The result is always what
 * pix_hash_blocks returns for the same arguments.
 *
 * Memory: HM_ENTRIES prompts per thread, each up to HM_BLOCKS blocks (about
 * 38 KiB), allocated when a prompt of at least HM_MIN_BLOCKS blocks first
 * needs one: at most about 2.5 MiB per thread that routes long prompts,
 * nothing for one that does not. Freed when the thread exits.
 *
 * Threading: per thread, no locks.
 */
#ifndef SY_DATAPLANE_POLICY_HASH_MEMO_H
#define SY_DATAPLANE_POLICY_HASH_MEMO_H

#include <stddef.h>
#include <stdint.h>

#define HM_ENTRIES    64u  /* prompts remembered per thread (by their first block) */
#define HM_BLOCKS     160u /* blocks remembered per prompt (about 9,600 tokens) */
#define HM_MIN_BLOCKS 4u   /* shorter prompts are just hashed */

/* pix_hash_blocks(seed, text, len, out, cap), reusing what this thread
 * remembers (see above), and remembering this prompt. */
size_t hm_hash_blocks(uint64_t seed, const char *text, size_t len, uint64_t *out, size_t cap);

#endif
