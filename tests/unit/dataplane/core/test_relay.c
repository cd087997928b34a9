/*
 * Unit tests of the relay buffer (dataplane/core/relay.h): bytes come out in
 * order, the DP_RELAY_CAP bound refuses what does not fit until the reader
 * makes room, a streamed relay holds no buffer once drained and takes one
 * again at the next append, and a whole relay keeps its bytes until it is
 * released with them at its start.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dataplane/core/relay.h"

static void test_stream_drained_holds_nothing(void **state)
{
    (void)state;
    struct dp_relay r = {0};
    assert_false(dp_relay_is_open(&r));
    assert_int_equal(dp_relay_append(&r, "x", 1), -ENOSPC); /* closed */
    assert_int_equal(dp_relay_open(&r, false), 0);
    assert_true(dp_relay_is_open(&r));
    char out[64];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dp_relay_append(&r, "data: a\n\n", 9), 0);
        assert_int_equal(dp_relay_append(&r, "data: b\n\n", 9), 0);
        assert_int_equal(dp_relay_pending(&r), 18);
        assert_int_equal(dp_relay_read(&r, out, 4), 4);
        assert_non_null(r.buf.data); /* bytes left: kept */
        assert_int_equal(dp_relay_read(&r, out + 4, sizeof(out) - 4), 14);
        assert_memory_equal(out, "data: a\n\ndata: b\n\n", 18);
        /* Drained: between two events a stream holds no buffer, and stays open. */
        assert_null(r.buf.data);
        assert_int_equal(r.buf.alloc, 0);
        assert_true(dp_relay_is_open(&r));
        assert_int_equal(dp_relay_read(&r, out, sizeof(out)), 0);
    }
    dp_relay_fini(&r);
    assert_false(dp_relay_is_open(&r));
}

static void test_bound_and_growth(void **state)
{
    (void)state;
    struct dp_relay r = {0};
    assert_int_equal(dp_relay_open(&r, false), 0);
    static unsigned char big[DP_RELAY_CAP];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7);
    /* Drained first, then one append larger than the first buffer. */
    assert_int_equal(dp_relay_append(&r, big, 10), 0);
    static unsigned char out[DP_RELAY_CAP];
    assert_int_equal(dp_relay_read(&r, out, sizeof(out)), 10);
    assert_null(r.buf.data);
    assert_int_equal(dp_relay_append(&r, big, DP_RELAY_INIT * 3), 0);
    assert_int_equal(dp_relay_append(&r, big + DP_RELAY_INIT * 3, DP_RELAY_CAP - DP_RELAY_INIT * 3),
                     0);
    assert_int_equal(dp_relay_pending(&r), DP_RELAY_CAP);
    /* Full: the producer must pause. */
    assert_int_equal(dp_relay_append(&r, "x", 1), -ENOSPC);
    assert_false(dp_relay_has_room(&r, 1));
    assert_int_equal(dp_relay_read(&r, out, 100), 100);
    assert_true(dp_relay_has_room(&r, 100));
    assert_false(dp_relay_has_room(&r, 101));
    assert_int_equal(dp_relay_read(&r, out + 100, sizeof(out) - 100), DP_RELAY_CAP - 100);
    assert_memory_equal(out, big, DP_RELAY_CAP);
    assert_null(r.buf.data);
    assert_true(dp_relay_has_room(&r, DP_RELAY_CAP));
    dp_relay_fini(&r);
}

static void test_whole_kept_until_released(void **state)
{
    (void)state;
    struct dp_relay r = {0};
    assert_int_equal(dp_relay_open(&r, true), 0);
    assert_true(dp_relay_is_whole(&r));
    assert_int_equal(dp_relay_append(&r, "{\"a\":1}", 7), 0);
    size_t len = 0;
    unsigned char *b = dp_relay_release(&r, &len);
    assert_non_null(b);
    assert_int_equal(len, 7);
    assert_memory_equal(b, "{\"a\":1}", 7);
    free(b);
    assert_false(dp_relay_is_open(&r));
    assert_null(dp_relay_release(&r, &len));
    /* Switched to streaming (too large to send whole): read as it comes. */
    assert_int_equal(dp_relay_open(&r, true), 0);
    assert_int_equal(dp_relay_append(&r, "abc", 3), 0);
    dp_relay_stream(&r);
    char out[8];
    assert_int_equal(dp_relay_read(&r, out, sizeof(out)), 3);
    assert_null(r.buf.data);
    dp_relay_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_drained_holds_nothing),
        cmocka_unit_test(test_bound_and_growth),
        cmocka_unit_test(test_whole_kept_until_released),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
