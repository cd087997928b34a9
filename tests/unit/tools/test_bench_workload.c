/*
 * Unit tests of the load generator's workloads (tests/bench/workload.c):
 * the YAML parser (quick overrides, errors with FILE:LINE:COL), plan
 * expansion (every shared-prefix prompt once, multi-turn prefixes that
 * extend, the hot group's share), the Poisson arrival process (fixed seed,
 * mean inter-arrival 1/rate), the sequential-turns model (its keys, its
 * errors, conversations starting at rate / turns per second, think times),
 * the shared head of multi-turn system prompts (shared_system_tokens: its
 * errors, every conversation starting with the same bytes, plans without
 * it unchanged) and the hit-rate ceiling (in plan order or a given order).
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

/* base + each case's extra lines must be refused with an error containing want. */
struct err_case {
    const char *extra, *want;
};

static void expect_errors(const char *base, const struct err_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char yaml[512], err[256] = "";
        struct wl_spec s;
        snprintf(yaml, sizeof(yaml), "%s%s", base, cases[i].extra);
        assert_int_equal(parse(yaml, false, &s, err, sizeof(err)), -EINVAL);
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("case %zu: got '%s', want '%s'", i, err, cases[i].want);
    }
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
    assert_true(fabs(wl_hit_ceiling(&p, NULL, 0, 16, 1000) - (6.0 * 64) / (8.0 * 80)) < 1e-9);
    /* One block of room: it holds the last request's first block (a prefix's
     * head is inserted last), so only a request right after one of its own
     * group hits, and only that block. */
    size_t follows = 0;
    for (size_t i = 1; i < p.n; i++)
        follows += p.req[i].group == p.req[i - 1].group;
    assert_true(fabs(wl_hit_ceiling(&p, NULL, 0, 16, 1) - (double)follows * 16 / (8.0 * 80)) <
                1e-9);
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

static const char seq_yaml[] = "name: ag\n"
                               "kind: multi_turn\n"
                               "sequential_turns: true\n"
                               "turns: 5\n"
                               "think_ms: 40\n"
                               "max_concurrency: 3\n"
                               "duration_s: 200\n"
                               "warmup_s: 2.5\n"
                               "system_tokens: 32\n"
                               "question_tokens: 4\n"
                               "output_tokens: 4\n"
                               "rate: 10\n"
                               "seed: 3\n"
                               "quick:\n"
                               "  duration_s: 20\n";

static void test_sequential_parse(void **state)
{
    (void)state;
    struct wl_spec s;
    char err[256] = "";
    assert_int_equal(parse(seq_yaml, false, &s, err, sizeof(err)), 0);
    assert_true(s.sequential_turns);
    assert_int_equal(s.turns, 5);
    assert_true(s.think_ms == 40.0);
    assert_int_equal(s.max_concurrency, 3);
    assert_true(s.duration_s == 200.0);
    assert_true(s.warmup_s == 2.5);
    assert_int_equal(parse(seq_yaml, true, &s, err, sizeof(err)), 0);
    assert_true(s.duration_s == 20.0);
    char desc[512];
    wl_spec_format(&s, desc, sizeof(desc));
    assert_non_null(strstr(desc, "sequential_turns=true turns=5 think_ms=40 max_concurrency=3"));
    /* Without the key, a multi_turn workload is the turn-major open loop. */
    assert_int_equal(parse("name: a\nkind: multi_turn\nconversations: 2\nturns: 2\n"
                           "question_tokens: 4\noutput_tokens: 4\nrate: 5\n",
                           false, &s, err, sizeof(err)),
                     0);
    assert_false(s.sequential_turns);
}

static void test_sequential_errors(void **state)
{
    (void)state;
    static const char base[] = "name: a\nquestion_tokens: 4\noutput_tokens: 4\nrate: 5\n";
    static const struct err_case cases[] = {
        {"kind: multi_turn\nsequential_turns: yes\n",
         "w.yaml:6:19: sequential_turns: expected true or false, got 'yes'"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\nduration_s: 5\nthink_ms: -1\n",
         "w.yaml:9:11: think_ms: expected milliseconds in 0..3600000, got '-1'"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\nduration_s: 0\n",
         "w.yaml:8:13: duration_s: expected seconds in 0.1..86400, got '0'"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\nduration_s: 5\n"
         "max_concurrency: x\n",
         "w.yaml:9:18: max_concurrency: expected an integer in 0..100000, got 'x'"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\n",
         "w.yaml: missing or invalid turns/duration_s"},
        {"kind: shared_prefix\ngroups: 2\nprompts_per_group: 2\nsequential_turns: true\n"
         "turns: 2\nduration_s: 5\n",
         "w.yaml: sequential_turns: only for kind multi_turn"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\nduration_s: 5\n"
         "conversations: 3\n",
         "w.yaml: conversations: not used with sequential_turns"},
        {"kind: multi_turn\nsequential_turns: true\nturns: 2\nduration_s: 5\nwarmup_s: 5\n",
         "w.yaml: warmup_s: must be below duration_s"},
        {"kind: multi_turn\nconversations: 2\nturns: 2\nthink_ms: 5\n",
         "w.yaml: think_ms: only with sequential_turns: true"},
        {"kind: multi_turn\nconversations: 2\nturns: 2\nmax_concurrency: 5\n",
         "w.yaml: max_concurrency: only with sequential_turns: true"},
        {"kind: multi_turn\nconversations: 2\nturns: 2\nduration_s: 5\n",
         "w.yaml: duration_s: only with sequential_turns: true"},
    };
    expect_errors(base, cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_sequential_plan(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p, q;
    char err[256];
    assert_int_equal(parse(seq_yaml, false, &s, err, sizeof(err)), 0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_true(p.sequential);
    assert_int_equal(p.turns, 5);
    assert_int_equal(p.max_concurrency, 3);
    assert_true(p.stop_s == 200.0);
    assert_true(p.warmup_s == 2.5);
    assert_int_equal(p.n % 5, 0);
    size_t conv = p.n / 5;
    /* Conversations start at rate / turns = 2 per second over 200 s. */
    assert_true(conv > 340 && conv < 460);
    double think_sum = 0;
    size_t thinks = 0;
    for (size_t c = 0; c < conv; c++) {
        const struct wl_request *first = &p.req[c * 5];
        assert_true(first->at_s < 200.0);
        if (c == 0)
            assert_true(first->at_s == 0);
        else
            assert_true(first->at_s >= p.req[(c - 1) * 5].at_s);
        assert_true(first->think_s == 0);
        for (unsigned t = 0; t < 5; t++) {
            const struct wl_request *r = &p.req[c * 5 + t];
            assert_int_equal(r->group, c);
            assert_int_equal(r->turn, t);
            assert_true(r->chat);
            assert_true(r->at_s == first->at_s);
            if (t > 0) {
                const struct wl_request *prev = r - 1;
                assert_memory_equal(r->text, prev->text, prev->text_len);
                assert_true(r->think_s >= 0);
                think_sum += r->think_s;
                thinks++;
            }
        }
    }
    /* Mean gap between starts turns / rate = 0.5 s; think times mean 40 ms. */
    double gap = p.req[(conv - 1) * 5].at_s / (double)(conv - 1);
    assert_true(fabs(gap - 0.5) < 0.06);
    assert_true(fabs(think_sum / (double)thinks - 0.040) < 0.004);
    /* The same file gives the same plan; think times do not depend on the rate. */
    s.rate = 20;
    assert_int_equal(wl_plan_build(&s, &q), 0);
    assert_true(q.n > p.n);
    for (size_t i = 0; i < p.n; i++) {
        assert_true(q.req[i].think_s == p.req[i].think_s);
        assert_string_equal(q.req[i].body, p.req[i].body);
    }
    wl_plan_fini(&q);
    wl_plan_fini(&p);
}

static void test_ceiling_order(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p;
    char err[256];
    /* Two conversations of 2 turns, 64-token system prompts (4 blocks),
     * 16-token questions and replies: turn 1 holds 6 full blocks. */
    assert_int_equal(parse("name: c\nkind: multi_turn\nsequential_turns: true\nturns: 2\n"
                           "duration_s: 1\nsystem_tokens: 64\nquestion_tokens: 16\n"
                           "output_tokens: 16\nrate: 0.004\nseed: 1\n",
                           false, &s, err, sizeof(err)),
                     0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 2); /* one conversation starts in 1 s at 0.002/s: at 0 */
    /* The order given is the order fed: turn 1 after turn 0 finds its
     * blocks; turn 1 alone finds nothing, and again after itself finds all
     * of its full blocks. */
    size_t fwd[] = {0, 1}, again[] = {1, 1};
    double in_order = wl_hit_ceiling(&p, fwd, 2, 16, 100);
    assert_true(in_order > 0);
    assert_true(in_order == wl_hit_ceiling(&p, NULL, 0, 16, 100));
    assert_true(wl_hit_ceiling(&p, again, 1, 16, 100) == 0);
    size_t blocks = p.req[1].text_len / 64, tokens = (p.req[1].text_len + 3) / 4;
    assert_true(fabs(wl_hit_ceiling(&p, again, 2, 16, 100) -
                     (double)(blocks * 16) / (2.0 * (double)tokens)) < 1e-9);
    wl_plan_fini(&p);
}

/* The requests' bytes (bodies, texts, sessions) as one hash. */
static uint64_t plan_bytes_hash(const struct wl_plan *p)
{
    uint64_t h = 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct wl_request *r = &p->req[i];
        h = XXH3_64bits_withSeed(r->body, r->body_len, h);
        h = XXH3_64bits_withSeed(r->text, r->text_len, h);
        h = XXH3_64bits_withSeed(r->session, strlen(r->session), h);
    }
    return h;
}

static const char shared_seq_yaml[] = "name: sh\n"
                                      "kind: multi_turn\n"
                                      "sequential_turns: true\n"
                                      "turns: 3\n"
                                      "duration_s: 20\n"
                                      "shared_system_tokens: 64\n"
                                      "system_tokens: 32\n"
                                      "question_tokens: 4\n"
                                      "output_tokens: 4\n"
                                      "rate: 3\n"
                                      "seed: 6\n"
                                      "quick:\n"
                                      "  shared_system_tokens: 16\n";

static void test_shared_system_parse(void **state)
{
    (void)state;
    struct wl_spec s;
    char err[256] = "";
    assert_int_equal(parse(shared_seq_yaml, false, &s, err, sizeof(err)), 0);
    assert_int_equal(s.shared_system_tokens, 64);
    assert_int_equal(s.system_tokens, 32);
    char desc[512];
    wl_spec_format(&s, desc, sizeof(desc));
    assert_non_null(strstr(desc, "warmup_s=0 shared_system_tokens=64 system_tokens=32"));
    assert_int_equal(parse(shared_seq_yaml, true, &s, err, sizeof(err)), 0);
    assert_int_equal(s.shared_system_tokens, 16);
    /* Without the key: 0, and the description does not name it. */
    assert_int_equal(parse(seq_yaml, false, &s, err, sizeof(err)), 0);
    assert_int_equal(s.shared_system_tokens, 0);
    wl_spec_format(&s, desc, sizeof(desc));
    assert_null(strstr(desc, "shared_system_tokens"));

    static const char base[] = "name: a\nquestion_tokens: 4\noutput_tokens: 4\nrate: 5\n";
    static const struct err_case cases[] = {
        {"kind: multi_turn\nconversations: 2\nturns: 2\nshared_system_tokens: -3\n",
         "w.yaml:8:23: shared_system_tokens: expected an integer in 0..1000000, got '-3'"},
        {"kind: multi_turn\nconversations: 2\nturns: 2\nshared_system_tokens: 2000000\n",
         "w.yaml:8:23: shared_system_tokens: expected an integer in 0..1000000, got '2000000'"},
        {"kind: multi_turn\nconversations: 2\nturns: 2\nshared_system_tokens: many\n",
         "shared_system_tokens: expected an integer"},
        {"kind: shared_prefix\ngroups: 2\nprompts_per_group: 2\nshared_system_tokens: 8\n",
         "w.yaml: shared_system_tokens: only for kind multi_turn"},
        {"kind: hot_prefix\ngroups: 2\nrequests: 4\nshared_system_tokens: 8\n",
         "w.yaml: shared_system_tokens: only for kind multi_turn"},
    };
    expect_errors(base, cases, sizeof(cases) / sizeof(cases[0]));
    /* 0 is allowed anywhere: it is the default. */
    assert_int_equal(parse("name: a\nkind: shared_prefix\ngroups: 2\nprompts_per_group: 2\n"
                           "shared_system_tokens: 0\nquestion_tokens: 4\noutput_tokens: 4\n"
                           "rate: 5\n",
                           false, &s, err, sizeof(err)),
                     0);
}

static void test_shared_system_plan(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p, own;
    char err[256];
    assert_int_equal(parse(shared_seq_yaml, false, &s, err, sizeof(err)), 0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_true(p.n >= 6 * 3);
    size_t conv = p.n / 3;
    /* The routing text: "system", 64 shared tokens, 32 own, then turns. */
    size_t head = 6 + 64 * 4, sys = head + 32 * 4;
    for (size_t i = 0; i < p.n; i++) {
        const struct wl_request *r = &p.req[i];
        assert_true(r->text_len > sys);
        assert_memory_equal(r->text, "system", 6);
        /* Every request starts with the same shared head... */
        assert_memory_equal(r->text, p.req[0].text, head);
        /* ...in its system message, before its own context. */
        assert_non_null(strstr(r->body, "{\"role\":\"system\",\"content\":\""));
        assert_non_null(memmem(r->body, r->body_len, p.req[0].text + 6, 64 * 4));
        if (r->turn > 0)
            assert_memory_equal(r->text, r[-1].text, r[-1].text_len);
    }
    /* ...then each conversation's own context, different across conversations. */
    for (size_t a = 0; a < conv; a++)
        for (size_t b = a + 1; b < conv; b++)
            assert_true(memcmp(p.req[a * 3].text + head, p.req[b * 3].text + head, sys - head) !=
                        0);
    /* The own context is what the same workload without a shared head has. */
    s.shared_system_tokens = 0;
    assert_int_equal(wl_plan_build(&s, &own), 0);
    assert_int_equal(own.n, p.n);
    for (size_t i = 0; i < p.n; i++) {
        assert_int_equal(own.req[i].text_len + 64 * 4, p.req[i].text_len);
        assert_memory_equal(own.req[i].text + 6, p.req[i].text + head, own.req[i].text_len - 6);
    }
    wl_plan_fini(&own);

    /* Ceiling: another conversation's first turn after conversation 0's
     * finds the full blocks of the shared head (262 bytes: 4 blocks of 64),
     * not one more; either alone finds nothing. Fed in the order given. */
    size_t first_two[] = {0, 3}, alone[] = {3};
    double tokens = (double)((p.req[0].text_len + 3) / 4 + (p.req[3].text_len + 3) / 4);
    assert_true(wl_hit_ceiling(&p, alone, 1, 16, 1000) == 0);
    assert_true(fabs(wl_hit_ceiling(&p, first_two, 2, 16, 1000) - 4.0 * 16 / tokens) < 1e-9);
    wl_plan_fini(&p);
}

/* private_head_share: about that share of conversations get a head of
 * their own (as long as the shared one, unlike it and each other); the
 * rest keep the shared head; 0 leaves the plan as it was. */
static void test_private_heads(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p, all_shared;
    char err[256] = "";
    char yaml[sizeof(shared_seq_yaml) + 64];
    snprintf(yaml, sizeof(yaml), "%sprivate_head_share: 0.5\n", shared_seq_yaml);
    assert_int_equal(parse(yaml, false, &s, err, sizeof(err)), 0);
    assert_true(s.private_head_share == 0.5);
    char desc[512];
    wl_spec_format(&s, desc, sizeof(desc));
    assert_non_null(strstr(desc, "shared_system_tokens=64 private_head_share=0.5 "));
    assert_int_equal(wl_plan_build(&s, &p), 0);
    s.private_head_share = 0;
    assert_int_equal(wl_plan_build(&s, &all_shared), 0);
    assert_int_equal(p.n, all_shared.n);
    size_t conv = p.n / 3, head = 6 + 64 * 4, shared = 0;
    const char *common = all_shared.req[0].text;
    for (size_t c = 0; c < conv; c++) {
        const struct wl_request *r = &p.req[c * 3];
        assert_int_equal(r->text_len, all_shared.req[c * 3].text_len); /* same length */
        if (memcmp(r->text, common, head) == 0) {
            shared++;
            /* A sharing conversation is unchanged. */
            assert_memory_equal(r->text, all_shared.req[c * 3].text, r->text_len);
            continue;
        }
        /* A private head: its own, then the same own context and turns. */
        assert_memory_equal(r->text + head, all_shared.req[c * 3].text + head, r->text_len - head);
        for (size_t d = 0; d < conv; d++)
            assert_true(d == c || memcmp(r->text, p.req[d * 3].text, head) != 0);
    }
    /* About half of the conversations (a fixed draw per seed). */
    assert_true(conv >= 8);
    assert_true(shared > 0 && shared < conv);
    wl_plan_fini(&p);
    wl_plan_fini(&all_shared);

    static const struct err_case cases[] = {
        {"private_head_share: 1.5\n", "private_head_share: expected a number in 0..1"},
        {"private_head_share: -0.1\n", "private_head_share: expected a number in 0..1"},
    };
    expect_errors(shared_seq_yaml, cases, sizeof(cases) / sizeof(cases[0]));
    static const struct err_case without_head[] = {
        {"private_head_share: 0.5\n", "w.yaml: private_head_share: only with shared_system_tokens"},
    };
    expect_errors(seq_yaml, without_head, 1);
}

/* Plans of workloads that do not use shared_system_tokens are byte for byte
 * those of the generator before the key existed (hashes taken then). */
static void test_plans_without_shared_head_unchanged(void **state)
{
    (void)state;
    struct wl_spec s;
    struct wl_plan p;
    char err[256];
    assert_int_equal(parse(seq_yaml, true, &s, err, sizeof(err)), 0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 255);
    assert_true(plan_bytes_hash(&p) == 0xdf16663ecb585b72ull);
    wl_plan_fini(&p);
    assert_int_equal(parse("name: mt\nkind: multi_turn\nconversations: 3\nturns: 4\n"
                           "system_tokens: 8\nquestion_tokens: 5\noutput_tokens: 6\n"
                           "rate: 10\nseed: 1\nshared_system_tokens: 0\n",
                           false, &s, err, sizeof(err)),
                     0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, 12);
    assert_true(plan_bytes_hash(&p) == 0x70c6bba09481067bull);
    wl_plan_fini(&p);
}

/* bypass_share: about that share of the requests is marked, the same ones
 * for the same seed, every request of a group with the same worker key;
 * bodies and arrivals are the plan's without the key; the routed ceiling
 * counts only the requests left to the router. */
static void test_bypass_share(void **state)
{
    (void)state;
    char yaml[600], err[256];
    struct wl_spec s0, s;
    struct wl_plan p0, p;
    snprintf(yaml, sizeof(yaml), "%s", shared_yaml);
    assert_int_equal(parse(yaml, false, &s0, err, sizeof(err)), 0);
    snprintf(yaml, sizeof(yaml), "%sbypass_share: 0.33\n", shared_yaml);
    assert_int_equal(parse(yaml, false, &s, err, sizeof(err)), 0);
    assert_true(s.bypass_share > 0.32 && s.bypass_share < 0.34);
    s0.groups = s.groups = 40;
    s0.prompts_per_group = s.prompts_per_group = 30;
    assert_int_equal(wl_plan_build(&s0, &p0), 0);
    assert_int_equal(wl_plan_build(&s, &p), 0);
    assert_int_equal(p.n, p0.n);
    size_t marked = 0;
    uint32_t key_of[40] = {0};
    bool seen[40] = {false};
    for (size_t i = 0; i < p.n; i++) {
        assert_false(p0.req[i].bypass);
        assert_true(p.req[i].at_s == p0.req[i].at_s);
        assert_memory_equal(p.req[i].body, p0.req[i].body, p.req[i].body_len);
        marked += p.req[i].bypass;
        unsigned g = p.req[i].group;
        if (seen[g])
            assert_int_equal(p.req[i].bypass_key, key_of[g]);
        seen[g] = true;
        key_of[g] = p.req[i].bypass_key;
    }
    assert_true(marked > p.n / 4 && marked < p.n * 5 / 12);
    /* Groups go to different workers (not all to one). */
    bool differ = false;
    for (unsigned g = 1; g < 40; g++)
        differ |= key_of[g] % 4 != key_of[0] % 4;
    assert_true(differ);
    /* The same seed marks the same requests. */
    struct wl_plan again;
    assert_int_equal(wl_plan_build(&s, &again), 0);
    for (size_t i = 0; i < p.n; i++)
        assert_int_equal(again.req[i].bypass, p.req[i].bypass);
    wl_plan_fini(&again);
    /* Routed-only ceiling: unchanged without bypassing requests, differs with. */
    double all = wl_hit_ceiling(&p, NULL, 0, 16, 1 << 16);
    assert_true(wl_hit_ceiling_routed(&p0, NULL, 0, 16, 1 << 16) ==
                wl_hit_ceiling(&p0, NULL, 0, 16, 1 << 16));
    assert_true(wl_hit_ceiling_routed(&p, NULL, 0, 16, 1 << 16) != all);
    char spec[512];
    wl_spec_format(&s, spec, sizeof(spec));
    assert_non_null(strstr(spec, "bypass_share=0.33"));
    wl_plan_fini(&p0);
    wl_plan_fini(&p);
    snprintf(yaml, sizeof(yaml), "%sbypass_share: 1.5\n", shared_yaml);
    assert_int_equal(parse(yaml, false, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "bypass_share"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_quick),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_shared_prefix_plan),
        cmocka_unit_test(test_poisson_arrivals),
        cmocka_unit_test(test_multi_turn_extends),
        cmocka_unit_test(test_sequential_parse),
        cmocka_unit_test(test_sequential_errors),
        cmocka_unit_test(test_sequential_plan),
        cmocka_unit_test(test_ceiling_order),
        cmocka_unit_test(test_shared_system_parse),
        cmocka_unit_test(test_shared_system_plan),
        cmocka_unit_test(test_plans_without_shared_head_unchanged),
        cmocka_unit_test(test_private_heads),
        cmocka_unit_test(test_bypass_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
