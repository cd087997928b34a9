/*
 * Unit tests of the per-thread block hash memo (dataplane/policy/
 * hash_memo.c): whatever it remembers, hm_hash_blocks returns exactly what
 * pix_hash_blocks returns, over thousands of prompts that share heads,
 * differ by one byte anywhere (the last byte of a block included), change
 * model, length and cap, and outnumber the memo's entries (evictions);
 * and in other threads too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/policy/hash_memo.h"
#include "shm/prefix_index.h"

#define MAX_BLOCKS (HM_BLOCKS + 40u)
#define FAMILIES   (HM_ENTRIES + 16u) /* more heads than entries: evictions */

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545f4914f6cdd1dull;
}

static void check_one(uint64_t seed, const char *text, size_t len, size_t cap)
{
    static _Thread_local uint64_t want[MAX_BLOCKS], got[MAX_BLOCKS];
    size_t nw = pix_hash_blocks(seed, text, len, want, cap);
    size_t ng = hm_hash_blocks(seed, text, len, got, cap);
    assert_int_equal(nw, ng);
    for (size_t i = 0; i < nw; i++)
        if (want[i] != got[i])
            fail_msg("block %zu of %zu differs (len %zu, cap %zu)", i, nw, len, cap);
}

/* Prompts of FAMILIES families (a family: the same head), each a copy of
 * its family's text with one byte changed somewhere, cut at some length. */
static void *run_prompts(void *arg)
{
    rnd_state = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    size_t max_len = MAX_BLOCKS * PIX_BLOCK_BYTES + 100;
    char *family = malloc(FAMILIES * max_len);
    char *text = malloc(max_len);
    assert_non_null(family);
    assert_non_null(text);
    for (size_t i = 0; i < FAMILIES * max_len; i++)
        family[i] = (char)('a' + rnd() % 4); /* few letters: long common runs */
    uint64_t seeds[2] = {pix_model_seed("model-a"), pix_model_seed("model-b")};
    for (int round = 0; round < 4000; round++) {
        size_t f = (size_t)(rnd() % FAMILIES);
        size_t len = (size_t)(rnd() % max_len);
        memcpy(text, family + f * max_len, len);
        switch (rnd() % 4) {
        case 0: /* one byte anywhere */
            if (len > 0)
                text[rnd() % len] ^= 1;
            break;
        case 1: /* the last byte of a block */
            if (len >= PIX_BLOCK_BYTES)
                text[(rnd() % (len / PIX_BLOCK_BYTES)) * PIX_BLOCK_BYTES + PIX_BLOCK_BYTES - 1] ^=
                    1;
            break;
        case 2: /* the family's text again: a repeat */
            break;
        default: /* and change the family, so its next prompts differ there */
            if (len > 0) {
                size_t at = (size_t)(rnd() % len);
                family[f * max_len + at] ^= 2;
                text[at] ^= 2;
            }
            break;
        }
        size_t cap = rnd() % 8 == 0 ? (size_t)(rnd() % MAX_BLOCKS) : MAX_BLOCKS;
        check_one(seeds[rnd() % 8 == 0], text, len, cap);
    }
    free(text);
    free(family);
    return NULL;
}

static void test_same_hashes_as_without_memo(void **state)
{
    (void)state;
    run_prompts((void *)1);
}

static void test_same_hashes_in_other_threads(void **state)
{
    (void)state;
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, run_prompts, (void *)(i + 2)), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

/* A remembered prompt changed in its first block only: the first block's
 * bytes decide, not its position in the memo. */
static void test_first_block_change(void **state)
{
    (void)state;
    char text[HM_BLOCKS * PIX_BLOCK_BYTES];
    memset(text, 'x', sizeof(text));
    uint64_t seed = pix_model_seed("m");
    check_one(seed, text, sizeof(text), MAX_BLOCKS);
    text[3] = 'y';
    check_one(seed, text, sizeof(text), MAX_BLOCKS);
    text[3] = 'x';
    text[PIX_BLOCK_BYTES] = 'y';
    check_one(seed, text, sizeof(text), MAX_BLOCKS);
    check_one(seed, text, sizeof(text) - 1, MAX_BLOCKS);
    check_one(seed, text, HM_MIN_BLOCKS * PIX_BLOCK_BYTES - 1, MAX_BLOCKS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_hashes_as_without_memo),
        cmocka_unit_test(test_same_hashes_in_other_threads),
        cmocka_unit_test(test_first_block_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
