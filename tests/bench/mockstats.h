/*
 * The mock workers' ground truth for the routing benchmark: resets them
 * before a run, samples each one's in-flight count from GET /mock/stats on
 * a thread of its own while the run goes (time-averaged load per worker),
 * and reads the prefix-cache counters at the end. The sampler thread owns
 * its curl handles; the caller reads the results only after ms_stop.
 */
#ifndef SY_TESTS_BENCH_MOCKSTATS_H
#define SY_TESTS_BENCH_MOCKSTATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define MS_MAX_MOCKS 64

struct ms_mock {
    char url[128];       /* http://HOST:PORT */
    double inflight_sum; /* sum of sampled in-flight counts */
    unsigned samples;
    long long hit_tokens;   /* prefix_hit_tokens at the end */
    long long query_tokens; /* prefix_query_tokens at the end */
    long long requests;     /* requests_total at the end */
};

struct ms_fleet {
    struct ms_mock mock[MS_MAX_MOCKS];
    size_t n;
    unsigned period_ms;
    atomic_bool stop;
    pthread_t thread;
    bool running;
};

/* POST /mock/reset to every mock (empties KV caches and counters). */
int ms_reset(struct ms_fleet *f);
/* Starts sampling in-flight every period_ms. */
int ms_start(struct ms_fleet *f, unsigned period_ms);
/* Stops sampling and reads the final counters. Returns 0 or -EIO. */
int ms_stop(struct ms_fleet *f);

#endif
