/*
 * End-to-end tests of security review II's findings about hostile peers of
 * the control plane (docs/security.md): the peers it reads without trusting
 * them with its resources. Each test replays the attack through the real
 * binaries and failed before its fix.
 *
 *  - Row 17: a worker publishing KV-cache events evicts every other
 *    worker from the KV holder index by flooding BlockStored (a hostile
 *    publisher went from 0 to 6,919 of 7,680 facts, a good worker from 512
 *    to 5). Two mock workers publish their real events; one of them is
 *    sent prompts until it has stored three times the index's capacity.
 *    The other must keep every fact it reported, and the flooder's held-back
 *    blocks are counted under its name.
 *  - Row 20: a hostile Kubernetes API server (switchyard-fakekube's
 *    flood_list fault) answers the pod list with millions of tiny items,
 *    with more pods than discovery.kubernetes.max_pods, or with pods that
 *    each deserve a warning. The control plane's peak RSS stays bounded,
 *    its log gains a bounded number of lines, the refusal names the key,
 *    and the registry keeps the last good view until the server behaves.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/kv_holders.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"

/* ---- row 17: one worker cannot evict the others from the KV holder index ---- */

#define KV_GOOD_PROMPTS  8
#define KV_GOOD_BLOCKS   64 /* 512 facts, as in the review */
#define KV_FLOOD_BLOCKS  480
#define KV_FLOOD_PROMPTS 48 /* 23,040 stores: three times the index's 7,680 */

/* Starts mock i publishing its KV events (as h_precise_fleet_start does) with
 * an LRU that never evicts, so it only ever sends BlockStored. */
static void kv_start_worker(struct h_precise_fleet *f, size_t i)
{
    struct h_precise_worker *w = &f->w[i];
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(w->id, sizeof(w->id), "w%zu", i + 1);
    snprintf(w->pub, sizeof(w->pub), "tcp://127.0.0.1:%u", p);
    snprintf(w->replay, sizeof(w->replay), "tcp://127.0.0.1:%u", q);
    snprintf(w->kv_events, sizeof(w->kv_events),
             "kv_events:\n  endpoint: \"tcp://*:%u\"\n  replay_endpoint: \"tcp://*:%u\"\n", p, q);
    const char *argv[] = {"--model",
                          H_FLEET_MODEL,
                          "--kv-events-endpoint",
                          w->pub,
                          "--kv-events-replay-endpoint",
                          w->replay,
                          "--kv-blocks",
                          "1000000",
                          NULL};
    memcpy(w->argv, argv, sizeof(argv));
    struct h_fleet *fl = &f->fleet;
    assert_int_equal(h_mock_startv(&fl->mock[i], w->argv), 0);
    assert_int_equal(h_config_add_worker(&fl->cfg, fl->mock[i].url, w->id, H_FLEET_MODEL, NULL), 0);
    fl->cfg.workers[fl->cfg.n_workers - 1].extra = w->kv_events;
}

/* Two publishing workers in front of the smallest index (4,096 asked,
 * 7,680 held: 512 buckets of 15), as in the review. */
static void kv_fleet_start(struct h_precise_fleet *f)
{
    memset(f, 0, sizeof(*f));
    f->fleet.n = 2;
    for (size_t i = 0; i < 2; i++)
        kv_start_worker(f, i);
    f->fleet.cfg.shm_extra = "kv_index_blocks: 4096\n";
    snprintf(f->policy_extra, sizeof(f->policy_extra), "%s  tokenize_timeout: 2s\n",
             H_PRECISE_POLICY_EXACT);
    h_fleet_start_router(&f->fleet, &(struct h_fleet_opts){
                                        .policy = "precise_cache_aware",
                                        .policy_extra = f->policy_extra,
                                        .health_interval = "100ms",
                                        .dataplane_extra = H_PRECISE_DATAPLANE_EXTRA,
                                    });
    assert_int_equal(
        h_url(f->cp_metrics, sizeof(f->cp_metrics), f->fleet.cfg.admin_port, "/metrics"), 0);
    assert_int_equal(h_wait_until(h_precise_dp_attached, f->fleet.dp, H_PRECISE_WAIT_MS), 0);
    f->ix = h_precise_attach_holders(f->fleet.cfg.shm_name);
    h_precise_wait_cp_metric_ge(f, "switchyard_kv_events_subscriptions", 2);
    for (size_t i = 0; i < 2; i++) {
        char sample[160];
        snprintf(sample, sizeof(sample), "switchyard_kv_events_batches_total{worker=\"%s\"}",
                 f->w[i].id);
        h_precise_fleet_probe_until(f, i, sample);
    }
}

/* Blocks of content the index says worker i holds. */
static size_t kv_held(const struct h_precise_fleet *f, size_t i, const char *content)
{
    uint64_t chain[KV_GOOD_BLOCKS + 1];
    size_t n = h_precise_chain(content, chain, KV_GOOD_BLOCKS + 1);
    uint32_t slot = h_precise_slot(&f->fleet, f->w[i].id);
    size_t k = 0;
    for (size_t b = 0; b < n; b++)
        k += kvh_has(f->ix, chain[b], slot);
    return k;
}

static size_t kv_held_all(const struct h_precise_fleet *f, char *const *prompts)
{
    size_t k = 0;
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++)
        k += kv_held(f, 0, prompts[p]);
    return k;
}

struct kv_good_wait {
    const struct h_precise_fleet *f;
    char *const *prompts;
};

static bool kv_good_all_held(void *arg)
{
    const struct kv_good_wait *g = arg;
    return kv_held_all(g->f, g->prompts) == KV_GOOD_PROMPTS * KV_GOOD_BLOCKS;
}

static long long kv_limited(const struct h_precise_fleet *f, const char *id, const char *action)
{
    char sample[160];
    snprintf(sample, sizeof(sample),
             "switchyard_kv_share_limited_total{worker=\"%s\",action=\"%s\"}", id, action);
    long long v = h_precise_cp_metric(f, sample);
    return v < 0 ? 0 : v;
}

static void test_kv_flood_keeps_other_workers_facts(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    kv_fleet_start(&f);
    long long cap = h_precise_cp_metric(&f, "switchyard_kv_index_capacity");
    assert_int_equal(cap, 7680);

    /* The good worker reports 512 blocks. */
    char *good[KV_GOOD_PROMPTS];
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++) {
        good[p] = h_precise_blocks(7000 + (unsigned)p, KV_GOOD_BLOCKS);
        h_precise_fleet_chat_direct(&f, 0, good[p]);
    }
    struct kv_good_wait gw = {&f, good};
    assert_int_equal(h_wait_until(kv_good_all_held, &gw, H_PRECISE_WAIT_MS), 0);

    /* The other floods: every prompt new, nothing ever removed. */
    long long before = h_precise_cp_metric(&f, "switchyard_kv_blocks_total{op=\"stored\"}");
    for (size_t p = 0; p < KV_FLOOD_PROMPTS; p++) {
        char *c = h_precise_blocks(9000 + (unsigned)p, KV_FLOOD_BLOCKS);
        h_precise_fleet_chat_direct(&f, 1, c);
        free(c);
    }
    /* Applied: every flood block went through the index. */
    h_precise_wait_cp_metric_ge(&f, "switchyard_kv_blocks_total{op=\"stored\"}",
                                before + KV_FLOOD_PROMPTS * KV_FLOOD_BLOCKS);

    size_t kept = kv_held_all(&f, good);
    size_t bad = kvh_slot_count(f.ix, h_precise_slot(&f.fleet, f.w[1].id));
    fprintf(stderr, "good worker keeps %zu of %d facts; the flooder holds %zu of %lld\n", kept,
            KV_GOOD_PROMPTS * KV_GOOD_BLOCKS, bad, cap);
    assert_int_equal(kept, KV_GOOD_PROMPTS * KV_GOOD_BLOCKS);
    /* The flooder recycled its own facts, counted under its name. */
    assert_true(kv_limited(&f, f.w[1].id, "self_evicted") + kv_limited(&f, f.w[1].id, "refused") >
                0);
    assert_int_equal(
        kv_limited(&f, f.w[0].id, "self_evicted") + kv_limited(&f, f.w[0].id, "refused"), 0);
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++)
        free(good[p]);
    h_precise_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_kv_flood_keeps_other_workers_facts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
