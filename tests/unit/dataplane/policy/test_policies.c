/*
 * Unit tests of the classic routing policies through the policy interface
 * (dataplane/core/policy.h): round_robin, random, power_of_two, least_load,
 * consistent_hash and cache_aware's plumbing — ties, a single eligible
 * worker, none, and workers coming and going.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "dataplane/core/policy.h"

#define MAXW 16

struct fleet {
    struct shm_worker_info w[MAXW];
    struct pol_candidate c[MAXW];
    size_t n;
};

static void fleet_init(struct fleet *f, size_t n)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    for (size_t i = 0; i < n; i++) {
        f->w[i].slot = (uint32_t)(i * 3 + 1);
        f->w[i].generation = 1;
        snprintf(f->w[i].id, sizeof(f->w[i].id), "worker-%zu", i);
        f->c[i].worker = &f->w[i];
        f->c[i].load = 0;
    }
}

/* What a data plane's loops share: one for the whole run, as in a data
 * plane (cache_aware makes its private index in it on first use). */
static struct pol_shared *shared;

static int shared_setup(void **state)
{
    (void)state;
    return pol_shared_create(NULL, NULL, &shared);
}

static int shared_teardown(void **state)
{
    (void)state;
    pol_shared_destroy(shared);
    return 0;
}

static struct pol_policy make(enum cfg_policy_name name)
{
    struct cfg_policy cfg = {
        .name = name,
        .cache_threshold = 0.5,
        .balance_abs_threshold = 32,
        .balance_rel_threshold = 1.5,
        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
    };
    struct pol_policy p;
    assert_int_equal(pol_create(&cfg, shared, &p), 0);
    return p;
}

static const char *no_headers(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return NULL;
}

static struct pol_request plain_request(void)
{
    return (struct pol_request){
        .path = "/v1/completions", .model = "m", .text = "", .user = "", .header = no_headers};
}

static int pick(struct pol_policy *p, const struct pol_request *r, struct fleet *f,
                enum pol_decision *decision)
{
    return pol_pick(p, r, f->c, f->n, decision);
}

static void test_every_policy_single_and_no_worker(void **state)
{
    (void)state;
    enum cfg_policy_name all[] = {CFG_POLICY_ROUND_ROBIN,     CFG_POLICY_RANDOM,
                                  CFG_POLICY_POWER_OF_TWO,    CFG_POLICY_LEAST_LOAD,
                                  CFG_POLICY_CONSISTENT_HASH, CFG_POLICY_CACHE_AWARE};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        struct pol_policy p = make(all[k]);
        struct fleet f;
        fleet_init(&f, 1);
        f.c[0].load = 1000;
        struct pol_request r = plain_request();
        enum pol_decision d = POL_DECISION_UNSET;
        for (int i = 0; i < 20; i++)
            assert_int_equal(pick(&p, &r, &f, &d), 0);
        assert_int_not_equal(d, POL_DECISION_UNSET);
        f.n = 0;
        assert_int_equal(pick(&p, &r, &f, &d), -ENOENT);
        pol_destroy(&p);
    }
}

static void test_round_robin_cycles_evenly(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_ROUND_ROBIN);
    struct fleet f;
    fleet_init(&f, 4);
    f.c[2].load = 99; /* round robin ignores load */
    struct pol_request r = plain_request();
    int count[4] = {0};
    enum pol_decision d;
    for (int i = 0; i < 400; i++)
        count[pick(&p, &r, &f, &d)]++;
    for (int i = 0; i < 4; i++)
        assert_int_equal(count[i], 100);
    assert_string_equal(pol_decision_name(d), "round_robin");
    pol_destroy(&p);
}

static void test_random_covers_all(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_RANDOM);
    struct fleet f;
    fleet_init(&f, 5);
    struct pol_request r = plain_request();
    int count[5] = {0};
    enum pol_decision d;
    for (int i = 0; i < 5000; i++)
        count[pick(&p, &r, &f, &d)]++;
    for (int i = 0; i < 5; i++)
        assert_true(count[i] > 800 && count[i] < 1200);
    pol_destroy(&p);
}

static void test_power_of_two_prefers_lower_of_two(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_POWER_OF_TWO);
    struct fleet f;
    fleet_init(&f, 3);
    f.c[0].load = 10;
    f.c[1].load = 5;
    f.c[2].load = 0;
    struct pol_request r = plain_request();
    int count[3] = {0};
    enum pol_decision d;
    for (int i = 0; i < 3000; i++)
        count[pick(&p, &r, &f, &d)]++;
    /* The busiest is never the lower of two distinct draws. */
    assert_int_equal(count[0], 0);
    /* The idle one wins every pair it is in: 2/3 of draws. */
    assert_true(count[2] > 1800 && count[2] < 2200);
    /* Two workers: always the lower, never the same one twice. */
    fleet_init(&f, 2);
    f.c[0].load = 1;
    for (int i = 0; i < 100; i++)
        assert_int_equal(pick(&p, &r, &f, &d), 1);
    pol_destroy(&p);
}

static void test_least_load_minimum_and_rotating_ties(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_LEAST_LOAD);
    struct fleet f;
    fleet_init(&f, 4);
    f.c[0].load = 3;
    f.c[1].load = 1;
    f.c[2].load = 2;
    f.c[3].load = 1;
    struct pol_request r = plain_request();
    int count[4] = {0};
    enum pol_decision d;
    for (int i = 0; i < 100; i++)
        count[pick(&p, &r, &f, &d)]++;
    assert_int_equal(count[0] + count[2], 0);
    assert_true(count[1] > 0 && count[3] > 0);
    assert_string_equal(pol_decision_name(d), "least_load");
    pol_destroy(&p);
}

static const char *session_header(void *ctx, const char *name)
{
    return strcasecmp(name, "X-Session-Id") == 0 ? ctx : NULL;
}

static void test_consistent_hash_sticky_and_stable(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_CONSISTENT_HASH);
    struct fleet f;
    fleet_init(&f, 8);
    struct pol_request r = plain_request();
    r.header = session_header;
    enum pol_decision d;
    int home[50];
    char keys[50][24];
    for (int k = 0; k < 50; k++) {
        snprintf(keys[k], sizeof(keys[k]), "session-%d", k);
        r.header_ctx = keys[k];
        home[k] = pick(&p, &r, &f, &d);
        assert_string_equal(pol_decision_name(d), "hash");
        for (int again = 0; again < 3; again++)
            assert_int_equal(pick(&p, &r, &f, &d), home[k]);
    }
    /* Remove worker 7 (an unrelated one for most keys): keys not on it stay. */
    f.n = 7;
    for (int k = 0; k < 50; k++) {
        r.header_ctx = keys[k];
        int now = pick(&p, &r, &f, &d);
        if (home[k] != 7)
            assert_int_equal(now, home[k]);
    }
    /* Without a key: least loaded. */
    f.c[4].load = 0;
    for (size_t i = 0; i < f.n; i++)
        f.c[i].load = i == 4 ? 0 : 5;
    struct pol_request nokey = plain_request();
    assert_int_equal(pick(&p, &nokey, &f, &d), 4);
    assert_string_equal(pol_decision_name(d), "no_key");
    /* The body's user is a key too. */
    nokey.user = "alice";
    int alice = pick(&p, &nokey, &f, &d);
    assert_string_equal(pol_decision_name(d), "hash");
    assert_int_equal(pick(&p, &nokey, &f, &d), alice);
    pol_destroy(&p);
}

static void test_consistent_hash_bounded_load(void **state)
{
    (void)state;
    struct pol_policy p = make(CFG_POLICY_CONSISTENT_HASH);
    struct fleet f;
    fleet_init(&f, 4);
    struct pol_request r = plain_request();
    r.header = session_header;
    r.header_ctx = "one-heavy-session";
    enum pol_decision d;
    int home = pick(&p, &r, &f, &d);
    /* The heavy session piles up on its home worker until it is full:
     * cap = ceil(1.25 * (total + 1) / 4). */
    int moved = -1;
    for (int i = 0; i < 100 && moved < 0; i++) {
        int got = pick(&p, &r, &f, &d);
        f.c[got].load++;
        if (got != home)
            moved = i;
    }
    assert_true(moved > 0);
    uint64_t total = 0, max = 0;
    for (size_t i = 0; i < f.n; i++) {
        total += f.c[i].load;
        if (f.c[i].load > max)
            max = f.c[i].load;
    }
    /* No worker went past the bound when the key moved on. */
    assert_true((double)max <= 1.25 * (double)total / 4.0 + 1.0);
    pol_destroy(&p);
}

/* The decision labels as published in metrics and x-switchyard-decision. */
static void test_decision_labels(void **state)
{
    (void)state;
    static const char *const want[POL_DECISION_COUNT] = {
        "other",
        "round_robin",
        "random",
        "power_of_two",
        "least_load",
        "hash",
        "hash_all_full",
        "no_key",
        "affinity",
        "overloaded_fallback",
        "no_match",
        "fleet_imbalanced",
        "affinity_despite_imbalance",
        "response_affinity",
    };
    for (int d = 0; d < POL_DECISION_COUNT; d++)
        assert_string_equal(pol_decision_name((enum pol_decision)d), want[d]);
    assert_string_equal(pol_decision_name(POL_DECISION_COUNT), "other");
    assert_string_equal(pol_decision_name(POL_DECISION_LEAST_LOAD), pol_least_load_ops.name);
    assert_string_equal(pol_decision_name(pol_round_robin_ops.decision), pol_round_robin_ops.name);
    assert_string_equal(pol_decision_name(pol_random_ops.decision), pol_random_ops.name);
    assert_string_equal(pol_decision_name(pol_power_of_two_ops.decision),
                        pol_power_of_two_ops.name);
    assert_string_equal(pol_decision_name(pol_least_load_ops.decision), pol_least_load_ops.name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_policy_single_and_no_worker),
        cmocka_unit_test(test_round_robin_cycles_evenly),
        cmocka_unit_test(test_random_covers_all),
        cmocka_unit_test(test_power_of_two_prefers_lower_of_two),
        cmocka_unit_test(test_least_load_minimum_and_rotating_ties),
        cmocka_unit_test(test_consistent_hash_sticky_and_stable),
        cmocka_unit_test(test_consistent_hash_bounded_load),
        cmocka_unit_test(test_decision_labels),
    };
    return cmocka_run_group_tests_name("policies", tests, shared_setup, shared_teardown);
}
