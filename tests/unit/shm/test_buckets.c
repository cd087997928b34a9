/*
 * Unit tests of the rate-limit buckets (shm/buckets.c): the GCRA arithmetic
 * (burst, refill, the wait it reports, refunds, a cost above the capacity),
 * two mappings of one object sharing a bucket, and attach refusing an
 * object of another layout or one open to other users.
 */
#include "shm/buckets.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static char name[64];

static int setup(void **state)
{
    (void)state;
    snprintf(name, sizeof(name), "/sy-unit-buckets-%d", (int)getpid());
    shm_unlink(name);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    shm_unlink(name);
    return 0;
}

static void test_gcra(void **state)
{
    (void)state;
    struct shm_buckets b;
    char err[256];
    assert_int_equal(shm_buckets_open(&b, name, err, sizeof(err)), 0);
    /* 2 per second, burst 3 */
    struct shm_bucket_limit lim = {.interval_us = 500000, .capacity = 3};
    uint64_t k = shm_buckets_key("team-a"), now = 1000000000;
    assert_int_equal(shm_buckets_available(&b, k, SHM_BUCKET_REQUESTS, &lim, now), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_REQUESTS, &lim, 1, now), 0);
    assert_int_equal(shm_buckets_available(&b, k, SHM_BUCKET_REQUESTS, &lim, now), 0);
    assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_REQUESTS, &lim, 1, now), 500000);
    assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_REQUESTS, &lim, 1, now + 200000), 300000);
    assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_REQUESTS, &lim, 1, now + 500000), 0);
    /* Another tenant, another kind: untouched. */
    assert_int_equal(
        shm_buckets_take(&b, shm_buckets_key("team-b"), SHM_BUCKET_REQUESTS, &lim, 1, now), 0);
    assert_int_equal(shm_buckets_available(&b, k, SHM_BUCKET_TOKENS, &lim, now), 3);
    /* A refund gives the unit back. */
    shm_buckets_refund(&b, k, SHM_BUCKET_REQUESTS, &lim, 1);
    assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_REQUESTS, &lim, 1, now + 500000), 0);
    /* A cost above the capacity passes on a full bucket only. */
    struct shm_bucket_limit tok = {.interval_us = 10, .capacity = 100};
    assert_int_equal(shm_buckets_take(&b, k, SHM_BUCKET_TOKENS, &tok, 1000, now), 0);
    assert_true(shm_buckets_take(&b, k, SHM_BUCKET_TOKENS, &tok, 1, now) > 0);

    /* A second mapping (another data plane) sees the same bucket. */
    struct shm_buckets b2;
    assert_int_equal(shm_buckets_open(&b2, name, err, sizeof(err)), 0);
    assert_true(shm_buckets_take(&b2, k, SHM_BUCKET_REQUESTS, &lim, 1, now + 500000) > 0);
    shm_buckets_close(&b2);
    shm_buckets_close(&b);
}

static void test_attach_refuses(void **state)
{
    (void)state;
    struct shm_buckets b;
    char err[256];
    assert_int_equal(shm_buckets_open(&b, name, err, sizeof(err)), 0);
    b.hdr->version = 99;
    struct shm_buckets b2;
    assert_int_equal(shm_buckets_open(&b2, name, err, sizeof(err)), -EPROTO);
    assert_non_null(strstr(err, "layout version 99"));
    b.hdr->version = SHM_BUCKET_VERSION;
    assert_int_equal(fchmod(b.fd, 0644), 0);
    assert_int_equal(shm_buckets_open(&b2, name, err, sizeof(err)), -EPERM);
    shm_buckets_close(&b);
    /* An unpublished object nobody is creating is replaced. */
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    assert_int_equal(shm_buckets_open(&b, name, err, sizeof(err)), 0);
    shm_buckets_close(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gcra, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_refuses, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
