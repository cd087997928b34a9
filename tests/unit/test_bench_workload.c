/*
 * Unit tests of the load generator's workloads (tests/bench/workload.c):
 * the YAML parser (quick overrides, errors with FILE:LINE:COL), plan
 * expansion (every shared-prefix prompt once, multi-turn prefixes that
 * extend, the hot group's share), the Poisson arrival process (fixed seed,
 * mean inter-arrival 1/rate) and the hit-rate ceiling.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/bench/workload.c"

static int parse(const char *yaml, bool quick, struct wl_spec *s, char *err, size_t errlen)
{
    return wl_parse_string(yaml, strlen(yaml), "w.yaml", quick, s, err, errlen);
}

static const char shared_yaml[] = "name: sp\n"
                                  "kind: shared_prefix\n"
                                  "groups: 2\n"
                                  "prompts_per_group: 4\n"
                                  "system_tokens: 64\n"
                                  "question_tokens: 16\n"
                                  "output_tokens: 8\n"
                                  "rate: 50\n"
                                  "seed: 9\n"
                                  "quick:\n"
                                  "  groups: 3\n"
                                  "  rate: 20.5\n";

static void test_parse_and_quick(void **state)
{
    (void)state;
    struct wl_spec s;
    char err[256] = "";
    assert_int_equal(parse(shared_yaml, false, &s, err, sizeof(err)), 0);
    assert_string_equal(s.name, "sp");
    assert_int_equal(s.kind, WL_KIND_SHARED_PREFIX);
    assert_int_equal(s.groups, 2);
    assert_int_equal(s.prompts_per_group, 4);
    assert_int_equal(s.system_tokens, 64);
    assert_true(s.rate == 50.0);
    assert_int_equal(s.seed, 9);
    assert_int_equal(parse(shared_yaml, true, &s, err, sizeof(err)), 0);
    assert_int_equal(s.groups, 3);
    assert_true(s.rate == 20.5);
    assert_int_equal(s.prompts_per_group, 4);
}

static void test_parse_errors(void **state)
{
    (void)state;
    struct wl_spec s;
    char err[256] = "";
    assert_int_equal(
        parse("name: a\nkind: shared_prefix\ngroupz: 3\n", false, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "w.yaml:3:1: groupz: unknown key"));
    assert_int_equal(parse("name: a\nkind: fancy\n", false, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "w.yaml:2:7: kind: expected one of"));
    assert_int_equal(
        parse("name: a\nkind: hot_prefix\nhot_share: 1.5\n", false, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "hot_share"));
    assert_int_equal(
        parse("name: a\nkind: shared_prefix\ngroups: -1\n", false, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "w.yaml:3:9: groups: expected an integer"));
    /* Everything valid but the rate missing. */
    assert_int_equal(parse("name: a\nkind: multi_turn\nconversations: 2\nturns: 2\n"
                           "question_tokens: 4\noutput_tokens: 4\n",
                           false, &s, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "rate"));
    assert_int_equal(parse("[1, 2]\n", false, &s, err, sizeof(err)), -EINVAL);
}

static void test_shared_prefix_plan(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p, q;
    char err[256];
    assert_int_equal(parse(shared_yaml, false, &s, err, sizeof(err)), 0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 8);
    unsigned seen[2] = {0};
    for (size_t i = 0; i < p.n; i++) {
        const struct wl_request *r = &p.req[i];
        assert_true(r->group < 2);
        seen[r->group]++;
        assert_int_equal(r->text_len, (64 + 16) * 4);
        assert_false(r->chat);
        /* The system prompt is the group's; the question is the request's. */
        for (size_t j = 0; j < p.n; j++) {
            if (p.req[j].group == r->group)
                assert_memory_equal(p.req[j].text, r->text, 64 * 4);
            if (j != i)
                assert_true(memcmp(p.req[j].text, r->text, r->text_len) != 0);
        }
        assert_non_null(strstr(r->body, "\"stream\":true"));
        assert_non_null(strstr(r->body, "\"max_tokens\":8"));
    }
    assert_int_equal(seen[0], 4);
    assert_int_equal(seen[1], 4);
    /* Same seed, same plan. */
    assert_int_equal(wl_plan_build(&s, &q), 0);
    for (size_t i = 0; i < p.n; i++) {
        assert_true(p.req[i].at_s == q.req[i].at_s);
        assert_string_equal(p.req[i].body, q.req[i].body);
    }
    wl_plan_fini(&q);
    /* Ceiling: 4 blocks of system prompt shared, the question block never. */
    assert_true(fabs(wl_hit_ceiling(&p, 16, 1000) - (6.0 * 64) / (8.0 * 80)) < 1e-9);
    /* One block of room: it holds the last request's first block (a prefix's
     * head is inserted last), so only a request right after one of its own
     * group hits, and only that block. */
    size_t follows = 0;
    for (size_t i = 1; i < p.n; i++)
        follows += p.req[i].group == p.req[i - 1].group;
    assert_true(fabs(wl_hit_ceiling(&p, 16, 1) - (double)follows * 16 / (8.0 * 80)) < 1e-9);
    wl_plan_fini(&p);
}

static void test_poisson_arrivals(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p;
    char err[256];
    assert_int_equal(parse("name: h\nkind: hot_prefix\ngroups: 5\nrequests: 20000\n"
                           "hot_share: 0.5\nsystem_tokens: 0\nquestion_tokens: 1\n"
                           "output_tokens: 1\nrate: 200\nseed: 4\n",
                           false, &s, err, sizeof(err)),
                     0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 20000);
    assert_true(p.req[0].at_s == 0);
    size_t hot = 0, short_gaps = 0;
    for (size_t i = 1; i < p.n; i++) {
        double gap = p.req[i].at_s - p.req[i - 1].at_s;
        assert_true(gap >= 0);
        if (gap < 1.0 / 200)
            short_gaps++;
    }
    for (size_t i = 0; i < p.n; i++)
        hot += p.req[i].group == 0;
    /* Mean gap 1/rate; exponential: P(gap < mean) = 1 - 1/e = 0.632. */
    double mean = p.req[p.n - 1].at_s / (double)(p.n - 1);
    assert_true(fabs(mean - 1.0 / 200) < 0.05 / 200);
    assert_true(fabs((double)short_gaps / (double)(p.n - 1) - 0.632) < 0.02);
    assert_true(fabs((double)hot / (double)p.n - 0.5) < 0.02);
    wl_plan_fini(&p);
}

static void test_multi_turn_extends(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p;
    char err[256];
    assert_int_equal(parse("name: mt\nkind: multi_turn\nconversations: 3\nturns: 4\n"
                           "system_tokens: 8\nquestion_tokens: 5\noutput_tokens: 6\n"
                           "rate: 10\nseed: 1\n",
                           false, &s, err, sizeof(err)),
                     0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 12);
    for (size_t i = 0; i < p.n; i++) {
        const struct wl_request *r = &p.req[i];
        assert_true(r->chat);
        assert_int_equal(r->turn, i / 3);
        assert_int_equal(r->group, i % 3);
        if (r->turn > 0) {
            const struct wl_request *prev = &p.req[i - 3];
            assert_int_equal(prev->group, r->group);
            assert_string_equal(prev->session, r->session);
            assert_true(r->text_len > prev->text_len);
            assert_memory_equal(r->text, prev->text, prev->text_len);
        }
    }
    assert_non_null(strstr(p.req[3].body, "\"role\":\"assistant\""));
    assert_null(strstr(p.req[0].body, "\"role\":\"assistant\""));
    wl_plan_fini(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_quick),    cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_shared_prefix_plan), cmocka_unit_test(test_poisson_arrivals),
        cmocka_unit_test(test_multi_turn_extends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
