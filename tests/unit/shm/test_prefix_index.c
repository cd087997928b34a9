/*
 * Unit tests of the prefix index (shm/prefix_index.c): its bounded memory
 * and refs, and its shared segment — created by the owner with mode 0600,
 * shared by attachers, kept across a re-open of the same size, replaced
 * when it is of another size or unusable, and refused on attach whenever
 * its owner, mode, header or size is not what this binary would write;
 * and a whole prompt held matching whole.
 * Each test uses a segment name of its own and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/prefix_index.h"

static char name_buf[64];

static const char *seg_name(void)
{
    static unsigned seq;
    snprintf(name_buf, sizeof(name_buf), "/sy-unit-pix-%d-%u", (int)getpid(), ++seq);
    shm_unlink(name_buf);
    return name_buf;
}

static struct pix_index *open_owner(const char *name, size_t blocks, enum pix_open_outcome expect)
{
    struct pix_index *ix = NULL;
    enum pix_open_outcome outcome = PIX_OPEN_UNSET;
    char err[512] = "";
    int rc = pix_open_owner(name, blocks, &ix, &outcome, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "pix_open_owner: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(outcome, expect);
    assert_non_null(ix);
    return ix;
}

static int attach(const char *name, struct pix_index **out)
{
    char err[512] = "";
    *out = NULL;
    return pix_attach(name, out, err, sizeof(err));
}

/* Overwrites bytes of the named object at offset (the header's layout:
 * magic 0, layout_version 8, ..., n_buckets 32, total_size 40). */
static void poke(const char *name, off_t offset, const void *bytes, size_t len)
{
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, len, offset), (ssize_t)len);
    close(fd);
}

static uint64_t block(unsigned i)
{
    return (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
}

static void test_index_memory_is_bounded(void **state)
{
    (void)state;
    struct pix_index *ix = pix_create(1 << 18);
    assert_non_null(ix);
    size_t bytes = pix_memory_bytes(ix);
    size_t cap = pix_capacity(ix);
    assert_true(cap >= (1 << 18));
    assert_true(bytes <= cap * 16 + 4096);
    /* One million distinct blocks. */
    uint64_t h[1024];
    for (uint64_t i = 0; i < 1000000; i += 1024) {
        for (size_t k = 0; k < 1024; k++)
            h[k] = (i + k) * 0x9e3779b97f4a7c15ull;
        pix_record(ix, h, 0, 1024, (uint32_t)(i % 7));
    }
    assert_int_equal(pix_memory_bytes(ix), bytes);
    /* The latest blocks are still there; most early ones were evicted. */
    assert_true(pix_has(ix, h[1023], (uint32_t)((1000000 - 1024 + 576) / 1024 * 1024 % 7)) ||
                pix_has(ix, h[1023], 0) || pix_has(ix, h[1023], 1) || pix_has(ix, h[1023], 2) ||
                pix_has(ix, h[1023], 3) || pix_has(ix, h[1023], 4) || pix_has(ix, h[1023], 5) ||
                pix_has(ix, h[1023], 6));
    size_t early_left = 0;
    for (uint64_t i = 0; i < 1024; i++)
        for (uint32_t s = 0; s < 7; s++)
            early_left += pix_has(ix, i * 0x9e3779b97f4a7c15ull, s);
    assert_true(early_left < 512);
    pix_destroy(ix);
}

static void test_refs_keep_three_most_recent_workers(void **state)
{
    (void)state;
    struct pix_index *ix = pix_create(1 << 16);
    assert_non_null(ix);
    uint64_t h = 0x1234567890abcdefull;
    for (uint32_t s = 1; s <= 4; s++)
        pix_record(ix, &h, 0, 1, s);
    assert_false(pix_has(ix, h, 1));
    assert_true(pix_has(ix, h, 2));
    assert_true(pix_has(ix, h, 3));
    assert_true(pix_has(ix, h, 4));
    pix_destroy(ix);
}

/* A worker that holds a prompt's last block was sent the whole prompt (the
 * chain covers every block before it): the match is whole, whatever holes
 * evictions left on the way. The bisection alone would stop at the hole
 * its first probe lands on. */
static void test_whole_prompt_held_matches_whole(void **state)
{
    (void)state;
    enum { N = 16 };
    struct pix_index *ix = pix_create(1 << 16);
    assert_non_null(ix);
    uint64_t h[N];
    for (unsigned i = 0; i < N; i++)
        h[i] = block(100 + i);
    /* Every block but N/2 - 1, where the bisection looks first. */
    pix_record(ix, h, 0, N / 2 - 1, 5);
    pix_record(ix, h, N / 2, N, 5);
    static struct pix_slot_set cands;
    pix_slots_add(&cands, 5);
    uint32_t holders[PIX_REFS];
    size_t nh = 0;
    assert_int_equal(pix_longest_match(ix, h, N, &cands, holders, &nh), N);
    assert_int_equal(nh, 1);
    assert_int_equal(holders[0], 5);
    /* A prompt that goes on past what was sent: the bisection decides, as
     * before, and stops at the hole. */
    uint64_t other[N];
    memcpy(other, h, sizeof(other));
    other[N - 1] = block(999);
    assert_int_equal(pix_longest_match(ix, other, N, &cands, holders, &nh), N / 2 - 1);
    pix_destroy(ix);
}

static void test_private_index_is_clamped(void **state)
{
    (void)state;
    struct pix_index *small = pix_create(1);
    assert_non_null(small);
    assert_int_equal(pix_capacity(small), PIX_MIN_BLOCKS);
    assert_false(pix_is_shared(small));
    pix_destroy(small);
    pix_destroy(NULL);
}

static void test_segment_shared_and_kept_across_reopen(void **state)
{
    (void)state;
    const char *name = seg_name();
    struct pix_index *owner = open_owner(name, 1 << 14, PIX_OPEN_CREATED);
    assert_true(pix_is_shared(owner));
    assert_int_equal(pix_capacity(owner), 1 << 14);
    assert_int_equal(pix_memory_bytes(owner), 128 + (1 << 14) / 4 * 64);

    struct stat st;
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_uid, geteuid());

    /* Two data planes see what the other records. */
    struct pix_index *a, *b;
    assert_int_equal(attach(name, &a), 0);
    assert_int_equal(attach(name, &b), 0);
    uint64_t h[3] = {block(1), block(2), block(3)};
    pix_record(a, h, 0, 3, 7);
    assert_true(pix_has(b, h[2], 7));
    assert_true(pix_has(owner, h[0], 7));
    pix_record(b, h, 0, 1, 9);
    assert_true(pix_has(a, h[0], 9));

    /* A data plane that exits (or crashes: nothing is held but a mapping)
     * takes nothing with it; a control-plane restart keeps the contents. */
    pix_destroy(a);
    pix_destroy(owner);
    owner = open_owner(name, 1 << 14, PIX_OPEN_REATTACHED);
    assert_true(pix_has(owner, h[2], 7));
    assert_true(pix_has(b, h[1], 7));
    pix_destroy(owner);
    pix_destroy(b);
    shm_unlink(name);
}

static void test_segment_of_another_size_is_replaced(void **state)
{
    (void)state;
    const char *name = seg_name();
    struct pix_index *owner = open_owner(name, 1 << 14, PIX_OPEN_CREATED);
    struct pix_index *old;
    assert_int_equal(attach(name, &old), 0);
    uint64_t h = block(5);
    pix_record(owner, &h, 0, 1, 3);
    pix_destroy(owner);

    owner = open_owner(name, 1 << 15, PIX_OPEN_REPLACED);
    assert_int_equal(pix_capacity(owner), 1 << 15);
    assert_false(pix_has(owner, h, 3));
    /* A data plane still on the old one keeps a valid mapping. */
    assert_true(pix_has(old, h, 3));
    pix_record(old, &h, 0, 1, 4);
    pix_destroy(old);
    struct pix_index *fresh;
    assert_int_equal(attach(name, &fresh), 0);
    assert_int_equal(pix_capacity(fresh), 1 << 15);
    pix_destroy(fresh);
    pix_destroy(owner);
    shm_unlink(name);
}

static void test_attach_validates_header_and_size(void **state)
{
    (void)state;
    const char *name = seg_name();
    struct pix_index *ix;
    assert_int_equal(attach(name, &ix), -ENOENT);
    struct pix_index *owner = open_owner(name, 1 << 14, PIX_OPEN_CREATED);
    pix_destroy(owner);

    /* Another layout version. */
    uint32_t v = PIX_LAYOUT_VERSION + 1;
    poke(name, 8, &v, sizeof(v));
    assert_int_equal(attach(name, &ix), -EPROTO);
    v = PIX_LAYOUT_VERSION;
    poke(name, 8, &v, sizeof(v));
    assert_int_equal(attach(name, &ix), 0);
    pix_destroy(ix);

    /* A bucket count that is not a power of two, or that claims more than
     * the object holds, or more than our bound. */
    uint64_t good = (1 << 14) / 4, n = good + 1;
    poke(name, 32, &n, sizeof(n));
    assert_int_equal(attach(name, &ix), -EPROTO);
    n = good * 2;
    poke(name, 32, &n, sizeof(n));
    assert_int_equal(attach(name, &ix), -EPROTO);
    n = (uint64_t)1 << 40;
    uint64_t total = 128 + n * 64;
    poke(name, 32, &n, sizeof(n));
    poke(name, 40, &total, sizeof(total));
    assert_int_equal(attach(name, &ix), -EPROTO);
    poke(name, 32, &good, sizeof(good));
    total = 128 + good * 64;
    poke(name, 40, &total, sizeof(total));
    assert_int_equal(attach(name, &ix), 0);
    pix_destroy(ix);

    /* An object grown or shrunk behind the header's back. */
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)total + 4096), 0);
    assert_int_equal(attach(name, &ix), -EPROTO);
    assert_int_equal(ftruncate(fd, 64), 0);
    assert_int_equal(attach(name, &ix), -EAGAIN);
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(ftruncate(fd, (off_t)total), 0);
    close(fd);
    /* Zeroed by the shrink: no magic, as if never published. */
    assert_int_equal(attach(name, &ix), -EAGAIN);
    /* The owner replaces what it cannot use. */
    owner = open_owner(name, 1 << 14, PIX_OPEN_REPLACED);
    assert_int_equal(attach(name, &ix), 0);
    pix_destroy(ix);
    pix_destroy(owner);
    shm_unlink(name);
}

static void test_segment_open_to_others_is_refused(void **state)
{
    (void)state;
    const char *name = seg_name();
    /* Pre-created with group and other access (as another local user could
     * do with a name in /dev/shm): neither side adopts or replaces it. */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0666), 0);
    close(fd);
    struct pix_index *ix = NULL;
    enum pix_open_outcome outcome = PIX_OPEN_UNSET;
    char err[512];
    assert_int_equal(pix_open_owner(name, 1 << 14, &ix, &outcome, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "0666"));
    assert_int_equal(attach(name, &ix), -EPERM);
    struct stat st;
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    assert_int_equal(stat(path, &st), 0); /* not removed either */
    shm_unlink(name);

    /* Created under a permissive umask: still 0600. */
    mode_t old = umask(0);
    struct pix_index *owner = open_owner(name, 1 << 14, PIX_OPEN_CREATED);
    umask(old);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    pix_destroy(owner);
    shm_unlink(name);
}

static void test_segment_name(void **state)
{
    (void)state;
    char out[300];
    assert_int_equal(pix_segment_name("/switchyard", out, sizeof(out)), 0);
    assert_string_equal(out, "/switchyard.prefix");
    assert_int_equal(pix_segment_name("/switchyard", out, 12), -ENAMETOOLONG);
    char longname[251];
    longname[0] = '/';
    memset(longname + 1, 'a', 249);
    longname[250] = '\0';
    assert_int_equal(pix_segment_name(longname, out, sizeof(out)), -ENAMETOOLONG);
    longname[249 - 7] = '\0'; /* 248 characters after the '/', with the suffix */
    assert_int_equal(pix_segment_name(longname, out, sizeof(out)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_memory_is_bounded),
        cmocka_unit_test(test_refs_keep_three_most_recent_workers),
        cmocka_unit_test(test_whole_prompt_held_matches_whole),
        cmocka_unit_test(test_private_index_is_clamped),
        cmocka_unit_test(test_segment_shared_and_kept_across_reopen),
        cmocka_unit_test(test_segment_of_another_size_is_replaced),
        cmocka_unit_test(test_attach_validates_header_and_size),
        cmocka_unit_test(test_segment_open_to_others_is_refused),
        cmocka_unit_test(test_segment_name),
    };
    return cmocka_run_group_tests_name("prefix_index", tests, NULL, NULL);
}
