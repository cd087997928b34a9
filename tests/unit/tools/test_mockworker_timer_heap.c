/*
 * Unit tests of the mock worker's timer heap (tests/mockworker/timer_heap.c):
 * timers come out in deadline order after removals from the middle,
 * removing twice is a no-op, a removed or popped timer is no longer pending, pop_due stops at
 * the first future deadline, and fini leaves remaining timers not pending.
 * (The order-and-remove case moved here from test_mockworker_cache with
 * the heap itself.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/mockworker/timer_heap.c"

static void test_timer_heap_order_and_remove(void **state)
{
    (void)state;
    enum { N = 200 };
    struct th_timer t[N];
    struct th_heap h;
    th_heap_init(&h);
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        th_timer_init(&t[i]);
        t[i].deadline = (x >> 33) % 1000;
        assert_int_equal(th_heap_push(&h, &t[i]), 0);
        assert_true(th_timer_is_pending(&t[i]));
    }
    for (int i = 0; i < N; i += 3)
        th_heap_remove(&h, &t[i]);
    th_heap_remove(&h, &t[0]); /* removing twice is a no-op */
    uint64_t last = 0;
    size_t popped = 0;
    for (;;) {
        struct th_timer *top = th_heap_top(&h);
        if (top == NULL)
            break;
        assert_true(top->deadline >= last);
        last = top->deadline;
        th_heap_remove(&h, top);
        assert_false(th_timer_is_pending(top));
        popped++;
    }
    assert_int_equal(popped, N - (N + 2) / 3);
    th_heap_fini(&h);
}

static void test_pop_due_and_fini(void **state)
{
    (void)state;
    struct th_timer a, b, c;
    th_timer_init(&a);
    th_timer_init(&b);
    th_timer_init(&c);
    assert_false(th_timer_is_pending(&a));
    a.deadline = 30;
    b.deadline = 10;
    c.deadline = 20;
    struct th_heap h;
    th_heap_init(&h);
    assert_int_equal(th_heap_push(&h, &a), 0);
    assert_int_equal(th_heap_push(&h, &b), 0);
    assert_int_equal(th_heap_push(&h, &c), 0);
    assert_int_equal(th_heap_size(&h), 3);
    assert_null(th_heap_pop_due(&h, 5));
    assert_ptr_equal(th_heap_pop_due(&h, 20), &b);
    assert_false(th_timer_is_pending(&b));
    assert_ptr_equal(th_heap_pop_due(&h, 20), &c);
    assert_null(th_heap_pop_due(&h, 20));
    assert_int_equal(th_heap_size(&h), 1);
    th_heap_remove(&h, &b); /* already fired: no-op */
    assert_int_equal(th_heap_size(&h), 1);
    th_heap_fini(&h);
    assert_false(th_timer_is_pending(&a));
    assert_null(th_heap_top(&h));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_heap_order_and_remove),
        cmocka_unit_test(test_pop_due_and_fini),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
