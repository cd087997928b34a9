/*
 * The chaos soak's client traffic: open-loop arrivals (exponential gaps at
 * a fixed mean rate, whatever earlier requests are doing) served by a pool
 * of client threads, each a blocking libcurl transfer on a fresh
 * connection. A request goes to one of the node's data planes at random,
 * on a random route (sk_route below: chat, completions, Responses new and
 * continued with previous_response_id, Messages, rerank, score, tokenize,
 * embeddings), streaming or not where the route streams, and some are
 * closed by the client at a random moment. Every outcome is classified by
 * what a complete answer of its route is; a failure is kept with its
 * interval, data plane and worker (x-switchyard-worker) for attribution
 * (timeline.h). A continued Responses request names a response an
 * earlier request of the run got (one of the last SK_RESP_RING), and is
 * pinned by the router to the worker that made it: that worker goes with
 * its failure.
 *
 * Traffic can be paused for a quiescent checkpoint: no new request starts
 * and sk_traffic_inflight() falls to 0 as the running ones end.
 */
#ifndef SY_TESTS_SOAK_TRAFFIC_H
#define SY_TESTS_SOAK_TRAFFIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/soak/timeline.h"

#define SK_MAX_DP 2

struct sk_traffic_opts {
    char base[SK_MAX_DP][64]; /* http://127.0.0.1:PORT of each data plane */
    int n_dp;
    const char *model;
    double rate; /* mean arrivals per second */
    int threads; /* client threads (bounds the requests in flight) */
    int stream_percent;
    int abort_percent; /* closed by the client ... */
    int abort_max_ms;  /* ... at a uniform moment in [0, abort_max_ms) */
    int max_tokens;
    int timeout_ms; /* a request not done by then fails ("timeout") */
    uint64_t seed;
};

/* The routes of the mix, in the report's order. */
enum sk_route {
    SK_R_CHAT,
    SK_R_COMPLETIONS,
    SK_R_RESPONSES,      /* a new conversation */
    SK_R_RESPONSES_NEXT, /* previous_response_id: pinned to its worker */
    SK_R_MESSAGES,
    SK_R_RERANK,
    SK_R_SCORE,
    SK_R_TOKENIZE,
    SK_R_EMBEDDINGS,
    SK_R_N
};

/* "chat", "completions", "responses", "responses_next", ... */
const char *sk_route_name(enum sk_route r);

struct sk_counts {
    long started, ok, aborted, failed;
    long late; /* started more than 1 s after its arrival time (the pool was full) */
    long by_route[SK_R_N], streamed;
    long ok_by_route[SK_R_N];
};

struct sk_traffic;

int sk_traffic_start(const struct sk_traffic_opts *o, struct sk_traffic **out);
void sk_traffic_pause(struct sk_traffic *t, bool paused);
long sk_traffic_inflight(struct sk_traffic *t);
void sk_traffic_counts(struct sk_traffic *t, struct sk_counts *c);
/* Moves the failures recorded since the last call into *out (malloc'd;
 * the caller frees it). Returns how many. */
size_t sk_traffic_take_failures(struct sk_traffic *t, struct sk_failure **out);
/* Stops starting requests, waits for the running ones, joins, frees. */
void sk_traffic_stop(struct sk_traffic *t);

#endif
