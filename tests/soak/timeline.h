/*
 * The chaos soak's fault timeline and the attribution of failed requests.
 * Every fault the scheduler injects is an entry with the interval in which
 * it could have touched a request and what it touched (a data plane, a
 * worker, the control plane). A failed request is explained when some entry
 * that can fail requests overlaps the request's own interval and touched
 * its data plane or its worker; otherwise it is unexplained and fails the
 * soak. A worker fault explains only what a worker fault can cause: a
 * response from the router (an error status, a cut stream). No response at
 * all (connection refused, reset or closed before a status line) is the
 * router's own doing and only the death of its data plane explains it. A
 * continued Responses request refused because the worker it is pinned to
 * cannot take it is explained by that worker's removal, drain or health
 * flap (timeline.c). Main thread only (the traffic threads hand their
 * failures over).
 */
#ifndef SY_TESTS_SOAK_TIMELINE_H
#define SY_TESTS_SOAK_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sk_fault_kind {
    SK_F_DP_KILL,       /* SIGKILL of a data plane; the supervisor restarts it */
    SK_F_HOT_RESTART,   /* --hot-restart beside the serving data plane */
    SK_F_CP_KILL,       /* SIGKILL of the control plane, then a restart */
    SK_F_WORKER_5XX,    /* the mock answers the next requests 500/503 */
    SK_F_STALL_HEADERS, /* the mock holds requests before any byte */
    SK_F_STALL_CHUNKS,  /* the mock goes silent mid-stream */
    SK_F_RESET,         /* the mock closes connections mid-response */
    SK_F_HEALTH_FLAP,   /* the mock's /health answers 503 for a while */
    SK_F_ADD,           /* POST /workers (a spare mock) */
    SK_F_DRAIN,         /* POST /workers/{id}/drain */
    SK_F_REMOVE,        /* DELETE /workers/{id} */
    SK_F_RESET_LOAD,    /* POST /workers/{id}/reset_load */
    SK_F_N
};

/* Kind names as they appear in the report ("dp_kill", ...). */
const char *sk_fault_name(enum sk_fault_kind k);

/* True for the kinds that may fail a request they touch; the others (hot
 * restart, control-plane kill, add, drain, reset_load) must be invisible to
 * clients, so they explain nothing. */
bool sk_fault_may_fail(enum sk_fault_kind k);

struct sk_fault {
    enum sk_fault_kind kind;
    int dp;          /* data plane index, or -1 */
    char worker[32]; /* worker id, or "" */
    int64_t t0, t1;  /* ms (h_now_ms); t1 = -1 while it lasts */
    bool skipped;    /* could not be applied (e.g. admin API down) */
};

/* What a traffic thread hands over about a failed request. */
struct sk_failure {
    int64_t t0, t1;
    int dp;
    char worker[32]; /* from x-switchyard-worker; "" when no response came */
    char pinned[32]; /* the worker a previous_response_id pins it to, or "" */
    char route[24];
    bool stream;
    long status;       /* HTTP status, 0 when no response came */
    int curl_code;     /* CURLE_* */
    char what[96];     /* "http 503", "truncated stream", "curl 7", ... */
    long explained_by; /* index into the timeline, or -1 */
};

struct sk_timeline {
    struct sk_fault *f;
    size_t n, cap;
    long count[SK_F_N];   /* applied */
    long skipped[SK_F_N]; /* could not be applied */
};

/* Appends a fault starting now; returns its index or -ENOMEM. */
long sk_timeline_add(struct sk_timeline *tl, enum sk_fault_kind kind, int dp, const char *worker,
                     int64_t t0);
/* Ends fault idx at t1. */
void sk_timeline_end(struct sk_timeline *tl, long idx, int64_t t1);
/* Marks fault idx as not applied (it then explains nothing). */
void sk_timeline_skip(struct sk_timeline *tl, long idx);
/* Finds the fault explaining fr (sets fr->explained_by); true if found.
 * `now` closes the faults still running. */
bool sk_timeline_explain(const struct sk_timeline *tl, struct sk_failure *fr, int64_t now);
void sk_timeline_free(struct sk_timeline *tl);

#endif
