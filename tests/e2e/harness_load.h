/*
 * Client traffic for end-to-end tests: one background thread driving a
 * libcurl multi handle that keeps `concurrency` requests in flight against
 * the router (chat and completions, streaming or not, random max_tokens),
 * optionally closing some of them at a random moment, and classifying every
 * outcome. Used by the soak and by the tests that kill or restart a process
 * under traffic and must prove that no client request failed.
 *
 * Start/stop from the test's main thread; the generator owns its thread and
 * its curl handles until h_load_stop returns.
 */
#ifndef SY_TESTS_E2E_HARNESS_LOAD_H
#define SY_TESTS_E2E_HARNESS_LOAD_H

#include <stdbool.h>
#include <stdint.h>

struct h_load_opts {
    const char *base;       /* "http://127.0.0.1:PORT" of the dataplane */
    const char *model;      /* the model field of every request */
    int concurrency;        /* requests kept in flight (<= 256) */
    long total;             /* stop starting new requests after this many; 0 = until stopped */
    int stream_percent;     /* share of streaming requests */
    int abort_percent;      /* share of requests the client closes on purpose */
    int abort_max_ms;       /* ... at a uniformly random moment in [0, abort_max_ms) */
    int max_tokens;         /* upper bound of the random max_tokens (>= 1) */
    int request_timeout_ms; /* a request not done by then counts as failed (0 = 30 s) */
    uint32_t seed;
};

/* Counts, consistent once h_load_stop returned; h_load_peek reads them live. */
struct h_load_result {
    long started;
    long ok;            /* 200 with a complete body (a stream ended by [DONE]) */
    long aborted;       /* closed by us on purpose */
    long http_error;    /* answered with a status other than 200 */
    long truncated;     /* 200 whose stream ended without [DONE] */
    long transport;     /* connection failed or cut (curl error), timeouts included */
    long timeouts;      /* ... of which: not done within request_timeout_ms */
    long status_5xx[6]; /* 500..505 */
    char first_failure[400];
};

struct h_load;

/* Starts the generator thread. 0 or -errno. */
int h_load_start(const struct h_load_opts *opts, struct h_load **out);

/* Current counts (approximate while running). */
void h_load_peek(struct h_load *l, struct h_load_result *r);

/* True once `total` requests have finished (never when total is 0). */
bool h_load_is_done(struct h_load *l);

/* Stops starting requests, waits for (or, when abort_rest, closes) those in
 * flight, joins the thread, fills r, frees. NULL l is a no-op. */
void h_load_stop(struct h_load *l, bool abort_rest, struct h_load_result *r);

/* Stops every generator still running, closing its requests (teardown calls
 * it, so a test that fails mid-traffic leaves no thread behind). */
void h_load_stop_all(void);

#endif
