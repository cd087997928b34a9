/*
 * Unit tests of the rendezvous ranking shared by consistent_hash and
 * cache_aware (dataplane/policy/rendezvous.c): the walk's answer is the
 * accepted candidate with the highest score whatever the candidates' order,
 * and the bounded-load limit is factor × mean + 1.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "dataplane/policy/rendezvous.h"

struct walk {
    const uint64_t *seeds;
    uint64_t refused; /* bit i: candidate i is not accepted */
};

static bool accept_fn(const void *ctx, size_t i, uint64_t *seed)
{
    const struct walk *w = ctx;
    *seed = w->seeds[i];
    return ((w->refused >> i) & 1u) == 0;
}

static void test_walk_is_order_free_and_skips_refused(void **state)
{
    (void)state;
    uint64_t seeds[5], rev[5];
    for (int i = 0; i < 5; i++) {
        char id[32];
        snprintf(id, sizeof(id), "w%d", i);
        seeds[i] = rdv_worker_seed(id);
        rev[4 - i] = seeds[i];
    }
    for (uint64_t key = 0; key < 100; key++) {
        struct walk fw = {.seeds = seeds}, rw = {.seeds = rev};
        long a = rdv_first(&key, sizeof(key), 5, accept_fn, &fw);
        long b = rdv_first(&key, sizeof(key), 5, accept_fn, &rw);
        assert_true(a >= 0 && b >= 0);
        assert_true(seeds[a] == rev[b]);
        /* Its score is the highest. */
        for (int i = 0; i < 5; i++)
            assert_true(rdv_score(&key, sizeof(key), seeds[i]) <=
                        rdv_score(&key, sizeof(key), seeds[a]));
        /* Refusing the first gives the second, never the first again. */
        fw.refused = 1ull << a;
        long second = rdv_first(&key, sizeof(key), 5, accept_fn, &fw);
        assert_true(second >= 0 && second != a);
        fw.refused = 0x1f;
        assert_int_equal(rdv_first(&key, sizeof(key), 5, accept_fn, &fw), -1);
    }
}

static void test_load_bound(void **state)
{
    (void)state;
    /* Idle fleet: one request per worker fits before the mean moves. */
    assert_true(rdv_within_bound(0, 0, 8, 1.25));
    assert_true(rdv_within_bound(1, 0, 8, 1.25));
    assert_false(rdv_within_bound(2, 0, 8, 1.25));
    /* mean 10: bound 13.5 at 1.25, 21 at 2. */
    assert_true(rdv_within_bound(13, 80, 8, 1.25));
    assert_false(rdv_within_bound(14, 80, 8, 1.25));
    assert_true(rdv_within_bound(21, 80, 8, 2.0));
    assert_false(rdv_within_bound(22, 80, 8, 2.0));
    assert_false(rdv_within_bound(0, 0, 0, 1.25));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_is_order_free_and_skips_refused),
        cmocka_unit_test(test_load_bound),
    };
    return cmocka_run_group_tests_name("rendezvous", tests, NULL, NULL);
}
