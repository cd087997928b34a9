/*
 * Unit tests of the exact holder index (shm/kv_holders.c): facts added,
 * removed and forgotten per slot; the longest held prefix over candidates;
 * the bound (a full index evicts and never names a holder that was not
 * reported); the shared segment (created 0600, attached, emptied when kept
 * across an owner's re-open, replaced at another size, refused when its
 * header lies); and a writer process churning the index while this one
 * reads, which must never see a fact that was never written.
 * Each test uses a segment name of its own and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/kv_holders.h"

static char name_buf[64];

static const char *seg_name(void)
{
    static unsigned seq;
    snprintf(name_buf, sizeof(name_buf), "/sy-unit-kvh-%d-%u", (int)getpid(), ++seq);
    shm_unlink(name_buf);
    return name_buf;
}

static uint64_t key_of(unsigned i)
{
    uint64_t x = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return x * 0xbf58476d1ce4e5b9ull;
}

static struct pix_slot_set *slots_of(const uint32_t *s, size_t n)
{
    struct pix_slot_set *set = calloc(1, sizeof(*set));
    assert_non_null(set);
    for (size_t i = 0; i < n; i++)
        pix_slots_add(set, s[i]);
    return set;
}

static void test_add_remove_has(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    assert_non_null(ix);
    assert_true(kvh_capacity(ix) >= (1 << 14));
    assert_false(kvh_is_shared(ix));
    kvh_add(ix, key_of(1), 3);
    kvh_add(ix, key_of(1), 5);
    kvh_add(ix, key_of(2), 3);
    kvh_add(ix, key_of(1), 3); /* again: still one fact */
    assert_int_equal(kvh_count(ix), 3);
    assert_int_equal(kvh_slot_count(ix, 3), 2);
    assert_true(kvh_has(ix, key_of(1), 3));
    assert_true(kvh_has(ix, key_of(1), 5));
    assert_false(kvh_has(ix, key_of(1), 4));
    assert_false(kvh_has(ix, key_of(3), 3));
    kvh_remove(ix, key_of(1), 3);
    assert_false(kvh_has(ix, key_of(1), 3));
    assert_true(kvh_has(ix, key_of(1), 5));
    kvh_remove(ix, key_of(1), 3); /* absent: nothing */
    assert_int_equal(kvh_count(ix), 2);
    /* Slots the index cannot record are ignored. */
    kvh_add(ix, key_of(9), PIX_SLOT_LIMIT);
    assert_false(kvh_has(ix, key_of(9), PIX_SLOT_LIMIT));
    assert_int_equal(kvh_count(ix), 2);
    kvh_destroy(ix);
    kvh_destroy(NULL);
}

static void test_forget_slot(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    for (unsigned i = 0; i < 100; i++) {
        kvh_add(ix, key_of(i), 7);
        kvh_add(ix, key_of(i), 8);
    }
    assert_int_equal(kvh_count(ix), 200);
    kvh_forget_slot(ix, 7);
    assert_int_equal(kvh_count(ix), 100);
    assert_int_equal(kvh_slot_count(ix, 7), 0);
    for (unsigned i = 0; i < 100; i++) {
        assert_false(kvh_has(ix, key_of(i), 7));
        assert_true(kvh_has(ix, key_of(i), 8));
    }
    /* The slot learns again after a forget; its stale facts are reused. */
    kvh_add(ix, key_of(5), 7);
    assert_true(kvh_has(ix, key_of(5), 7));
    assert_false(kvh_has(ix, key_of(6), 7));
    assert_int_equal(kvh_count(ix), 101);
    /* A removal of a forgotten fact changes no count. */
    kvh_remove(ix, key_of(6), 7);
    assert_int_equal(kvh_count(ix), 101);
    /* Stored again after a forget (the old fact still in its bucket): a
     * removal withdraws the new one. */
    kvh_forget_slot(ix, 8);
    kvh_add(ix, key_of(7), 8);
    assert_true(kvh_has(ix, key_of(7), 8));
    kvh_remove(ix, key_of(7), 8);
    assert_false(kvh_has(ix, key_of(7), 8));
    kvh_forget_all(ix);
    assert_int_equal(kvh_count(ix), 0);
    assert_false(kvh_has(ix, key_of(5), 7));
    assert_false(kvh_has(ix, key_of(5), 8));
    kvh_destroy(ix);
}

static void test_longest_match(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    enum { N = 40 };
    uint64_t chain[N];
    for (unsigned i = 0; i < N; i++)
        chain[i] = key_of(1000 + i);
    /* Slot 1 holds 10 blocks, slot 2 holds 25, slot 3 (not a candidate)
     * all 40, slot 4 holds 25 too. */
    for (unsigned i = 0; i < N; i++) {
        if (i < 10)
            kvh_add(ix, chain[i], 1);
        if (i < 25) {
            kvh_add(ix, chain[i], 2);
            kvh_add(ix, chain[i], 4);
        }
        kvh_add(ix, chain[i], 3);
    }
    uint32_t cand[] = {1, 2, 4};
    struct pix_slot_set *set = slots_of(cand, 3);
    uint32_t holders[8];
    size_t nh = 0;
    assert_int_equal(kvh_longest_match(ix, chain, N, set, holders, 8, &nh), 25);
    assert_int_equal(nh, 2);
    assert_true((holders[0] == 2 && holders[1] == 4) || (holders[0] == 4 && holders[1] == 2));
    /* max_holders bounds the list, not the length. */
    assert_int_equal(kvh_longest_match(ix, chain, N, set, holders, 1, &nh), 25);
    assert_int_equal(nh, 1);
    /* Slot 2 and 4 lose block 24 (removed): the match shortens to 24. */
    kvh_remove(ix, chain[24], 2);
    kvh_remove(ix, chain[24], 4);
    assert_int_equal(kvh_longest_match(ix, chain, N, set, holders, 8, &nh), 24);
    /* Forgetting 2 and 4 leaves slot 1's 10 blocks. */
    kvh_forget_slot(ix, 2);
    kvh_forget_slot(ix, 4);
    assert_int_equal(kvh_longest_match(ix, chain, N, set, holders, 8, &nh), 10);
    assert_int_equal(nh, 1);
    assert_int_equal(holders[0], 1);
    /* Another chain (another model's seed) matches nothing. */
    uint64_t other[3] = {key_of(1), key_of(2), key_of(3)};
    assert_int_equal(kvh_longest_match(ix, other, 3, set, holders, 8, &nh), 0);
    assert_int_equal(nh, 0);
    assert_int_equal(kvh_longest_match(ix, chain, 0, set, holders, 8, &nh), 0);
    free(set);
    kvh_destroy(ix);
}

/* A full index evicts, and every holder it names is one that was added and
 * neither removed nor forgotten since. */
static void test_bound_never_names_a_wrong_holder(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(4096);
    size_t cap = kvh_capacity(ix);
    assert_true(cap >= 4096 && cap < 4096 * 2);
    size_t bytes = kvh_memory_bytes(ix);
    assert_true(bytes <= cap * 16 + (1u << 20));
    enum { KEYS = 20000, SLOTS = 16 };
    /* truth[k] is a bitmask of the slots holding key k now. */
    uint32_t *truth = calloc(KEYS, sizeof(*truth));
    assert_non_null(truth);
    unsigned rnd = 12345;
    for (unsigned step = 0; step < 200000; step++) {
        rnd = rnd * 1103515245u + 12345u;
        unsigned k = (rnd >> 8) % KEYS, s = (rnd >> 3) % SLOTS;
        unsigned op = rnd % 8;
        if (op < 5) {
            kvh_add(ix, key_of(k), s);
            truth[k] |= 1u << s;
        } else if (op < 7) {
            kvh_remove(ix, key_of(k), s);
            truth[k] &= ~(1u << s);
        } else if (step % 1000 == 7) {
            kvh_forget_slot(ix, s);
            for (unsigned j = 0; j < KEYS; j++)
                truth[j] &= ~(1u << s);
        }
        assert_true(kvh_count(ix) <= cap);
    }
    uint32_t all[SLOTS];
    for (unsigned s = 0; s < SLOTS; s++)
        all[s] = s;
    struct pix_slot_set *set = slots_of(all, SLOTS);
    size_t held = 0, counted = 0;
    for (unsigned k = 0; k < KEYS; k++) {
        for (unsigned s = 0; s < SLOTS; s++) {
            bool has = kvh_has(ix, key_of(k), s);
            if (has && !(truth[k] & (1u << s)))
                fail_msg("key %u names slot %u, which does not hold it", k, s);
            held += has;
        }
        uint64_t c = key_of(k);
        uint32_t holders[SLOTS];
        size_t nh = 0;
        size_t m = kvh_longest_match(ix, &c, 1, set, holders, SLOTS, &nh);
        for (size_t i = 0; i < nh; i++)
            assert_true(truth[k] & (1u << holders[i]));
        assert_int_equal(m, nh > 0 ? 1 : 0);
        counted += nh;
    }
    /* Full, and the count is the facts a reader finds. */
    assert_int_equal(held, kvh_count(ix));
    assert_int_equal(counted, held);
    assert_true(held > cap / 2);
    free(set);
    free(truth);
    kvh_destroy(ix);
}

/* security review II, row 17: one slot flooding stores (never removing)
 * must not push out another slot's facts. Before the share rule a full
 * bucket gave up its oldest fact, whoever held it, and a good worker's 512
 * facts went down to a handful. The flooder ends up recycling its own. */
static void test_flood_keeps_other_slots_facts(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(4096);
    size_t cap = kvh_capacity(ix);
    enum { GOOD = 3, BAD = 7, KEPT = 512 };
    for (unsigned i = 0; i < KEPT; i++)
        assert_int_equal(kvh_add(ix, key_of(i), GOOD), KVH_ADD_STORED);
    assert_int_equal(kvh_share(ix, GOOD), cap);
    assert_int_equal(kvh_share(ix, BAD), cap / 2); /* a newcomer counts itself */
    size_t limited = 0;
    for (unsigned i = 0; i < 20 * cap; i++) {
        enum kvh_add_result r = kvh_add(ix, key_of(100000 + i), BAD);
        assert_int_not_equal(r, KVH_ADD_EVICTED);
        limited += r == KVH_ADD_SELF_EVICTED || r == KVH_ADD_REFUSED;
    }
    size_t kept = 0;
    for (unsigned i = 0; i < KEPT; i++)
        kept += kvh_has(ix, key_of(i), GOOD);
    assert_int_equal(kept, KEPT);
    assert_int_equal(kvh_slot_count(ix, GOOD), KEPT);
    assert_true(limited > 0);
    /* It still fills what nobody else uses: free room is lent, not lost. */
    assert_true(kvh_slot_count(ix, BAD) > cap / 2);
    assert_int_equal(kvh_count(ix), KEPT + kvh_slot_count(ix, BAD));
    /* The good slot wins its room back from the flooder, over its share. */
    for (unsigned i = 0; i < 1000; i++)
        kvh_add(ix, key_of(200000 + i), GOOD);
    kept = 0;
    for (unsigned i = 0; i < 1000; i++)
        kept += kvh_has(ix, key_of(200000 + i), GOOD);
    assert_int_equal(kept, 1000);
    /* A single slot uses the whole index. */
    kvh_forget_all(ix);
    for (unsigned i = 0; i < 4 * cap; i++)
        kvh_add(ix, key_of(i), GOOD);
    assert_true(kvh_slot_count(ix, GOOD) > cap * 9 / 10);
    kvh_destroy(ix);
}

static void test_segment_shared_kept_emptied_replaced(void **state)
{
    (void)state;
    const char *name = seg_name();
    char err[512] = "";
    struct kvh_index *owner = NULL, *reader = NULL;
    bool replaced = true;
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), -ENOENT);
    assert_int_equal(kvh_open_owner(name, 1 << 14, &owner, &replaced, err, sizeof(err)), 0);
    assert_false(replaced);
    assert_true(kvh_is_shared(owner));
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), 0);
    kvh_add(owner, key_of(1), 2);
    assert_true(kvh_has(reader, key_of(1), 2));
    assert_int_equal(kvh_count(reader), 1);
    kvh_destroy(owner);
    /* A new owner keeps the segment but none of its facts. */
    assert_int_equal(kvh_open_owner(name, 1 << 14, &owner, &replaced, err, sizeof(err)), 0);
    assert_false(replaced);
    assert_false(kvh_has(reader, key_of(1), 2));
    assert_int_equal(kvh_count(owner), 0);
    kvh_add(owner, key_of(1), 2);
    assert_true(kvh_has(reader, key_of(1), 2));
    kvh_destroy(owner);
    /* Another size: replaced; the old one, still mapped, is emptied first. */
    assert_int_equal(kvh_open_owner(name, 1 << 16, &owner, &replaced, err, sizeof(err)), 0);
    assert_true(replaced);
    assert_non_null(strstr(err, "replaced"));
    assert_false(kvh_has(reader, key_of(1), 2));
    assert_true(kvh_capacity(owner) >= (1 << 16));
    kvh_destroy(reader);
    kvh_destroy(owner);
    shm_unlink(name);
}

static void test_attach_validates(void **state)
{
    (void)state;
    const char *name = seg_name();
    char err[512] = "";
    struct kvh_index *owner = NULL, *reader = NULL;
    bool replaced;
    assert_int_equal(kvh_open_owner(name, 4096, &owner, &replaced, err, sizeof(err)), 0);
    kvh_destroy(owner);
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    /* n_buckets (offset 32) lying about the size. */
    uint64_t lie = 1u << 20;
    assert_int_equal(pwrite(fd, &lie, sizeof(lie), 32), (ssize_t)sizeof(lie));
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), -EPROTO);
    /* No magic: not published. */
    uint64_t zero = 0;
    assert_int_equal(pwrite(fd, &zero, sizeof(zero), 0), (ssize_t)sizeof(zero));
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), -EAGAIN);
    /* Open to others: refused. */
    assert_int_equal(fchmod(fd, 0644), 0);
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), -EPERM);
    assert_int_equal(kvh_open_owner(name, 4096, &owner, &replaced, err, sizeof(err)), -EPERM);
    /* An unusable one of ours is replaced by the owner. */
    assert_int_equal(fchmod(fd, 0600), 0);
    close(fd);
    assert_int_equal(kvh_open_owner(name, 4096, &owner, &replaced, err, sizeof(err)), 0);
    assert_true(replaced);
    assert_int_equal(kvh_attach(name, &reader, err, sizeof(err)), 0);
    kvh_destroy(reader);
    kvh_destroy(owner);
    shm_unlink(name);
}

static void test_segment_name(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(kvh_segment_name("/switchyard", out, sizeof(out)), 0);
    assert_string_equal(out, "/switchyard.kvholders");
    assert_int_equal(kvh_segment_name("/switchyard", out, 12), -ENAMETOOLONG);
}

/*
 * A writer process churns a small shared index (every bucket full, facts
 * evicted, removed, slots forgotten) where slot = key % 61 always; this
 * process reads meanwhile. A torn read would pair one fact's key with
 * another's slot and name a holder the writer never wrote.
 */
#define RW_KEYS  50000u
#define RW_SLOTS 61u

static void rw_writer(const char *name)
{
    char err[256];
    struct kvh_index *ix = NULL;
    if (kvh_attach(name, &ix, err, sizeof(err)) != 0)
        _exit(2);
    unsigned rnd = 99;
    for (;;) {
        for (unsigned i = 0; i < 1000; i++) {
            rnd = rnd * 1103515245u + 12345u;
            unsigned k = (rnd >> 7) % RW_KEYS;
            if (rnd % 4 != 0)
                kvh_add(ix, key_of(k), k % RW_SLOTS);
            else
                kvh_remove(ix, key_of(k), k % RW_SLOTS);
        }
        kvh_forget_slot(ix, rnd % RW_SLOTS);
    }
}

static void test_two_process_reader_writer(void **state)
{
    (void)state;
    const char *name = seg_name();
    char err[512] = "";
    struct kvh_index *ix = NULL;
    bool replaced;
    assert_int_equal(kvh_open_owner(name, 4096, &ix, &replaced, err, sizeof(err)), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        rw_writer(name);
    uint32_t all[RW_SLOTS];
    for (unsigned s = 0; s < RW_SLOTS; s++)
        all[s] = s;
    struct pix_slot_set *set = slots_of(all, RW_SLOTS);
    size_t seen = 0, wrong = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned rnd = 7;
    do {
        for (unsigned i = 0; i < 10000; i++) {
            rnd = rnd * 1103515245u + 12345u;
            unsigned k = (rnd >> 7) % RW_KEYS;
            uint64_t c = key_of(k);
            uint32_t holders[16];
            size_t nh = 0;
            kvh_longest_match(ix, &c, 1, set, holders, 16, &nh);
            for (size_t h = 0; h < nh; h++) {
                if (holders[h] != k % RW_SLOTS)
                    wrong++;
                else
                    seen++;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < 1500);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status)); /* it ran until killed (did attach) */
    assert_int_equal(wrong, 0);
    assert_true(seen > 0);
    free(set);
    kvh_destroy(ix);
    shm_unlink(name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_remove_has),
        cmocka_unit_test(test_forget_slot),
        cmocka_unit_test(test_longest_match),
        cmocka_unit_test(test_bound_never_names_a_wrong_holder),
        cmocka_unit_test(test_flood_keeps_other_slots_facts),
        cmocka_unit_test(test_segment_shared_kept_emptied_replaced),
        cmocka_unit_test(test_attach_validates),
        cmocka_unit_test(test_segment_name),
        cmocka_unit_test(test_two_process_reader_writer),
    };
    return cmocka_run_group_tests_name("kv_holders", tests, NULL, NULL);
}
