/*
 * What the config loader's files share and nobody else sees (the public
 * contract is config.h). The loader is four files, one job each:
 *
 *   config_values.c  scalar syntax and validity: numbers, durations, sizes,
 *                    booleans, enum names, HOST:PORT, worker URLs, paths;
 *                    pure functions of text, no YAML, no struct cfg
 *   config_schema.c  the schema: one table row per key with its kind, field,
 *                    bounds and default; cfg_schema_apply_defaults fills a
 *                    struct from those rows
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

#define CFG_WORKERS_LIMIT 65536 /* the largest shm.max_workers */

/* ---- config_values.c: scalar syntax ---------------------------------------- */

/* One name of an enum value; tables end with a NULL name. */
struct cfg_enum_name {
    const char *name;
    int value;
};

extern const struct cfg_enum_name cfg_role_names[];
extern const struct cfg_enum_name cfg_policy_names[];
extern const struct cfg_enum_name cfg_gate_names[];

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
bool cfg_model_is_valid(const char *model);

/* snprintf into err when there is one (NULL or 0 bytes: nothing). */
__attribute__((format(printf, 3, 4))) void cfg_set_err(char *err, size_t err_len, const char *fmt,
                                                       ...);

#endif
