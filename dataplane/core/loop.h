/*
 * Event loops of the dataplane. dataplane.threads loops (0 = one per core)
 * run shared-nothing: each has its own MHD daemon in external epoll mode on
 * the shared listen port (SO_REUSEPORT spreads connections), its own CURLM
 * driven by curl_multi_socket_action, its own registry copy and policy
 * instance, and waits in exactly one epoll_wait. A request never leaves the
 * loop that accepted it, so nothing per request is locked.
 *
 * Cross-thread messages are few: the main thread asks a loop to drain or to
 * stop by setting loop->cmd and writing its eventfd, and a loop wakes
 * another through the same eventfd when admission's order gives a free
 * slot to a request queued there (adm_hub.h; the hub is the one structure
 * the loops share, under a mutex). Everything else in a struct dp_loop
 * belongs to its thread.
 *
 * epoll tags: small integers name the loop's own fds, DP_TAG_CURL | fd a
 * curl socket (no pointer, so a socket curl dropped mid-batch is harmless),
 * anything else is a struct dp_request * whose client fd is watched.
 * Requests are freed only at the end of a pass (the graveyard), so a stale
 * pointer in the current batch is still readable.
 *
 * This header is the loop's data and the little the modules ask of it
 * (dp_loop_bury): each module's state is embedded from a types-only header
 * of its own (listener_types.h, upstream_types.h, forwarder_types.h,
 * pd_types.h), so every module can include this one without a cycle. The
 * driver that sets a loop up, runs its thread and dispatches its events to
 * the modules is loop_run.h.
 */
#ifndef SY_DATAPLANE_LOOP_H
#define SY_DATAPLANE_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dataplane/types/admission_types.h"
#include "dataplane/types/forwarder_types.h"
#include "dataplane/core/guard.h"
#include "dataplane/types/listener_types.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/types/pd_types.h"
#include "dataplane/core/policy.h"
#include "dataplane/types/request_types.h"
#include "dataplane/types/upstream_types.h"
#include "dataplane/core/workers.h"

#define DP_TAG_MHD      1u
#define DP_TAG_EVFD     2u
#define DP_TAG_TICK     3u
#define DP_TAG_CURL     (0xC5ull << 56)
#define DP_TICK_MS      20u
#define DP_CUT_GRACE_MS 1000u /* after the drain deadline: time to flush error events */

struct dp_alog;
struct dp_tracer;
struct dp_salt_key;
struct dp_resp;

enum dp_cmd {
    DP_CMD_NONE = 0,
    DP_CMD_DRAIN, /* stop accepting, let in-flight finish until the drain deadline */
    DP_CMD_STOP,  /* abort everything now */
};

/* Process-wide state shared by every loop; lives in dp_run's frame. */
struct dp_tls;

struct dp_shared {
    const struct cfg *cfg; /* borrowed, read-only */
    struct shm_segment *seg;
    uint32_t lease;
    struct dp_guards guards;
    struct dp_metrics metrics;
    struct dp_adm_shared adm; /* admission.c: rate-limit buckets, reload signal */
    /* What every loop's policies share (policy.h: the node's indexes,
     * precise's speculative entries); set up before the loops start. */
    struct pol_shared *policies;
    /* The node's response table (resp_affinity.h); NULL = stickiness off. */
    struct dp_resp *resp;
    struct sockaddr_storage listen_addr;
    socklen_t listen_addr_len;
    /* Listening sockets received from a predecessor (hot restart): loop i
     * serves inherited[i] when i < n_inherited, else binds listen_addr. */
    const int *inherited;
    unsigned n_inherited;
    _Atomic unsigned loops_running; /* decremented by each loop thread as it ends */
    /* Client connections each loop may hold (dataplane.max_connections
     * shared out; set before the loops start). */
    unsigned conn_cap_per_loop;
    struct dp_alog *alog;     /* the access log (access_log.h); NULL = off */
    struct dp_tracer *tracer; /* span export (trace_export.h); NULL = off */
    struct dp_tls *tls;       /* dataplane.tls (tls_server.h); NULL = plain HTTP */
    /* dataplane.cache_salt_key_file's secret (cache_salt.h), read-only;
     * NULL when none is configured. */
    const struct dp_salt_key *salt_key;
    /* dataplane.plain_listen resolved; plain_addr_len 0 = none. */
    struct sockaddr_storage plain_addr;
    socklen_t plain_addr_len;
};

/*
 * One event loop. Created by the main thread, then touched only by its own
 * thread. Each module keeps its own state in its own member (listener,
 * upstream, forwarder, P/D), which only that module touches once
 * dp_loop_init (loop_run.h) has cleared it; the rest is the loop's.
 */
struct dp_tok_loop;

struct dp_loop {
    struct dp_shared *sh; /* borrowed */
    unsigned index;
    pthread_t thread;
    bool started;
    int epfd, evfd, tickfd;
    struct dp_lst lst;    /* listener.c */
    struct dp_up up;      /* upstream.c */
    struct dp_fwd fwd;    /* forwarder.c */
    struct dp_pd_loop pd; /* pd.c */
    struct dp_workers workers;
    /* admission.c, adm_queue.c */
    struct dp_adm_loop adm;
    struct pol_policy policy;
    struct dp_tok_loop *tok;   /* tokenize.c's cache; NULL until first used */
    struct list_node requests; /* requests MHD still knows (dp_request.req_link) */
    /* A stack of requests to free at the end of the pass (dp_request.dead_next):
     * only pushed and emptied whole, so a singly linked stack suffices. */
    struct dp_request *graveyard;
    _Atomic int cmd; /* enum dp_cmd, written by the main thread */
    /* The monotonic clock (ms) as the current pass began, after its
     * epoll_wait: what per-chunk work reads instead of the clock (a
     * relayed token's idle deadline), as precise as a deadline needs. */
    uint64_t pass_ms;
    uint64_t drain_deadline_ms;
    bool draining;
    bool cutting;       /* drain deadline passed or stopping: requests were cut, new ones get 503 */
    unsigned drain_cut; /* requests the drain deadline ended (loop_cut), for the exit's log */
    uint64_t cut_deadline_ms; /* ...and this is when the loop stops regardless */
};

/* Loop thread: puts a request whose last reference went on the graveyard. */
void dp_loop_bury(struct dp_loop *loop, struct dp_request *req);
/* Loop thread, at the end of a pass: frees every request on the graveyard. */
void dp_loop_free_graveyard(struct dp_loop *loop);

#endif
