/*
 * The configuration both daemons read: one YAML file (schema in
 * docs/configuration.md), parsed with libyaml's event API into the plain
 * structs below. Every key of the schema is accepted, also those whose
 * feature lands later; unknown keys, wrong types, out-of-range values,
 * duplicate worker ids or urls and malformed URLs are errors whose message
 * reads
 *
 *   FILE:LINE:COL: key.path: expected ..., got '...'
 *
 * with 1-based line and column. Durations are written with units (250ms, 5s,
 * 2m, 1h) and stored in milliseconds; sizes as bytes or with a unit (64KiB,
 * 32MiB, 1GiB) and stored in bytes.
 *
 * Ownership: a struct cfg is caller storage (cfg_init_defaults / cfg_fini);
 * it owns its workers array. Not thread-safe while loading; read-only after.
 */
#ifndef SY_COMMON_CONFIG_H
#define SY_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/config_types.h"

/* Fills every field with its documented default (the schema rows'); no workers. */
void cfg_init_defaults(struct cfg *cfg);

/* Frees what cfg owns and leaves it as after cfg_init_defaults. */
void cfg_fini(struct cfg *cfg);

/*
 * Loads a YAML file over the defaults. Returns 0, or a negative errno with a
 * one-line message in err (FILE:LINE:COL: key.path: ... where a position is
 * known, FILE: ... otherwise). On error cfg is left as after cfg_fini.
 * cfg is overwritten, not freed: cfg_fini a previously loaded cfg first.
 * Errors: -EINVAL for a bad config, -ENOMEM, or the errno of open/read.
 */
int cfg_load_file(struct cfg *cfg, const char *path, char *err, size_t err_len);

/* The same from memory; name stands for the file in messages. */
int cfg_load_string(struct cfg *cfg, const char *name, const char *yaml, size_t len, char *err,
                    size_t err_len);

/* "250ms", "5s", "2m", "1h", "0" -> milliseconds. Returns 0 or -EINVAL. */
int cfg_parse_duration_ms(const char *text, uint64_t *out_ms);

/* "1048576", "64KiB", "32MiB", "1GiB" (also KB/MB/GB, powers of 1000) -> bytes. */
int cfg_parse_size(const char *text, uint64_t *out_bytes);

/* "127.0.0.1:8080" or "[::1]:8080" -> host (no brackets) and port 1..65535.
 * Returns 0, -EINVAL, or -ENOSPC when the host does not fit host_len. */
int cfg_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port);

/* Validates a worker URL (http or https, host and port required) and writes
 * the default worker id HOST:PORT into id. Returns 0 or -EINVAL with err. */
int cfg_check_worker_url(const char *url, char *id, size_t id_len, char *err, size_t err_len);

/*
 * The same, and writes the URL's canonical form "scheme://host:port" (scheme
 * and ASCII host lower-cased, IPv6 host in brackets, no path) into canon: the
 * form struct cfg_worker.url holds and duplicates are compared in. The path
 * must be empty or "/"; user info, query and fragment are refused. The id is
 * HOST:PORT with an IPv6 host unbracketed, or "" when it does not fit id_len;
 * it is not checked against the id alphabet. err gets the reason ("an
 * explicit port is required"). Returns 0, -EINVAL, -ENOSPC (canon too small)
 * or -ENOMEM.
 */
int cfg_canon_worker_url(const char *url, char *canon, size_t canon_len, char *id, size_t id_len,
                         char *err, size_t err_len);

/* A worker id: 1..CFG_ID_MAX-1 characters of [A-Za-z0-9._:-]. */
bool cfg_worker_id_is_valid(const char *id);

/* A KV-events endpoint: "" or tcp://HOST:PORT, HOST a name, an IPv4
 * address, [IPv6], '*' or empty (both: the worker's own host), PORT 1..65535. */
bool cfg_kv_endpoint_is_valid(const char *endpoint);

/* Names for messages and the admin API; "unset" for a value out of range.
 * The parsers accept exactly the names the schema uses; 0 or -EINVAL. */
const char *cfg_role_name(enum cfg_role role);
int cfg_role_parse(const char *text, enum cfg_role *out);
const char *cfg_policy_name_str(enum cfg_policy_name name);
int cfg_policy_name_parse(const char *text, enum cfg_policy_name *out);

/*
 * The dotted names of the keys whose values differ between a and b, in
 * schema order: leaf keys ("dataplane.retry.max_attempts"), and "workers"
 * for any change to the list (an entry's id, url, model, role or kv_events,
 * their order or number). Writes up to cap names; returns how many differ (may be more
 * than cap). The paths of the files are not compared.
 */
size_t cfg_diff(const struct cfg *a, const struct cfg *b, char (*names)[CFG_KEY_NAME_MAX],
                size_t cap);

/* Calls fn with every key's dotted name, in schema order ("workers" once). */
void cfg_each_key(void (*fn)(const char *name, void *arg), void *arg);

/*
 * How a change of key takes effect; key is a dotted name as cfg_diff and
 * cfg_each_key give them ("dataplane.retry.max_attempts", "workers"). Never
 * CFG_EFFECT_UNSET: a name that is not a key (unknown, or a mapping's) needs
 * a restart, since refusing a reload is safe and ignoring a change is not.
 */
enum cfg_reload_effect cfg_key_effect(const char *key);

#endif
