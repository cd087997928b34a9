/*
 * What the config loader's files share and nobody else sees (the public
 * contract is config.h). The loader is four files, one job each:
 *
 *   config_values.c  scalar syntax and validity: numbers, durations, sizes,
 *                    booleans, enum names, HOST:PORT, worker URLs, paths;
 *                    pure functions of text, no YAML, no struct cfg
 *   config_schema.c  the schema: one table row per key with its kind, field,
 *                    bounds, default and reload effect;
 *                    cfg_schema_apply_defaults fills a struct from those rows
 *   config_yaml.c    the walker over libyaml events: reads a document
 *                    against the schema tables, keeps the key path and the
 *                    marks every message points at
 *   config.c         the public entry points and the checks that span keys
 *
 * Everything here is internal to those files; the unit test includes all of
 * them to reach their static helpers too.
 */
#ifndef SY_COMMON_CONFIG_INTERNAL_H
#define SY_COMMON_CONFIG_INTERNAL_H

#include "common/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#define CFG_WORKERS_LIMIT 65536 /* the largest shm.max_workers */
#define CFG_TABLE_MAX     32    /* keys in one mapping of the schema (the seen mask is 32 bits) */
#define CFG_KEYPATH_MAX   192   /* key path shown in messages; cut to fit */
#define CFG_SHOW_MAX      64    /* bytes of a bad value quoted in a message */
#define CFG_SHOW_BUF      (CFG_SHOW_MAX + 8)

/* ---- config_values.c: scalar syntax ---------------------------------------- */

/* One name of an enum value; tables end with a NULL name. */
struct cfg_enum_name {
    const char *name;
    int value;
};

extern const struct cfg_enum_name cfg_role_names[];
extern const struct cfg_enum_name cfg_policy_names[];
extern const struct cfg_enum_name cfg_gate_names[];
extern const struct cfg_enum_name cfg_load_signal_names[];
extern const struct cfg_enum_name cfg_pd_fallback_names[];

/* The value named text in names: 0, or -EINVAL for NULL or an unknown name. */
int cfg_enum_parse(const struct cfg_enum_name *names, const char *text, int *out);

/* Writes "a|b|c" into buf (cut to fit). */
void cfg_enum_list(const struct cfg_enum_name *names, char *buf, size_t len);

/* A whole text of decimal digits that fits 64 bits: 0 or -EINVAL. */
int cfg_parse_uint(const char *text, uint64_t *out);

/* A finite decimal number (no hex, inf or nan): 0 or -EINVAL. */
int cfg_parse_number(const char *text, double *out);

/* true|True|TRUE|false|False|FALSE: 0 or -EINVAL. */
int cfg_parse_bool(const char *text, bool *out);

/* The shortest spelling of a value in the largest unit that divides it, as
 * the range messages show it: "1500ms", "2h", "32MiB", "1023". */
void cfg_format_duration(uint64_t ms, char *buf, size_t len);
void cfg_format_size(uint64_t bytes, char *buf, size_t len);

/* Validity of the string-valued keys (the lengths are the fields'). */
bool cfg_shm_name_is_valid(const char *name);
bool cfg_http_path_is_valid(const char *path);
bool cfg_file_path_is_valid(const char *path);
bool cfg_socket_path_is_valid(const char *path);
/* dataplane.cors entries: "*" or an origin (http(s)://host[:port], no
 * path); "*" or a header name (an HTTP token). */
bool cfg_cors_origin_is_valid(const char *text);
bool cfg_cors_header_is_valid(const char *text);
bool cfg_header_name_is_valid(const char *text);
bool cfg_tls_priorities_is_valid(const char *text);
bool cfg_dns_name_is_valid(const char *text);
bool cfg_model_is_valid(const char *model);
bool cfg_addr_or_empty_is_valid(const char *addr);
/* "" or an http:// / https:// URL without spaces or control characters. */
bool cfg_otlp_endpoint_is_valid(const char *url);
bool cfg_health_initial_is_valid(const char *text);
bool cfg_tls_version_is_valid(const char *version);

/* snprintf into err when there is one (NULL or 0 bytes: nothing). */
__attribute__((format(printf, 3, 4))) void cfg_set_err(char *err, size_t err_len, const char *fmt,
                                                       ...);

/* ---- config_schema.c: the table of keys ------------------------------------ */

enum cfg_kind {
    CFG_KIND_UNSET = 0,
    CFG_KIND_MAP,         /* nested mapping: child table, optional finish check */
    CFG_KIND_STRING,      /* char[size], checked by valid() */
    CFG_KIND_U32,         /* uint32_t in min..max */
    CFG_KIND_DURATION,    /* uint64_t milliseconds in min..max */
    CFG_KIND_SIZE,        /* uint64_t bytes in min..max */
    CFG_KIND_BOOL,        /* bool */
    CFG_KIND_DOUBLE,      /* double in dmin..dmax */
    CFG_KIND_ADDR,        /* char[size] holding HOST:PORT */
    CFG_KIND_ROLE,        /* enum cfg_role, named by names */
    CFG_KIND_POLICY,      /* enum cfg_policy_name, named by names */
    CFG_KIND_GATE,        /* enum cfg_balance_gate, named by names */
    CFG_KIND_PD_FALLBACK, /* enum cfg_pd_fallback, named by names */
    CFG_KIND_LOAD_SIGNAL, /* enum cfg_load_signal, named by names */
    CFG_KIND_STATUS_LIST, /* the whole struct cfg_retry: on_status and n_on_status */
    CFG_KIND_WORKERS,     /* struct cfg's workers array; each entry a child mapping */
    CFG_KIND_STR_LIST,    /* struct cfg_str_list, each entry checked by valid(); default [] */
};

struct cfg_parser;
struct cfg_key;

/* What one mapping held: which table rows were given, and where. */
struct cfg_map_seen {
    uint32_t mask; /* bit i: row i of the table was given */
    yaml_mark_t key_mark[CFG_TABLE_MAX];
    yaml_mark_t value_mark[CFG_TABLE_MAX];
};

/* Checks across the keys of one mapping, run after it was read: table is the
 * mapping's, base its struct. 0, or the walker's error (cfg_yaml_fail_at). */
typedef int (*cfg_finish_fn)(struct cfg_parser *p, const struct cfg_key *table, void *base,
                             const struct cfg_map_seen *seen);

/* One key of one mapping. Tables end with a row whose name is NULL. */
struct cfg_key {
    const char *name;
    enum cfg_kind kind;
    size_t offset; /* of the field inside the mapping's struct */
    size_t size;   /* CFG_KIND_STRING, CFG_KIND_ADDR: the field's size */
    uint64_t min;  /* CFG_KIND_U32, CFG_KIND_DURATION, CFG_KIND_SIZE */
    uint64_t max;
    double dmin; /* CFG_KIND_DOUBLE */
    double dmax;
    bool (*valid)(const char *text);   /* CFG_KIND_STRING; NULL: any text that fits */
    const char *expect;                /* STRING, MAP, WORKERS: what is wanted, for messages */
    const struct cfg_enum_name *names; /* ROLE, POLICY, GATE */
    const struct cfg_key *child;       /* MAP, WORKERS (one entry) */
    cfg_finish_fn finish;              /* MAP, WORKERS (each entry); optional */
    /* How a change takes effect. On a MAP or WORKERS row: for the rows
     * below it that give none; UNSET: as the row above it says. */
    enum cfg_reload_effect effect;
    /* The key's default, in the member its kind reads: u for U32, DURATION
     * (ms), SIZE (bytes), BOOL (0/1) and the enums; d for DOUBLE; s for
     * STRING and ADDR; list and n for STATUS_LIST. is_set on every row but
     * a MAP, whose defaults are its child rows'. */
    struct {
        bool is_set;
        uint64_t u;
        double d;
        const char *s;
        const int *list;
        size_t n;
    } def;
};

/* The root mapping of a config file. */
extern const struct cfg_key cfg_schema_root[];

/* Fills every field that table describes in base (the mapping's struct) with
 * its row's default, mappings recursively. Touches nothing else: the workers
 * list and struct cfg's path stay as they are. */
void cfg_schema_apply_defaults(const struct cfg_key *table, void *base);

/* The row of table named name, or -1. */
int cfg_key_index(const struct cfg_key *table, const char *name);

/* Stores value into the enum field of an enum-kind row (ROLE, POLICY, GATE). */
void cfg_key_set_enum(const struct cfg_key *k, void *field, int value);

/* Writes "a|b|c" of the table's key names into buf (cut to fit). */
void cfg_key_list(const struct cfg_key *table, char *buf, size_t len);

/* ---- config_yaml.c: the walker ---------------------------------------------- */

/* Where the walker put each worker entry's parts, for checks after the list. */
struct cfg_worker_pos {
    yaml_mark_t entry; /* the list item */
    yaml_mark_t url;   /* its url value */
    yaml_mark_t id;    /* its id value; the url's when the id is derived */
};

/*
 * One load in progress: lives on cfg_load_string's stack. The walker stands
 * on event; it is freed before the next one is read. pos grows with
 * cfg->workers (one per entry) and dies with the parser.
 */
struct cfg_parser {
    yaml_parser_t yaml;
    yaml_event_t event;
    bool have_event;
    const char *name; /* the file as the user named it */
    const unsigned char *input;
    size_t input_len;
    struct cfg *cfg;
    struct cfg_worker_pos *pos;
    size_t workers_cap;
    char path[CFG_KEYPATH_MAX]; /* key path of the current value */
    size_t path_len;
    char *err;
    size_t err_len;
};

/* Prepares p to read len bytes of input (borrowed until cfg_yaml_fini) into
 * cfg; name stands for the file in messages. 0 or -ENOMEM (message in err). */
int cfg_yaml_init(struct cfg_parser *p, struct cfg *cfg, const char *name, const char *input,
                  size_t len, char *err, size_t err_len);

/* Reads the stream: nothing, or one document whose root is a mapping of
 * root. 0, or -EINVAL / -ENOMEM with the message in p->err. */
int cfg_yaml_walk(struct cfg_parser *p, const struct cfg_key *root);

/* Frees what p holds (not cfg). */
void cfg_yaml_fini(struct cfg_parser *p);

/* Sets p->err to "NAME:LINE:COL: key.path: MESSAGE" and returns -EINVAL. */
__attribute__((format(printf, 3, 4))) int cfg_yaml_fail_at(struct cfg_parser *p, yaml_mark_t mark,
                                                           const char *fmt, ...);

/* Sets p->err to "NAME: out of memory" and returns -ENOMEM. */
int cfg_yaml_fail_oom(struct cfg_parser *p);

/* Appends to the key path shown in messages; returns the length to restore. */
__attribute__((format(printf, 2, 3))) size_t cfg_yaml_path_push(struct cfg_parser *p,
                                                                const char *fmt, ...);
/* The same for one key: ".key" (no dot at the root). */
size_t cfg_yaml_path_push_key(struct cfg_parser *p, const char *key);

/* Copies text for quoting in a message: at most CFG_SHOW_MAX bytes (not
 * splitting a UTF-8 sequence), control bytes as '?', "..." when cut. */
void cfg_yaml_show_text(const char *text, size_t len, char *buf, size_t buf_len);

/* ---- config.c: checks that span keys ---------------------------------------- */

/* dataplane.retry: backoff <= backoff_max. */
int cfg_check_retry(struct cfg_parser *p, const struct cfg_key *table, void *base,
                    const struct cfg_map_seen *seen);

/* discovery.kubernetes: marks it enabled; an http:// api_server only with
 * insecure_http (port_name, when set, wins over port). */
int cfg_check_kubernetes(struct cfg_parser *p, const struct cfg_key *table, void *base,
                         const struct cfg_map_seen *seen);

/* dataplane.upstream_tls: client_cert_file and client_key_file come together. */
int cfg_check_upstream_tls(struct cfg_parser *p, const struct cfg_key *table, void *base,
                           const struct cfg_map_seen *seen);

/* dataplane.tls: cert_file and key_file together; client_ca_file needs them. */
int cfg_check_dataplane_tls(struct cfg_parser *p, const struct cfg_key *table, void *base,
                            const struct cfg_map_seen *seen);

/* One workers entry: url present and canonical, id given or derivable. */
int cfg_check_kv_events(struct cfg_parser *p, const struct cfg_key *table, void *base,
                        const struct cfg_map_seen *seen);
int cfg_check_worker(struct cfg_parser *p, const struct cfg_key *table, void *base,
                     const struct cfg_map_seen *seen);

#endif
