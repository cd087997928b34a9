/*
 * The config schema: one table per mapping of the file, one row per key.
 * A row is the whole truth about its key: its name, its kind (integer,
 * duration, size, enum, nested mapping, ...), the offset of its field inside
 * the mapping's struct, the accepted range or validity check, the text that
 * messages quote as what was expected, its default, and how a change of it
 * takes effect (enum cfg_reload_effect). The walker (config_yaml.c) reads a
 * file against these rows; the unknown-key message lists their names;
 * cfg_schema_apply_defaults is the only place a default is written, for
 * struct cfg (cfg_init_defaults) and for each workers entry as it is read;
 * cfg_key_effect (config_diff.c) is where the control plane's reload learns
 * whether it may apply a change. docs/configuration.md documents the same
 * keys in the same order, and docs/operations.md's table their effects.
 *
 * A key's effect is its row's, or else the nearest mapping row's above it:
 * each section is read by one daemon, so its row (KEY_SECTION) says how its
 * keys take effect once, and the few keys that differ say so in their own
 * row (the _EFFECT form of a row macro; add that form to another macro
 * when a key needs it). The "workers" row gives its entries' keys theirs:
 * the list changes as a whole. A leaf with no effect on the way up is a
 * bug that test_config_effect catches (at run time it would need a
 * restart).
 *
 * Adding a key means adding its field to struct cfg (config.h) and one row
 * here. The tables are constant and shared by every load on every thread.
 */
#include "common/config_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)

/*
 * One macro per shape of row; each takes the key's default as its last
 * argument, so a row cannot be written without one. Leaf rows set
 * def.is_set; a mapping's defaults are its child rows'. The effect is
 * left to the mapping's unless the row's macro takes one.
 */
#define KEY_STR(n, type, field, check, what, dflt)                                                 \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_STRING, .offset = offsetof(type, field),                     \
        .size = FIELD_SIZE(type, field), .valid = (check), .expect = (what),                       \
        .def = {.is_set = true, .s = (dflt)},                                                      \
    }
#define KEY_ADDR(n, type, field, dflt)                                                             \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_ADDR, .offset = offsetof(type, field),                       \
        .size = FIELD_SIZE(type, field), .def = {.is_set = true, .s = (dflt)},                     \
    }
#define KEY_RANGE_EFFECT(n, k, type, field, lo, hi, dflt, eff)                                     \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .min = (lo), .max = (hi),       \
        .def = {.is_set = true, .u = (dflt)}, .effect = (eff),                                     \
    }
#define KEY_RANGE(n, k, type, field, lo, hi, dflt)                                                 \
    KEY_RANGE_EFFECT(n, k, type, field, lo, hi, dflt, CFG_EFFECT_UNSET)
#define KEY_NUM(n, type, field, lo, hi, dflt)                                                      \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_DOUBLE, .offset = offsetof(type, field), .dmin = (lo),       \
        .dmax = (hi), .def = {.is_set = true, .d = (dflt)},                                        \
    }
#define KEY_BOOL(n, type, field, dflt)                                                             \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_BOOL, .offset = offsetof(type, field),                       \
        .def = {.is_set = true, .u = (dflt) ? 1 : 0},                                              \
    }
#define KEY_ENUM(n, k, type, field, names_, dflt)                                                  \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .names = (names_),              \
        .def = {.is_set = true, .u = (dflt)},                                                      \
    }
/* The list's field is the whole struct cfg_retry (codes and count). */
#define KEY_STATUS_LIST(key, codes)                                                                \
    {                                                                                              \
        .name = (key), .kind = CFG_KIND_STATUS_LIST, .offset = 0,                                  \
        .def = {.is_set = true, .list = (codes), .n = sizeof(codes) / sizeof((codes)[0])},         \
    }
/* A list of strings, each checked by check; the default is the empty list. */
#define KEY_STR_LIST(n, type, field, check, what)                                                  \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_STR_LIST, .offset = offsetof(type, field), .valid = (check), \
        .expect = (what), .def = {.is_set = true},                                                 \
    }
#define KEY_MAP(n, type, field, keys, what, fin)                                                   \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_MAP, .offset = offsetof(type, field), .child = (keys),       \
        .expect = (what), .finish = (fin)                                                          \
    }
/* A mapping that says how its keys take effect. */
#define KEY_SECTION(n, type, field, keys, eff)                                                     \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_MAP, .offset = offsetof(type, field), .child = (keys),       \
        .effect = (eff)                                                                            \
    }
#define KEY_END                                                                                    \
    {                                                                                              \
        .name = NULL                                                                               \
    }

#define MS_SECOND UINT64_C(1000)
#define MS_MINUTE (60 * MS_SECOND)
#define MS_HOUR   (60 * MS_MINUTE)
#define KIB       (UINT64_C(1) << 10)
#define MIB       (UINT64_C(1) << 20)
#define GIB       (UINT64_C(1) << 30)

static const struct cfg_key shm_keys[] = {
    KEY_STR("name", struct cfg_shm, name, cfg_shm_name_is_valid,
            "a POSIX shm name: '/' then 1..249 characters, no other '/'", "/switchyard"),
    KEY_RANGE("max_workers", CFG_KIND_U32, struct cfg_shm, max_workers, 1, CFG_WORKERS_LIMIT, 1024),
    KEY_RANGE("max_dataplanes", CFG_KIND_U32, struct cfg_shm, max_dataplanes, 1, 64, 8),
    /* 1 Mi blocks of 240 bytes of routing text in 16 MiB (64 KiB .. 4 GiB). */
    KEY_RANGE("prefix_index_blocks", CFG_KIND_U32, struct cfg_shm, prefix_index_blocks, 4096,
              268435456, 1048576),
    /* 1 Mi (block, worker) facts of KV-cache events in 16 MiB + 512 KiB. */
    KEY_RANGE("kv_index_blocks", CFG_KIND_U32, struct cfg_shm, kv_index_blocks, 4096, 268435456,
              1048576),
    KEY_END,
};

static const struct cfg_key health_keys[] = {
    KEY_STR("path", struct cfg_health, path, cfg_http_path_is_valid,
            "an HTTP path starting with '/' (at most 255 characters, no spaces)", "/health"),
    KEY_RANGE("interval", CFG_KIND_DURATION, struct cfg_health, interval_ms, 10, MS_HOUR,
              5 * MS_SECOND),
    KEY_RANGE("timeout", CFG_KIND_DURATION, struct cfg_health, timeout_ms, 1, MS_HOUR,
              2 * MS_SECOND),
    KEY_RANGE("failure_threshold", CFG_KIND_U32, struct cfg_health, failure_threshold, 1, 100, 3),
    KEY_RANGE("success_threshold", CFG_KIND_U32, struct cfg_health, success_threshold, 1, 100, 2),
    /* A worker added while the router runs is routed only once it answered. */
    KEY_STR("initial", struct cfg_health, initial, cfg_health_initial_is_valid,
            "one of unknown|healthy", "unknown"),
    KEY_RANGE("models_interval", CFG_KIND_DURATION, struct cfg_health, models_interval_ms, 100,
              MS_HOUR, 30 * MS_SECOND),
    KEY_END,
};

static const struct cfg_key load_reports_keys[] = {
    KEY_STR("path", struct cfg_load_reports, path, cfg_http_path_is_valid,
            "an HTTP path starting with '/' (at most 255 characters, no spaces)", "/metrics"),
    /* 0 turns scraping off. */
    KEY_RANGE("interval", CFG_KIND_DURATION, struct cfg_load_reports, interval_ms, 0, MS_HOUR, 250),
    KEY_RANGE("timeout", CFG_KIND_DURATION, struct cfg_load_reports, timeout_ms, 1, MS_HOUR,
              MS_SECOND),
    /* Read by the data planes (the control plane's admin API reads it too,
     * but only to show the same number): a hot restart applies it. */
    KEY_RANGE_EFFECT("stale_after", CFG_KIND_DURATION, struct cfg_load_reports, stale_after_ms, 1,
                     MS_HOUR, MS_SECOND, CFG_EFFECT_DATAPLANE_RESTART),
    KEY_END,
};

static const struct cfg_key controlplane_keys[] = {
    KEY_ADDR("admin_listen", struct cfg_controlplane, admin_listen, "127.0.0.1:8081"),
    /* "": the admin API asks for no token. */
    KEY_STR("admin_token_file", struct cfg_controlplane, admin_token_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\"", ""),
    KEY_STR("admin_socket", struct cfg_controlplane, admin_socket, cfg_socket_path_is_valid,
            "a socket path of 1..107 characters without control characters",
            "/run/switchyard/admin.sock"),
    /* Without a token the admin API may listen only on loopback, unless
     * this says the operator means it (docs/security.md). */
    KEY_BOOL("admin_insecure", struct cfg_controlplane, admin_insecure, false),
    /* Besides IP literals and localhost, the names a browser may reach the
     * admin API by (Host, Origin): anything else is a rebinding page. */
    KEY_STR_LIST("admin_allowed_hosts", struct cfg_controlplane, admin_allowed_hosts,
                 cfg_dns_name_is_valid, "a DNS name like router.internal (no port)"),
    KEY_RANGE("reset_load_timeout", CFG_KIND_DURATION, struct cfg_controlplane,
              reset_load_timeout_ms, 100, 10 * 60 * 1000, 2000),
    KEY_SECTION("health", struct cfg_controlplane, health, health_keys, CFG_EFFECT_RELOAD),
    KEY_MAP("load_reports", struct cfg_controlplane, load_reports, load_reports_keys, NULL, NULL),
    KEY_END,
};

static const int retry_on_status[] = {408, 429, 500, 502, 503, 504};

static const struct cfg_key retry_keys[] = {
    KEY_RANGE("max_attempts", CFG_KIND_U32, struct cfg_retry, max_attempts, 1, 10, 3),
    KEY_STATUS_LIST("on_status", retry_on_status),
    KEY_RANGE("backoff", CFG_KIND_DURATION, struct cfg_retry, backoff_ms, 0, MS_MINUTE, 50),
    KEY_RANGE("backoff_max", CFG_KIND_DURATION, struct cfg_retry, backoff_max_ms, 0, 10 * MS_MINUTE,
              2 * MS_SECOND),
    KEY_END,
};

static const struct cfg_key cors_keys[] = {
    KEY_STR_LIST("allowed_origins", struct cfg_cors, allowed_origins, cfg_cors_origin_is_valid,
                 "\"*\" or an origin like https://app.example:8443 (no path)"),
    KEY_STR_LIST("allowed_headers", struct cfg_cors, allowed_headers, cfg_cors_header_is_valid,
                 "\"*\" or a header name"),
    KEY_END,
};

#define TLS_FILE_EXPECT "a file path of at most 255 characters without control characters, or \"\""

static const struct cfg_key upstream_tls_keys[] = {
    /* "": the system's CA store (what curl was built with). */
    KEY_STR("ca_file", struct cfg_upstream_tls, ca_file, cfg_file_path_is_valid, TLS_FILE_EXPECT,
            ""),
    KEY_STR("client_cert_file", struct cfg_upstream_tls, client_cert_file, cfg_file_path_is_valid,
            TLS_FILE_EXPECT, ""),
    KEY_STR("client_key_file", struct cfg_upstream_tls, client_key_file, cfg_file_path_is_valid,
            TLS_FILE_EXPECT, ""),
    /* false only for a lab: a worker's certificate is then not checked at all. */
    KEY_BOOL("verify", struct cfg_upstream_tls, verify, true),
    KEY_END,
};

static const struct cfg_key dataplane_tls_keys[] = {
    /* "": the data plane speaks plain HTTP on listen. */
    KEY_STR("cert_file", struct cfg_dataplane_tls, cert_file, cfg_file_path_is_valid,
            TLS_FILE_EXPECT, ""),
    KEY_STR("key_file", struct cfg_dataplane_tls, key_file, cfg_file_path_is_valid, TLS_FILE_EXPECT,
            ""),
    /* "": no client certificates asked; else every client needs one (mTLS). */
    KEY_STR("client_ca_file", struct cfg_dataplane_tls, client_ca_file, cfg_file_path_is_valid,
            TLS_FILE_EXPECT, ""),
    KEY_STR("min_version", struct cfg_dataplane_tls, min_version, cfg_tls_version_is_valid,
            "one of 1.2|1.3", "1.2"),
    /* "": AEAD suites only (docs/security.md gives the string). */
    KEY_STR("priorities", struct cfg_dataplane_tls, priorities, cfg_tls_priorities_is_valid,
            "a GnuTLS priority string of at most 255 printable characters, or \"\"", ""),
    KEY_END,
};

static const struct cfg_key dataplane_keys[] = {
    KEY_ADDR("listen", struct cfg_dataplane, listen, "127.0.0.1:8080"),
    /* 0: one event loop per core. */
    KEY_RANGE("threads", CFG_KIND_U32, struct cfg_dataplane, threads, 0, 256, 0),
    KEY_RANGE("max_body", CFG_KIND_SIZE, struct cfg_dataplane, max_body, KIB, GIB, 32 * MIB),
    KEY_RANGE("max_header_size", CFG_KIND_SIZE, struct cfg_dataplane, max_header_size, KIB, MIB,
              6 * KIB),
    KEY_RANGE("connect_timeout", CFG_KIND_DURATION, struct cfg_dataplane, connect_timeout_ms, 1,
              MS_HOUR, 2 * MS_SECOND),
    KEY_RANGE("first_byte_timeout", CFG_KIND_DURATION, struct cfg_dataplane, first_byte_timeout_ms,
              1, 24 * MS_HOUR, 10 * MS_MINUTE),
    KEY_RANGE("idle_timeout", CFG_KIND_DURATION, struct cfg_dataplane, idle_timeout_ms, 1,
              24 * MS_HOUR, 2 * MS_MINUTE),
    KEY_RANGE("drain_timeout", CFG_KIND_DURATION, struct cfg_dataplane, drain_timeout_ms, 0,
              24 * MS_HOUR, 10 * MS_MINUTE),
    KEY_RANGE("header_timeout", CFG_KIND_DURATION, struct cfg_dataplane, header_timeout_ms, 100,
              MS_HOUR, 30 * MS_SECOND),
    /* Bytes per second; 0: no minimum. */
    KEY_RANGE("upload_min_rate", CFG_KIND_SIZE, struct cfg_dataplane, upload_min_rate, 0, GIB, KIB),
    /* 0: no limit (the usual case behind a load balancer, which is one address). */
    KEY_RANGE("per_ip_connection_limit", CFG_KIND_U32, struct cfg_dataplane,
              per_ip_connection_limit, 0, 1000000, 0),
    KEY_RANGE("max_connections", CFG_KIND_U32, struct cfg_dataplane, max_connections, 0, 1000000,
              0),
    /* "": /metrics is served on listen, as before this key existed. */
    KEY_STR("metrics_listen", struct cfg_dataplane, metrics_listen, cfg_addr_or_empty_is_valid,
            "HOST:PORT (e.g. 127.0.0.1:9090), or \"\" for the listen address", ""),
    KEY_BOOL("debug_headers", struct cfg_dataplane, debug_headers, false),
    KEY_MAP("retry", struct cfg_dataplane, retry, retry_keys, NULL, cfg_check_retry),
    /* "off" (or ""), "stderr", or a path (reopened on SIGUSR1). */
    KEY_STR("access_log", struct cfg_dataplane, access_log, cfg_file_path_is_valid,
            "off, stderr, or a file path of at most 255 characters without control characters",
            "off"),
    KEY_RANGE("access_log_buffer", CFG_KIND_SIZE, struct cfg_dataplane, access_log_buffer, 4 * KIB,
              GIB, 1 * MIB),
    /* "": no client keys, every request is the anonymous tenant. */
    KEY_STR("api_keys_file", struct cfg_dataplane, api_keys_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\"", ""),
    /* "": the client's Authorization reaches workers as before. */
    KEY_STR("upstream_api_key_file", struct cfg_dataplane, upstream_api_key_file,
            cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\"", ""),
    KEY_RANGE("response_ttl", CFG_KIND_DURATION, struct cfg_dataplane, response_ttl_ms, MS_SECOND,
              30 * 24 * MS_HOUR, MS_HOUR),
    /* Response ids the node remembers (all its data planes share them). */
    KEY_RANGE("response_table_size", CFG_KIND_U32, struct cfg_dataplane, response_table_size, 64,
              16777216, 65536),
    /* Off while allowed_origins is empty. */
    KEY_MAP("cors", struct cfg_dataplane, cors, cors_keys, NULL, NULL),
    KEY_MAP("upstream_tls", struct cfg_dataplane, upstream_tls, upstream_tls_keys,
            "a mapping like { ca_file: /etc/switchyard/workers-ca.pem }", cfg_check_upstream_tls),
    KEY_MAP("tls", struct cfg_dataplane, tls, dataplane_tls_keys,
            "a mapping like { cert_file: /etc/switchyard/tls.crt, key_file: ... }",
            cfg_check_dataplane_tls),
    /* "": only listen. Beside an HTTPS listen: plain HTTP for local clients and probes. */
    KEY_STR("plain_listen", struct cfg_dataplane, plain_listen, cfg_addr_or_empty_is_valid,
            "HOST:PORT (e.g. 127.0.0.1:8079), or \"\" for none", ""),
    /* Authorization and x-api-key are always stripped when api_keys_file is set. */
    KEY_STR_LIST("strip_headers", struct cfg_dataplane, strip_headers, cfg_header_name_is_valid,
                 "a header name"),
    KEY_BOOL("metrics_tenant_labels", struct cfg_dataplane, metrics_tenant_labels, true),
    /* "": a keys file whose tenants ask for cache_isolation is refused. */
    KEY_STR("cache_salt_key_file", struct cfg_dataplane, cache_salt_key_file,
            cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\"", ""),
    KEY_END,
};

static const struct cfg_key admission_queue_keys[] = {
    KEY_RANGE("max_depth", CFG_KIND_U32, struct cfg_admission_queue, max_depth, 0, 1000000, 1000),
    KEY_RANGE("max_wait", CFG_KIND_DURATION, struct cfg_admission_queue, max_wait_ms, 1, MS_HOUR,
              30 * MS_SECOND),
    KEY_END,
};

/* 0 everywhere: no saturation, nothing waits (the behaviour before admission). */
static const struct cfg_key admission_keys[] = {
    KEY_RANGE("max_inflight_per_worker", CFG_KIND_U32, struct cfg_admission,
              max_inflight_per_worker, 0, 1000000, 0),
    KEY_RANGE("max_waiting_per_worker", CFG_KIND_U32, struct cfg_admission, max_waiting_per_worker,
              0, 1000000, 0),
    KEY_NUM("max_kv_usage", struct cfg_admission, max_kv_usage, 0.0, 1.0, 0.0),
    KEY_MAP("queue", struct cfg_admission, queue, admission_queue_keys, NULL, NULL),
    /* Read by the data plane at start: the section's effect (a data plane
     * restart) is this key's too. */
    KEY_BOOL("forward_priority", struct cfg_admission, forward_priority, false),
    KEY_END,
};

/* prefill and decode have one key each, with different defaults. */
static const struct cfg_key policy_prefill_keys[] = {
    KEY_ENUM("name", CFG_KIND_POLICY, struct cfg_policy_role, name, cfg_policy_names,
             CFG_POLICY_CACHE_AWARE),
    KEY_END,
};

static const struct cfg_key policy_decode_keys[] = {
    KEY_ENUM("name", CFG_KIND_POLICY, struct cfg_policy_role, name, cfg_policy_names,
             CFG_POLICY_LEAST_LOAD),
    KEY_END,
};

static const struct cfg_key precise_keys[] = {
    /* vLLM's default --block-size. The control plane maps the workers' KV
     * events to chains of this size, and the data planes hash requests
     * with it: a control-plane restart, then the data planes'. */
    KEY_RANGE_EFFECT("block_size", CFG_KIND_U32, struct cfg_precise, block_size, 1, 4096, 16,
                     CFG_EFFECT_RESTART),
    KEY_STR("tokenizer_url", struct cfg_precise, tokenizer_url, cfg_otlp_endpoint_is_valid,
            "an http:// or https:// URL of at most 255 characters, or \"\"", ""),
    KEY_RANGE("tokenize_timeout", CFG_KIND_DURATION, struct cfg_precise, tokenize_timeout_ms, 1,
              10 * MS_SECOND, 50),
    KEY_RANGE("tokenize_cache_entries", CFG_KIND_U32, struct cfg_precise, tokenize_cache_entries, 0,
              1048576, 4096),
    KEY_RANGE("speculative_ttl", CFG_KIND_DURATION, struct cfg_precise, speculative_ttl_ms, 0,
              MS_MINUTE, 2 * MS_SECOND),
    KEY_END,
};

static const struct cfg_key policy_keys[] = {
    KEY_ENUM("name", CFG_KIND_POLICY, struct cfg_policy, name, cfg_policy_names,
             CFG_POLICY_CACHE_AWARE),
    KEY_NUM("cache_threshold", struct cfg_policy, cache_threshold, 0.0, 1.0, 0.5),
    KEY_RANGE("balance_abs_threshold", CFG_KIND_U32, struct cfg_policy, balance_abs_threshold, 0,
              1000000, 32),
    KEY_NUM("balance_rel_threshold", struct cfg_policy, balance_rel_threshold, 1.0, INFINITY, 1.5),
    KEY_ENUM("balance_gate", CFG_KIND_GATE, struct cfg_policy, balance_gate, cfg_gate_names,
             CFG_BALANCE_GATE_PER_REQUEST),
    KEY_MAP("prefill", struct cfg_policy, prefill, policy_prefill_keys,
            "a mapping like { name: cache_aware }", NULL),
    KEY_MAP("decode", struct cfg_policy, decode, policy_decode_keys,
            "a mapping like { name: least_load }", NULL),
    /* A format change of the prefill answer costs speed, not availability. */
    KEY_ENUM("pd_fallback", CFG_KIND_PD_FALLBACK, struct cfg_policy, pd_fallback,
             cfg_pd_fallback_names, CFG_PD_FALLBACK_LOCAL_PREFILL),
    KEY_ENUM("load_signal", CFG_KIND_LOAD_SIGNAL, struct cfg_policy, load_signal,
             cfg_load_signal_names, CFG_LOAD_SIGNAL_COMBINED),
    KEY_NUM("kv_overload", struct cfg_policy, kv_overload, 0.0, 1.0, 0.9),
    /* cache_aware: cold prefixes and overloaded fallbacks follow a
     * rendezvous ranking, so independent router nodes agree (false: the
     * least-loaded worker, as before). */
    KEY_BOOL("rendezvous", struct cfg_policy, rendezvous, true),
    KEY_NUM("bounded_load_factor", struct cfg_policy, bounded_load_factor, 1.0, 100.0, 1.25),
    /* On: with affinity_load_factor 2 it spreads a hot prefix (busiest
     * worker 1.7-1.8x the mean on the replicas section's hot_prefix, from
     * 2.7x) at the same hit rates (the *_bounded configs measure it). */
    KEY_BOOL("bounded_affinity", struct cfg_policy, bounded_affinity, true),
    KEY_NUM("affinity_load_factor", struct cfg_policy, affinity_load_factor, 1.0, 100.0, 2.0),
    KEY_MAP("precise_cache_aware", struct cfg_policy, precise_cache_aware, precise_keys,
            "a mapping like { block_size: 16, tokenize_timeout: 50ms }", NULL),
    KEY_END,
};

static const struct cfg_key tracing_keys[] = {
    KEY_BOOL("propagate", struct cfg_tracing, propagate, true),
    /* "": spans are not exported. */
    KEY_STR("otlp_endpoint", struct cfg_tracing, otlp_endpoint, cfg_otlp_endpoint_is_valid,
            "an http:// or https:// URL of at most 255 characters, or \"\"", ""),
    KEY_STR("service_name", struct cfg_tracing, service_name, cfg_model_is_valid,
            "a name of at most 127 characters without control characters", "switchyard"),
    KEY_RANGE("batch_size", CFG_KIND_U32, struct cfg_tracing, batch_size, 1, 100000, 512),
    KEY_RANGE("batch_interval", CFG_KIND_DURATION, struct cfg_tracing, batch_interval_ms, 10,
              MS_HOUR, 1 * MS_SECOND),
    KEY_RANGE("queue_size", CFG_KIND_SIZE, struct cfg_tracing, queue_size, 4 * KIB, GIB, 1 * MIB),
    KEY_RANGE("export_timeout", CFG_KIND_DURATION, struct cfg_tracing, export_timeout_ms, 10,
              MS_MINUTE, 2 * MS_SECOND),
    KEY_END,
};

static bool kube_scheme_is_valid(const char *s)
{
    return strcmp(s, "http") == 0 || strcmp(s, "https") == 0;
}

static bool kube_text_is_valid(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return false;
    return true;
}

static bool kube_api_server_is_valid(const char *s)
{
    return s[0] == '\0' || ((strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0) &&
                            kube_text_is_valid(s));
}

/* A namespace is a DNS label: lower-case letters, digits and '-'. */
static bool kube_namespace_is_valid(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
            return false;
    return true;
}

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static const struct cfg_key kubernetes_keys[] = {
    KEY_STR("api_server", struct cfg_kubernetes, api_server, kube_api_server_is_valid,
            "an https:// URL (http:// with insecure_http), or \"\" for the in-cluster address", ""),
    KEY_STR("token_file", struct cfg_kubernetes, token_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters",
            KUBE_SA_DIR "/token"),
    KEY_STR("ca_file", struct cfg_kubernetes, ca_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters",
            KUBE_SA_DIR "/ca.crt"),
    KEY_STR("namespace", struct cfg_kubernetes, namespace_name, kube_namespace_is_valid,
            "a namespace name (at most 63 of [a-z0-9-]), or \"\" for the service account's", ""),
    KEY_STR("label_selector", struct cfg_kubernetes, label_selector, kube_text_is_valid,
            "an equality-based label selector like app=vllm,tier!=canary (no spaces)", ""),
    KEY_RANGE("port", CFG_KIND_U32, struct cfg_kubernetes, port, 1, 65535, 8000),
    KEY_STR("port_name", struct cfg_kubernetes, port_name, kube_text_is_valid,
            "a container port name (at most 63 characters)", ""),
    KEY_STR("scheme", struct cfg_kubernetes, scheme, kube_scheme_is_valid, "http or https", "http"),
    KEY_STR("model_label", struct cfg_kubernetes, model_label, kube_text_is_valid,
            "a label key, or \"\" to always ask the pod's /v1/models", "switchyard.io/model"),
    KEY_STR("role_label", struct cfg_kubernetes, role_label, kube_text_is_valid,
            "a label key, or \"\" for role regular", "switchyard.io/role"),
    KEY_RANGE("resync", CFG_KIND_DURATION, struct cfg_kubernetes, resync_ms, 100, 24 * MS_HOUR,
              5 * MS_MINUTE),
    KEY_RANGE("watch_timeout", CFG_KIND_DURATION, struct cfg_kubernetes, watch_timeout_ms,
              MS_SECOND, MS_HOUR, 5 * MS_MINUTE),
    KEY_BOOL("insecure_http", struct cfg_kubernetes, insecure_http, false),
    /* A hostile or broken API server cannot grow the control plane without bound. */
    KEY_RANGE("max_list_items", CFG_KIND_U32, struct cfg_kubernetes, max_list_items, 1, 1000000,
              10000),
    KEY_RANGE("max_pods", CFG_KIND_U32, struct cfg_kubernetes, max_pods, 1, 1000000, 16384),
    KEY_END,
};

static const struct cfg_key discovery_keys[] = {
    KEY_MAP("kubernetes", struct cfg_discovery, kubernetes, kubernetes_keys, NULL,
            cfg_check_kubernetes),
    KEY_END,
};

/* A worker's KV-cache event publisher (vLLM's --kv-events-config). */
static const struct cfg_key kv_events_keys[] = {
    KEY_STR("endpoint", struct cfg_kv_events, endpoint, cfg_kv_endpoint_is_valid,
            "a tcp://HOST:PORT endpoint (HOST * = the worker's host), or \"\" for none", ""),
    KEY_STR("replay_endpoint", struct cfg_kv_events, replay_endpoint, cfg_kv_endpoint_is_valid,
            "a tcp://HOST:PORT endpoint (HOST * = the worker's host), or \"\" for none", ""),
    KEY_RANGE("data_parallel_size", CFG_KIND_U32, struct cfg_kv_events, data_parallel_size, 1, 64,
              1),
    KEY_END,
};

/* One workers entry. url is required and id "" means derived from it
 * (cfg_check_worker); model "" means learnt from the worker. */
static const struct cfg_key worker_keys[] = {
    KEY_STR("url", struct cfg_worker, url, NULL, "a URL of at most 255 characters", ""),
    KEY_STR("id", struct cfg_worker, id, cfg_worker_id_is_valid,
            "1..63 characters of [A-Za-z0-9._:-]", ""),
    KEY_STR("model", struct cfg_worker, model, cfg_model_is_valid,
            "a model name of at most 127 characters without control characters", ""),
    KEY_ENUM("role", CFG_KIND_ROLE, struct cfg_worker, role, cfg_role_names, CFG_ROLE_REGULAR),
    KEY_MAP("kv_events", struct cfg_worker, kv_events, kv_events_keys, NULL, cfg_check_kv_events),
    KEY_END,
};

const struct cfg_key cfg_schema_root[] = {
    KEY_SECTION("shm", struct cfg, shm, shm_keys, CFG_EFFECT_RESTART),
    /* Its listener, socket, token and scrapes are set up at its start
     * (health and load_reports.stale_after say otherwise). */
    KEY_SECTION("controlplane", struct cfg, controlplane, controlplane_keys, CFG_EFFECT_RESTART),
    KEY_SECTION("dataplane", struct cfg, dataplane, dataplane_keys, CFG_EFFECT_DATAPLANE_RESTART),
    KEY_SECTION("policy", struct cfg, policy, policy_keys, CFG_EFFECT_DATAPLANE_RESTART),
    KEY_SECTION("tracing", struct cfg, tracing, tracing_keys, CFG_EFFECT_DATAPLANE_RESTART),
    /* The source is made anew with the new settings; discovered workers
     * that still match keep their slots and generations. */
    KEY_SECTION("discovery", struct cfg, discovery, discovery_keys, CFG_EFFECT_RELOAD),
    KEY_SECTION("admission", struct cfg, admission, admission_keys, CFG_EFFECT_DATAPLANE_RESTART),
    /* No workers by default; each entry's defaults are worker_keys'. A
     * reload re-syncs the list, a worker's kv_events subscription too. */
    {
        .name = "workers",
        .kind = CFG_KIND_WORKERS,
        .child = worker_keys,
        .expect = "a mapping with url and optional id, model, role, kv_events",
        .finish = cfg_check_worker,
        .def = {.is_set = true},
        .effect = CFG_EFFECT_RELOAD,
    },
    KEY_END,
};

int cfg_key_index(const struct cfg_key *table, const char *name)
{
    for (int i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, name) == 0)
            return i;
    }
    return -1;
}

void cfg_key_list(const struct cfg_key *table, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; table[i].name != NULL && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : "|", table[i].name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

void cfg_key_set_enum(const struct cfg_key *k, void *field, int value)
{
    /* Each enum type is stored through its own type: their sizes are the
     * compiler's choice. */
    if (k->kind == CFG_KIND_ROLE)
        *(enum cfg_role *)field = (enum cfg_role)value;
    else if (k->kind == CFG_KIND_POLICY)
        *(enum cfg_policy_name *)field = (enum cfg_policy_name)value;
    else if (k->kind == CFG_KIND_PD_FALLBACK)
        *(enum cfg_pd_fallback *)field = (enum cfg_pd_fallback)value;
    else if (k->kind == CFG_KIND_LOAD_SIGNAL)
        *(enum cfg_load_signal *)field = (enum cfg_load_signal)value;
    else
        *(enum cfg_balance_gate *)field = (enum cfg_balance_gate)value;
}

void cfg_schema_apply_defaults(const struct cfg_key *table, void *base)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++) {
        void *field = (char *)base + k->offset;

        switch (k->kind) {
        case CFG_KIND_MAP:
            cfg_schema_apply_defaults(k->child, field);
            break;
        case CFG_KIND_STRING:
        case CFG_KIND_ADDR:
            snprintf(field, k->size, "%s", k->def.s);
            break;
        case CFG_KIND_U32:
            *(uint32_t *)field = (uint32_t)k->def.u;
            break;
        case CFG_KIND_DURATION:
        case CFG_KIND_SIZE:
            *(uint64_t *)field = k->def.u;
            break;
        case CFG_KIND_BOOL:
            *(bool *)field = k->def.u != 0;
            break;
        case CFG_KIND_DOUBLE:
            *(double *)field = k->def.d;
            break;
        case CFG_KIND_ROLE:
        case CFG_KIND_POLICY:
        case CFG_KIND_GATE:
        case CFG_KIND_PD_FALLBACK:
        case CFG_KIND_LOAD_SIGNAL:
            cfg_key_set_enum(k, field, (int)k->def.u);
            break;
        case CFG_KIND_STATUS_LIST: {
            struct cfg_retry *retry = field;

            assert(k->def.n <= CFG_ON_STATUS_MAX);
            if (k->def.n > 0)
                memcpy(retry->on_status, k->def.list, k->def.n * sizeof(k->def.list[0]));
            retry->n_on_status = k->def.n;
            break;
        }
        case CFG_KIND_STR_LIST:
            ((struct cfg_str_list *)field)->n = 0;
            break;
        case CFG_KIND_WORKERS:
            /* Only the root holds the list; entries get worker_keys' defaults as they are read. */
            break;
        case CFG_KIND_UNSET:
            break;
        }
    }
}
