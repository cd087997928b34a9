/*
 * Unit tests of the node's response table (shm/responses.h): ids map to
 * their worker, expire after the reader's TTL, a full set forgets its
 * least recently used id, a second opener (another data plane, or a hot
 * restart's successor) sees the same entries, and a table that is not
 * ours, of another layout, or left unpublished by a dead creator is
 * refused or replaced; an entry keeps its tenant, and a live id is never
 * moved to another worker or tenant (security findings 12 and 13).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "shm/responses.h"

static char name[64];

static int setup(void **state)
{
    (void)state;
    snprintf(name, sizeof(name), "/sy-unit-resp-%d", (int)getpid());
    shm_unlink(name);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    shm_unlink(name);
    return 0;
}

#define REGISTRY 1000u /* the registry id the tests open for, unless they say */

static uint64_t open_for(struct shm_resp_table *t, uint64_t n, bool want_created, uint64_t reg)
{
    char err[256];
    bool created = !want_created;
    uint64_t forgot = 99;
    assert_int_equal(shm_resp_open(t, name, n, reg, &created, &forgot, err, sizeof(err)), 0);
    assert_int_equal(created, want_created);
    return forgot;
}

static void open_ok(struct shm_resp_table *t, uint64_t n, bool want_created)
{
    assert_int_equal(open_for(t, n, want_created, REGISTRY), 0);
}

#define TTL 60000u

/* put and get with a worker (slot, gen) of the anonymous tenant. */
static int put(struct shm_resp_table *t, const char *id, size_t len, uint32_t slot, uint32_t gen,
               uint64_t now)
{
    struct shm_resp_owner o = {.slot = slot, .generation = gen};
    return shm_resp_put(t, id, len, &o, now, TTL);
}

static int get(struct shm_resp_table *t, const char *id, size_t len, uint64_t now, uint64_t ttl,
               uint32_t *slot, uint32_t *gen)
{
    struct shm_resp_owner o = {0};
    int rc = shm_resp_get(t, id, len, now, ttl, &o);
    *slot = o.slot;
    *gen = o.generation;
    return rc;
}

static void test_put_get_and_shared(void **state)
{
    (void)state;
    struct shm_resp_table a, b;
    open_ok(&a, 100, true);
    assert_int_equal(a.n_entries, 104); /* rounded up to whole sets */
    assert_int_equal(put(&a, "resp_1", 6, 3, 7, 1000), 0);
    uint32_t slot = 0, gen = 0;
    assert_int_equal(get(&a, "resp_1", 6, 1001, 60000, &slot, &gen), 0);
    assert_int_equal(slot, 3);
    assert_int_equal(gen, 7);
    assert_int_equal(get(&a, "resp_2", 6, 1001, 60000, &slot, &gen), -ENOENT);
    assert_int_equal(get(&a, "resp_", 5, 1001, 60000, &slot, &gen), -ENOENT);
    /* A second opener (another data plane) keeps the size and sees the id. */
    open_ok(&b, 5000, false);
    assert_int_equal(b.n_entries, 104);
    assert_int_equal(get(&b, "resp_1", 6, 1002, 60000, &slot, &gen), 0);
    /* A live id is not moved to another worker (security finding 13). */
    assert_int_equal(put(&b, "resp_1", 6, 4, 1, 1003), -EEXIST);
    assert_int_equal(get(&a, "resp_1", 6, 1004, 60000, &slot, &gen), 0);
    assert_int_equal(slot, 3);
    /* Its own worker may store it again. */
    assert_int_equal(put(&b, "resp_1", 6, 3, 7, 1005), 0);
    /* Ids too long or empty are refused. */
    char longid[SHM_RESP_ID_MAX + 2];
    memset(longid, 'x', sizeof(longid));
    assert_int_equal(put(&a, longid, sizeof(longid), 1, 1, 1), -EINVAL);
    assert_int_equal(put(&a, "", 0, 1, 1, 1), -EINVAL);
    assert_int_equal(put(&a, longid, SHM_RESP_ID_MAX, 2, 2, 1), 0);
    assert_int_equal(get(&b, longid, SHM_RESP_ID_MAX, 2, 60000, &slot, &gen), 0);
    assert_int_equal(slot, 2);
    shm_resp_close(&a);
    shm_resp_close(&b);
    shm_resp_close(&b); /* closed: no-op */
}

static void test_ttl(void **state)
{
    (void)state;
    struct shm_resp_table t;
    open_ok(&t, 64, true);
    assert_int_equal(put(&t, "r", 1, 1, 1, 1000), 0);
    uint32_t slot, gen;
    assert_int_equal(get(&t, "r", 1, 1000 + 500, 500, &slot, &gen), 0);
    assert_int_equal(get(&t, "r", 1, 1000 + 501, 500, &slot, &gen), -ENOENT);
    shm_resp_close(&t);
}

/* One set of SHM_RESP_WAYS entries: the ninth id takes the least recently
 * used entry, and a hit counts as a use. */
static void test_lru_when_full(void **state)
{
    (void)state;
    struct shm_resp_table t;
    open_ok(&t, SHM_RESP_WAYS, true);
    char id[16];
    for (unsigned i = 0; i < SHM_RESP_WAYS; i++) {
        snprintf(id, sizeof(id), "id%u", i);
        assert_int_equal(put(&t, id, strlen(id), i, 1, 100 + i), 0);
    }
    uint32_t slot, gen;
    assert_int_equal(get(&t, "id0", 3, 200, 60000, &slot, &gen), 0); /* id0 used */
    assert_int_equal(put(&t, "new", 3, 99, 1, 201), 0);
    assert_int_equal(get(&t, "id1", 3, 202, 60000, &slot, &gen), -ENOENT);
    assert_int_equal(get(&t, "id0", 3, 202, 60000, &slot, &gen), 0);
    assert_int_equal(get(&t, "new", 3, 202, 60000, &slot, &gen), 0);
    assert_int_equal(slot, 99);
    struct shm_resp_stats st;
    shm_resp_stats(&t, &st);
    assert_int_equal(st.inserts, SHM_RESP_WAYS + 1);
    assert_int_equal(st.evictions, 1);
    shm_resp_close(&t);
}

static void test_refuses_foreign_and_other_layouts(void **state)
{
    (void)state;
    struct shm_resp_table t;
    open_ok(&t, 64, true);
    shm_resp_close(&t);
    /* Opened to others: refused. */
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    char err[256];
    bool created;
    uint64_t forgot;
    assert_int_equal(shm_resp_open(&t, name, 64, REGISTRY, &created, &forgot, err, sizeof(err)),
                     -EPERM);
    assert_non_null(strstr(err, "0644"));
    assert_int_equal(fchmod(fd, 0600), 0);
    /* Another layout version (second word of the header): refused. */
    uint32_t *words = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(words != MAP_FAILED);
    words[2] = 99;
    assert_int_equal(shm_resp_open(&t, name, 64, REGISTRY, &created, &forgot, err, sizeof(err)),
                     -EPROTO);
    assert_non_null(strstr(err, "layout version 99"));
    munmap(words, 64);
    close(fd);
    shm_unlink(name);
    /* Left unpublished by a dead creator (no lock, no magic): replaced. */
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    open_ok(&t, 64, true);
    shm_resp_close(&t);
}

/* Slots and generations of another registry (a --fresh start) mean
 * nothing: an opener for a new registry empties the table, once. */
static void test_another_registry_forgets(void **state)
{
    (void)state;
    struct shm_resp_table a, b, c;
    open_ok(&a, 64, true);
    assert_int_equal(put(&a, "r1", 2, 0, 1, 10), 0);
    assert_int_equal(put(&a, "r2", 2, 1, 1, 10), 0);
    assert_int_equal(open_for(&b, 64, false, REGISTRY + 1), 2);
    uint32_t slot, gen;
    assert_int_equal(get(&a, "r1", 2, 11, 60000, &slot, &gen), -ENOENT);
    assert_int_equal(put(&b, "r3", 2, 0, 1, 12), 0);
    /* A second opener of the new registry keeps what it holds. */
    assert_int_equal(open_for(&c, 64, false, REGISTRY + 1), 0);
    assert_int_equal(get(&c, "r3", 2, 13, 60000, &slot, &gen), 0);
    shm_resp_close(&a);
    shm_resp_close(&b);
    shm_resp_close(&c);
}

/* A new table is empty as created: neither its creator nor a second
 * opener reads its entries, so only the pages written hold memory
 * (reading a page of a shared-memory object allocates it). */
static void test_new_table_costs_no_memory(void **state)
{
    (void)state;
    struct shm_resp_table a, b;
    open_ok(&a, 65536, true);
    open_ok(&b, 65536, false);
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (a.size + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(pages);
    assert_non_null(vec);
    assert_int_equal(mincore(a.base, a.size, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1u;
    free(vec);
    assert_true(pages > 1000);
    assert_true(resident <= 2);
    assert_int_equal(put(&a, "r1", 2, 0, 1, 10), 0);
    uint32_t slot, gen;
    assert_int_equal(get(&b, "r1", 2, 11, 60000, &slot, &gen), 0);
    shm_resp_close(&a);
    shm_resp_close(&b);
}

/* Security finding 12 and 13: an entry keeps the tenant it was made for,
 * and a live id is never moved to another worker, generation or tenant;
 * an expired one may be. */
static void test_owner_is_kept(void **state)
{
    (void)state;
    struct shm_resp_table t;
    open_ok(&t, 64, true);
    struct shm_resp_owner a = {.slot = 1, .generation = 2, .tenant = 0xa11ce};
    struct shm_resp_owner got = {0};
    assert_int_equal(shm_resp_put(&t, "resp_a", 6, &a, 1000, 500), 0);
    assert_int_equal(shm_resp_get(&t, "resp_a", 6, 1001, 500, &got), 0);
    assert_int_equal(got.slot, 1);
    assert_int_equal(got.generation, 2);
    assert_int_equal(got.tenant, 0xa11ce);
    struct shm_resp_owner other[] = {
        {.slot = 9, .generation = 2, .tenant = 0xa11ce}, /* another worker */
        {.slot = 1, .generation = 3, .tenant = 0xa11ce}, /* its slot's next occupant */
        {.slot = 1, .generation = 2, .tenant = 0xb0b},   /* another tenant, same worker */
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        assert_int_equal(shm_resp_put(&t, "resp_a", 6, &other[i], 1100, 500), -EEXIST);
    assert_int_equal(shm_resp_get(&t, "resp_a", 6, 1200, 500, &got), 0);
    assert_int_equal(got.slot, 1);
    assert_int_equal(got.generation, 2);
    assert_int_equal(got.tenant, 0xa11ce);
    /* Past the TTL it is absent, and may be made again by anyone. */
    assert_int_equal(shm_resp_put(&t, "resp_a", 6, &other[0], 1501, 500), 0);
    assert_int_equal(shm_resp_get(&t, "resp_a", 6, 1502, 500, &got), 0);
    assert_int_equal(got.slot, 9);
    shm_resp_close(&t);
}

/* An entry of another id with the same hash is another id: a put does not
 * take it over as "the same id" (the whole id is compared, finding 13).
 * The colliding entry is forged: an XXH3 collision is not at hand. */
static void test_same_hash_is_not_same_id(void **state)
{
    (void)state;
    struct shm_resp_table t;
    open_ok(&t, SHM_RESP_WAYS, true); /* one set */
    struct shm_resp_owner victim = {.slot = 5, .generation = 1, .tenant = 7};
    assert_int_equal(shm_resp_put(&t, "resp_X", 6, &victim, 100, TTL), 0);
    /* Entry 0 (header 64 bytes; key at +8): resp_X under resp_1's hash. */
    uint64_t *entry0 = (uint64_t *)((char *)t.base + 64);
    entry0[1] = XXH3_64bits("resp_1", 6);
    struct shm_resp_owner got;
    assert_int_equal(shm_resp_get(&t, "resp_1", 6, 101, TTL, &got), -ENOENT);
    struct shm_resp_owner w = {.slot = 6, .generation = 1, .tenant = 8};
    assert_int_equal(shm_resp_put(&t, "resp_1", 6, &w, 102, TTL), 0);
    assert_int_equal(shm_resp_get(&t, "resp_1", 6, 103, TTL, &got), 0);
    assert_int_equal(got.slot, 6);
    /* The forged entry is still there, resp_X's bytes and owner untouched. */
    assert_int_equal(entry0[1], XXH3_64bits("resp_1", 6));
    assert_int_equal(((uint32_t *)entry0)[8], 5);
    assert_memory_equal((char *)t.base + 64 + 56, "resp_X", 6);
    shm_resp_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_and_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_when_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuses_foreign_and_other_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_another_registry_forgets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_table_costs_no_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_is_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_hash_is_not_same_id, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
