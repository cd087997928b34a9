/*
 * The config schema: one table per mapping of the file, one row per key.
 * A row is the whole truth about its key: its name, its kind (integer,
 * duration, size, enum, nested mapping, ...), the offset of its field inside
 * the mapping's struct, the accepted range or validity check, and the text
 * that messages quote as what was expected. The walker (config_yaml.c) reads
 * a file against these rows; the unknown-key message lists their names;
 * docs/configuration.md documents the same keys in the same order.
 *
 * Adding a key means adding its field to struct cfg (config.h) and one row
 * here. The tables are constant and shared by every load on every thread.
 */
#include "common/config_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)

#define KEY_STR(n, type, field, check, what)                                                       \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_STRING, .offset = offsetof(type, field),                     \
        .size = FIELD_SIZE(type, field), .valid = (check), .expect = (what)                        \
    }
#define KEY_ADDR(n, type, field)                                                                   \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_ADDR, .offset = offsetof(type, field),                       \
        .size = FIELD_SIZE(type, field)                                                            \
    }
#define KEY_RANGE(n, k, type, field, lo, hi)                                                       \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .min = (lo), .max = (hi)        \
    }
#define KEY_NUM(n, type, field, lo, hi)                                                            \
    {                                                                                              \
        .name = (n), .kind = CFG_KIND_DOUBLE, .offset = offsetof(type, field), .dmin = (lo),       \
        .dmax = (hi)                                                                               \
    }
#define KEY_OF(n, k, type, field)                                                                  \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field)                                  \
    }
#define KEY_ENUM(n, k, type, field, names_)                                                        \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .names = (names_)               \
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

#define MS_MINUTE (UINT64_C(60) * 1000)
#define MS_HOUR   (60 * MS_MINUTE)

static const struct cfg_key shm_keys[] = {
    KEY_STR("name", struct cfg_shm, name, cfg_shm_name_is_valid,
            "a POSIX shm name: '/' then 1..249 characters, no other '/'"),
    KEY_RANGE("max_workers", CFG_KIND_U32, struct cfg_shm, max_workers, 1, CFG_WORKERS_LIMIT),
    KEY_RANGE("max_dataplanes", CFG_KIND_U32, struct cfg_shm, max_dataplanes, 1, 64),
    KEY_END,
};

static const struct cfg_key health_keys[] = {
    KEY_STR("path", struct cfg_health, path, cfg_http_path_is_valid,
            "an HTTP path starting with '/' (at most 255 characters, no spaces)"),
    KEY_RANGE("interval", CFG_KIND_DURATION, struct cfg_health, interval_ms, 10, MS_HOUR),
    KEY_RANGE("timeout", CFG_KIND_DURATION, struct cfg_health, timeout_ms, 1, MS_HOUR),
    KEY_RANGE("failure_threshold", CFG_KIND_U32, struct cfg_health, failure_threshold, 1, 100),
    KEY_RANGE("success_threshold", CFG_KIND_U32, struct cfg_health, success_threshold, 1, 100),
    KEY_END,
};

static const struct cfg_key controlplane_keys[] = {
    KEY_ADDR("admin_listen", struct cfg_controlplane, admin_listen),
    KEY_STR("admin_token_file", struct cfg_controlplane, admin_token_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\""),
    KEY_STR("admin_socket", struct cfg_controlplane, admin_socket, cfg_socket_path_is_valid,
            "a socket path of 1..107 characters without control characters"),
    KEY_MAP("health", struct cfg_controlplane, health, health_keys, NULL, NULL),
    KEY_END,
};

static const struct cfg_key retry_keys[] = {
    KEY_RANGE("max_attempts", CFG_KIND_U32, struct cfg_retry, max_attempts, 1, 10),
    {.name = "on_status", .kind = CFG_KIND_STATUS_LIST, .offset = 0},
    KEY_RANGE("backoff", CFG_KIND_DURATION, struct cfg_retry, backoff_ms, 0, MS_MINUTE),
    KEY_RANGE("backoff_max", CFG_KIND_DURATION, struct cfg_retry, backoff_max_ms, 0,
              10 * MS_MINUTE),
    KEY_END,
};

static const struct cfg_key dataplane_keys[] = {
    KEY_ADDR("listen", struct cfg_dataplane, listen),
    KEY_RANGE("threads", CFG_KIND_U32, struct cfg_dataplane, threads, 0, 256),
    KEY_RANGE("max_body", CFG_KIND_SIZE, struct cfg_dataplane, max_body, UINT64_C(1) << 10,
              UINT64_C(1) << 30),
    KEY_RANGE("max_header_size", CFG_KIND_SIZE, struct cfg_dataplane, max_header_size,
              UINT64_C(1) << 10, UINT64_C(1) << 20),
    KEY_RANGE("connect_timeout", CFG_KIND_DURATION, struct cfg_dataplane, connect_timeout_ms, 1,
              MS_HOUR),
    KEY_RANGE("first_byte_timeout", CFG_KIND_DURATION, struct cfg_dataplane, first_byte_timeout_ms,
              1, 24 * MS_HOUR),
    KEY_RANGE("idle_timeout", CFG_KIND_DURATION, struct cfg_dataplane, idle_timeout_ms, 1,
              24 * MS_HOUR),
    KEY_RANGE("drain_timeout", CFG_KIND_DURATION, struct cfg_dataplane, drain_timeout_ms, 0,
              24 * MS_HOUR),
    KEY_OF("debug_headers", CFG_KIND_BOOL, struct cfg_dataplane, debug_headers),
    KEY_MAP("retry", struct cfg_dataplane, retry, retry_keys, NULL, cfg_check_retry),
    KEY_END,
};

static const struct cfg_key policy_role_keys[] = {
    KEY_ENUM("name", CFG_KIND_POLICY, struct cfg_policy_role, name, cfg_policy_names),
    KEY_END,
};

static const struct cfg_key policy_keys[] = {
    KEY_ENUM("name", CFG_KIND_POLICY, struct cfg_policy, name, cfg_policy_names),
    KEY_NUM("cache_threshold", struct cfg_policy, cache_threshold, 0.0, 1.0),
    KEY_RANGE("balance_abs_threshold", CFG_KIND_U32, struct cfg_policy, balance_abs_threshold, 0,
              1000000),
    KEY_NUM("balance_rel_threshold", struct cfg_policy, balance_rel_threshold, 1.0, INFINITY),
    KEY_ENUM("balance_gate", CFG_KIND_GATE, struct cfg_policy, balance_gate, cfg_gate_names),
    KEY_MAP("prefill", struct cfg_policy, prefill, policy_role_keys,
            "a mapping like { name: cache_aware }", NULL),
    KEY_MAP("decode", struct cfg_policy, decode, policy_role_keys,
            "a mapping like { name: least_load }", NULL),
    KEY_END,
};

static const struct cfg_key worker_keys[] = {
    KEY_STR("url", struct cfg_worker, url, NULL, "a URL of at most 255 characters"),
    KEY_STR("id", struct cfg_worker, id, cfg_worker_id_is_valid,
            "1..63 characters of [A-Za-z0-9._:-]"),
    KEY_STR("model", struct cfg_worker, model, cfg_model_is_valid,
            "a model name of at most 127 characters without control characters"),
    KEY_ENUM("role", CFG_KIND_ROLE, struct cfg_worker, role, cfg_role_names),
    KEY_END,
};

const struct cfg_key cfg_schema_root[] = {
    KEY_MAP("shm", struct cfg, shm, shm_keys, NULL, NULL),
    KEY_MAP("controlplane", struct cfg, controlplane, controlplane_keys, NULL, NULL),
    KEY_MAP("dataplane", struct cfg, dataplane, dataplane_keys, NULL, NULL),
    KEY_MAP("policy", struct cfg, policy, policy_keys, NULL, NULL),
    {
        .name = "workers",
        .kind = CFG_KIND_WORKERS,
        .child = worker_keys,
        .expect = "a mapping with url and optional id, model, role",
        .finish = cfg_check_worker,
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
    else
        *(enum cfg_balance_gate *)field = (enum cfg_balance_gate)value;
}
