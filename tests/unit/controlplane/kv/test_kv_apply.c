/*
 * Unit tests of controlplane/kv/kv_apply.c with synthetic event batches over a
 * private holder index: a stored chain lands under the keys a request's
 * tokens hash to (the same keys a data plane computes with tkc_chain);
 * parents resolve across batches; removal, AllBlocksCleared and a forget
 * withdraw facts; an unknown parent, another block size, a CPU block and an
 * unknown model are skipped and counted; a LoRA adapter's chain is seeded
 * with its name; a worker's map is bounded and what it drops leaves the
 * index too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/token_chain.h"
#include "controlplane/kv/kv_apply.h"

#define BS 4u

static int model_of(void *arg, uint32_t slot, const char *worker_id, char *out, size_t len)
{
    (void)arg;
    (void)worker_id;
    if (slot == 9)
        return -2; /* not known */
    snprintf(out, len, "%s", "base-model");
    return 0;
}

struct fixture {
    struct kvh_index *ix;
    struct kv_apply *a;
    struct kv_event_sink sink;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->ix = kvh_create(1 << 14);
    f->a = kva_create(f->ix, BS, 16, 1000, model_of, NULL);
    f->sink = kva_sink(f->a);
    *state = f;
    return f->ix != NULL && f->a != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    kva_destroy(f->a);
    kvh_destroy(f->ix);
    free(f);
    return 0;
}

/* Tokens of a prompt: block b of prompt p is {p, b, b, b}. */
static void tokens_of(unsigned p, size_t from_block, size_t n_blocks, uint32_t *out)
{
    for (size_t b = 0; b < n_blocks; b++)
        for (unsigned t = 0; t < BS; t++)
            out[b * BS + t] = t == 0 ? p : (uint32_t)(from_block + b);
}

/* What a data plane computes for the first n blocks of prompt p. */
static void keys_of(const char *model, unsigned p, size_t n, uint64_t *out)
{
    uint32_t tok[64 * BS];
    tokens_of(p, 0, n, tok);
    assert_int_equal(tkc_chain(tkc_seed(model), tok, n * BS, BS, out, n), n);
}

static uint64_t vh(unsigned p, size_t b)
{
    return ((uint64_t)p << 32) ^ (b * 0x9e3779b97f4a7c15ull) ^ 0xabcdefull;
}

/* BlockStored of blocks [from, from + n) of prompt p, parent = block from-1. */
static void store(struct fixture *f, uint32_t slot, unsigned p, size_t from, size_t n,
                  uint32_t block_size, enum kv_medium medium, const char *lora)
{
    uint64_t hashes[64];
    uint32_t tok[64 * BS];
    for (size_t i = 0; i < n; i++)
        hashes[i] = vh(p, from + i);
    tokens_of(p, from, n, tok);
    struct kv_event ev = {
        .kind = KV_EVENT_BLOCK_STORED,
        .block_hashes = hashes,
        .n_block_hashes = n,
        .has_parent = from > 0,
        .parent_block_hash = from > 0 ? vh(p, from - 1) : 0,
        .token_ids = tok,
        .n_token_ids = n * block_size,
        .block_size = block_size,
        .medium = medium,
        .lora_name = lora,
    };
    struct kv_event_batch batch = {.seq = 1, .dp_rank = -1, .events = &ev, .n_events = 1};
    f->sink.on_batch(f->sink.ctx, slot, "w", &batch);
}

static void removed(struct fixture *f, uint32_t slot, unsigned p, size_t from, size_t n)
{
    uint64_t hashes[64];
    for (size_t i = 0; i < n; i++)
        hashes[i] = vh(p, from + i);
    struct kv_event ev = {.kind = KV_EVENT_BLOCK_REMOVED,
                          .block_hashes = hashes,
                          .n_block_hashes = n,
                          .medium = KV_MEDIUM_GPU};
    struct kv_event_batch batch = {.seq = 2, .events = &ev, .n_events = 1};
    f->sink.on_batch(f->sink.ctx, slot, "w", &batch);
}

static size_t match(struct fixture *f, const uint64_t *keys, size_t n, uint32_t slot)
{
    struct pix_slot_set *set = calloc(1, sizeof(*set));
    pix_slots_add(set, slot);
    uint32_t holders[4];
    size_t nh;
    size_t m = kvh_longest_match(f->ix, keys, n, set, holders, 4, &nh);
    free(set);
    return m;
}

static void test_chain_placed_and_parents_across_batches(void **state)
{
    struct fixture *f = *state;
    uint64_t keys[8];
    keys_of("base-model", 1, 8, keys);
    store(f, 2, 1, 0, 3, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(match(f, keys, 8, 2), 3);
    /* The next batch continues the chain from its parent. */
    store(f, 2, 1, 3, 2, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(match(f, keys, 8, 2), 5);
    for (size_t i = 0; i < 5; i++)
        assert_true(kvh_has(f->ix, keys[i], 2));
    assert_false(kvh_has(f->ix, keys[5], 2));
    assert_int_equal(kva_map_size(f->a, 2), 5);
    struct kva_stats st;
    kva_stats(f->a, &st);
    assert_int_equal(st.applied[KV_EVENT_BLOCK_STORED], 2);
    assert_int_equal(st.blocks_stored, 5);
    /* Another prompt sharing nothing is not matched by these keys. */
    uint64_t other[3];
    keys_of("base-model", 2, 3, other);
    assert_int_equal(match(f, other, 3, 2), 0);
    /* Same tokens, another model: other keys. */
    keys_of("other-model", 1, 3, other);
    assert_int_equal(match(f, other, 3, 2), 0);
}

static void test_removal_and_forget(void **state)
{
    struct fixture *f = *state;
    uint64_t keys[6];
    keys_of("base-model", 1, 6, keys);
    store(f, 3, 1, 0, 6, BS, KV_MEDIUM_GPU, NULL);
    store(f, 4, 1, 0, 6, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kvh_count(f->ix), 12);
    /* The tail goes first, as vLLM evicts. */
    removed(f, 3, 1, 4, 2);
    assert_int_equal(match(f, keys, 6, 3), 4);
    assert_false(kvh_has(f->ix, keys[4], 3));
    assert_true(kvh_has(f->ix, keys[4], 4));
    assert_int_equal(kva_map_size(f->a, 3), 4);
    /* A removed block's children can no longer be placed under it. */
    store(f, 3, 1, 5, 1, BS, KV_MEDIUM_GPU, NULL);
    struct kva_stats st;
    kva_stats(f->a, &st);
    assert_int_equal(st.skipped[KVA_SKIP_UNKNOWN_PARENT], 1);
    /* AllBlocksCleared: everything of slot 3, nothing of slot 4. */
    struct kv_event clr = {.kind = KV_EVENT_ALL_BLOCKS_CLEARED};
    struct kv_event_batch b = {.seq = 3, .events = &clr, .n_events = 1};
    f->sink.on_batch(f->sink.ctx, 3, "w", &b);
    assert_int_equal(match(f, keys, 6, 3), 0);
    assert_int_equal(kva_map_size(f->a, 3), 0);
    assert_int_equal(match(f, keys, 6, 4), 6);
    /* on_forget: the same for slot 4. */
    f->sink.on_forget(f->sink.ctx, 4, "w4");
    assert_int_equal(match(f, keys, 6, 4), 0);
    assert_int_equal(kvh_count(f->ix), 0);
    /* After a forget a worker's new chains are placed again. */
    store(f, 4, 1, 0, 2, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(match(f, keys, 6, 4), 2);
    kva_stats(f->a, &st);
    assert_int_equal(st.forgets, 2);
    assert_int_equal(st.applied[KV_EVENT_ALL_BLOCKS_CLEARED], 1);
}

static void test_skips_are_counted(void **state)
{
    struct fixture *f = *state;
    uint64_t keys[4];
    keys_of("base-model", 1, 4, keys);
    /* A chain whose start we never saw. */
    store(f, 1, 1, 2, 2, BS, KV_MEDIUM_GPU, NULL);
    /* Another block size. */
    store(f, 1, 1, 0, 2, BS * 2, KV_MEDIUM_GPU, NULL);
    /* A CPU copy. */
    store(f, 1, 1, 0, 2, BS, KV_MEDIUM_CPU, NULL);
    /* A worker whose model is not known. */
    store(f, 9, 1, 0, 2, BS, KV_MEDIUM_GPU, NULL);
    /* A slot beyond the registry. */
    store(f, 16, 1, 0, 2, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kvh_count(f->ix), 0);
    assert_int_equal(match(f, keys, 4, 1), 0);
    struct kva_stats st;
    kva_stats(f->a, &st);
    assert_int_equal(st.skipped[KVA_SKIP_UNKNOWN_PARENT], 1);
    assert_int_equal(st.skipped[KVA_SKIP_BLOCK_SIZE], 1);
    assert_int_equal(st.skipped[KVA_SKIP_MEDIUM], 1);
    assert_int_equal(st.skipped[KVA_SKIP_UNKNOWN_MODEL], 1);
    assert_int_equal(st.skipped[KVA_SKIP_MALFORMED], 1);
    assert_int_equal(st.applied[KV_EVENT_BLOCK_STORED], 0);
    /* The control plane's page shows them. */
    struct buf page = BUF_INIT(1 << 16);
    struct prom_writer w;
    prom_init(&w, &page);
    kva_metrics_write(f->a, &w);
    assert_int_equal(prom_error(&w), 0);
    assert_non_null(strstr(page.data, "switchyard_kv_events_skipped_total{reason=\"medium\"} 1"));
    assert_non_null(strstr(page.data, "switchyard_kv_index_facts 0"));
    buf_fini(&page);
    /* Token ids that do not fill the blocks. */
    uint64_t h[2] = {1, 2};
    uint32_t tok[3] = {1, 2, 3};
    struct kv_event ev = {.kind = KV_EVENT_BLOCK_STORED,
                          .block_hashes = h,
                          .n_block_hashes = 2,
                          .token_ids = tok,
                          .n_token_ids = 3,
                          .block_size = BS};
    struct kv_event_batch b = {.events = &ev, .n_events = 1};
    f->sink.on_batch(f->sink.ctx, 1, "w", &b);
    kva_stats(f->a, &st);
    assert_int_equal(st.skipped[KVA_SKIP_MALFORMED], 2);
    assert_int_equal(kvh_count(f->ix), 0);
}

static void test_lora_seed(void **state)
{
    struct fixture *f = *state;
    uint64_t lora[3], base[3];
    keys_of("my-adapter", 1, 3, lora);
    keys_of("base-model", 1, 3, base);
    store(f, 5, 1, 0, 3, BS, KV_MEDIUM_GPU, "my-adapter");
    assert_int_equal(match(f, lora, 3, 5), 3);
    assert_int_equal(match(f, base, 3, 5), 0);
    /* Its children follow the adapter's chain through the parent. */
    uint64_t more[5];
    keys_of("my-adapter", 1, 5, more);
    store(f, 5, 1, 3, 2, BS, KV_MEDIUM_GPU, "my-adapter");
    assert_int_equal(match(f, more, 5, 5), 5);
}

/* A map of 10 entries: the 11th block evicts the oldest, in the map and in
 * the index, and a later removal of the evicted block changes nothing. */
static void test_map_is_bounded(void **state)
{
    (void)state;
    struct kvh_index *ix = kvh_create(1 << 14);
    struct kv_apply *a = kva_create(ix, BS, 4, 10, model_of, NULL);
    struct fixture f = {.ix = ix, .a = a, .sink = kva_sink(a)};
    uint64_t keys[30];
    keys_of("base-model", 7, 30, keys);
    store(&f, 0, 7, 0, 10, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kva_map_size(a, 0), 10);
    assert_int_equal(kvh_count(ix), 10);
    store(&f, 0, 7, 10, 1, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kva_map_size(a, 0), 10);
    assert_int_equal(kvh_count(ix), 10);
    assert_false(kvh_has(ix, keys[0], 0));
    assert_true(kvh_has(ix, keys[10], 0));
    struct kva_stats st;
    kva_stats(a, &st);
    assert_int_equal(st.map_evictions, 1);
    /* Removed blocks leave stale ring entries; the bound still holds and
     * only live entries are evicted. */
    removed(&f, 0, 7, 5, 3);
    assert_int_equal(kva_map_size(a, 0), 7);
    for (size_t b = 11; b < 30; b++)
        store(&f, 0, 7, b, 1, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kva_map_size(a, 0), 10);
    assert_int_equal(kvh_count(ix), 10);
    for (size_t b = 0; b < 20; b++)
        assert_false(kvh_has(ix, keys[b], 0));
    for (size_t b = 20; b < 30; b++)
        assert_true(kvh_has(ix, keys[b], 0));
    /* Thousands of blocks: the map grows and stays bounded. */
    struct kv_apply *big = kva_create(ix, BS, 4, 3000, model_of, NULL);
    struct fixture g = {.ix = ix, .a = big, .sink = kva_sink(big)};
    for (unsigned p = 100; p < 1100; p++)
        store(&g, 1, p, 0, 4, BS, KV_MEDIUM_GPU, NULL);
    assert_int_equal(kva_map_size(big, 1), 3000);
    assert_int_equal(kvh_slot_count(ix, 1), 3000);
    kva_destroy(big);
    kva_destroy(a);
    kvh_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chain_placed_and_parents_across_batches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_removal_and_forget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_skips_are_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lora_seed, setup, teardown),
        cmocka_unit_test(test_map_is_bounded),
    };
    return cmocka_run_group_tests_name("kv_apply", tests, NULL, NULL);
}
