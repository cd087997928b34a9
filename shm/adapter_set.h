/*
 * A set of LoRA adapter names in 16 bytes: a 128-bit Bloom filter, so a
 * worker's running adapters fit in its report (shm/load_report.h) and the
 * data plane can ask "is adapter X running there?" per request with one
 * hash of X and three bit tests, no string compares and no second record
 * to keep consistent.
 *
 * Why a Bloom filter and not the adapter's index in the slot's alias list:
 * the alias list belongs to the registry record (another seqlock, written
 * on another schedule, reordered when adapters are loaded or unloaded), so
 * indices published with a report could name the wrong adapter once the
 * list changed; names that did not fit the alias field would have no index
 * at all. A hash of the name means the same thing to every process and
 * every version of the list.
 *
 * The price is honest: a lookup can answer "maybe" for a name that is not
 * in the set (a false positive), never "no" for one that is. Each name sets
 * 3 of the 128 bits (from one XXH3-64 of the name), so the chance that a
 * name not in the set reads as present is about (1 - e^(-3n/128))^3 for n
 * names in it: 0.07% at 4 running adapters, 0.5% at 8, 3% at 16, 15% at 32.
 * vLLM runs at most max_loras adapters per batch (1 by default, single
 * digits in practice). A false positive only makes routing prefer a worker
 * that does not run the adapter; it never sends a request to a worker that
 * does not have it loaded (that filter is the registry's exact names).
 *
 * Plain values and pure functions; any thread.
 */
#ifndef SY_SHM_ADAPTER_SET_H
#define SY_SHM_ADAPTER_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_ADAPTER_SET_WORDS 2u

/* Caller storage; all zero = the empty set. */
struct shm_adapter_set {
    uint64_t bits[SHM_ADAPTER_SET_WORDS];
};

/* The hash a lookup needs: compute it once per request, test many sets. */
uint64_t shm_adapter_hash(const char *name, size_t len);

/* Adds the name whose hash is h. */
void shm_adapter_set_add(struct shm_adapter_set *s, uint64_t h);

/* True when the name whose hash is h may be in s (false: surely not). */
bool shm_adapter_set_may_have(const struct shm_adapter_set *s, uint64_t h);

/* Adds every name of a comma-separated list (vLLM's label form); blanks
 * around a name are trimmed, empty items skipped. Returns how many names
 * were added. */
size_t shm_adapter_set_add_list(struct shm_adapter_set *s, const char *list, size_t len);

/* s |= other. */
void shm_adapter_set_union(struct shm_adapter_set *s, const struct shm_adapter_set *other);

bool shm_adapter_set_is_empty(const struct shm_adapter_set *s);

#endif
