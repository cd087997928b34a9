/* The types of config.h: types only, including only types headers. */
#ifndef SY_COMMON_CONFIG_TYPES_H
#define SY_COMMON_CONFIG_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sizes include the terminating NUL. The shared-memory worker slot stores
 * the same fields with the same limits (shm/layout.h). */
#define CFG_ID_MAX 64

#define CFG_URL_MAX 256

#define CFG_MODEL_MAX 128

#define CFG_PATH_MAX 256

#define CFG_ADDR_MAX 128

#define CFG_ON_STATUS_MAX 32

#define CFG_LIST_MAX 16 /* entries of a list of strings */

#define CFG_LIST_ITEM_MAX 256 /* bytes of one entry, NUL included */

enum cfg_role {
    CFG_ROLE_UNSET = 0,
    CFG_ROLE_REGULAR,
    CFG_ROLE_PREFILL,
    CFG_ROLE_DECODE,
};

enum cfg_policy_name {
    CFG_POLICY_UNSET = 0,
    CFG_POLICY_ROUND_ROBIN,
    CFG_POLICY_RANDOM,
    CFG_POLICY_POWER_OF_TWO,
    CFG_POLICY_LEAST_LOAD,
    CFG_POLICY_CONSISTENT_HASH,
    CFG_POLICY_CACHE_AWARE,
    CFG_POLICY_PRECISE_CACHE_AWARE, /* KV-cache events: exact holders (docs/routing.md) */
};

enum cfg_balance_gate {
    CFG_BALANCE_GATE_UNSET = 0,
    CFG_BALANCE_GATE_PER_REQUEST,
    CFG_BALANCE_GATE_FLEET,
};

/* policy.pd_fallback: what a P/D request does when the prefill answer has no
 * usable kv_transfer_params (docs/pd.md). */
enum cfg_pd_fallback {
    CFG_PD_FALLBACK_UNSET = 0,
    CFG_PD_FALLBACK_LOCAL_PREFILL, /* the client's body to a decode worker, which prefills */
    CFG_PD_FALLBACK_ERROR,         /* 502 bad_kv_transfer_params */
};

/* policy.load_signal: the load a policy sees (docs/routing.md, "Two truths"). */
enum cfg_load_signal {
    CFG_LOAD_SIGNAL_UNSET = 0,
    CFG_LOAD_SIGNAL_COMBINED, /* own in-flight combined with the worker's fresh report */
    CFG_LOAD_SIGNAL_OWN,      /* this node's own in-flight count only */
};

struct cfg_shm {
    char name[CFG_PATH_MAX]; /* POSIX shm name, starts with '/', no other '/' */
    uint32_t max_workers;
    uint32_t max_dataplanes;
    uint32_t prefix_index_blocks; /* capacity of the "<name>.prefix" segment */
    uint32_t kv_index_blocks;     /* (block, holder) facts of the "<name>.kvholders" segment */
};

struct cfg_health {
    char path[CFG_PATH_MAX]; /* starts with '/' */
    uint64_t interval_ms;
    uint64_t timeout_ms;
    uint32_t failure_threshold;
    uint32_t success_threshold;
    /* "unknown" or "healthy": how a worker added at run time (admin API,
     * discovery, a reload) starts; unknown = not routed before its first
     * successful probe. */
    char initial[16];
    uint64_t models_interval_ms; /* each worker's /v1/models is read again this often */
};

/* controlplane.load_reports: scraping each worker's /metrics. */
struct cfg_load_reports {
    char path[CFG_PATH_MAX]; /* starts with '/' */
    uint64_t interval_ms;    /* 0 = no scraping */
    uint64_t timeout_ms;
    uint64_t stale_after_ms; /* a report older than this is ignored */
};

/* A list of strings (e.g. dataplane.cors.allowed_origins). */
struct cfg_str_list {
    char item[CFG_LIST_MAX][CFG_LIST_ITEM_MAX];
    size_t n;
};

struct cfg_controlplane {
    char admin_listen[CFG_ADDR_MAX];     /* HOST:PORT */
    char admin_token_file[CFG_PATH_MAX]; /* empty = no auth */
    char admin_socket[CFG_PATH_MAX];
    /* Serve the admin API without a token on a non-loopback address. */
    bool admin_insecure;
    /* DNS names a browser may use in Host for the admin API, besides IP
     * literals and localhost (controlplane/admin/admin_guard.h). */
    struct cfg_str_list admin_allowed_hosts;
    /* How long reset_load waits for every data plane's in-flight count. */
    uint64_t reset_load_timeout_ms;
    struct cfg_health health;
    struct cfg_load_reports load_reports;
};

struct cfg_retry {
    uint32_t max_attempts; /* attempts in total, >= 1 */
    int on_status[CFG_ON_STATUS_MAX];
    size_t n_on_status;
    uint64_t backoff_ms;
    uint64_t backoff_max_ms;
};

/* dataplane.cors: off while allowed_origins is empty (docs/api.md). */
struct cfg_cors {
    struct cfg_str_list allowed_origins; /* "*" or scheme://host[:port] */
    struct cfg_str_list allowed_headers; /* "*" or header names */
};

/* dataplane.upstream_tls: how every curl user (the data plane's requests,
 * the control plane's probes, scrapes and discovery calls) reaches https://
 * workers; applied to a handle by tls_client_apply (common/tls_client.h). */
struct cfg_upstream_tls {
    char ca_file[CFG_PATH_MAX];          /* PEM CA bundle; "" = the system's store */
    char client_cert_file[CFG_PATH_MAX]; /* PEM; "" = no client certificate */
    char client_key_file[CFG_PATH_MAX];  /* PEM; set exactly when client_cert_file is */
    bool verify;                         /* check the chain and the host name */
};

/* dataplane.tls: HTTPS on dataplane.listen (dataplane/http/tls_server.h). TLS is
 * on when cert_file is set; the files are re-read on SIGHUP. */
struct cfg_dataplane_tls {
    char cert_file[CFG_PATH_MAX];      /* PEM chain; "" = plain HTTP */
    char key_file[CFG_PATH_MAX];       /* PEM; set exactly when cert_file is */
    char client_ca_file[CFG_PATH_MAX]; /* PEM; "" = no client certificates (else mTLS) */
    char min_version[8];               /* "1.2" or "1.3" */
    /* A GnuTLS priority string; "" = the built-in AEAD-only default
     * (docs/security.md). min_version still applies on top of it. */
    char priorities[CFG_PATH_MAX];
};

struct cfg_dataplane {
    char listen[CFG_ADDR_MAX]; /* HOST:PORT */
    uint32_t threads;          /* 0 = one event loop per core */
    uint64_t max_body;         /* bytes */
    uint64_t max_header_size;  /* bytes: request line plus headers */
    uint64_t connect_timeout_ms;
    uint64_t first_byte_timeout_ms;
    uint64_t idle_timeout_ms;
    uint64_t drain_timeout_ms;
    /* Slow clients: request headers complete within header_timeout_ms of
     * the connection's accept or previous request; bodies arrive at an
     * average of at least upload_min_rate bytes/s (0 = no minimum) once
     * header_timeout_ms has passed; per_ip_connection_limit connections
     * per client address (0 = no limit). */
    uint64_t header_timeout_ms;
    uint64_t upload_min_rate;
    uint32_t per_ip_connection_limit;
    /* Client connections the data plane holds (0: half its descriptor
     * limit); at the cap a new connection closes the oldest idle one. */
    uint32_t max_connections;
    char metrics_listen[CFG_ADDR_MAX]; /* HOST:PORT, or "" = /metrics on listen */
    bool debug_headers;
    struct cfg_retry retry;
    /* "off" (or ""), "stderr", or a file path: one JSON line per request. */
    char access_log[CFG_PATH_MAX];
    uint64_t access_log_buffer; /* bytes of lines queued per event loop */
    /* Client API keys (dataplane/admission/api_keys.h): "" = no keys, one anonymous
     * tenant. The worker key file holds vLLM's --api-key: "" = none. */
    char api_keys_file[CFG_PATH_MAX];
    char upstream_api_key_file[CFG_PATH_MAX];
    /* The router's secret from which tenants with cache_isolation get their
     * cache_salt; "" = no tenant may ask for cache_isolation. */
    char cache_salt_key_file[CFG_PATH_MAX];
    /* Responses stickiness (docs/api.md): how long a response id stays
     * bound to its worker, and how many ids the node's table holds. */
    uint64_t response_ttl_ms;
    uint32_t response_table_size;
    struct cfg_cors cors;
    struct cfg_upstream_tls upstream_tls;
    struct cfg_dataplane_tls tls;
    char plain_listen[CFG_ADDR_MAX]; /* HOST:PORT of a second, plain-HTTP listener, or "" */
    /* Client headers never forwarded to workers, beside the fixed ones. */
    struct cfg_str_list strip_headers;
    /* false: /metrics sums the per-tenant series into one (no tenant names). */
    bool metrics_tenant_labels;
};

struct cfg_policy_role {
    enum cfg_policy_name name;
};

/* policy.precise_cache_aware: matching requests to the blocks the workers'
 * KV-cache events report (docs/routing.md). */
struct cfg_precise {
    uint32_t block_size;             /* tokens per block: the workers' --block-size */
    char tokenizer_url[CFG_URL_MAX]; /* "" = the worker's own /tokenize */
    uint64_t tokenize_timeout_ms;    /* a request waits no longer for its tokens */
    uint32_t tokenize_cache_entries; /* prompts whose tokens are remembered, per event loop */
    uint64_t speculative_ttl_ms;     /* a just-sent prefix counts as held this long */
};

struct cfg_policy {
    enum cfg_policy_name name;
    double cache_threshold; /* 0..1 */
    uint32_t balance_abs_threshold;
    double balance_rel_threshold; /* >= 1 */
    enum cfg_balance_gate balance_gate;
    struct cfg_policy_role prefill;
    struct cfg_policy_role decode;
    enum cfg_pd_fallback pd_fallback;
    enum cfg_load_signal load_signal;
    double kv_overload; /* a fresh report's kv_cache_usage above this = overloaded */
    /* cache_aware: cold prefixes and overloaded fallbacks walk a rendezvous
     * ranking (false: the least-loaded worker, as before); a worker is
     * within bounds while its load <= bounded_load_factor x mean + 1. */
    bool rendezvous;
    double bounded_load_factor; /* >= 1 */
    /* cache_aware: a matched worker over the load bound also gives way
     * (overloaded_fallback down the ranking), not only over the balance
     * thresholds. */
    bool bounded_affinity;
    /* ... the matched worker's bound: load <= this x mean + 1 (looser than
     * bounded_load_factor: a busy moment must not move a prefix, a hot
     * prefix piling up must). */
    double affinity_load_factor; /* >= 1 */
    struct cfg_precise precise_cache_aware;
};

/* tracing: W3C trace context to the workers, spans to an OTLP collector. */
struct cfg_tracing {
    bool propagate;                   /* send traceparent/tracestate to the workers */
    char otlp_endpoint[CFG_URL_MAX];  /* http(s) URL of an OTLP/HTTP collector; "" = no export */
    char service_name[CFG_MODEL_MAX]; /* resource attribute service.name */
    uint32_t batch_size;              /* spans per export request, at most */
    uint64_t batch_interval_ms;       /* a partial batch leaves after this long */
    uint64_t queue_size;              /* bytes of encoded spans queued per event loop */
    uint64_t export_timeout_ms;       /* one export request, at most */
};

/*
 * discovery.kubernetes (docs/kubernetes.md): workers found by listing and
 * watching pods. enabled: the mapping was given. Empty api_server and
 * namespace mean the in-cluster values (the environment, the service
 * account's namespace file), resolved when the source starts.
 */
struct cfg_kubernetes {
    bool enabled;
    char api_server[CFG_URL_MAX]; /* "" = https://$KUBERNETES_SERVICE_HOST:$..._PORT */
    char token_file[CFG_PATH_MAX];
    char ca_file[CFG_PATH_MAX];
    char namespace_name[CFG_ID_MAX]; /* "" = the service account's namespace */
    char label_selector[CFG_PATH_MAX];
    uint32_t port;              /* the workers' port; ignored when port_name is set */
    char port_name[CFG_ID_MAX]; /* a named container port; "" = use port */
    char scheme[8];             /* http | https */
    char model_label[CFG_PATH_MAX];
    char role_label[CFG_PATH_MAX];
    uint64_t resync_ms;        /* full re-list period */
    uint64_t watch_timeout_ms; /* a watch's timeoutSeconds; silence past it ends the watch */
    bool insecure_http;        /* allow an http:// api_server (tests) */
    uint32_t max_list_items; /* items of one list page or watch burst beyond which it is refused */
    uint32_t max_pods;       /* pods tracked at most; beyond, the list is refused */
};

struct cfg_discovery {
    struct cfg_kubernetes kubernetes;
};

/* admission: saturation thresholds (0 = not used) and the wait queue. */
struct cfg_admission_queue {
    uint32_t max_depth;   /* requests waiting per model */
    uint64_t max_wait_ms; /* a waiting request's TTL */
};

struct cfg_admission {
    uint32_t max_inflight_per_worker; /* this node's load per worker */
    uint32_t max_waiting_per_worker;  /* from the worker's load report */
    double max_kv_usage;              /* 0..1, from the worker's load report */
    struct cfg_admission_queue queue;
    bool forward_priority; /* the tenant's band becomes vLLM's request priority */
};

/* Where a worker publishes its KV-cache events (vLLM's --kv-events-config):
 * tcp://HOST:PORT endpoints, HOST '*' or empty = the worker's own host. */
struct cfg_kv_events {
    char endpoint[CFG_URL_MAX];        /* "" = no events from this worker */
    char replay_endpoint[CFG_URL_MAX]; /* "" = no replay: a gap is a resync */
    uint32_t data_parallel_size;       /* publishers at endpoint port + rank, default 1 */
};

struct cfg_worker {
    char id[CFG_ID_MAX];       /* default: HOST:PORT of the url */
    char url[CFG_URL_MAX];     /* http(s)://host:port, validated with curl_url */
    char model[CFG_MODEL_MAX]; /* empty = learn from the worker's /v1/models */
    enum cfg_role role;        /* default regular */
    struct cfg_kv_events kv_events;
    int line; /* 1-based line of the entry, for later error messages */
};

struct cfg {
    char path[CFG_PATH_MAX]; /* the file it was loaded from, as given */
    struct cfg_shm shm;
    struct cfg_controlplane controlplane;
    struct cfg_dataplane dataplane;
    struct cfg_policy policy;
    struct cfg_tracing tracing;
    struct cfg_discovery discovery;
    struct cfg_admission admission;
    struct cfg_worker *workers; /* owned; n_workers entries */
    size_t n_workers;
};

/* Longest dotted key name ("controlplane.health.success_threshold") plus NUL. */
#define CFG_KEY_NAME_MAX 96

/* How a change of a key's value takes effect. Each key's schema row says
 * which (config_schema.c), so a new key brings its own; docs/operations.md's
 * table says the same in words. The zero value: the row leaves it to its
 * mapping's row. */
enum cfg_reload_effect {
    CFG_EFFECT_UNSET = 0,
    CFG_EFFECT_RELOAD,            /* a control-plane reload applies it */
    CFG_EFFECT_DATAPLANE_RESTART, /* the data planes read it at their (hot) restart */
    CFG_EFFECT_RESTART,           /* only a restart of the control plane applies it */
};

#endif
