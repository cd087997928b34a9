/*
 * The cache-salt secret and derived salts (see cache_salt.h). The secret is
 * keyed into an HMAC context once; a derivation copies that context, so no
 * request pays for the key schedule and no thread writes shared state.
 */
#include "dataplane/admission/cache_salt.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <nettle/sha2.h>

#include "dataplane/admission/api_keys.h"

int dp_salt_key_load(struct dp_salt_key *k, const char *path, char *err, size_t err_len)
{
    memset(k, 0, sizeof(*k));
    if (path[0] == '\0')
        return 0;
    char secret[DP_SALT_SECRET_MAX];
    int rc = dp_keys_read_secret(path, secret, sizeof(secret));
    if (rc == 0 && strlen(secret) < DP_SALT_SECRET_MIN)
        rc = -ERANGE;
    if (rc != 0) {
        snprintf(err, err_len, "dataplane.cache_salt_key_file %s: %s", path,
                 rc == -EPERM    ? "other users may read it (chmod o-rwx)"
                 : rc == -EINVAL ? "empty, several lines, or longer than 511 bytes"
                 : rc == -ERANGE ? "the secret is shorter than 32 characters"
                                 : strerror(-rc));
        explicit_bzero(secret, sizeof(secret));
        return rc;
    }
    hmac_sha256_set_key(&k->keyed, strlen(secret), (const uint8_t *)secret);
    explicit_bzero(secret, sizeof(secret));
    k->on = true;
    return 0;
}

void dp_salt_key_fini(struct dp_salt_key *k)
{
    explicit_bzero(k, sizeof(*k));
}

void dp_salt_derive(const struct dp_salt_key *k, const char *tenant, const char *client,
                    size_t client_len, char out[DP_SALT_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    struct hmac_sha256_ctx c = k->keyed;
    hmac_sha256_update(&c, strlen(tenant), (const uint8_t *)tenant);
    if (client != NULL) {
        /* A tenant name holds no NUL, so (tenant, client) pairs never collide. */
        hmac_sha256_update(&c, 1, (const uint8_t *)"");
        hmac_sha256_update(&c, client_len, (const uint8_t *)client);
    }
    uint8_t d[SHA256_DIGEST_SIZE];
    hmac_sha256_digest(&c, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 0xf];
    }
    out[DP_SALT_HEX_LEN] = '\0';
    explicit_bzero(&c, sizeof(c));
    explicit_bzero(d, sizeof(d));
}
