/*
 * The data plane's accounting soak (invariant 1, paired accounting, and 5,
 * no underflow): 2,000 mixed requests (chat and completions, streaming and
 * not) across 3 mock workers, a quarter of them closed by the client at a
 * random moment, while faults (503/500/429 answers, held error bodies,
 * resets mid-stream, stalls before headers and between tokens, slow
 * prefill) come and go on random workers. Afterwards a batch of requests
 * is held stalled on every worker: each worker's router load must equal
 * the requests its mock really has in flight (a leak or a lost count from
 * the soak would show here), and once those are closed every load is 0 and
 * no underflow was ever counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shm/load.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_load.h"

#define N_WORKERS     3
#define SOAK_REQUESTS 2000
#define HELD_REQUESTS 24
#define SOAK_MS       120000
#define SETTLE_MS     5000

static const char *const FAULTS[] = {
    "{\"fail_status\":503,\"fail_count\":3}",
    "{\"fail_status\":500,\"fail_count\":2,\"fail_body_hold_ms\":40}",
    "{\"fail_status\":429,\"fail_count\":1}",
    "{\"reset_after_chunks\":2}",
    "{\"stall_after_chunks\":1,\"stall_ms\":150}",
    "{\"stall_before_headers_ms\":120}",
    "{\"extra_latency_ms\":40}",
};

static const char *const CLEAR_FAULTS =
    "{\"fail_status\":0,\"fail_body_hold_ms\":0,\"reset_after_chunks\":0,"
    "\"stall_after_chunks\":0,\"stall_ms\":0,\"stall_before_headers_ms\":0,"
    "\"extra_latency_ms\":0}";

struct progress {
    struct h_load *load;
    long want;
};

static bool finished_at_least(void *arg)
{
    struct progress *p = arg;
    struct h_load_result r;
    h_load_peek(p->load, &r);
    return r.ok + r.aborted + r.http_error + r.truncated + r.transport >= p->want ||
           h_load_is_done(p->load);
}

/* Every worker's router load equals its mock's in-flight count, and the
 * mocks together hold `total` requests. */
struct match {
    struct h_fleet *f;
    long long total;
    long long load[N_WORKERS], inflight[N_WORKERS];
};

static bool loads_match_mocks(void *arg)
{
    struct match *m = arg;
    long long sum = 0;
    bool equal = true;
    for (size_t i = 0; i < N_WORKERS; i++) {
        m->inflight[i] = h_fleet_mock_stat(m->f, i, "inflight");
        m->load[i] = h_fleet_load(m->f, i);
        sum += m->inflight[i];
        equal = equal && m->load[i] == m->inflight[i];
    }
    return equal && sum == m->total;
}

static void test_soak_with_aborts_and_faults(void **state)
{
    (void)state;
    static const char *const mock_args[] = {"--tpot-ms", "3", "--prefill-base-us", "2000", NULL};
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){
                          .n = N_WORKERS,
                          .mock_args = mock_args,
                          .policy = "least_load",
                          .dataplane_extra = "first_byte_timeout: 20s\nidle_timeout: 20s\n"
                                             "retry: {max_attempts: 3, backoff: 5ms, "
                                             "backoff_max: 20ms}\n",
                      });

    struct h_load *load;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = 32,
                                                        .total = SOAK_REQUESTS,
                                                        .stream_percent = 50,
                                                        .abort_percent = 25,
                                                        .abort_max_ms = 80,
                                                        .max_tokens = 24,
                                                        .request_timeout_ms = 8000,
                                                        .seed = 2026},
                                  &load),
                     0);
    /* Every 100 finished requests, a new random fault on a random worker
     * (the previous one cleared): faults overlap aborts at every phase. */
    uint64_t rng = 99;
    size_t faulty = 0;
    for (long mark = 100; mark < SOAK_REQUESTS; mark += 100) {
        struct progress p = {.load = load, .want = mark};
        assert_int_equal(h_wait_until(finished_at_least, &p, SOAK_MS), 0);
        assert_int_equal(h_mock_faults(f.mock[faulty].url, CLEAR_FAULTS), 0);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        faulty = (size_t)(rng >> 33) % N_WORKERS;
        const char *fault = FAULTS[(rng >> 40) % (sizeof(FAULTS) / sizeof(FAULTS[0]))];
        assert_int_equal(h_mock_faults(f.mock[faulty].url, fault), 0);
    }
    struct progress all = {.load = load, .want = SOAK_REQUESTS};
    assert_int_equal(h_wait_until(finished_at_least, &all, SOAK_MS), 0);
    struct h_load_result r;
    h_load_stop(load, false, &r);
    print_message("soak: started %ld ok %ld aborted %ld http_error %ld (502 %ld 503 %ld 504 %ld) "
                  "truncated %ld transport %ld (timeouts %ld); first failure: %s\n",
                  r.started, r.ok, r.aborted, r.http_error, r.status_5xx[2], r.status_5xx[3],
                  r.status_5xx[4], r.truncated, r.transport, r.timeouts, r.first_failure);
    assert_int_equal(r.started, SOAK_REQUESTS);
    assert_int_equal(r.ok + r.aborted + r.http_error + r.truncated + r.transport, SOAK_REQUESTS);
    /* Nothing hung: every request ended well before the router's own
     * first-byte and idle timeouts (20 s) could have ended it. */
    assert_int_equal(r.timeouts, 0);
    /* The mix really happened: aborts, successes, and faults that reached clients. */
    assert_true(r.aborted > SOAK_REQUESTS / 10);
    assert_true(r.ok > SOAK_REQUESTS / 3);
    long long aborts_seen = 0;
    for (size_t i = 0; i < N_WORKERS; i++) {
        assert_int_equal(h_mock_faults(f.mock[i].url, CLEAR_FAULTS), 0);
        aborts_seen += h_fleet_mock_stat(&f, i, "client_aborts");
    }
    assert_true(aborts_seen > 0);

    /* Hold a batch stalled on every worker: load == the mock's in-flight. */
    for (size_t i = 0; i < N_WORKERS; i++)
        assert_int_equal(h_mock_faults(f.mock[i].url, i == 0 ? "{\"stall_before_headers_ms\":60000}"
                                                             : "{\"stall_after_chunks\":1,"
                                                               "\"stall_ms\":60000}"),
                         0);
    struct h_load *held;
    assert_int_equal(h_load_start(&(struct h_load_opts){.base = f.base,
                                                        .model = H_FLEET_MODEL,
                                                        .concurrency = HELD_REQUESTS,
                                                        .total = HELD_REQUESTS,
                                                        .stream_percent = 100,
                                                        .max_tokens = 8,
                                                        .request_timeout_ms = 60000,
                                                        .seed = 7},
                                  &held),
                     0);
    struct match m = {.f = &f, .total = HELD_REQUESTS};
    int rc = h_wait_until(loads_match_mocks, &m, SETTLE_MS);
    for (size_t i = 0; i < N_WORKERS; i++)
        print_message("held: w%zu load %lld mock inflight %lld\n", i + 1, m.load[i], m.inflight[i]);
    assert_int_equal(rc, 0);
    for (size_t i = 0; i < N_WORKERS; i++)
        assert_true(m.load[i] > 0); /* least_load spread the batch over every worker */

    /* Close them all: every load and every mock back to 0, no underflow. */
    h_load_stop(held, true, &r);
    assert_int_equal(r.aborted, HELD_REQUESTS);
    m.total = 0;
    rc = h_wait_until(loads_match_mocks, &m, SETTLE_MS);
    for (size_t i = 0; i < N_WORKERS; i++)
        print_message("end: w%zu load %lld mock inflight %lld\n", i + 1, m.load[i], m.inflight[i]);
    assert_int_equal(rc, 0);
    for (size_t i = 0; i < N_WORKERS; i++)
        assert_int_equal(m.load[i], 0);
    assert_int_equal(shm_load_underflows(&f.seg), 0);
    h_fleet_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_soak_with_aborts_and_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
