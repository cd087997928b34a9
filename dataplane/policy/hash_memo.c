/*
 * Per-thread memo of prompt block hashes (see hash_memo.h). Entries are
 * found by their first block (its hash, then its bytes): a prompt updates
 * the entry of its family (the latest prompt of a family is the likeliest
 * to share the most with the next) or replaces the least recently used.
 */
#include "dataplane/policy/hash_memo.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shm/prefix_index.h"

#define HM_CHUNK_BLOCKS 16u /* blocks compared by one memcmp before narrowing down */

struct hm_entry {
    uint64_t seed;
    size_t n; /* blocks held */
    uint64_t hashes[HM_BLOCKS];
    char text[HM_BLOCKS * PIX_BLOCK_BYTES];
};

/* first[i] and used[i] describe e[i] (first: its hashes[0]; used: when it
 * was last looked up, 0 = empty), kept apart so a lookup scans 1 KiB. */
struct hm_table {
    uint64_t first[HM_ENTRIES];
    uint64_t used[HM_ENTRIES];
    uint64_t clock;
    struct hm_entry *e[HM_ENTRIES];
};

static _Thread_local struct hm_table *hm_tls;
static pthread_key_t hm_key;
static pthread_once_t hm_once = PTHREAD_ONCE_INIT;
static bool hm_key_ok;

static void hm_table_free(void *p)
{
    struct hm_table *t = p;
    for (size_t i = 0; i < HM_ENTRIES; i++)
        free(t->e[i]);
    free(t);
}

static void hm_key_init(void)
{
    hm_key_ok = pthread_key_create(&hm_key, hm_table_free) == 0;
}

/* This thread's table; NULL without memory (then nothing is remembered). */
static struct hm_table *hm_table(void)
{
    if (hm_tls != NULL)
        return hm_tls;
    pthread_once(&hm_once, hm_key_init);
    if (!hm_key_ok)
        return NULL;
    struct hm_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    if (pthread_setspecific(hm_key, t) != 0) {
        free(t);
        return NULL;
    }
    hm_tls = t;
    return t;
}

/* How many leading blocks of a and b (at least 1, which the caller
 * checked, at most lim) are equal. */
static size_t hm_common_blocks(const char *a, const char *b, size_t lim)
{
    size_t i = 1;
    while (i < lim) {
        size_t k = lim - i < HM_CHUNK_BLOCKS ? lim - i : HM_CHUNK_BLOCKS;
        size_t off = i * PIX_BLOCK_BYTES;
        if (memcmp(a + off, b + off, k * PIX_BLOCK_BYTES) == 0) {
            i += k;
            continue;
        }
        /* A difference within these k blocks: find its block. */
        while (memcmp(a + i * PIX_BLOCK_BYTES, b + i * PIX_BLOCK_BYTES, PIX_BLOCK_BYTES) == 0)
            i++;
        return i;
    }
    return lim;
}

/* The entry remembering a prompt that starts like this one, or the one to
 * replace with it (an empty one, else the least recently used); *hit says
 * which. */
static size_t hm_find(struct hm_table *t, uint64_t seed, uint64_t first, const char *text,
                      bool *hit)
{
    size_t victim = 0;
    for (size_t i = 0; i < HM_ENTRIES; i++) {
        if (t->used[i] != 0 && t->first[i] == first && t->e[i]->seed == seed &&
            memcmp(t->e[i]->text, text, PIX_BLOCK_BYTES) == 0) {
            *hit = true;
            return i;
        }
        if (t->used[i] < t->used[victim])
            victim = i;
    }
    *hit = false;
    return victim;
}

size_t hm_hash_blocks(uint64_t seed, const char *text, size_t len, uint64_t *out, size_t cap)
{
    size_t n = len / PIX_BLOCK_BYTES;
    if (n > cap)
        n = cap;
    if (n < HM_MIN_BLOCKS)
        return pix_hash_blocks(seed, text, len, out, cap);
    (void)pix_hash_blocks(seed, text, PIX_BLOCK_BYTES, out, 1);
    struct hm_table *t = hm_table();
    if (t == NULL)
        return pix_hash_blocks(seed, text, len, out, cap);
    bool hit = false;
    size_t i = hm_find(t, seed, out[0], text, &hit);
    struct hm_entry *e = t->e[i];
    size_t known = 1; /* out[0..known) are final */
    if (hit) {
        known = hm_common_blocks(e->text, text, n < e->n ? n : e->n);
        memcpy(out + 1, e->hashes + 1, (known - 1) * sizeof(out[0]));
    }
    /* The chain goes on from the last known hash, as pix_hash_blocks's would. */
    (void)pix_hash_blocks(out[known - 1], text + known * PIX_BLOCK_BYTES,
                          (n - known) * PIX_BLOCK_BYTES, out + known, n - known);

    /* Remember this prompt; what it shares with a hit entry is there already. */
    size_t from = hit ? known : 0;
    if (e == NULL && (e = malloc(sizeof(*e))) == NULL)
        return n;
    t->e[i] = e;
    t->first[i] = out[0];
    t->used[i] = ++t->clock;
    e->seed = seed;
    size_t keep = n < HM_BLOCKS ? n : HM_BLOCKS;
    if (from < keep) {
        memcpy(e->hashes + from, out + from, (keep - from) * sizeof(out[0]));
        memcpy(e->text + from * PIX_BLOCK_BYTES, text + from * PIX_BLOCK_BYTES,
               (keep - from) * PIX_BLOCK_BYTES);
    }
    e->n = keep;
    return n;
}
