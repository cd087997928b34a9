/*
 * Admission control's state (admission.h, adm_queue.h): types only, so
 * loop.h and types.h can embed it without depending on the modules. The
 * process-wide part (struct dp_adm_shared) lives in struct dp_shared; the
 * loop's (struct dp_adm_loop) in struct dp_loop, touched by its thread
 * only; the request's (struct dp_adm_req) in struct dp_request.
 */
#ifndef SY_DATAPLANE_CORE_ADMISSION_TYPES_H
#define SY_DATAPLANE_CORE_ADMISSION_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list_types.h"
#include "dataplane/types/api_keys_types.h"
#include "shm/buckets_types.h"

#define DP_UPSTREAM_KEY_MAX 512u
/* An n above this is charged as this many choices (vLLM refuses such n
 * anyway; the bound keeps the estimate's product in range). */
#define DP_ADM_CHOICES_MAX 1024u

struct dp_request;
struct dp_adm_metrics;
struct dp_adm_hub;
struct dp_loop;

/* Why a request was refused or left the queue; the label of the metrics. */
enum dp_adm_reason {
    DP_ADM_REASON_UNSET = 0,
    DP_ADM_REASON_UNAUTHORIZED,  /* 401: key missing or unknown */
    DP_ADM_REASON_RATE_LIMIT,    /* 429 */
    DP_ADM_REASON_QUEUE_FULL,    /* 429 */
    DP_ADM_REASON_QUEUE_TIMEOUT, /* 429 */
    DP_ADM_REASON_SHUTTING_DOWN, /* 503: queued when the data plane drained */
    DP_ADM_REASON_COUNT,
};

/* How a request left the queue (exactly once each; the fourth accounting state). */
enum dp_adm_left {
    DP_ADM_LEFT_UNSET = 0,
    DP_ADM_LEFT_DISPATCHED,
    DP_ADM_LEFT_TIMEOUT,
    DP_ADM_LEFT_FULL,     /* evicted: a higher band, or a tenant under its share */
    DP_ADM_LEFT_GONE,     /* the client left */
    DP_ADM_LEFT_SHUTDOWN, /* answered 503 shutting_down */
    DP_ADM_LEFT_COUNT,
};

/* What the forwarder registers with admission (dp_adm_loop_init): how a
 * request leaves the queue for a worker, and how it is answered. */
struct dp_adm_ops {
    void (*dispatch)(struct dp_request *req);
    void (*reply)(struct dp_request *req, int status, const char *code, const char *msg);
};

/* Process-wide: the rate-limit buckets and the reload signal. Lives in
 * struct dp_shared; set up by the main thread before the loops start. */
struct dp_adm_shared {
    struct shm_buckets buckets;
    bool buckets_ok;
    _Atomic unsigned reload_gen;    /* +1 on SIGHUP; each loop re-reads its files */
    struct dp_adm_metrics *metrics; /* owned (adm_metrics.h) */
    struct dp_adm_hub *hub;         /* owned: the queue's order over every loop (adm_hub.h) */
};

/* A watched file's identity: a change of any of these means re-read. */
struct dp_adm_file_id {
    bool present;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
};

/* A loop's admission state; its thread only. */
struct dp_adm_loop {
    const struct dp_adm_ops *ops;
    bool keys_on;        /* dataplane.api_keys_file is set */
    struct dp_keys keys; /* the last good keys file */
    struct dp_adm_file_id keys_id;
    char upstream_key[DP_UPSTREAM_KEY_MAX]; /* "" = none */
    struct dp_adm_file_id upstream_id;
    unsigned reload_seen;
    uint64_t next_check_ms;
    /* The queue (adm_queue.c): per model, bands, tenants. */
    struct list_node models; /* struct dp_adm_model.link */
    struct list_node by_age; /* every queued request, oldest first (dp_adm_req.age_link) */
    uint32_t queued;
    bool kick; /* a guard was released: try the queue at the end of the pass */
    /* Wakes this loop from another thread (its eventfd; set by the loop's
     * driver before the loops start): the hub chose a request queued here
     * for a slot another loop saw free, or gave the place of one queued
     * here to another loop's arrival (this loop answers it). */
    void (*wake)(struct dp_loop *loop);
};

/* A request's admission state. */
struct dp_adm_req {
    bool authenticated;              /* the key was checked (at the headers) */
    char tenant[DP_TENANT_NAME_MAX]; /* "anonymous" without a keys file */
    uint64_t tenant_hash;
    enum dp_prio prio;
    double requests_per_s;
    uint32_t burst;
    uint64_t tokens_per_min;
    bool cache_isolation; /* the tenant's requests carry its derived cache_salt */
    int64_t max_tokens;   /* max_completion_tokens, max_tokens or max_output_tokens; -1 = absent */
    uint32_t choices;     /* the body's n (1 when absent; at most DP_ADM_CHOICES_MAX) */
    const char *rejected; /* x-switchyard-rejected of our answer (static), NULL = none */
    /* queued */
    bool queued;
    bool dispatching; /* being handed to the forwarder by the queue */
    bool requeued;    /* ...which put it back */
    uint64_t enqueued_ms;
    struct dp_adm_tq *tq;
    struct list_node tq_link;
    struct list_node age_link;
    /* overload.c: attempts of the current leg that ended in 429/503 */
    const void *overload_leg; /* the leg they belong to */
    uint32_t overloaded;
    int overload_status;       /* the last one's */
    uint32_t overload_retry_s; /* the shortest Retry-After seen; 0 = none */
};

#endif
