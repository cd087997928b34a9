/*
 * The adapter-name Bloom filter (see adapter_set.h). The three bit indices
 * are three 7-bit fields of one XXH3-64 of the name: independent enough for
 * a 128-bit filter, and one hash per request is all the data plane pays.
 */
#include "shm/adapter_set.h"

#include <string.h>

#include <xxhash.h>

#define SHM_ADAPTER_SET_K 3u

uint64_t shm_adapter_hash(const char *name, size_t len)
{
    return XXH3_64bits(name, len);
}

static unsigned shm_adapter_bit(uint64_t h, unsigned i)
{
    return (unsigned)(h >> (7u * i)) & 127u;
}

void shm_adapter_set_add(struct shm_adapter_set *s, uint64_t h)
{
    for (unsigned i = 0; i < SHM_ADAPTER_SET_K; i++) {
        unsigned b = shm_adapter_bit(h, i);
        s->bits[b >> 6] |= 1ull << (b & 63u);
    }
}

bool shm_adapter_set_may_have(const struct shm_adapter_set *s, uint64_t h)
{
    for (unsigned i = 0; i < SHM_ADAPTER_SET_K; i++) {
        unsigned b = shm_adapter_bit(h, i);
        if (!(s->bits[b >> 6] & (1ull << (b & 63u))))
            return false;
    }
    return true;
}

size_t shm_adapter_set_add_list(struct shm_adapter_set *s, const char *list, size_t len)
{
    size_t added = 0;
    size_t at = 0;
    while (at < len) {
        const char *comma = memchr(list + at, ',', len - at);
        size_t end = comma != NULL ? (size_t)(comma - list) : len;
        size_t a = at, b = end;
        while (a < b && list[a] == ' ')
            a++;
        while (b > a && list[b - 1] == ' ')
            b--;
        if (b > a) {
            shm_adapter_set_add(s, shm_adapter_hash(list + a, b - a));
            added++;
        }
        at = end + 1;
    }
    return added;
}

void shm_adapter_set_union(struct shm_adapter_set *s, const struct shm_adapter_set *other)
{
    for (unsigned i = 0; i < SHM_ADAPTER_SET_WORDS; i++)
        s->bits[i] |= other->bits[i];
}

bool shm_adapter_set_is_empty(const struct shm_adapter_set *s)
{
    for (unsigned i = 0; i < SHM_ADAPTER_SET_WORDS; i++)
        if (s->bits[i] != 0)
            return false;
    return true;
}
