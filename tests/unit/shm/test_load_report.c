/*
 * Unit tests of the load reports in worker slots (shm/load_report.c): a
 * report round-trips; it is tied to the slot's generation (the next
 * occupant of a slot never sees its predecessor's report, and a write for
 * a replaced worker is refused); writing one touches no load counter and
 * no registry field; a reader racing a writer thread never sees a torn
 * report; a report left half-written by a dead writer is dropped on repair.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/layout_private.h"
#include "shm/load.h"
#include "shm/load_report.h"
#include "shm/registry.h"
#include "shm/segment.h"

static char test_name[64];

static int setup_name(void **state)
{
    (void)state;
    static int n;
    snprintf(test_name, sizeof(test_name), "/sy-unit-lr-%d-%d", (int)getpid(), n++);
    return 0;
}

static int teardown_unlink(void **state)
{
    (void)state;
    shm_unlink(test_name);
    return 0;
}

static void open_owner(struct shm_segment *seg)
{
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    if (shm_segment_open_owner(seg, test_name, 8, 2, &outcome, err, sizeof(err)) != 0)
        fail_msg("open_owner: %s", err);
}

static struct shm_worker_info add_worker(struct shm_segment *seg, const char *id, const char *url)
{
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR, .healthy = true}, out;
    snprintf(in.id, sizeof(in.id), "%s", id);
    snprintf(in.url, sizeof(in.url), "%s", url);
    snprintf(in.model, sizeof(in.model), "m");
    assert_int_equal(shm_registry_add(seg, &in, &out), 0);
    return out;
}

static void test_round_trip_and_generation(void **state)
{
    (void)state;
    struct shm_segment seg;
    open_owner(&seg);
    struct shm_worker_info w = add_worker(&seg, "w1", "http://127.0.0.1:1");
    struct shm_load_report r;
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), -ENOENT);
    struct shm_load_report in = {
        .running = 5, .waiting = 2, .kv_cache_usage = 0.25, .own_inflight = 3, .unix_ms = 1234};
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), 0);
    assert_int_equal(r.running, 5);
    assert_int_equal(r.waiting, 2);
    assert_int_equal(r.own_inflight, 3);
    assert_int_equal(r.unix_ms, 1234);
    assert_true(r.kv_cache_usage > 0.2499 && r.kv_cache_usage < 0.2501);
    assert_true(shm_adapter_set_is_empty(&r.running_adapters));
    /* The running adapters ride in the report. */
    shm_adapter_set_add(&in.running_adapters, shm_adapter_hash("sql", 3));
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), 0);
    assert_memory_equal(&r.running_adapters, &in.running_adapters, sizeof(in.running_adapters));
    assert_true(shm_adapter_set_may_have(&r.running_adapters, shm_adapter_hash("sql", 3)));
    /* Out of range usage is clamped. */
    in.kv_cache_usage = 3.0;
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), 0);
    assert_true(r.kv_cache_usage == 1.0);
    /* Another generation's reader sees nothing; a zero timestamp is refused. */
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation + 1, &r), -ENOENT);
    in.unix_ms = 0;
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), -EINVAL);
    in.unix_ms = 99;
    assert_int_equal(shm_load_report_write(&seg, 8, w.generation, &in), -EINVAL);
    assert_int_equal(shm_load_report_read(&seg, 8, w.generation, &r), -ENOENT);

    /* The worker leaves, another takes the slot: no inherited report, and a
     * late write for the old worker is refused. */
    assert_int_equal(shm_registry_remove(&seg, w.slot), 0);
    struct shm_worker_info w2 = add_worker(&seg, "w2", "http://127.0.0.1:2");
    assert_int_equal(w2.slot, w.slot);
    assert_int_not_equal(w2.generation, w.generation);
    assert_int_equal(shm_load_report_read(&seg, w2.slot, w2.generation, &r), -ENOENT);
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), -ESTALE);
    shm_segment_close(&seg);
}

/* Invariant 10: a report writes no lease counter and no registry field. */
static void test_report_touches_no_counter(void **state)
{
    (void)state;
    struct shm_segment seg;
    open_owner(&seg);
    struct shm_worker_info w = add_worker(&seg, "w1", "http://127.0.0.1:1");
    size_t loads_bytes = (size_t)seg.max_workers * seg.lines_per_worker * SHM_CACHE_LINE;
    unsigned char before[4096];
    assert_true(loads_bytes <= sizeof(before));
    memcpy(before, (const void *)seg.loads, loads_bytes);
    uint64_t changes = shm_registry_changes(&seg);
    uint32_t reg_seq = atomic_load(&seg.slots[w.slot].seq);
    struct shm_load_report in = {.running = 40, .waiting = 9, .unix_ms = 77};
    for (int i = 0; i < 100; i++)
        assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    assert_memory_equal(before, (const void *)seg.loads, loads_bytes);
    assert_int_equal(shm_registry_changes(&seg), changes);
    assert_int_equal(atomic_load(&seg.slots[w.slot].seq), reg_seq);
    assert_int_equal(shm_load_of(&seg, w.slot, w.generation), 0);
    struct shm_worker_info back;
    assert_int_equal(shm_registry_read_slot(&seg, w.slot, &back), 0);
    assert_string_equal(back.id, "w1");
    shm_segment_close(&seg);
}

struct stress {
    struct shm_segment *seg;
    uint32_t slot, generation;
    atomic_bool stop;
};

/* Every report written keeps running == waiting == own == unix_ms ==
 * both words of the adapter set. */
static void *writer(void *arg)
{
    struct stress *st = arg;
    for (uint32_t i = 1; !atomic_load(&st->stop); i++) {
        struct shm_load_report r = {.running = i,
                                    .waiting = i,
                                    .own_inflight = i,
                                    .unix_ms = i,
                                    .running_adapters = {{i, i}}};
        shm_load_report_write(st->seg, st->slot, st->generation, &r);
    }
    return NULL;
}

static void test_no_torn_reads(void **state)
{
    (void)state;
    struct shm_segment seg;
    open_owner(&seg);
    struct shm_worker_info w = add_worker(&seg, "w1", "http://127.0.0.1:1");
    struct stress st = {.seg = &seg, .slot = w.slot, .generation = w.generation};
    atomic_init(&st.stop, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer, &st), 0);
    uint64_t good = 0, torn = 0;
    for (int i = 0; i < 2000000; i++) {
        struct shm_load_report r;
        if (shm_load_report_read(&seg, w.slot, w.generation, &r) != 0)
            continue;
        good++;
        if (r.running != r.waiting || r.running != r.own_inflight || r.running != r.unix_ms ||
            r.running != r.running_adapters.bits[0] || r.running != r.running_adapters.bits[1])
            torn++;
    }
    atomic_store(&st.stop, true);
    pthread_join(t, NULL);
    assert_true(good > 0);
    assert_int_equal(torn, 0);
    shm_segment_close(&seg);
}

static void test_repair_drops_half_written(void **state)
{
    (void)state;
    struct shm_segment seg;
    open_owner(&seg);
    struct shm_worker_info w = add_worker(&seg, "w1", "http://127.0.0.1:1");
    struct shm_load_report in = {.running = 1, .unix_ms = 5};
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    /* A writer that died mid-write leaves seq odd. */
    atomic_fetch_add(&seg.slots[w.slot].report_seq, 1);
    struct shm_load_report r;
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), -EAGAIN);
    assert_int_equal(shm_load_report_repair(&seg), 1);
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), -ENOENT);
    assert_int_equal(shm_load_report_repair(&seg), 0);
    assert_int_equal(shm_load_report_write(&seg, w.slot, w.generation, &in), 0);
    assert_int_equal(shm_load_report_read(&seg, w.slot, w.generation, &r), 0);
    shm_segment_close(&seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_generation, setup_name,
                                        teardown_unlink),
        cmocka_unit_test_setup_teardown(test_report_touches_no_counter, setup_name,
                                        teardown_unlink),
        cmocka_unit_test_setup_teardown(test_no_torn_reads, setup_name, teardown_unlink),
        cmocka_unit_test_setup_teardown(test_repair_drops_half_written, setup_name,
                                        teardown_unlink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
