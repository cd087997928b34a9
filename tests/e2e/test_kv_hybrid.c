/*
 * End-to-end: precise_cache_aware over workers of a hybrid model (issue
 * #38). vLLM sends one BlockStored per KV-cache group: the full-attention
 * group stores every block, a sliding-window group only the blocks inside
 * its window, under the same hashes, with token_ids still covering the
 * whole run (vllm/v1/core/block_pool.py skips the masked blocks, not their
 * tokens), and each group removes its own blocks. The mocks publish exactly
 * that (--kv-groups hybrid: vLLM's bytes, batch positional, events maps with
 * group_idx, kv_cache_spec_kind and extra_keys).
 *
 * Before the fix the sliding group's event ("96 token ids for 2 blocks of
 * 16") failed the decoding of its whole batch and the subscriber resynced
 * the worker, forgetting every block of it: a hybrid model was never
 * routed precisely. Now the full-attention group is routed on, the others'
 * events are skipped and counted by kind, and one group's removal never
 * withdraws what the full-attention group holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/kv_holders.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"

#define WAIT_MS   H_PRECISE_WAIT_MS
#define MAX_CHAIN 64
#define RUN       6 /* prompts of the whole run */

static const char *const hybrid_args[] = {"--kv-groups", "hybrid", NULL};

static size_t n_blocks(const char *content)
{
    return (4 + strlen(content)) / H_PRECISE_BLOCK_TEXT;
}

/* How many of content's blocks the index says worker i holds. */
static size_t held(struct h_precise_fleet *f, size_t i, const char *content)
{
    uint64_t chain[MAX_CHAIN];
    size_t n = h_precise_chain(content, chain, MAX_CHAIN);
    uint32_t slot = h_precise_slot(&f->fleet, f->w[i].id);
    size_t k = 0;
    for (size_t b = 0; b < n; b++)
        k += kvh_has(f->ix, chain[b], slot);
    return k;
}

struct held_wait {
    struct h_precise_fleet *f;
    size_t i;
    const char *content;
};

static bool all_held(void *arg)
{
    struct held_wait *h = arg;
    return held(h->f, h->i, h->content) == n_blocks(h->content);
}

static void wait_held(struct h_precise_fleet *f, size_t i, const char *content)
{
    struct held_wait h = {f, i, content};
    if (h_wait_until(all_held, &h, WAIT_MS) != 0)
        fail_msg("%s holds %zu of %zu blocks after %d ms", f->w[i].id, held(f, i, content),
                 n_blocks(content), WAIT_MS);
}

static size_t worker_index(const struct h_precise_fleet *f, const char *id)
{
    for (size_t i = 0; i < f->fleet.n; i++)
        if (strcmp(f->w[i].id, id) == 0)
            return i;
    fail_msg("unknown worker %s", id);
    return 0;
}

static long long per_worker(const struct h_precise_fleet *f, const char *family, size_t i)
{
    char sample[160];
    snprintf(sample, sizeof(sample), "%s{worker=\"%s\"}", family, f->w[i].id);
    return h_precise_cp_metric(f, sample);
}

/* A whole run of prompts through the router: each is learned from the
 * full-attention group's events and routed back to its holder as
 * `affinity`, nothing is ever resynced or refused, and every prompt's
 * blocks are still held at the end (the sliding group's removals, which
 * its small pool makes all along, withdrew none of them). */
static void test_hybrid_model_routed_precisely_for_a_whole_run(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 2, .mock_args = hybrid_args});
    char *content[RUN];
    size_t holder[RUN];
    char worker[64], decision[64];
    for (size_t k = 0; k < RUN; k++) {
        content[k] = h_precise_blocks(3800 + (unsigned)k, 6);
        h_precise_fleet_chat(&f, content[k], worker, sizeof(worker), decision, sizeof(decision));
        assert_string_equal(decision, "no_match");
        holder[k] = worker_index(&f, worker);
        wait_held(&f, holder[k], content[k]);
        h_precise_fleet_chat(&f, content[k], worker, sizeof(worker), decision, sizeof(decision));
        assert_string_equal(decision, "affinity");
        assert_string_equal(worker, f.w[holder[k]].id);
    }
    for (size_t k = 0; k < RUN; k++)
        assert_int_equal(held(&f, holder[k], content[k]), n_blocks(content[k]));
    for (size_t i = 0; i < f.fleet.n; i++) {
        assert_int_equal(per_worker(&f, "switchyard_kv_events_resyncs_total", i), 0);
        assert_int_equal(per_worker(&f, "switchyard_kv_events_decode_errors_total", i), 0);
    }
    /* The sliding group's stores (one per prompt and probe) and removals
     * are skipped, and counted under its kind. */
    assert_true(h_precise_cp_metric(
                    &f, "switchyard_kv_events_group_skipped_total{kind=\"sliding_window\"}") >=
                2 * RUN);
    assert_int_equal(
        h_precise_cp_metric(&f, "switchyard_kv_events_skipped_total{reason=\"malformed\"}"), 0);
    for (size_t k = 0; k < RUN; k++)
        free(content[k]);
    h_precise_fleet_stop(&f);
}

/* The sliding group's pool holds 4 blocks: after P (its last 2 blocks in
 * that group) and two more prompts, it evicts P's 2 with a BlockRemoved of
 * group 1 alone. The full-attention group still holds them, and so must
 * the index. */
static void test_removal_in_one_group_keeps_the_full_groups_blocks(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    h_precise_fleet_start(&f, &(struct h_precise_fleet_opts){.n = 2, .mock_args = hybrid_args});
    char *p = h_precise_blocks(3900, 6);
    h_precise_fleet_chat_direct(&f, 0, p);
    wait_held(&f, 0, p);
    const char *sw = "switchyard_kv_events_group_skipped_total{kind=\"sliding_window\"}";
    long long skipped = h_precise_cp_metric(&f, sw);
    char *q[2];
    for (unsigned k = 0; k < 2; k++) {
        q[k] = h_precise_blocks(3901 + k, 3);
        h_precise_fleet_chat_direct(&f, 0, q[k]);
        wait_held(&f, 0, q[k]);
    }
    /* Two stores of group 1 and the removal of P's two blocks there. */
    h_precise_wait_cp_metric_ge(&f, sw, skipped + 3);
    assert_int_equal(held(&f, 0, p), n_blocks(p));
    char worker[64], decision[64];
    h_precise_fleet_chat(&f, p, worker, sizeof(worker), decision, sizeof(decision));
    assert_string_equal(worker, "w1");
    assert_string_equal(decision, "affinity");
    assert_int_equal(per_worker(&f, "switchyard_kv_events_resyncs_total", 0), 0);
    free(q[0]);
    free(q[1]);
    free(p);
    h_precise_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_hybrid_model_routed_precisely_for_a_whole_run),
        H_TEST(test_removal_in_one_group_keeps_the_full_groups_blocks),
    };
    return cmocka_run_group_tests_name("kv_hybrid", tests, NULL, NULL);
}
