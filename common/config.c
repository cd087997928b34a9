/*
 * The config loader: turns one YAML file into struct cfg (contract in
 * config.h, every key with its range in docs/configuration.md).
 *
 * libyaml's event API gives a flat stream of events with 0-based marks and no
 * types. A small recursive-descent layer walks that stream against static key
 * tables, one per mapping of the schema. A table row names a key, its kind
 * (integer, duration, size, enum, nested mapping, ...), the offset of its
 * field inside the mapping's struct and the accepted range, so the schema,
 * the range checks and the "expected one of ..." lists live in one place.
 * The walker keeps the key path of the value it stands on
 * ("workers[0].role") and stops at the first problem with one message
 *
 *   FILE:LINE:COL: key.path: expected ..., got '...'
 *
 * pointing at the offending value (at the key for unknown and duplicate
 * keys). It never skips a subtree it does not know, so its recursion depth is
 * the schema's. Checks that span keys (retry.backoff <= retry.backoff_max,
 * unique worker ids and urls, worker count <= shm.max_workers) run once the
 * mapping or the document they span has been read.
 *
 * Loading writes no globals: each call owns its parser on its stack. A
 * struct cfg is filled by one thread and only read afterwards.
 */
#include "common/config.h"
#include "common/config_internal.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define CFG_FILE_MAX    (16u << 20) /* largest config file cfg_load_file reads */
#define CFG_KEYPATH_MAX 192         /* key path shown in messages; cut to fit */
#define CFG_SHOW_MAX    64          /* bytes of a bad value quoted in a message */
#define CFG_SHOW_BUF    (CFG_SHOW_MAX + 8)
#define CFG_MSG_MAX     512
#define CFG_TABLE_MAX   16 /* keys in one mapping of the schema */

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)

/* ---- defaults ------------------------------------------------------------ */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

void cfg_init_defaults(struct cfg *cfg)
{
    static const int on_status[] = {408, 429, 500, 502, 503, 504};

    memset(cfg, 0, sizeof(*cfg));

    copy_str(cfg->shm.name, sizeof(cfg->shm.name), "/switchyard");
    cfg->shm.max_workers = 1024;
    cfg->shm.max_dataplanes = 8;

    copy_str(cfg->controlplane.admin_listen, sizeof(cfg->controlplane.admin_listen),
             "127.0.0.1:8081");
    copy_str(cfg->controlplane.admin_socket, sizeof(cfg->controlplane.admin_socket),
             "/run/switchyard/admin.sock");
    copy_str(cfg->controlplane.health.path, sizeof(cfg->controlplane.health.path), "/health");
    cfg->controlplane.health.interval_ms = 5000;
    cfg->controlplane.health.timeout_ms = 2000;
    cfg->controlplane.health.failure_threshold = 3;
    cfg->controlplane.health.success_threshold = 2;

    copy_str(cfg->dataplane.listen, sizeof(cfg->dataplane.listen), "127.0.0.1:8080");
    cfg->dataplane.threads = 0;
    cfg->dataplane.max_body = 32u << 20;
    cfg->dataplane.max_header_size = 6u << 10;
    cfg->dataplane.connect_timeout_ms = 2000;
    cfg->dataplane.first_byte_timeout_ms = 600000;
    cfg->dataplane.idle_timeout_ms = 120000;
    cfg->dataplane.drain_timeout_ms = 600000;
    cfg->dataplane.debug_headers = false;
    cfg->dataplane.retry.max_attempts = 3;
    memcpy(cfg->dataplane.retry.on_status, on_status, sizeof(on_status));
    cfg->dataplane.retry.n_on_status = sizeof(on_status) / sizeof(on_status[0]);
    cfg->dataplane.retry.backoff_ms = 50;
    cfg->dataplane.retry.backoff_max_ms = 2000;

    cfg->policy.name = CFG_POLICY_CACHE_AWARE;
    cfg->policy.cache_threshold = 0.5;
    cfg->policy.balance_abs_threshold = 32;
    cfg->policy.balance_rel_threshold = 1.5;
    cfg->policy.balance_gate = CFG_BALANCE_GATE_PER_REQUEST;
    cfg->policy.prefill.name = CFG_POLICY_CACHE_AWARE;
    cfg->policy.decode.name = CFG_POLICY_LEAST_LOAD;
}

void cfg_fini(struct cfg *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->workers);
    cfg_init_defaults(cfg);
}

/* ---- the schema -------------------------------------------------------------- */

enum key_kind {
    KIND_UNSET = 0,
    KIND_MAP,         /* nested mapping: child table, optional finish check */
    KIND_STRING,      /* char[size], checked by valid() */
    KIND_U32,         /* uint32_t in min..max */
    KIND_DURATION,    /* uint64_t milliseconds in min..max */
    KIND_SIZE,        /* uint64_t bytes in min..max */
    KIND_BOOL,        /* bool */
    KIND_DOUBLE,      /* double in dmin..dmax */
    KIND_ADDR,        /* char[size] holding HOST:PORT */
    KIND_ROLE,        /* enum cfg_role */
    KIND_POLICY,      /* enum cfg_policy_name */
    KIND_GATE,        /* enum cfg_balance_gate */
    KIND_STATUS_LIST, /* the whole struct cfg_retry: on_status and n_on_status */
    KIND_WORKERS,     /* struct cfg's workers array */
};

struct cfg_parser;

/* What one mapping held: which table rows were given, and where. */
struct map_seen {
    uint32_t mask; /* bit i: row i of the table was given */
    yaml_mark_t key_mark[CFG_TABLE_MAX];
    yaml_mark_t value_mark[CFG_TABLE_MAX];
};

/* Checks across the keys of one mapping, run after it was read; base is its struct. */
typedef int (*cfg_finish_fn)(struct cfg_parser *p, void *base, const struct map_seen *seen);

/* One key of one mapping. Tables end with a row whose name is NULL. */
struct key_def {
    const char *name;
    enum key_kind kind;
    size_t offset; /* of the field inside the mapping's struct */
    size_t size;   /* KIND_STRING, KIND_ADDR: the field's size */
    uint64_t min;  /* KIND_U32, KIND_DURATION, KIND_SIZE */
    uint64_t max;
    double dmin; /* KIND_DOUBLE */
    double dmax;
    bool (*valid)(const char *text); /* KIND_STRING; NULL: any text that fits */
    const char *expect;              /* KIND_STRING, KIND_MAP: what is wanted, for messages */
    const struct key_def *child;     /* KIND_MAP */
    cfg_finish_fn finish;            /* KIND_MAP, optional */
};

#define KEY_STR(n, type, field, check, what)                                                       \
    {                                                                                              \
        .name = (n), .kind = KIND_STRING, .offset = offsetof(type, field),                         \
        .size = FIELD_SIZE(type, field), .valid = (check), .expect = (what)                        \
    }
#define KEY_ADDR(n, type, field)                                                                   \
    {                                                                                              \
        .name = (n), .kind = KIND_ADDR, .offset = offsetof(type, field),                           \
        .size = FIELD_SIZE(type, field)                                                            \
    }
#define KEY_RANGE(n, k, type, field, lo, hi)                                                       \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field), .min = (lo), .max = (hi)        \
    }
#define KEY_NUM(n, type, field, lo, hi)                                                            \
    {                                                                                              \
        .name = (n), .kind = KIND_DOUBLE, .offset = offsetof(type, field), .dmin = (lo),           \
        .dmax = (hi)                                                                               \
    }
#define KEY_OF(n, k, type, field)                                                                  \
    {                                                                                              \
        .name = (n), .kind = (k), .offset = offsetof(type, field)                                  \
    }
#define KEY_MAP(n, type, field, keys, what, fin)                                                   \
    {                                                                                              \
        .name = (n), .kind = KIND_MAP, .offset = offsetof(type, field), .child = (keys),           \
        .expect = (what), .finish = (fin)                                                          \
    }
#define KEY_END                                                                                    \
    {                                                                                              \
        .name = NULL                                                                               \
    }

#define MS_MINUTE (UINT64_C(60) * 1000)
#define MS_HOUR   (60 * MS_MINUTE)

static int finish_retry(struct cfg_parser *p, void *base, const struct map_seen *seen);

static const struct key_def shm_keys[] = {
    KEY_STR("name", struct cfg_shm, name, cfg_shm_name_is_valid,
            "a POSIX shm name: '/' then 1..249 characters, no other '/'"),
    KEY_RANGE("max_workers", KIND_U32, struct cfg_shm, max_workers, 1, CFG_WORKERS_LIMIT),
    KEY_RANGE("max_dataplanes", KIND_U32, struct cfg_shm, max_dataplanes, 1, 64),
    KEY_END,
};

static const struct key_def health_keys[] = {
    KEY_STR("path", struct cfg_health, path, cfg_http_path_is_valid,
            "an HTTP path starting with '/' (at most 255 characters, no spaces)"),
    KEY_RANGE("interval", KIND_DURATION, struct cfg_health, interval_ms, 10, MS_HOUR),
    KEY_RANGE("timeout", KIND_DURATION, struct cfg_health, timeout_ms, 1, MS_HOUR),
    KEY_RANGE("failure_threshold", KIND_U32, struct cfg_health, failure_threshold, 1, 100),
    KEY_RANGE("success_threshold", KIND_U32, struct cfg_health, success_threshold, 1, 100),
    KEY_END,
};

static const struct key_def controlplane_keys[] = {
    KEY_ADDR("admin_listen", struct cfg_controlplane, admin_listen),
    KEY_STR("admin_token_file", struct cfg_controlplane, admin_token_file, cfg_file_path_is_valid,
            "a file path of at most 255 characters without control characters, or \"\""),
    KEY_STR("admin_socket", struct cfg_controlplane, admin_socket, cfg_socket_path_is_valid,
            "a socket path of 1..107 characters without control characters"),
    KEY_MAP("health", struct cfg_controlplane, health, health_keys, NULL, NULL),
    KEY_END,
};

static const struct key_def retry_keys[] = {
    KEY_RANGE("max_attempts", KIND_U32, struct cfg_retry, max_attempts, 1, 10),
    {.name = "on_status", .kind = KIND_STATUS_LIST, .offset = 0},
    KEY_RANGE("backoff", KIND_DURATION, struct cfg_retry, backoff_ms, 0, MS_MINUTE),
    KEY_RANGE("backoff_max", KIND_DURATION, struct cfg_retry, backoff_max_ms, 0, 10 * MS_MINUTE),
    KEY_END,
};

static const struct key_def dataplane_keys[] = {
    KEY_ADDR("listen", struct cfg_dataplane, listen),
    KEY_RANGE("threads", KIND_U32, struct cfg_dataplane, threads, 0, 256),
    KEY_RANGE("max_body", KIND_SIZE, struct cfg_dataplane, max_body, UINT64_C(1) << 10,
              UINT64_C(1) << 30),
    KEY_RANGE("max_header_size", KIND_SIZE, struct cfg_dataplane, max_header_size,
              UINT64_C(1) << 10, UINT64_C(1) << 20),
    KEY_RANGE("connect_timeout", KIND_DURATION, struct cfg_dataplane, connect_timeout_ms, 1,
              MS_HOUR),
    KEY_RANGE("first_byte_timeout", KIND_DURATION, struct cfg_dataplane, first_byte_timeout_ms, 1,
              24 * MS_HOUR),
    KEY_RANGE("idle_timeout", KIND_DURATION, struct cfg_dataplane, idle_timeout_ms, 1,
              24 * MS_HOUR),
    KEY_RANGE("drain_timeout", KIND_DURATION, struct cfg_dataplane, drain_timeout_ms, 0,
              24 * MS_HOUR),
    KEY_OF("debug_headers", KIND_BOOL, struct cfg_dataplane, debug_headers),
    KEY_MAP("retry", struct cfg_dataplane, retry, retry_keys, NULL, finish_retry),
    KEY_END,
};

static const struct key_def policy_role_keys[] = {
    KEY_OF("name", KIND_POLICY, struct cfg_policy_role, name),
    KEY_END,
};

static const struct key_def policy_keys[] = {
    KEY_OF("name", KIND_POLICY, struct cfg_policy, name),
    KEY_NUM("cache_threshold", struct cfg_policy, cache_threshold, 0.0, 1.0),
    KEY_RANGE("balance_abs_threshold", KIND_U32, struct cfg_policy, balance_abs_threshold, 0,
              1000000),
    KEY_NUM("balance_rel_threshold", struct cfg_policy, balance_rel_threshold, 1.0, INFINITY),
    KEY_OF("balance_gate", KIND_GATE, struct cfg_policy, balance_gate),
    KEY_MAP("prefill", struct cfg_policy, prefill, policy_role_keys,
            "a mapping like { name: cache_aware }", NULL),
    KEY_MAP("decode", struct cfg_policy, decode, policy_role_keys,
            "a mapping like { name: least_load }", NULL),
    KEY_END,
};

static const struct key_def worker_keys[] = {
    KEY_STR("url", struct cfg_worker, url, NULL, "a URL of at most 255 characters"),
    KEY_STR("id", struct cfg_worker, id, cfg_worker_id_is_valid,
            "1..63 characters of [A-Za-z0-9._:-]"),
    KEY_STR("model", struct cfg_worker, model, cfg_model_is_valid,
            "a model name of at most 127 characters without control characters"),
    KEY_OF("role", KIND_ROLE, struct cfg_worker, role),
    KEY_END,
};

static const struct key_def root_keys[] = {
    KEY_MAP("shm", struct cfg, shm, shm_keys, NULL, NULL),
    KEY_MAP("controlplane", struct cfg, controlplane, controlplane_keys, NULL, NULL),
    KEY_MAP("dataplane", struct cfg, dataplane, dataplane_keys, NULL, NULL),
    KEY_MAP("policy", struct cfg, policy, policy_keys, NULL, NULL),
    {.name = "workers", .kind = KIND_WORKERS},
    KEY_END,
};

static int find_key(const struct key_def *table, const char *name)
{
    for (int i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, name) == 0)
            return i;
    }
    return -1;
}

static void key_list(const struct key_def *table, char *buf, size_t len)
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

/* ---- the walker over libyaml events ---------------------------------------------- */

/* Where the walker put each worker entry's parts, for checks after the list. */
struct worker_pos {
    yaml_mark_t entry; /* the list item */
    yaml_mark_t url;   /* its url value */
    yaml_mark_t id;    /* its id value; the url's when the id is derived */
};

/*
 * One load in progress: lives on cfg_load_string's stack. The walker stands
 * on event; it is freed before the next one is read. pos grows with
 * cfg->workers and dies with the parser.
 */
struct cfg_parser {
    yaml_parser_t yaml;
    yaml_event_t event;
    bool have_event;
    const char *name; /* the file as the user named it */
    const unsigned char *input;
    size_t input_len;
    struct cfg *cfg;
    struct worker_pos *pos;
    size_t workers_cap;
    char path[CFG_KEYPATH_MAX]; /* key path of the current value */
    size_t path_len;
    char *err;
    size_t err_len;
};

/* Copies text for quoting in a message: at most CFG_SHOW_MAX bytes (not
 * splitting a UTF-8 sequence), control bytes as '?', "..." when cut. */
static void show_text(const char *text, size_t len, char *buf, size_t buf_len)
{
    size_t n = len;
    size_t o = 0;
    bool cut = false;

    if (n > CFG_SHOW_MAX) {
        n = CFG_SHOW_MAX;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
            n--;
        cut = true;
    }
    for (size_t i = 0; i < n && o + 1 < buf_len; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    for (int i = 0; cut && i < 3 && o + 1 < buf_len; i++)
        buf[o++] = '.';
    buf[o] = '\0';
}

__attribute__((format(printf, 3, 4))) static int fail_at(struct cfg_parser *p, yaml_mark_t mark,
                                                         const char *fmt, ...)
{
    char msg[CFG_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->path_len > 0)
        cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: %s: %s", p->name, mark.line + 1,
                    mark.column + 1, p->path, msg);
    else
        cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: %s", p->name, mark.line + 1, mark.column + 1,
                    msg);
    return -EINVAL;
}

static int fail_oom(struct cfg_parser *p)
{
    cfg_set_err(p->err, p->err_len, "%s: out of memory", p->name);
    return -ENOMEM;
}

/* How the current event looks in a message: 'text', a mapping, ... */
static void describe_event(const yaml_event_t *ev, char *buf, size_t len)
{
    char shown[CFG_SHOW_BUF];

    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        show_text((const char *)ev->data.scalar.value, ev->data.scalar.length, shown,
                  sizeof(shown));
        snprintf(buf, len, "'%s'", shown);
        break;
    case YAML_MAPPING_START_EVENT:
        snprintf(buf, len, "a mapping");
        break;
    case YAML_SEQUENCE_START_EVENT:
        snprintf(buf, len, "a sequence");
        break;
    case YAML_ALIAS_EVENT: {
        const char *anchor = (const char *)ev->data.alias.anchor;
        show_text(anchor, strlen(anchor), shown, sizeof(shown));
        snprintf(buf, len, "an alias (*%s)", shown);
        break;
    }
    default:
        snprintf(buf, len, "nothing");
        break;
    }
}

static int fail_expected(struct cfg_parser *p, const char *expected)
{
    char got[CFG_SHOW_BUF + 16];

    describe_event(&p->event, got, sizeof(got));
    return fail_at(p, p->event.start_mark, "expected %s, got %s", expected, got);
}

/* libyaml's reader reports a byte offset only: turn it into a mark. */
static yaml_mark_t mark_at_offset(const unsigned char *input, size_t len, size_t offset)
{
    yaml_mark_t mark = {.index = offset, .line = 0, .column = 0};

    for (size_t i = 0; i < offset && i < len; i++) {
        if (input[i] == '\n') {
            mark.line++;
            mark.column = 0;
        } else if ((input[i] & 0xc0) != 0x80) {
            mark.column++;
        }
    }
    return mark;
}

static int fail_syntax(struct cfg_parser *p)
{
    yaml_mark_t mark = p->yaml.problem_mark;
    const char *problem = p->yaml.problem != NULL ? p->yaml.problem : "unknown problem";

    if (p->yaml.error == YAML_MEMORY_ERROR)
        return fail_oom(p);
    if (p->yaml.error == YAML_READER_ERROR)
        mark = mark_at_offset(p->input, p->input_len, p->yaml.problem_offset);
    cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: YAML syntax error: %s", p->name, mark.line + 1,
                mark.column + 1, problem);
    return -EINVAL;
}

static int next_event(struct cfg_parser *p)
{
    if (p->have_event) {
        yaml_event_delete(&p->event);
        p->have_event = false;
    }
    if (!yaml_parser_parse(&p->yaml, &p->event))
        return fail_syntax(p);
    p->have_event = true;
    return 0;
}

/* Appends to the key path (cut to fit: it is only shown); returns the length to restore. */
__attribute__((format(printf, 2, 3))) static size_t path_push(struct cfg_parser *p, const char *fmt,
                                                              ...)
{
    size_t saved = p->path_len;
    size_t room = sizeof(p->path) - p->path_len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(p->path + p->path_len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        p->path[p->path_len] = '\0';
    else if ((size_t)n >= room)
        p->path_len = sizeof(p->path) - 1;
    else
        p->path_len += (size_t)n;
    return saved;
}

static size_t path_push_key(struct cfg_parser *p, const char *key)
{
    return path_push(p, "%s%s", p->path_len > 0 ? "." : "", key);
}

static void path_pop(struct cfg_parser *p, size_t len)
{
    p->path_len = len;
    p->path[len] = '\0';
}

/* A plain ~, null or nothing: an absent value. */
static bool event_is_null(const yaml_event_t *ev)
{
    const char *v;

    if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    v = (const char *)ev->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* The current event's text; fails naming expected unless it is a scalar without NUL bytes. */
static int want_scalar(struct cfg_parser *p, const char *expected, const char **text)
{
    const yaml_event_t *ev = &p->event;

    if (ev->type != YAML_SCALAR_EVENT ||
        strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
        return fail_expected(p, expected);
    *text = (const char *)ev->data.scalar.value;
    return 0;
}

static int parse_value(struct cfg_parser *p, const struct key_def *k, void *base);

/*
 * Reads the mapping that starts at the current event into base by table;
 * leaves the walker on its end. A null value counts as an empty mapping
 * when null_ok. what names the mapping in messages (NULL: "a mapping").
 */
static int parse_mapping(struct cfg_parser *p, const struct key_def *table, void *base,
                         struct map_seen *seen, bool null_ok, const char *what)
{
    int rc;

    memset(seen, 0, sizeof(*seen));
    if (null_ok && event_is_null(&p->event))
        return 0;
    if (p->event.type != YAML_MAPPING_START_EVENT)
        return fail_expected(p, what != NULL ? what : "a mapping");
    for (;;) {
        const char *key;
        yaml_mark_t key_mark;
        size_t saved;
        int i;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (p->event.type != YAML_SCALAR_EVENT)
            return fail_expected(p, "a key");
        key = (const char *)p->event.data.scalar.value;
        key_mark = p->event.start_mark;
        i = strlen(key) == p->event.data.scalar.length ? find_key(table, key) : -1;
        if (i < 0) {
            char shown[CFG_SHOW_BUF];
            char keys[CFG_MSG_MAX / 2];
            show_text(key, p->event.data.scalar.length, shown, sizeof(shown));
            key_list(table, keys, sizeof(keys));
            path_push_key(p, shown);
            return fail_at(p, key_mark, "unknown key (expected one of %s)", keys);
        }
        saved = path_push_key(p, table[i].name);
        if (seen->mask & (UINT32_C(1) << i))
            return fail_at(p, key_mark, "duplicate key (first at line %zu)",
                           seen->key_mark[i].line + 1);
        rc = next_event(p);
        if (rc != 0)
            return rc;
        seen->mask |= UINT32_C(1) << i;
        seen->key_mark[i] = key_mark;
        seen->value_mark[i] = p->event.start_mark;
        rc = parse_value(p, &table[i], base);
        if (rc != 0)
            return rc;
        path_pop(p, saved);
    }
}

static int parse_section(struct cfg_parser *p, const struct key_def *k, void *field)
{
    struct map_seen seen;
    int rc = parse_mapping(p, k->child, field, &seen, true, k->expect);

    if (rc == 0 && k->finish != NULL)
        rc = k->finish(p, field, &seen);
    return rc;
}

static int parse_string(struct cfg_parser *p, const struct key_def *k, char *dst)
{
    const char *text = "";
    size_t n;
    int rc;

    if (!event_is_null(&p->event)) {
        rc = want_scalar(p, k->expect, &text);
        if (rc != 0)
            return rc;
    }
    n = strlen(text);
    if (n >= k->size || (k->valid != NULL && !k->valid(text)))
        return fail_expected(p, k->expect);
    memcpy(dst, text, n + 1);
    return 0;
}

static int parse_u32(struct cfg_parser *p, const struct key_def *k, uint32_t *dst)
{
    char expected[64];
    const char *text = NULL;
    uint64_t v;
    int rc;

    snprintf(expected, sizeof(expected), "an integer in %" PRIu64 "..%" PRIu64, k->min, k->max);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_parse_uint(text, &v) != 0 || v < k->min || v > k->max)
        return fail_expected(p, expected);
    *dst = (uint32_t)v;
    return 0;
}

static int parse_unit_value(struct cfg_parser *p, const struct key_def *k, uint64_t *dst)
{
    bool is_duration = k->kind == KIND_DURATION;
    char lo[32];
    char hi[32];
    char expected[128];
    const char *text = NULL;
    uint64_t v;
    int rc;

    if (is_duration) {
        cfg_format_duration(k->min, lo, sizeof(lo));
        cfg_format_duration(k->max, hi, sizeof(hi));
    } else {
        cfg_format_size(k->min, lo, sizeof(lo));
        cfg_format_size(k->max, hi, sizeof(hi));
    }
    snprintf(expected, sizeof(expected), "%s in %s..%s",
             is_duration ? "a duration (ms|s|m|h)" : "a size (bytes, KiB|MiB|GiB or KB|MB|GB)", lo,
             hi);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    rc = is_duration ? cfg_parse_duration_ms(text, &v) : cfg_parse_size(text, &v);
    if (rc != 0 || v < k->min || v > k->max)
        return fail_expected(p, expected);
    *dst = v;
    return 0;
}

static int parse_bool(struct cfg_parser *p, bool *dst)
{
    const char *expected = "true|false";
    const char *text = NULL;
    int rc = want_scalar(p, expected, &text);

    if (rc != 0)
        return rc;
    if (cfg_parse_bool(text, dst) != 0)
        return fail_expected(p, expected);
    return 0;
}

static int parse_double(struct cfg_parser *p, const struct key_def *k, double *dst)
{
    char expected[64];
    const char *text = NULL;
    double d;
    int rc;

    if (isinf(k->dmax))
        snprintf(expected, sizeof(expected), "a number >= %g", k->dmin);
    else
        snprintf(expected, sizeof(expected), "a number in %g..%g", k->dmin, k->dmax);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_parse_number(text, &d) != 0 || d < k->dmin || d > k->dmax)
        return fail_expected(p, expected);
    *dst = d;
    return 0;
}

static int parse_addr(struct cfg_parser *p, const struct key_def *k, char *dst)
{
    const char *expected = "HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)";
    char host[CFG_ADDR_MAX];
    const char *text = NULL;
    uint16_t port;
    size_t n;
    int rc = want_scalar(p, expected, &text);

    if (rc != 0)
        return rc;
    n = strlen(text);
    if (n >= k->size || cfg_parse_host_port(text, host, sizeof(host), &port) != 0)
        return fail_expected(p, expected);
    memcpy(dst, text, n + 1);
    return 0;
}

static int parse_enum(struct cfg_parser *p, const struct key_def *k, void *field)
{
    const struct cfg_enum_name *names = k->kind == KIND_ROLE     ? cfg_role_names
                                        : k->kind == KIND_POLICY ? cfg_policy_names
                                                                 : cfg_gate_names;
    char list[128];
    char expected[160];
    const char *text = NULL;
    int value = 0;
    int rc;

    cfg_enum_list(names, list, sizeof(list));
    snprintf(expected, sizeof(expected), "one of %s", list);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_enum_parse(names, text, &value) != 0)
        return fail_expected(p, expected);
    if (k->kind == KIND_ROLE)
        *(enum cfg_role *)field = (enum cfg_role)value;
    else if (k->kind == KIND_POLICY)
        *(enum cfg_policy_name *)field = (enum cfg_policy_name)value;
    else
        *(enum cfg_balance_gate *)field = (enum cfg_balance_gate)value;
    return 0;
}

static int parse_status_list(struct cfg_parser *p, struct cfg_retry *retry)
{
    size_t n = 0;
    int rc;

    if (event_is_null(&p->event)) {
        retry->n_on_status = 0;
        return 0;
    }
    if (p->event.type != YAML_SEQUENCE_START_EVENT)
        return fail_expected(p, "a list of HTTP status codes like [502, 503]");
    for (;;) {
        const char *text = NULL;
        uint64_t v;
        size_t saved;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_SEQUENCE_END_EVENT)
            break;
        saved = path_push(p, "[%zu]", n);
        if (n == CFG_ON_STATUS_MAX)
            return fail_expected(p, "at most 32 status codes");
        rc = want_scalar(p, "an HTTP status code in 100..599", &text);
        if (rc != 0)
            return rc;
        if (cfg_parse_uint(text, &v) != 0 || v < 100 || v > 599)
            return fail_expected(p, "an HTTP status code in 100..599");
        for (size_t j = 0; j < n; j++) {
            if (retry->on_status[j] == (int)v)
                return fail_expected(p, "a status code not listed before");
        }
        retry->on_status[n++] = (int)v;
        path_pop(p, saved);
    }
    retry->n_on_status = n;
    return 0;
}

static int finish_retry(struct cfg_parser *p, void *base, const struct map_seen *seen)
{
    const struct cfg_retry *retry = base;
    int b = find_key(retry_keys, "backoff");
    int bm = find_key(retry_keys, "backoff_max");
    char backoff[32];
    char backoff_max[32];

    if (retry->backoff_ms <= retry->backoff_max_ms)
        return 0;
    cfg_format_duration(retry->backoff_ms, backoff, sizeof(backoff));
    cfg_format_duration(retry->backoff_max_ms, backoff_max, sizeof(backoff_max));
    if (seen->mask & (UINT32_C(1) << b)) {
        path_push_key(p, "backoff");
        return fail_at(p, seen->value_mark[b], "expected at most backoff_max (%s), got '%s'",
                       backoff_max, backoff);
    }
    path_push_key(p, "backoff_max");
    return fail_at(p, seen->value_mark[bm], "expected at least backoff (%s), got '%s'", backoff,
                   backoff_max);
}

static int grow_workers(struct cfg_parser *p)
{
    struct cfg *cfg = p->cfg;
    struct cfg_worker *workers;
    struct worker_pos *pos;
    size_t cap;

    if (cfg->n_workers < p->workers_cap)
        return 0;
    cap = p->workers_cap == 0 ? 16 : p->workers_cap * 2;
    if (cap > CFG_WORKERS_LIMIT)
        cap = CFG_WORKERS_LIMIT;
    workers = realloc(cfg->workers, cap * sizeof(*workers));
    if (workers == NULL)
        return fail_oom(p);
    cfg->workers = workers;
    pos = realloc(p->pos, cap * sizeof(*pos));
    if (pos == NULL)
        return fail_oom(p);
    p->pos = pos;
    p->workers_cap = cap;
    return 0;
}

/* After one entry: url present and canonical, id given or derivable. */
static int finish_worker(struct cfg_parser *p, struct cfg_worker *w, struct worker_pos *pos,
                         const struct map_seen *seen)
{
    uint32_t url_bit = UINT32_C(1) << find_key(worker_keys, "url");
    int id_i = find_key(worker_keys, "id");
    bool has_id = (seen->mask & (UINT32_C(1) << id_i)) != 0;
    char canon[CFG_URL_MAX];
    char id[CFG_ID_MAX];
    char reason[128];
    char shown[CFG_SHOW_BUF];
    int rc;

    if (!(seen->mask & url_bit))
        return fail_at(p, pos->entry, "missing required key 'url'");
    pos->url = seen->value_mark[find_key(worker_keys, "url")];
    pos->id = has_id ? seen->value_mark[id_i] : pos->url;
    path_push_key(p, "url");
    rc = cfg_canon_worker_url(w->url, canon, sizeof(canon), id, sizeof(id), reason, sizeof(reason));
    if (rc == -ENOMEM)
        return fail_oom(p);
    show_text(w->url, strlen(w->url), shown, sizeof(shown));
    if (rc != 0)
        return fail_at(p, pos->url, "expected an http(s)://HOST:PORT URL (%s), got '%s'", reason,
                       shown);
    if (!has_id && !cfg_worker_id_is_valid(id))
        return fail_at(p, pos->url,
                       "expected a HOST:PORT usable as worker id (1..63 characters of "
                       "[A-Za-z0-9._:-]) or an explicit id, got '%s'",
                       shown);
    memcpy(w->url, canon, sizeof(canon));
    if (!has_id)
        memcpy(w->id, id, sizeof(id));
    return 0;
}

static int parse_worker(struct cfg_parser *p, size_t i)
{
    struct cfg_worker *w = &p->cfg->workers[i];
    struct worker_pos *pos = &p->pos[i];
    struct map_seen seen;
    int rc;

    memset(w, 0, sizeof(*w));
    memset(pos, 0, sizeof(*pos));
    w->role = CFG_ROLE_REGULAR;
    w->line = (int)p->event.start_mark.line + 1;
    pos->entry = p->event.start_mark;
    p->cfg->n_workers = i + 1;
    rc = parse_mapping(p, worker_keys, w, &seen, false,
                       "a mapping with url and optional id, model, role");
    if (rc != 0)
        return rc;
    return finish_worker(p, w, pos, &seen);
}

static int parse_workers(struct cfg_parser *p)
{
    int rc;

    if (event_is_null(&p->event))
        return 0;
    if (p->event.type != YAML_SEQUENCE_START_EVENT)
        return fail_expected(p, "a list of workers");
    for (size_t i = 0;; i++) {
        size_t saved;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        if (i == CFG_WORKERS_LIMIT)
            return fail_at(p, p->event.start_mark, "expected at most %d workers, got more",
                           CFG_WORKERS_LIMIT);
        rc = grow_workers(p);
        if (rc != 0)
            return rc;
        saved = path_push(p, "[%zu]", i);
        rc = parse_worker(p, i);
        if (rc != 0)
            return rc;
        path_pop(p, saved);
    }
}

static int parse_value(struct cfg_parser *p, const struct key_def *k, void *base)
{
    void *field = (char *)base + k->offset;

    switch (k->kind) {
    case KIND_MAP:
        return parse_section(p, k, field);
    case KIND_STRING:
        return parse_string(p, k, field);
    case KIND_U32:
        return parse_u32(p, k, field);
    case KIND_DURATION:
    case KIND_SIZE:
        return parse_unit_value(p, k, field);
    case KIND_BOOL:
        return parse_bool(p, field);
    case KIND_DOUBLE:
        return parse_double(p, k, field);
    case KIND_ADDR:
        return parse_addr(p, k, field);
    case KIND_ROLE:
    case KIND_POLICY:
    case KIND_GATE:
        return parse_enum(p, k, field);
    case KIND_STATUS_LIST:
        return parse_status_list(p, field);
    case KIND_WORKERS:
        return parse_workers(p);
    case KIND_UNSET:
        break;
    }
    return fail_at(p, p->event.start_mark, "internal error: key without a kind");
}

/* ---- checks across the document ------------------------------------------------- */

struct dup_ref {
    const char *key;
    size_t index;
};

static int dup_ref_cmp(const void *a, const void *b)
{
    const struct dup_ref *x = a;
    const struct dup_ref *y = b;
    int c = strcmp(x->key, y->key);

    if (c != 0)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The smallest index whose key an earlier entry already has (and that
 * earlier entry in *first), or n when all keys differ. Sorts refs. */
static size_t first_duplicate(struct dup_ref *refs, size_t n, size_t *first)
{
    size_t best = n;

    qsort(refs, n, sizeof(*refs), dup_ref_cmp);
    for (size_t i = 1; i < n; i++) {
        bool opens_run = i == 1 || strcmp(refs[i - 1].key, refs[i - 2].key) != 0;
        if (opens_run && strcmp(refs[i].key, refs[i - 1].key) == 0 && refs[i].index < best) {
            best = refs[i].index;
            *first = refs[i - 1].index;
        }
    }
    return best;
}

/* Unique ids and urls (found in O(n log n)), and no more workers than slots. */
static int check_workers(struct cfg_parser *p)
{
    const struct cfg *cfg = p->cfg;
    size_t n = cfg->n_workers;
    struct dup_ref *refs;
    size_t id_dup;
    size_t url_dup;
    size_t id_first = 0;
    size_t url_first = 0;
    char shown[CFG_SHOW_BUF];

    if (n > cfg->shm.max_workers) {
        path_push_key(p, "workers");
        return fail_at(p, p->pos[cfg->shm.max_workers].entry,
                       "expected at most %" PRIu32 " workers (shm.max_workers), got %zu",
                       cfg->shm.max_workers, n);
    }
    if (n < 2)
        return 0;
    refs = malloc(n * sizeof(*refs));
    if (refs == NULL)
        return fail_oom(p);
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct dup_ref){.key = cfg->workers[i].id, .index = i};
    id_dup = first_duplicate(refs, n, &id_first);
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct dup_ref){.key = cfg->workers[i].url, .index = i};
    url_dup = first_duplicate(refs, n, &url_first);
    free(refs);

    if (url_dup < n && url_dup <= id_dup) {
        const struct cfg_worker *w = &cfg->workers[url_dup];
        show_text(w->url, strlen(w->url), shown, sizeof(shown));
        path_push(p, "workers[%zu].url", url_dup);
        return fail_at(p, p->pos[url_dup].url,
                       "expected a unique url, got '%s' (also workers[%zu] at line %d)", shown,
                       url_first, cfg->workers[url_first].line);
    }
    if (id_dup < n) {
        const struct cfg_worker *w = &cfg->workers[id_dup];
        show_text(w->id, strlen(w->id), shown, sizeof(shown));
        path_push(p, "workers[%zu].id", id_dup);
        return fail_at(p, p->pos[id_dup].id,
                       "expected a unique id, got '%s' (also workers[%zu] at line %d)", shown,
                       id_first, cfg->workers[id_first].line);
    }
    return 0;
}

/* stream-start, then nothing or one document whose root is the mapping of sections. */
static int parse_stream(struct cfg_parser *p)
{
    struct map_seen seen;
    int rc;

    rc = next_event(p); /* stream start */
    if (rc != 0)
        return rc;
    rc = next_event(p);
    if (rc != 0)
        return rc;
    if (p->event.type == YAML_STREAM_END_EVENT)
        return 0;
    rc = next_event(p); /* past document start: the root node */
    if (rc != 0)
        return rc;
    rc = parse_mapping(p, root_keys, p->cfg, &seen, true, NULL);
    if (rc != 0)
        return rc;
    rc = next_event(p); /* document end */
    if (rc != 0)
        return rc;
    rc = next_event(p);
    if (rc != 0)
        return rc;
    if (p->event.type != YAML_STREAM_END_EVENT)
        return fail_at(p, p->event.start_mark, "expected a single YAML document, got another");
    return 0;
}

/* ---- entry points ------------------------------------------------------------------- */

int cfg_load_string(struct cfg *cfg, const char *name, const char *yaml, size_t len, char *err,
                    size_t err_len)
{
    static const char empty[] = "";
    struct cfg_parser p;
    int rc;

    cfg_init_defaults(cfg);
    cfg_set_err(err, err_len, "%s", "");
    if (name == NULL)
        name = "<string>";
    if (yaml == NULL) {
        yaml = empty;
        len = 0;
    }
    memset(&p, 0, sizeof(p));
    p.name = name;
    p.input = (const unsigned char *)yaml;
    p.input_len = len;
    p.cfg = cfg;
    p.err = err;
    p.err_len = err_len;
    if (!yaml_parser_initialize(&p.yaml)) {
        rc = fail_oom(&p);
        goto out_fini_cfg;
    }
    yaml_parser_set_input_string(&p.yaml, p.input, len);

    rc = parse_stream(&p);
    if (rc == 0)
        rc = check_workers(&p);
    if (rc == 0)
        copy_str(cfg->path, sizeof(cfg->path), name);

    if (p.have_event)
        yaml_event_delete(&p.event);
    yaml_parser_delete(&p.yaml);
    free(p.pos);
out_fini_cfg:
    if (rc != 0)
        cfg_fini(cfg);
    return rc;
}

/* Reads the whole file (at most CFG_FILE_MAX bytes) into a malloc'ed buffer. */
static int read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_len)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0;
    size_t cap = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        rc = -errno;
        cfg_set_err(err, err_len, "%s: cannot open: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        cfg_set_err(err, err_len, "%s: cannot open: %s", path, strerror(-rc));
        goto out_close_fd;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
        cfg_set_err(err, err_len, "%s: cannot open: %s", path, strerror(EISDIR));
        goto out_close_fd;
    }
    for (;;) {
        ssize_t got;

        if (len == cap) {
            size_t ncap = cap == 0 ? 4096 : cap * 2;
            char *nbuf;

            if (cap > CFG_FILE_MAX) {
                rc = -EFBIG;
                cfg_set_err(err, err_len, "%s: cannot read: larger than %u bytes", path,
                            CFG_FILE_MAX);
                goto out_free_buf;
            }
            if (ncap > CFG_FILE_MAX + 1)
                ncap = CFG_FILE_MAX + 1;
            nbuf = realloc(buf, ncap);
            if (nbuf == NULL) {
                rc = -ENOMEM;
                cfg_set_err(err, err_len, "%s: out of memory", path);
                goto out_free_buf;
            }
            buf = nbuf;
            cap = ncap;
        }
        got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            cfg_set_err(err, err_len, "%s: cannot read: %s", path, strerror(-rc));
            goto out_free_buf;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    *out = buf;
    *out_len = len;
    buf = NULL;

out_free_buf:
    free(buf);
out_close_fd:
    close(fd);
    return rc;
}

int cfg_load_file(struct cfg *cfg, const char *path, char *err, size_t err_len)
{
    char *text = NULL;
    size_t len = 0;
    int rc;

    cfg_init_defaults(cfg);
    if (path == NULL) {
        cfg_set_err(err, err_len, "(null): cannot open: %s", strerror(EINVAL));
        return -EINVAL;
    }
    rc = read_file(path, &text, &len, err, err_len);
    if (rc != 0)
        return rc;
    rc = cfg_load_string(cfg, path, text, len, err, err_len);
    free(text);
    return rc;
}
