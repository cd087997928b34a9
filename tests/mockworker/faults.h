/*
 * Run-time fault injection of the mock worker, set through POST /mock/faults
 * with a JSON object whose fields are all optional and merge into the
 * current faults (a field set to 0 turns that fault off):
 *
 *   fail_status, fail_count     answer the next fail_count inference requests
 *                               with fail_status and an OpenAI error body
 *                               (fail_count absent = every request until
 *                               fail_status is set to 0)
 *   fail_body_hold_ms           a failed response sends its headers and half
 *                               its body, holds that long, then finishes
 *   stall_before_headers_ms     hold each inference request before any byte
 *   stall_after_chunks, stall_ms  streaming: after K SSE events, silence for T ms
 *   reset_after_chunks          streaming: close the connection after K events
 *                               (non-streaming: close without a response)
 *   health_status               what GET /health answers (0 or 200 = healthy)
 *   extra_latency_ms            added to each request's time to first token
 *   fail_retry_after_s          a failed response (above) carries Retry-After: N
 *   stream_error, stream_error_after_chunks  streaming: after K SSE events,
 *                               an in-band error event carrying this message
 *                               ("" = off), then data: [DONE] (vLLM's way of
 *                               failing a stream it already answered 200)
 *   metrics_stall_ms            GET /metrics answers only after this long
 *   metrics_garbage             GET /metrics answers 200 with a page that is
 *                               not Prometheus text (JSON true/false)
 *   kv_events_drop_batches      KV events (kv_events.h): the next K batches are
 *                               not sent on PUB (still kept for replay)
 *   kv_events_reorder           KV events: the next two batches go out swapped
 *   kv_events_replay_off        KV events: replay requests get no answer
 *                               (the first two are armed by each body that
 *                               names them; the third holds until cleared)
 *   response_id                 POST /v1/responses answers (and stores the
 *                               response) under this id instead of a new one
 *                               ("" = off): a worker that repeats an id
 *                               another worker made, by a bug or a lie
 *                               (docs/security.md, finding 13)
 *
 * Each request takes a snapshot of the faults when it arrives
 * (mw_fault_state_arrival), so a change applies to requests arriving after
 * it and never to one in progress.
 *
 * Threading: struct mw_fault_state is shared by all event loops and guarded
 * by its mutex; struct mw_faults is a plain value.
 */
#ifndef SY_TESTS_MOCKWORKER_FAULTS_H
#define SY_TESTS_MOCKWORKER_FAULTS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MW_FAIL_COUNT_UNLIMITED (-1)
#define MW_FAULT_MESSAGE_MAX    256
#define MW_FAULT_ID_MAX         160 /* response_id, NUL included */

struct mw_faults {
    int fail_status;    /* 0 = off, else 100..599 */
    int64_t fail_count; /* requests left to fail; MW_FAIL_COUNT_UNLIMITED = all */
    uint64_t fail_body_hold_ms;
    uint64_t stall_before_headers_ms;
    uint64_t stall_after_chunks;
    uint64_t stall_ms;
    uint64_t reset_after_chunks;
    int health_status; /* 0 = 200 */
    uint64_t extra_latency_ms;
    char stream_error[MW_FAULT_MESSAGE_MAX]; /* "" = off */
    uint64_t stream_error_after_chunks;
    uint64_t metrics_stall_ms;   /* GET /metrics answers after this long (0 = at once) */
    bool metrics_garbage;        /* GET /metrics answers 200 with bytes that are not Prometheus */
    uint64_t fail_retry_after_s; /* 0 = no Retry-After on failed responses */
    uint64_t kv_events_drop_batches;
    bool kv_events_reorder;
    bool kv_events_replay_off;
    char response_id[MW_FAULT_ID_MAX]; /* "" = off */
};

/* What one request does, decided when it arrives. */
struct mw_fault_plan {
    int fail_status; /* 0 = do not fail */
    uint64_t fail_body_hold_ms;
    uint64_t stall_before_headers_ms;
    uint64_t stall_after_chunks;
    uint64_t stall_ms;           /* 0 = no stall */
    uint64_t reset_after_chunks; /* 0 = no reset */
    uint64_t extra_latency_ms;
    char stream_error[MW_FAULT_MESSAGE_MAX]; /* "" = no in-band error */
    uint64_t stream_error_after_chunks;
    uint64_t fail_retry_after_s;
};

/* Shared holder. Caller storage; mw_fault_state_init / _fini. */
struct mw_fault_state {
    pthread_mutex_t lock;
    struct mw_faults cur;
};

int mw_fault_state_init(struct mw_fault_state *fs);
void mw_fault_state_fini(struct mw_fault_state *fs);

/*
 * Parses a /mock/faults body and merges it into a copy of the current
 * faults, which replaces them only if the whole body is valid. Returns 0, or
 * -EINVAL with a message in err (bad JSON, not an object, unknown field,
 * wrong type or range). *out receives the faults now in force.
 */
int mw_fault_state_update(struct mw_fault_state *fs, const char *body, size_t len,
                          struct mw_faults *out, char *err, size_t err_len);

/* Turns every fault off. */
void mw_fault_state_clear(struct mw_fault_state *fs);

/* Copy of the current faults. */
void mw_fault_state_get(struct mw_fault_state *fs, struct mw_faults *out);

/*
 * The plan of an inference request arriving now; consumes one fail_count.
 */
void mw_fault_state_arrival(struct mw_fault_state *fs, struct mw_fault_plan *plan);

/* The status GET /health answers now. */
int mw_fault_state_health(struct mw_fault_state *fs);

/* Pure: merges a parsed JSON object into f. 0 or -EINVAL with err. */
int mw_faults_merge_json(struct mw_faults *f, const json_t *obj, char *err, size_t err_len);

/* New JSON object with every field of f (fail_count -1 when unlimited). */
json_t *mw_faults_to_json(const struct mw_faults *f);

#endif
