/*
 * Types shared by the event loops (server.c) and the HTTP handlers
 * (handlers.c): the per-request state and the server-wide context. Only
 * types live here, so both modules can see the fields they share without
 * including each other's functions.
 *
 * A request's life: the access handler allocates it on MHD's first call for
 * the connection's current request, it may be parked (MHD-suspended, its
 * client fd watched for a hang-up, optionally with a deadline) any number of
 * times, and MHD's completion callback frees it. Everything about a request
 * runs on the thread of the loop that accepted its connection; the only
 * cross-thread touch is the engine admitting its sched entry (under the
 * engine lock) and waking the loop.
 */
#ifndef SY_TESTS_MOCKWORKER_REQUEST_H
#define SY_TESTS_MOCKWORKER_REQUEST_H

#include "common/buf.h"
#include "common/list.h"
#include "tests/mockworker/api.h"
#include "tests/mockworker/tls.h"
#include "tests/mockworker/cost_model.h"
#include "tests/mockworker/faults.h"
#include "tests/mockworker/kv_events.h"
#include "tests/mockworker/openai.h"
#include "tests/mockworker/options.h"
#include "tests/mockworker/pd_pins.h"
#include "tests/mockworker/stats.h"
#include "tests/mockworker/timer_heap.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct mw_loop;

enum mw_route {
    MW_ROUTE_UNSET = 0,
    MW_ROUTE_INFERENCE, /* POST to an inference path: ep says which */
    MW_ROUTE_API,       /* Responses, Messages, pooling, tokenizer (api.h): api says which */
    MW_ROUTE_HEALTH,
    MW_ROUTE_METRICS,
    MW_ROUTE_MODELS,
    MW_ROUTE_VERSION,
    MW_ROUTE_MOCK_STATS,
    MW_ROUTE_MOCK_FAULTS,
    MW_ROUTE_MOCK_RESET,
    MW_ROUTE_MOCK_KV_READ,
    MW_ROUTE_SLEEP, /* vLLM's sleep mode (sleep_mode.h) */
    MW_ROUTE_WAKE_UP,
    MW_ROUTE_IS_SLEEPING,
    MW_ROUTE_NOT_FOUND,
    MW_ROUTE_BAD_METHOD,
};

enum mw_phase {
    MW_PHASE_UNSET = 0,
    MW_PHASE_RECEIVING,  /* body arriving */
    MW_PHASE_STALLED,    /* parked: stall_before_headers_ms */
    MW_PHASE_QUEUED,     /* parked: waiting in the engine's FIFO */
    MW_PHASE_GENERATING, /* non-streaming: parked until the last token */
    MW_PHASE_RESPONDING, /* a response is queued; its reader may park */
};

/* Server-wide context: created by main via mw_server_init, read by all loops. */
struct mw_server {
    struct mw_options opts; /* read-only after init */
    struct mw_openai_cfg ocfg;
    const char *model_names[2 * MW_NAMES_MAX]; /* served names (ocfg.names); adapters: lora.h */
    const char *lora_paths[MW_NAMES_MAX];
    struct mw_engine engine;
    struct mw_stats stats;
    struct mw_fault_state faults;
    struct mw_pd_pins pins;         /* P/D: blocks pinned for remote decodes */
    struct mw_tls tls;              /* HTTPS, when --tls-cert is given */
    struct mw_kv_events *kv_events; /* KV-event publisher, NULL when off */
    uint64_t none_hash;             /* random seed of the block hash chains */
    char engine_id[MW_ENGINE_ID_MAX];
    uint16_t port;   /* the bound port (differs from opts.port when that was 0) */
    int64_t started; /* unix seconds, the "created" of /v1/models */
    int listen_fd;
    _Atomic uint64_t unique;   /* request id material */
    _Atomic uint64_t tail_ids; /* ids of partial tail blocks for P/D */
    _Atomic bool stopping;
    struct mw_loop *loops;
    unsigned n_loops;
};

/* One HTTP request. Owned by its loop's thread; freed by the completion callback. */
struct mw_req {
    struct mw_loop *loop;
    struct mw_server *server;
    struct MHD_Connection *conn;
    enum mw_route route;
    enum mw_endpoint ep;
    enum mw_phase phase;
    const char *allow; /* static: the route's methods, for 405's Allow header */
    bool accounted;    /* holds one inflight count */
    bool gone;         /* client hung up or the server stops: fail at the next callback */
    bool reset_by_us;  /* closed on purpose by a reset fault: not a client abort */

    /* MW_ROUTE_API: which endpoint, and the {id} of its path ("" if none). */
    enum mw_api api;
    char api_id[MW_API_ID_MAX];
    int lora; /* running on a LoRA adapter: its handle (lora.h), else -1 */

    /* Body, capped at opts.max_body_bytes (too_large then, rest discarded). */
    struct buf body;
    bool too_large;

    /* Parking (server.c). */
    bool parked;
    int watch_fd;               /* client fd in the loop's epoll, -1 when not watched */
    struct th_timer timer;      /* in the loop's heap while parked with a deadline */
    struct list_node park_link; /* on the loop's parked list while parked */

    /* Inference. */
    struct mw_infer infer;
    int parse_status;  /* 0 = parsed, else the error status to answer */
    char *parse_error; /* owned error body when parse_status != 0 */
    size_t parse_error_len;
    struct mw_fault_plan plan;
    uint64_t *hashes;
    uint32_t *block_ids;
    struct mw_sched_entry sched;
    bool submitted; /* sched was submitted to the engine */
    bool admitted;  /* the engine admitted sched (set on the owner loop's thread) */
    bool started;   /* infer_start fixed the token schedule */
    char id[MW_REQUEST_ID_MAX];
    struct mw_gen gen;
    uint64_t first_token_ns; /* when the first token is out (after prefill) */
    uint64_t tpot_ns;
    uint64_t shift_ns; /* stall time inserted into the token schedule */

    /* Streaming and held bodies: one pending piece, copied out by the reader. */
    uint64_t events_sent;
    bool stalled;          /* the stall fault has been served */
    unsigned error_events; /* stream_error fault: 1 = error event sent, 2 = its [DONE] too */
    bool finished;         /* engine finish done for the generated tokens */
    char *out_buf;
    size_t out_cap;
    size_t out_len;
    size_t out_off;
    size_t hold_split; /* fail_body_hold: bytes sent before the hold */
    bool hold_done;
};

#endif
