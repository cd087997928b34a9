/*
 * The config schema: one table per mapping of the file, one row per key.
 * A row is the whole truth about its key: its name, its kind (integer,
 * duration, size, enum, nested mapping, ...), the offset of its field inside
 * the mapping's struct, the accepted range or validity check, the text that
 * messages quote as what was expected, and its default. The walker
 * (config_yaml.c) reads a file against these rows; the unknown-key message
 * lists their names; cfg_schema_apply_defaults is the only place a default
 * is written, for struct cfg (cfg_init_defaults) and for each workers entry
 * as it is read. docs/configuration.md documents the same keys in the same
 * order.
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
 * def.is_set; a mapping's defaults are its child rows'.
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
#define KEY_RANGE(n, k, type, field, lo, hi, dflt)                                                 \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .min = (lo), .max = (hi),       \
        .def = {.is_set = true, .u = (dflt)},                                                      \
    }
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
#define KEY_MAP(n, type, field, keys, what, fin)                                                   \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_MAP, .offset = offsetof(type, field), .child = (keys),       \
        .expect = (what), .finish = (fin)                                                          \
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
    KEY_MAP("health", struct cfg_controlplane, health, health_keys, NULL, NULL),
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
    /* "": /metrics is served on listen, as before this key existed. */
    KEY_STR("metrics_listen", struct cfg_dataplane, metrics_listen, cfg_addr_or_empty_is_valid,
            "HOST:PORT (e.g. 127.0.0.1:9090), or \"\" for the listen address", ""),
    KEY_BOOL("debug_headers", struct cfg_dataplane, debug_headers, false),
    KEY_MAP("retry", struct cfg_dataplane, retry, retry_keys, NULL, cfg_check_retry),
    KEY_MAP("upstream_tls", struct cfg_dataplane, upstream_tls, upstream_tls_keys,
            "a mapping like { ca_file: /etc/switchyard/workers-ca.pem }", cfg_check_upstream_tls),
    KEY_MAP("tls", struct cfg_dataplane, tls, dataplane_tls_keys,
            "a mapping like { cert_file: /etc/switchyard/tls.crt, key_file: ... }",
            cfg_check_dataplane_tls),
    /* "": only listen. Beside an HTTPS listen: plain HTTP for local clients and probes. */
    KEY_STR("plain_listen", struct cfg_dataplane, plain_listen, cfg_addr_or_empty_is_valid,
            "HOST:PORT (e.g. 127.0.0.1:8079), or \"\" for none", ""),
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
    KEY_END,
};

const struct cfg_key cfg_schema_root[] = {
    KEY_MAP("shm", struct cfg, shm, shm_keys, NULL, NULL),
    KEY_MAP("controlplane", struct cfg, controlplane, controlplane_keys, NULL, NULL),
    KEY_MAP("dataplane", struct cfg, dataplane, dataplane_keys, NULL, NULL),
    KEY_MAP("policy", struct cfg, policy, policy_keys, NULL, NULL),
    /* No workers by default; each entry's defaults are worker_keys'. */
    {
        .name = "workers",
        .kind = CFG_KIND_WORKERS,
        .child = worker_keys,
        .expect = "a mapping with url and optional id, model, role",
        .finish = cfg_check_worker,
        .def = {.is_set = true},
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
        case CFG_KIND_WORKERS:
            /* Only the root holds the list; entries get worker_keys' defaults as they are read. */
            break;
        case CFG_KIND_UNSET:
            break;
        }
    }
}
