/*
 * Unit tests of the router's token chain (common/token_chain.c): the chain
 * is the fold of tkc_next over full blocks, so a block's hash depends on
 * every block before it; a partial last block is not hashed; different
 * models (seeds) never share keys for the same tokens; token ids of more
 * than one stack buffer's worth hash as one block (the chunked copy is
 * invisible); and max_out bounds what is written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/token_chain.h"

static void test_chain_is_fold_of_next(void **state)
{
    (void)state;
    uint32_t t[48];
    for (uint32_t i = 0; i < 48; i++)
        t[i] = 1000 + i;
    uint64_t seed = tkc_seed("m");
    uint64_t out[8];
    assert_int_equal(tkc_chain(seed, t, 48, 16, out, 8), 3);
    uint64_t h = seed;
    for (int b = 0; b < 3; b++) {
        h = tkc_next(h, t + 16 * b, 16);
        assert_true(out[b] == h);
    }
    /* A change in block 0 changes every later hash. */
    uint64_t out2[8];
    t[3]++;
    assert_int_equal(tkc_chain(seed, t, 48, 16, out2, 8), 3);
    for (int b = 0; b < 3; b++)
        assert_true(out2[b] != out[b]);
    /* A change in block 2 leaves blocks 0 and 1 alone. */
    t[3]--;
    t[40]++;
    assert_int_equal(tkc_chain(seed, t, 48, 16, out2, 8), 3);
    assert_true(out2[0] == out[0] && out2[1] == out[1] && out2[2] != out[2]);
}

static void test_partial_block_and_bounds(void **state)
{
    (void)state;
    uint32_t t[40] = {0};
    uint64_t out[8];
    assert_int_equal(tkc_chain(1, t, 40, 16, out, 8), 2);
    assert_int_equal(tkc_chain(1, t, 15, 16, out, 8), 0);
    assert_int_equal(tkc_chain(1, t, 40, 16, out, 1), 1);
    assert_int_equal(tkc_chain(1, t, 40, 0, out, 8), 0);
}

static void test_models_apart(void **state)
{
    (void)state;
    uint32_t t[16] = {7, 7, 7};
    assert_true(tkc_seed("a") != tkc_seed("b"));
    assert_true(tkc_next(tkc_seed("a"), t, 16) != tkc_next(tkc_seed("b"), t, 16));
}

static void test_long_block_chunking_invisible(void **state)
{
    (void)state;
    /* 200 ids = 800 bytes: more than one 256-byte chunk. Hash the same
     * little-endian bytes in one go and compare through a second block
     * size split: equal tokens, equal hash; one id changed, different. */
    uint32_t t[200];
    for (uint32_t i = 0; i < 200; i++)
        t[i] = i * 2654435761u;
    uint64_t a = tkc_next(5, t, 200);
    uint64_t b = tkc_next(5, t, 200);
    assert_true(a == b);
    t[199] ^= 1;
    assert_true(tkc_next(5, t, 200) != a);
    t[199] ^= 1;
    t[64] ^= 0x80000000u; /* the first id of the second chunk, its high byte */
    assert_true(tkc_next(5, t, 200) != a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_is_fold_of_next),
        cmocka_unit_test(test_partial_block_and_bounds),
        cmocka_unit_test(test_models_apart),
        cmocka_unit_test(test_long_block_chunking_invisible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
