/*
 * What the mock worker observed, for GET /mock/stats: the ground truth that
 * end-to-end tests compare the router with. Counted here are inference
 * requests only (POST /v1/chat/completions, /v1/completions,
 * /v1/embeddings, whatever their outcome); probes, /metrics, /v1/models and
 * the /mock/ controls are not, so a test's numbers do not depend on the health checker.
 *
 *   inflight        accepted (first header line parsed) and not yet ended:
 *                   response fully sent, connection failed, or the client
 *                   went away (then released as soon as it is noticed)
 *   requests_total  inference requests accepted
 *   by_status       responses queued, by status code
 *   client_aborts   requests the client abandoned before their response ended
 *
 * plus the P/D counters and the last inference request's body and headers.
 * Prefix-cache counters, running and waiting live in the engine
 * (cost_model.h).
 *
 * Threading: shared by all event loops. inflight is a relaxed atomic (read
 * alone, never combined with the rest); the rest is under the mutex.
 */
#ifndef SY_TESTS_MOCKWORKER_STATS_H
#define SY_TESTS_MOCKWORKER_STATS_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MW_STATUS_MIN 100
#define MW_STATUS_MAX 599

/* Caller storage; mw_stats_init / mw_stats_fini. */
struct mw_stats {
    _Atomic int64_t inflight;
    pthread_mutex_t lock;
    uint64_t requests_total;
    uint64_t client_aborts;
    uint64_t remote_prefill_used;
    uint64_t local_prefill;
    uint64_t by_status[MW_STATUS_MAX - MW_STATUS_MIN + 1];
    char *last_body; /* owned; NULL = none */
    size_t last_body_len;
    char *last_headers; /* owned; "name\0value\0" pairs, names lowercase */
    size_t last_headers_len;
    char last_traceparent[128]; /* the last traceparent header received; "" = none yet */
};

int mw_stats_init(struct mw_stats *s);
void mw_stats_fini(struct mw_stats *s);

/* A request was accepted: inflight and requests_total go up. */
void mw_stats_accept(struct mw_stats *s);

/* Its inflight count ends (exactly once per accept). */
void mw_stats_release(struct mw_stats *s);

void mw_stats_status(struct mw_stats *s, int status);
void mw_stats_client_abort(struct mw_stats *s);
void mw_stats_prefill_kind(struct mw_stats *s, int remote_used);

/*
 * Replaces the last request with body and headers (see struct mw_stats for
 * the headers' format), taking ownership of both (either may be NULL).
 */
void mw_stats_last_request(struct mw_stats *s, char *body, size_t body_len, char *headers,
                           size_t headers_len);

/*
 * Adds this module's fields to obj (inflight, requests_total, by_status,
 * client_aborts, remote_prefill_used, local_prefill, last_request,
 * last_request_headers, last_traceparent). last_request is the body as JSON, or as a string
 * when it is not valid JSON.
 */
void mw_stats_to_json(struct mw_stats *s, json_t *obj);

/* Zeroes everything but inflight and forgets the last request. */
void mw_stats_reset(struct mw_stats *s);

#endif
