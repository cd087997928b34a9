/*
 * The router's cache-salt secret and the salts it derives from it, for
 * tenants of the keys file with cache_isolation (docs/security.md).
 *
 * vLLM keeps requests of different cache_salt values from sharing prefix
 * cache blocks (the salt enters the first block's hash), so a tenant whose
 * every request carries a salt only it can produce neither hits nor times
 * another tenant's cached prompts. The salt is the hex of
 * HMAC-SHA256(secret, tenant name), or HMAC-SHA256(secret, tenant name
 * "\0" client salt) when the client sent a cache_salt of its own (it keeps
 * its own partitions inside the tenant's, and cannot reach another
 * tenant's: it would need the secret). The secret is one line of at least
 * DP_SALT_SECRET_MIN characters in dataplane.cache_salt_key_file, read once
 * at start; every router node of a fleet needs the same one, or a tenant's
 * requests stop sharing blocks across nodes.
 *
 * HMAC-SHA256 is nettle's (linked already for the keys file's SHA-256).
 *
 * Ownership: caller storage, filled by dp_salt_key_load before the loops
 * start and wiped by dp_salt_key_fini after they end; read-only in
 * between, so any thread may derive from it.
 */
#ifndef SY_DATAPLANE_ADMISSION_CACHE_SALT_H
#define SY_DATAPLANE_ADMISSION_CACHE_SALT_H

#include <stdbool.h>
#include <stddef.h>

#include <nettle/hmac.h>

#define DP_SALT_SECRET_MIN 32u  /* characters of the secret, at least */
#define DP_SALT_SECRET_MAX 512u /* with the NUL */
#define DP_SALT_HEX_LEN    64u  /* a derived salt: hex of a SHA-256 digest */

struct dp_salt_key {
    bool on; /* a secret was read */
    /* keyed with the secret: each derivation works on a copy */
    struct hmac_sha256_ctx keyed;
};

/*
 * Reads the secret from path (a one-line file no other user may read, the
 * check of the worker key file: dp_keys_read_secret). path "" leaves k off
 * and returns 0. Returns 0, or a negative errno with a message naming the
 * file and the key in err.
 */
int dp_salt_key_load(struct dp_salt_key *k, const char *path, char *err, size_t err_len);

void dp_salt_key_fini(struct dp_salt_key *k);

/*
 * The salt of tenant's requests into out (DP_SALT_HEX_LEN hex digits and a
 * NUL): HMAC of the tenant's name, followed by "\0" and the client's salt
 * client[0..client_len) when client is not NULL. k must be on.
 */
void dp_salt_derive(const struct dp_salt_key *k, const char *tenant, const char *client,
                    size_t client_len, char out[DP_SALT_HEX_LEN + 1]);

#endif
