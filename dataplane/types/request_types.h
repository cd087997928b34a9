/*
 * Types several of the dataplane's modules share (HAProxy style: types
 * here, functions in each module's own header): the request and the
 * attempt, which the listener, the forwarder, the upstream glue and the
 * legs all read, and the enums that label metrics. Only types and their
 * bounds: no function is declared here, and what one module alone uses
 * lives in that module's header.
 *
 * Threading: a request and its attempts belong to the event-loop thread
 * that accepted the request and are never touched by another.
 */
#ifndef SY_DATAPLANE_CORE_REQUEST_TYPES_H
#define SY_DATAPLANE_CORE_REQUEST_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "common/buf_types.h"
#include "common/config_types.h"
#include "common/list_types.h"
#include "dataplane/types/admission_types.h"
#include "dataplane/types/guard_types.h"
#include "dataplane/types/pd_types.h"
#include "dataplane/types/policy_types.h"
#include "dataplane/types/relay_types.h"
#include "dataplane/types/sse_scan_types.h"

#define DP_RESP_HDRS_CAP                                                                           \
    1024u /* upstream response headers kept for the client (more are dropped) */
#define DP_REQUEST_ID_MAX   128u
#define DP_ROUTING_TEXT_MAX (1u << 20) /* routing text kept for cache_aware (1 MiB) */
#define DP_USER_MAX         128u
#define DP_MAX_TRIED        16u
#define DP_CAUSE_MAX        160u
#define DP_RESP_ID_MAX      160u /* a Responses id (path segment or previous_response_id) */

/* A client route: the key of its row in the route table (routes.h), which
 * holds everything else about it. Metrics arrays are sized by
 * DP_ROUTE_COUNT; OTHER is every unknown path. */
enum dp_route {
    DP_ROUTE_UNSET = 0,
    DP_ROUTE_CHAT,
    DP_ROUTE_COMPLETIONS,
    DP_ROUTE_EMBEDDINGS,
    DP_ROUTE_MODELS,
    DP_ROUTE_HEALTH,
    DP_ROUTE_METRICS,
    DP_ROUTE_RESPONSES,        /* POST /v1/responses */
    DP_ROUTE_RESPONSES_GET,    /* GET /v1/responses/{id} */
    DP_ROUTE_RESPONSES_CANCEL, /* POST /v1/responses/{id}/cancel */
    DP_ROUTE_MESSAGES,         /* POST /v1/messages (Anthropic) */
    DP_ROUTE_MESSAGES_COUNT,   /* POST /v1/messages/count_tokens */
    DP_ROUTE_RERANK,
    DP_ROUTE_RERANK_V1,
    DP_ROUTE_RERANK_V2,
    DP_ROUTE_SCORE,
    DP_ROUTE_SCORE_V1,
    DP_ROUTE_POOLING,
    DP_ROUTE_CLASSIFY,
    DP_ROUTE_TOKENIZE,
    DP_ROUTE_DETOKENIZE,
    DP_ROUTE_PING,               /* GET/POST /ping (SageMaker's health) */
    DP_ROUTE_EMBED_V2,           /* POST /v2/embed (Cohere's embed) */
    DP_ROUTE_INVOCATIONS,        /* POST /invocations (SageMaker: the body's shape decides) */
    DP_ROUTE_CHAT_RENDER,        /* POST /v1/chat/completions/render */
    DP_ROUTE_COMPLETIONS_RENDER, /* POST /v1/completions/render */
    DP_ROUTE_MESSAGES_RENDER,    /* POST /v1/messages/render */
    DP_ROUTE_GENERATE,           /* POST /inference/v1/generate (token ids in and out) */
    DP_ROUTE_TRANSCRIPTIONS,     /* POST /v1/audio/transcriptions (multipart) */
    DP_ROUTE_TRANSLATIONS,       /* POST /v1/audio/translations (multipart) */
    DP_ROUTE_OTHER,
    DP_ROUTE_COUNT,
};

/* Where a client can disconnect; a label of switchyard_client_disconnects_total. */
enum dp_phase {
    DP_PHASE_UNSET = 0,
    DP_PHASE_HEADERS, /* waiting for a worker's response headers (or a retry) */
    DP_PHASE_STREAM,  /* relaying the body */
    DP_PHASE_COUNT,
};

/* Kinds of upstream failure; a label of switchyard_upstream_errors_total. */
enum dp_up_error {
    DP_UPERR_UNSET = 0,
    DP_UPERR_CONNECT,
    DP_UPERR_STATUS,   /* answered a status in retry.on_status */
    DP_UPERR_TIMEOUT,  /* first byte or idle timeout */
    DP_UPERR_TRANSFER, /* reset, truncated body, protocol error */
    DP_UPERR_IN_BAND,  /* a 200 stream carrying an error event */
    DP_UPERR_TLS,      /* handshake or certificate failure (https:// workers) */
    DP_UPERR_COUNT,
};

enum dp_attempt_state {
    DP_ATT_UNSET = 0,
    DP_ATT_WAITING,    /* sent; waiting for response headers */
    DP_ATT_RELAYING,   /* its body goes to the client */
    DP_ATT_DRAINING,   /* failed and retried: its body is read and discarded */
    DP_ATT_COLLECTING, /* a prefill leg's response: kept for the router (pd.h) */
};

/* The leg of a prefill/decode request (dataplane/forward/pd.h); NONE = a plain request. */
enum dp_pd_phase {
    DP_PD_NONE = 0,
    DP_PD_PREFILL,
    DP_PD_DECODE,
};

/* How a P/D request ended; the label of switchyard_pd_requests_total. */
enum dp_pd_outcome {
    DP_PD_OUT_UNSET = 0,
    DP_PD_OUT_OK,              /* the decode body reached its end */
    DP_PD_OUT_PREFILL_ERROR,   /* no prefill worker, or prefill failed: error answered */
    DP_PD_OUT_BAD_KV_PARAMS,   /* prefill answered without usable kv_transfer_params */
    DP_PD_OUT_DECODE_ERROR,    /* no decode worker, decode failed, or its stream was cut */
    DP_PD_OUT_ABORTED_PREFILL, /* the client left during the prefill phase */
    DP_PD_OUT_ABORTED_DECODE,  /* the client left during the decode phase */
    DP_PD_OUT_FALLBACK,        /* no usable params: sent to a decode worker as a plain request */
    DP_PD_OUT_COUNT,
};

/*
 * The P/D part of a request (pd.h). Owned by the request; the bodies live
 * until the request is freed, so a draining attempt can still send them.
 */
struct dp_pd_state {
    enum dp_pd_phase phase;
    char *prefill_body; /* owned; the prefill leg's body */
    size_t prefill_len;
    char *decode_body; /* owned; the decode leg's body, once prefill answered */
    size_t decode_len;
    /* The prefill response being collected, capped at DP_PD_RESP_MAX (pd.h):
     * buf_error() != 0 when it did not fit (or memory ran out): unusable. */
    struct buf resp;
    uint64_t phase_start_ms;
    enum dp_pd_outcome outcome; /* counted once, when first set */
    uint32_t reruns;            /* prefills run again after a failed decode */
    struct dp_pd_usage usage;   /* the prefill answer's, for the decode answer */
    char *prefill_answer;       /* owned; kept when the client asked for prompt_logprobs */
    size_t prefill_answer_len;
    /* The decode stream's rewriting (pd_usage_filter.h): a partial line
     * held back, and the output of the last chunk, committed once the
     * relay took it. */
    struct buf line, fout;
    int keep;        /* what the commit does with the chunk (pd_usage_filter.c) */
    bool no_rewrite; /* a line too long to hold: the rest passes as is */
    char prefill_worker[CFG_ID_MAX];
};

enum dp_req_phase {
    DP_REQ_UNSET = 0,
    DP_REQ_RECEIVING,  /* MHD is still handing us the body */
    DP_REQ_FORWARDING, /* suspended: attempts, backoff, waiting for headers */
    DP_REQ_REPLIED,    /* a response was queued (ours or relayed) */
};

struct dp_journal;
struct dp_form;
struct dp_tok_req;
struct dp_leg;
struct dp_request;
struct dp_resp_capture;
struct dp_loop;

/*
 * One try of a request on one worker. Owned by its loop; holds a reference
 * on its request (so the body it sends outlives the client connection) and
 * the guard for its increment. Dies when its transfer ends or is aborted.
 */
struct dp_attempt {
    struct dp_loop *loop;
    struct dp_request *req; /* reference held */
    CURL *easy;
    enum dp_attempt_state state;
    struct dp_guard guard;
    uint32_t slot;
    uint32_t generation;
    char worker_id[CFG_ID_MAX];
    long status;
    const struct dp_leg *leg; /* the leg it runs (legs.h; static) */
    const char *body;         /* borrowed from req: what this attempt POSTs */
    size_t body_len;
    bool paused; /* the write callback returned CURL_WRITEFUNC_PAUSE */
    uint64_t started_ms;
    uint64_t deadline_ms;     /* first byte, then idle; 0 = none */
    struct list_node link;    /* loop->fwd.attempts */
    struct list_node sibling; /* req->attempt_list */
};

/*
 * One client request. Created by the listener when MHD reports a new
 * request; references: one for the MHD connection (dropped in MHD's
 * completion callback) plus one per live attempt. Freed (deferred to the end
 * of the loop's current pass) when the last reference goes.
 */
struct dp_request {
    struct dp_loop *loop;
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    int refs;
    void (*release)(struct dp_request *req); /* at the last unref (request.h) */
    enum dp_route route;
    enum dp_req_phase phase;
    bool method_ok;
    bool preflight; /* a CORS preflight the router answers (cors.h) */
    bool suspended;
    bool client_gone;
    /* Answered before its body was read, whose end is unknown (ambiguous
     * framing): the connection must close after the answer. */
    bool close_after_reply;
    int client_fd; /* watched with EPOLLRDHUP while >= 0 and watching */
    bool watching;
    /* Parked, to be watched at the loop's next tick (dp_listener_watch_soon):
     * most requests are answered before it and never cost the epoll_ctl pair. */
    bool watch_queued;
    struct list_node watch_link; /* the loop's watch queue */
    uint64_t start_ms;
    uint64_t received_bytes; /* body bytes MHD handed over, kept or not (upload rate) */
    uint64_t first_byte_ms;  /* 0 until the first body byte reached the client buffer */

    /* request body, capped at dataplane.max_body (data NULL until a byte came) */
    struct buf body;
    bool body_too_large; /* bytes past the cap came (and were dropped) */

    /* parsed */
    char model[CFG_MODEL_MAX];
    bool stream;
    /* The shape the body was parsed as, an enum dp_body (routes.h, which
     * includes this file): its route's, or for /invocations the one its
     * fields name, as vLLM picks (dp_request_shape). */
    int shape;
    struct dp_form *form; /* owned; a multipart body's fields (form.h), or NULL */
    char request_id[DP_REQUEST_ID_MAX];
    struct buf routing_text; /* capped at DP_ROUTING_TEXT_MAX; data NULL until parsed */
    char user[DP_USER_MAX];  /* the body's "user", for consistent_hash */
    /* The cache_salt forwarded (the body's, or the one cache_isolation
     * set: salt_body.h): routing keys its prefixes with it (pol_request). */
    bool salted;
    uint64_t salt_hash;
    enum pol_decision decision; /* the last routing decision */
    char worker_id[CFG_ID_MAX]; /* the worker of the last attempt (debug headers) */
    struct curl_slist *up_headers;

    /* Responses (resp_affinity.h): the id in the path, or the body's
     * previous_response_id ("" when none); when pinned, the one worker
     * (slot, generation) the request may go to, whatever the policy says;
     * and the capture of the id of the answer (owned). */
    char resp_id[DP_RESP_ID_MAX];
    bool pinned;
    uint32_t pin_slot, pin_generation;
    struct dp_resp_capture *resp_capture;

    /* a reply of our own, ready to queue when the connection resumes */
    int reply_status;
    char *reply_body; /* owned */
    uint32_t retry_after_s;

    /* relaying */
    struct dp_attempt *active; /* the attempt whose body the client gets */
    long relay_status;
    /* "Name: value\n" lines from the worker (DP_RESP_HDRS_CAP bytes), kept
     * until MHD has its copy: a held stream does not pay for them. */
    char *resp_hdrs;
    size_t resp_hdrs_len;
    bool relay_ready; /* headers known, waiting for the handler to queue them */
    /* Toward the client, opened when relaying starts; a whole answer (not
     * SSE) is collected in it before anything is sent (relay.h). */
    struct dp_relay relay;
    bool up_done;   /* the worker's body ended (or was cut) */
    bool up_failed; /* ...abnormally: close the client connection with an error */
    bool sse;
    struct dp_sse_scan sse_scan; /* watches a relayed stream for an in-band error */
    bool in_band_error;          /* ...found one (counted once) */

    /* retries */
    uint32_t attempts;
    uint32_t tried[DP_MAX_TRIED];
    size_t n_tried;
    uint64_t backoff_ms;
    uint64_t retry_at_ms; /* 0 = no retry pending */
    /* Until when it may wait for a reset_load to give its worker back
     * (forwarder.c, fwd_wait_for_reset); 0 = has not waited. */
    uint64_t reset_wait_until_ms;
    int last_status; /* of the last failed attempt, 0 when none */
    char last_cause[DP_CAUSE_MAX];
    char parse_error[DP_CAUSE_MAX]; /* why the body is not a JSON object, for the 400 */
    struct list_node retry_link;    /* loop->fwd.retrying while retry_at_ms != 0 */
    struct list_node attempt_list;  /* head: live attempts of this request (dp_attempt.sibling) */
    int final_status;               /* what the client was sent, for metrics */
    const struct dp_leg *leg;       /* the plan's current leg (legs.h); NULL until forwarding */
    struct dp_pd_state pd;          /* the prefill/decode plan's state (pd.h) */
    struct list_node req_link;      /* loop->requests while MHD knows it */
    struct dp_adm_req adm;          /* tenant, limits, queue place (admission.h) */

    struct dp_request *dead_next; /* loop->graveyard */
    struct dp_journal *journal;   /* owned; what the access log and tracing read (journal.h) */
    struct dp_tok_req *tok;       /* owned; precise_cache_aware's tokens (tokenize.h), or NULL */
};

#endif
