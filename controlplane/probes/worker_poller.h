/*
 * The per-worker poller the control plane's periodic HTTP checks share
 * (the health prober, the /v1/models reader inside it, the load-report
 * scraper): for every worker in the registry, a few "jobs", each a GET of
 * the worker's URL plus a path, each on its own schedule, all workers in
 * parallel on one libcurl multi handle driven from the control plane's
 * epoll loop (common/curl_epoll.h, curl's sockets in an inner epoll set
 * whose descriptor the loop watches).
 *
 * What the poller does, so its users do not: follow the registry (a target
 * per slot keyed by (slot, generation, url): a slot that changes hands or
 * URL gets a fresh target and its transfers in flight are dropped before
 * their results could be applied to the newcomer; a removed worker's
 * target stops); keep one easy handle per job and target, made lazily with
 * the upstream TLS settings and re-added for every request so keep-alive
 * connections are reused; start a job when due unless it is still in
 * flight (a hung endpoint costs one transfer, not one per interval); bound
 * each transfer by the timeout; collect the body up to the job's cap; and
 * hand every finished transfer to the user's callback. It never writes
 * the segment: the users do, from their callbacks.
 *
 * What the user supplies (struct wp_ops): how many jobs and their paths
 * and body caps, when each job is next due (on_start, called as a job
 * starts), what a result means (on_done), and what a new or rescanned
 * worker means to its per-slot state (on_seen, optional). The poller
 * keeps that state (state_size bytes a slot, wp_state) and zeroes it
 * whenever the slot changes hands, so nothing a user counts about a
 * removed worker leaks to the next one; it also counts each worker's
 * results as on_done classes them (wp_stats).
 *
 * Threading: owned by the control plane's loop thread; every function and
 * every callback runs there, never from inside a curl callback.
 */
#ifndef SY_CONTROLPLANE_WORKER_POLLER_H
#define SY_CONTROLPLANE_WORKER_POLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/config.h"
#include "shm/registry.h"
#include "shm/segment.h"

#define WP_JOBS_MAX 2u

/* One worker as the poller tracks it; read-only for users. */
struct wp_target {
    bool active;
    uint32_t slot;
    uint32_t generation;
    char id[CFG_ID_MAX];
    char url[CFG_URL_MAX];
};

/* A finished transfer, as on_done sees it. body is the job's collected
 * bytes (NULL/0 for a job without a body cap), valid during the call. */
struct wp_result {
    CURLcode curl;  /* curl's result */
    long status;    /* HTTP status, 0 when none */
    bool truncated; /* the body passed the job's cap: the transfer was stopped */
    const char *body;
    size_t len;
};

/* What a finished transfer counts as in the per-worker stats. */
enum wp_outcome {
    WP_UNCOUNTED = 0,
    WP_OK,
    WP_FAILED,
};

/* Per-worker result counters, for /metrics; caller storage. */
struct wp_worker_stats {
    char id[CFG_ID_MAX];
    uint64_t ok;
    uint64_t failed;
};

struct wp_ops {
    void *user;
    unsigned n_jobs;               /* 1..WP_JOBS_MAX */
    size_t body_max[WP_JOBS_MAX];  /* 0: the body is discarded */
    const char *path[WP_JOBS_MAX]; /* borrowed; wp_set_path changes it */
    size_t state_size; /* bytes of the user's state per slot (wp_state); zeroed when fresh */
    /*
     * A worker in the registry, at every rescan: fresh is true when the
     * target was (re)started for it (new worker, slot changed hands or
     * URL) and its state zeroed. Every job of a
     * fresh target is due at now_ms unless the callback wp_schedule()s it.
     */
    void (*on_seen)(void *user, const struct wp_target *t, const struct shm_worker_info *w,
                    bool fresh, uint64_t now_ms);
    /* Job is starting at now_ms: returns when it is next due (monotonic ms). */
    uint64_t (*on_start)(void *user, const struct wp_target *t, unsigned job, uint64_t now_ms);
    /* Job finished (its handle is already removed); returns what it counts
     * as in the worker's stats. */
    enum wp_outcome (*on_done)(void *user, const struct wp_target *t, unsigned job,
                               const struct wp_result *r);
};

struct wp_poller;

/* Creates the poller. seg must outlive it; ops is copied. 0 or -ENOMEM/-EINVAL. */
int wp_create(struct shm_segment *seg, const struct wp_ops *ops, uint64_t timeout_ms,
              struct wp_poller **out);
void wp_destroy(struct wp_poller *p);

/* Requests of https:// workers use tls (borrowed, outlives p) from the next
 * handle made on; before, curl's defaults. */
void wp_set_upstream_tls(struct wp_poller *p, const struct cfg_upstream_tls *tls);

/* The per-transfer timeout (connect included) of transfers started from now on. */
void wp_set_timeout(struct wp_poller *p, uint64_t timeout_ms);

/* The path of a job from its next request on (borrowed, outlives p or the next call). */
void wp_set_path(struct wp_poller *p, unsigned job, const char *path);

/* The descriptor to watch for EPOLLIN in the loop's epoll set. */
int wp_fd(const struct wp_poller *p);

/* Drives transfers, follows registry changes, hands out finished
 * transfers, starts due jobs. Call on every loop pass. */
void wp_run(struct wp_poller *p, uint64_t now_ms);

/* Milliseconds until wp_run has work at now_ms (0 = now, -1 = none, at most 60000). */
int wp_timeout_ms(const struct wp_poller *p, uint64_t now_ms);

/* When job of slot is next due / makes it due at at_ms (0 = now). */
uint64_t wp_next(const struct wp_poller *p, uint32_t slot, unsigned job);
void wp_schedule(struct wp_poller *p, uint32_t slot, unsigned job, uint64_t at_ms);

/* The user's state of slot (state_size bytes), NULL when out of range or none. */
void *wp_state(const struct wp_poller *p, uint32_t slot);

/* The target in slot (active or not), NULL when slot is out of range. */
const struct wp_target *wp_target(const struct wp_poller *p, uint32_t slot);

/* True after the first complete registry scan: workers seen later were
 * added while the control plane ran. */
bool wp_scanned(const struct wp_poller *p);

/* Whether a registry change is still to be followed. */
bool wp_registry_pending(const struct wp_poller *p);

/* Copies the counters of the active targets (up to cap); returns how many.
 * A target's counters start at 0 whenever its slot changes hands. */
size_t wp_stats(const struct wp_poller *p, struct wp_worker_stats *out, size_t cap);

/* Slots the poller tracks (the segment's max_workers). */
uint32_t wp_slots(const struct wp_poller *p);

#endif
