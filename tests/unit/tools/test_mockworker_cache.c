/*
 * Unit tests of the mock worker's pure parts: token and block arithmetic,
 * chained block hashing, the LRU KV cache (eviction order, prefix matching,
 * block ids), the FIFO scheduler's accounting (admission, waiting, wake-up
 * masks, cancels in every state, prefix and KV usage counters) and the
 * fault merging rules (the timer heap has its own: test_mockworker_timer_heap). The .c files are
 * included so static helpers are reachable; the archive's copies are then never linked.
 */
#include "tests/mockworker/cost_model.c"
#include "tests/mockworker/faults.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* ---- tokens and hashing -------------------------------------------------------- */

static void test_prompt_tokens_round_up(void **state)
{
    (void)state;
    assert_int_equal(mw_prompt_tokens(0), 0);
    assert_int_equal(mw_prompt_tokens(1), 1);
    assert_int_equal(mw_prompt_tokens(4), 1);
    assert_int_equal(mw_prompt_tokens(5), 2);
    assert_int_equal(mw_prompt_tokens(64), 16);
}

static void test_full_blocks_ignore_partial_tail(void **state)
{
    (void)state;
    assert_int_equal(mw_full_blocks(63, 16), 0);
    assert_int_equal(mw_full_blocks(64, 16), 1);
    assert_int_equal(mw_full_blocks(130, 16), 2);
    assert_int_equal(mw_full_blocks(130, 1), 32);
    assert_int_equal(mw_full_blocks(100, 0), 0);
}

static void test_block_hashes_are_chained(void **state)
{
    (void)state;
    char a[192];
    char b[192];
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[10] = 'y'; /* differs in block 0 only */
    uint64_t ha[3];
    uint64_t hb[3];
    mw_block_hashes(a, sizeof(a), 16, ha, 3);
    mw_block_hashes(b, sizeof(b), 16, hb, 3);
    assert_int_equal(ha[0], XXH3_64bits_withSeed(a, 64, 0));
    assert_int_equal(ha[1], XXH3_64bits_withSeed(a + 64, 64, ha[0]));
    /* Blocks 1 and 2 have equal bytes but a different prefix: different hashes. */
    assert_true(ha[0] != hb[0]);
    assert_true(ha[1] != hb[1]);
    assert_true(ha[2] != hb[2]);
    /* Equal bytes at different positions hash differently too. */
    assert_true(ha[1] != ha[2]);

    char c[192];
    memcpy(c, a, sizeof(c));
    c[150] = 'z'; /* differs in block 2 only */
    uint64_t hc[3];
    mw_block_hashes(c, sizeof(c), 16, hc, 3);
    assert_int_equal(hc[0], ha[0]);
    assert_int_equal(hc[1], ha[1]);
    assert_true(hc[2] != ha[2]);
}

/* ---- KV cache ------------------------------------------------------------------- */

static void test_kv_lru_evicts_least_recently_used(void **state)
{
    (void)state;
    struct mw_kv_cache kv;
    assert_int_equal(mw_kv_init(&kv, 3), 0);
    uint64_t a = 11, b = 22, c = 33, d = 44;
    mw_kv_insert(&kv, &a, 1, NULL);
    mw_kv_insert(&kv, &b, 1, NULL);
    mw_kv_insert(&kv, &c, 1, NULL);
    assert_int_equal(kv.used, 3);
    mw_kv_insert(&kv, &a, 1, NULL); /* touch: b is now the oldest */
    mw_kv_insert(&kv, &d, 1, NULL);
    assert_int_equal(kv.used, 3);
    assert_int_equal(kv.evictions, 1);
    assert_true(mw_kv_find(&kv, a) != MW_KV_NONE);
    assert_true(mw_kv_find(&kv, b) == MW_KV_NONE);
    assert_true(mw_kv_find(&kv, c) != MW_KV_NONE);
    assert_true(mw_kv_find(&kv, d) != MW_KV_NONE);
    /* Lookups do not change recency: c is still the next victim. */
    assert_true(mw_kv_find(&kv, c) != MW_KV_NONE);
    uint64_t e = 55;
    mw_kv_insert(&kv, &e, 1, NULL);
    assert_true(mw_kv_find(&kv, c) == MW_KV_NONE);
    mw_kv_fini(&kv);
}

static void test_kv_keeps_prefix_head_over_tail(void **state)
{
    (void)state;
    struct mw_kv_cache kv;
    assert_int_equal(mw_kv_init(&kv, 4), 0);
    uint64_t p[6] = {1, 2, 3, 4, 5, 6};
    /* More blocks than capacity: the head of the prefix survives. */
    mw_kv_insert(&kv, p, 6, NULL);
    assert_int_equal(mw_kv_match_prefix(&kv, p, 6), 4);
    assert_true(mw_kv_find(&kv, 5) == MW_KV_NONE);
    mw_kv_clear(&kv);

    /* Within one prefix the tail is older than the head: it goes first. */
    mw_kv_insert(&kv, p, 3, NULL);
    uint64_t other = 99;
    mw_kv_insert(&kv, &other, 1, NULL);
    uint64_t more = 100;
    mw_kv_insert(&kv, &more, 1, NULL);
    assert_true(mw_kv_find(&kv, 3) == MW_KV_NONE);
    assert_int_equal(mw_kv_match_prefix(&kv, p, 3), 2);
    mw_kv_fini(&kv);
}

static void test_kv_match_stops_at_first_miss(void **state)
{
    (void)state;
    struct mw_kv_cache kv;
    assert_int_equal(mw_kv_init(&kv, 16), 0);
    uint64_t p[4] = {7, 8, 9, 10};
    mw_kv_insert(&kv, p, 1, NULL);
    mw_kv_insert(&kv, &p[2], 2, NULL); /* 9 and 10 present, 8 missing */
    assert_int_equal(mw_kv_match_prefix(&kv, p, 4), 1);
    assert_int_equal(mw_kv_match_prefix(&kv, &p[2], 2), 2);
    assert_int_equal(mw_kv_match_prefix(&kv, p, 0), 0);
    mw_kv_fini(&kv);
}

static void test_kv_ids_are_slots(void **state)
{
    (void)state;
    struct mw_kv_cache kv;
    assert_int_equal(mw_kv_init(&kv, 8), 0);
    uint64_t p[3] = {101, 102, 103};
    uint32_t ids[3];
    mw_kv_insert(&kv, p, 3, ids);
    for (int i = 0; i < 3; i++) {
        assert_true(ids[i] < 8);
        assert_int_equal(mw_kv_find(&kv, p[i]), ids[i]);
    }
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    /* Re-inserting keeps the ids. */
    uint32_t again[3];
    mw_kv_insert(&kv, p, 3, again);
    assert_memory_equal(ids, again, sizeof(ids));
    mw_kv_fini(&kv);
}

static void test_kv_many_colliding_buckets(void **state)
{
    (void)state;
    struct mw_kv_cache kv;
    assert_int_equal(mw_kv_init(&kv, 64), 0);
    /* Same low bits: one bucket chain, removal from its middle on eviction. */
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t h = (i << 32) | 5;
        mw_kv_insert(&kv, &h, 1, NULL);
        assert_true(mw_kv_find(&kv, h) != MW_KV_NONE);
    }
    assert_int_equal(kv.used, 64);
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t h = (i << 32) | 5;
        bool present = mw_kv_find(&kv, h) != MW_KV_NONE;
        assert_int_equal(present, i >= 1000 - 64);
    }
    mw_kv_fini(&kv);
}

/* ---- scheduler -------------------------------------------------------------------- */

static struct mw_sched_entry entry(unsigned owner, uint64_t prompt_tokens)
{
    struct mw_sched_entry x;
    memset(&x, 0, sizeof(x));
    x.owner = owner;
    x.prompt_tokens = prompt_tokens;
    x.use_prefix_cache = true;
    return x;
}

static void test_engine_fifo_admission(void **state)
{
    (void)state;
    struct mw_engine e;
    assert_int_equal(mw_engine_init(&e, 128, 16, 1), 0);
    struct mw_sched_entry a = entry(0, 10), b = entry(1, 10), c = entry(2, 10);
    assert_true(mw_engine_submit(&e, &a));
    assert_false(mw_engine_submit(&e, &b));
    assert_false(mw_engine_submit(&e, &c));
    struct mw_engine_snapshot s;
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.running, 1);
    assert_int_equal(s.waiting, 2);

    /* Finishing a admits b (oldest), not c, and names b's owner. */
    assert_int_equal(mw_engine_finish(&e, &a, 5), 1ull << 1);
    assert_int_equal(b.state, MW_SCHED_READY);
    assert_int_equal(c.state, MW_SCHED_WAITING);
    assert_null(mw_engine_take_ready(&e, 2));
    struct mw_sched_entry *got = mw_engine_take_ready(&e, 1);
    assert_ptr_equal(got, &b);
    assert_null(got->next);
    assert_int_equal(b.state, MW_SCHED_RUNNING);

    assert_int_equal(mw_engine_finish(&e, &b, 5), 1ull << 2);
    assert_ptr_equal(mw_engine_take_ready(&e, 2), &c);
    assert_int_equal(mw_engine_finish(&e, &c, 5), 0);
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.waiting, 0);
    assert_int_equal(s.held_blocks, 0);
    assert_int_equal(s.generation_tokens, 15);
    assert_int_equal(s.prompt_tokens, 30);
    /* A finished entry finishing again changes nothing. */
    assert_int_equal(mw_engine_finish(&e, &c, 5), 0);
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.generation_tokens, 15);
    mw_engine_fini(&e);
}

static void test_engine_no_overtaking_queue(void **state)
{
    (void)state;
    struct mw_engine e;
    assert_int_equal(mw_engine_init(&e, 128, 16, 2), 0);
    struct mw_sched_entry a = entry(0, 1), b = entry(0, 1), c = entry(0, 1), d = entry(0, 1);
    assert_true(mw_engine_submit(&e, &a));
    assert_true(mw_engine_submit(&e, &b));
    assert_false(mw_engine_submit(&e, &c));
    /* Cancel a waiting entry: no slot frees, nobody is woken. */
    assert_int_equal(mw_engine_finish(&e, &c, 0), 0);
    assert_int_equal(c.state, MW_SCHED_NONE);
    assert_false(mw_engine_submit(&e, &d));
    /* Several entries of one owner come back oldest first. */
    struct mw_sched_entry f = entry(0, 1);
    assert_false(mw_engine_submit(&e, &f));
    mw_engine_finish(&e, &a, 0);
    mw_engine_finish(&e, &b, 0);
    struct mw_sched_entry *got = mw_engine_take_ready(&e, 0);
    assert_ptr_equal(got, &d);
    assert_ptr_equal(got->next, &f);
    mw_engine_finish(&e, &d, 0);
    mw_engine_finish(&e, &f, 0);
    mw_engine_fini(&e);
}

static void test_engine_cancel_ready_entry_frees_slot(void **state)
{
    (void)state;
    struct mw_engine e;
    assert_int_equal(mw_engine_init(&e, 128, 16, 1), 0);
    struct mw_sched_entry a = entry(0, 1), b = entry(3, 1), c = entry(4, 1);
    assert_true(mw_engine_submit(&e, &a));
    assert_false(mw_engine_submit(&e, &b));
    assert_false(mw_engine_submit(&e, &c));
    assert_int_equal(mw_engine_finish(&e, &a, 0), 1ull << 3);
    /* b's client leaves before its loop took it: its slot goes to c. */
    assert_int_equal(mw_engine_finish(&e, &b, 0), 1ull << 4);
    assert_null(mw_engine_take_ready(&e, 3));
    assert_ptr_equal(mw_engine_take_ready(&e, 4), &c);
    struct mw_engine_snapshot s;
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.running, 1);
    assert_int_equal(s.waiting, 0);
    mw_engine_finish(&e, &c, 0);
    mw_engine_fini(&e);
}

static void test_engine_prefix_and_usage_accounting(void **state)
{
    (void)state;
    struct mw_engine e;
    assert_int_equal(mw_engine_init(&e, 10, 16, 8), 0);
    uint64_t h[3] = {1001, 1002, 1003};
    uint32_t ids[3];
    /* 3 full blocks + 8 tokens of tail: 56 tokens, 4 blocks held. */
    struct mw_sched_entry a = entry(0, 56);
    a.hashes = h;
    a.n_hashes = 3;
    a.block_ids = ids;
    assert_true(mw_engine_submit(&e, &a));
    assert_int_equal(a.hit_tokens, 0);
    assert_int_equal(a.compute_tokens, 56);
    assert_int_equal(a.held_blocks, 4);
    assert_int_equal(mw_kv_find(&e.kv, h[1]), ids[1]);

    struct mw_sched_entry b = entry(0, 56);
    b.hashes = h;
    b.n_hashes = 3;
    assert_true(mw_engine_submit(&e, &b));
    assert_int_equal(b.hit_tokens, 48);
    assert_int_equal(b.compute_tokens, 8);

    struct mw_engine_snapshot s;
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.prefix_query_tokens, 112);
    assert_int_equal(s.prefix_hit_tokens, 48);
    assert_int_equal(s.held_blocks, 8);
    assert_true(s.kv_usage > 0.79 && s.kv_usage < 0.81);
    assert_int_equal(s.kv_used_blocks, 3);

    /* Remote KV covers what the local cache misses, never more. */
    struct mw_sched_entry c = entry(0, 100);
    c.remote_tokens = 64;
    assert_true(mw_engine_submit(&e, &c));
    assert_int_equal(c.compute_tokens, 36);
    struct mw_sched_entry d = entry(0, 20);
    d.remote_tokens = 64;
    assert_true(mw_engine_submit(&e, &d));
    assert_int_equal(d.compute_tokens, 0);
    /* Usage is capped at 1 when held blocks exceed the capacity. */
    mw_engine_snapshot(&e, &s);
    assert_true(s.kv_usage <= 1.0);

    /* Embeddings skip the cache entirely. */
    struct mw_sched_entry x = entry(0, 56);
    x.hashes = h;
    x.n_hashes = 3;
    x.use_prefix_cache = false;
    assert_true(mw_engine_submit(&e, &x));
    assert_int_equal(x.hit_tokens, 0);
    assert_int_equal(x.compute_tokens, 56);

    mw_engine_finish(&e, &a, 1);
    mw_engine_finish(&e, &b, 1);
    mw_engine_finish(&e, &c, 1);
    mw_engine_finish(&e, &d, 1);
    mw_engine_finish(&e, &x, 0);
    mw_engine_reset(&e);
    mw_engine_snapshot(&e, &s);
    assert_int_equal(s.prefix_query_tokens, 0);
    assert_int_equal(s.kv_used_blocks, 0);
    assert_int_equal(s.held_blocks, 0);
    assert_int_equal(s.running, 0);
    mw_engine_fini(&e);
}

/* ---- faults ---------------------------------------------------------------------------- */

static int merge(struct mw_faults *f, const char *text)
{
    char err[256];
    json_t *obj = json_loads(text, JSON_DECODE_ANY, NULL);
    assert_non_null(obj);
    int rc = mw_faults_merge_json(f, obj, err, sizeof(err));
    json_decref(obj);
    return rc;
}

static void test_faults_merge_rules(void **state)
{
    (void)state;
    struct mw_faults f;
    memset(&f, 0, sizeof(f));
    assert_int_equal(merge(&f, "{\"fail_status\":503,\"fail_count\":2}"), 0);
    assert_int_equal(f.fail_status, 503);
    assert_int_equal(f.fail_count, 2);
    assert_int_equal(merge(&f, "{\"stall_ms\":10}"), 0);
    assert_int_equal(f.fail_count, 2); /* other fields untouched */
    assert_int_equal(merge(&f, "{\"fail_status\":500}"), 0);
    assert_int_equal(f.fail_count, MW_FAIL_COUNT_UNLIMITED);
    assert_int_equal(merge(&f, "{\"fail_status\":0}"), 0);
    assert_int_equal(f.fail_count, 0);
    /* All or nothing. */
    assert_int_equal(merge(&f, "{\"stall_ms\":20,\"nope\":1}"), -EINVAL);
    assert_int_equal(f.stall_ms, 10);
    assert_int_equal(merge(&f, "{\"stall_ms\":-1}"), -EINVAL);
    assert_int_equal(merge(&f, "{\"stall_ms\":true}"), -EINVAL);
    assert_int_equal(merge(&f, "{\"fail_status\":42}"), -EINVAL);
    assert_int_equal(merge(&f, "[]"), -EINVAL);
    assert_int_equal(merge(&f, "{\"response_id\":\"resp_x\"}"), 0);
    assert_string_equal(f.response_id, "resp_x");
    assert_int_equal(merge(&f, "{\"response_id\":1}"), -EINVAL);
    assert_int_equal(merge(&f, "{\"response_id\":\"\"}"), 0);
    assert_string_equal(f.response_id, "");
}

static void test_faults_arrival_consumes_count(void **state)
{
    (void)state;
    struct mw_fault_state fs;
    assert_int_equal(mw_fault_state_init(&fs), 0);
    struct mw_faults cur;
    char err[128];
    const char *body = "{\"fail_status\":429,\"fail_count\":2,\"stall_after_chunks\":3}";
    assert_int_equal(mw_fault_state_update(&fs, body, strlen(body), &cur, err, sizeof(err)), 0);
    struct mw_fault_plan p;
    mw_fault_state_arrival(&fs, &p);
    assert_int_equal(p.fail_status, 429);
    assert_int_equal(p.stall_ms, 0); /* stall_after_chunks alone is no stall */
    mw_fault_state_arrival(&fs, &p);
    assert_int_equal(p.fail_status, 429);
    mw_fault_state_arrival(&fs, &p);
    assert_int_equal(p.fail_status, 0);
    assert_int_equal(mw_fault_state_health(&fs), 200);
    body = "{\"health_status\":503}";
    assert_int_equal(mw_fault_state_update(&fs, body, strlen(body), &cur, err, sizeof(err)), 0);
    assert_int_equal(mw_fault_state_health(&fs), 503);
    assert_int_equal(mw_fault_state_update(&fs, "{", 1, &cur, err, sizeof(err)), -EINVAL);
    mw_fault_state_clear(&fs);
    assert_int_equal(mw_fault_state_health(&fs), 200);
    mw_fault_state_fini(&fs);
}

/* The /metrics faults: a stall in ms, garbage as a JSON boolean only. */
static void test_faults_metrics(void **state)
{
    (void)state;
    struct mw_faults f = {0};
    assert_int_equal(merge(&f, "{\"metrics_stall_ms\":1500,\"metrics_garbage\":true}"), 0);
    assert_int_equal(f.metrics_stall_ms, 1500);
    assert_true(f.metrics_garbage);
    assert_int_equal(merge(&f, "{\"metrics_garbage\":1}"), -EINVAL);
    assert_true(f.metrics_garbage);
    assert_int_equal(merge(&f, "{\"metrics_stall_ms\":-5}"), -EINVAL);
    assert_int_equal(merge(&f, "{\"metrics_garbage\":false,\"metrics_stall_ms\":0}"), 0);
    assert_false(f.metrics_garbage);
    assert_int_equal(f.metrics_stall_ms, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_tokens_round_up),
        cmocka_unit_test(test_full_blocks_ignore_partial_tail),
        cmocka_unit_test(test_block_hashes_are_chained),
        cmocka_unit_test(test_kv_lru_evicts_least_recently_used),
        cmocka_unit_test(test_kv_keeps_prefix_head_over_tail),
        cmocka_unit_test(test_kv_match_stops_at_first_miss),
        cmocka_unit_test(test_kv_ids_are_slots),
        cmocka_unit_test(test_kv_many_colliding_buckets),
        cmocka_unit_test(test_engine_fifo_admission),
        cmocka_unit_test(test_engine_no_overtaking_queue),
        cmocka_unit_test(test_engine_cancel_ready_entry_frees_slot),
        cmocka_unit_test(test_engine_prefix_and_usage_accounting),
        cmocka_unit_test(test_faults_merge_rules),
        cmocka_unit_test(test_faults_arrival_consumes_count),
        cmocka_unit_test(test_faults_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
