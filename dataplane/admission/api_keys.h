/*
 * Client API keys: the tenants file named by dataplane.api_keys_file, read
 * into an immutable table, and the check of a request's
 * "Authorization: Bearer <key>" against it.
 *
 * The file holds no key, only each key's SHA-256 (key_sha256), so a leaked
 * file or a log line of it gives nobody access. A presented key is hashed
 * and compared with every tenant's hash in constant time (no early exit,
 * no data-dependent branch), so response timing tells nothing about how
 * close a guess was. Neither keys nor hashes are ever logged; a parse error
 * names the file, the line and the column, and the field, never its value.
 *
 * SHA-256 comes from nettle: libmicrohttpd (through GnuTLS) already loads
 * it into the process, so linking it adds no library and no code to audit.
 *
 * Ownership: a struct dp_keys is caller storage filled by dp_keys_parse /
 * dp_keys_load_file and emptied by dp_keys_fini; it owns its tenants array.
 * Read-only once loaded; any thread may read it.
 */
#ifndef SY_DATAPLANE_API_KEYS_H
#define SY_DATAPLANE_API_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "dataplane/types/api_keys_types.h"

/* "high" | "normal" | "low"; "unset" out of range. */
const char *dp_prio_name(enum dp_prio p);

/*
 * Parses a keys file held in memory (name stands for the file in
 * messages). Returns 0, -EINVAL with "NAME:LINE:COL: tenants[i].field: ..."
 * in err, or -ENOMEM. On error out is empty. An empty tenant list is valid
 * (every request is then refused: a file with no tenant admits nobody).
 */
int dp_keys_parse(struct dp_keys *out, const char *name, const char *yaml, size_t len, char *err,
                  size_t err_len);

/* The same from a file (at most 1 MiB); the errno of open/read otherwise. */
int dp_keys_load_file(struct dp_keys *out, const char *path, char *err, size_t err_len);

void dp_keys_fini(struct dp_keys *k);

/*
 * The tenant whose key the value of an Authorization header carries
 * ("Bearer <key>", scheme case-insensitive), or NULL when the header is
 * NULL, malformed or names no tenant. Runs in time independent of which
 * tenant (if any) matches.
 */
const struct dp_tenant *dp_keys_match(const struct dp_keys *k, const char *authorization);
/* The same for a bare key (Anthropic's x-api-key header carries one). */
const struct dp_tenant *dp_keys_match_key(const struct dp_keys *k, const char *key);

/*
 * A keys file may ask for cache_isolation only when the router has a salt
 * secret (have_salt_key: dataplane.cache_salt_key_file is set). Returns 0,
 * or -EINVAL with a message naming the file (name), the first tenant
 * asking and both keys in err.
 */
int dp_keys_check_isolation(const struct dp_keys *k, const char *name, bool have_salt_key,
                            char *err, size_t err_len);

/* SHA-256 of data into out (32 bytes). */
void dp_keys_sha256(const void *data, size_t len, uint8_t out[DP_KEY_HASH_LEN]);

/* Reads a one-line secret file (the worker key): trailing white space
 * dropped. 0, -EPERM (other users may read it: common/secret_file.h),
 * -EINVAL (empty, several lines, or longer than cap - 1) or an errno. */
int dp_keys_read_secret(const char *path, char *out, size_t cap);

#endif
