/*
 * Fuzz target: the client API keys file (dataplane.api_keys_file), as the
 * data plane reads it at start and on reload: libyaml's document, then
 * every tenant field's parser and the cross-tenant checks. The file is
 * the operator's, but it is also the input of a reload anyone with write
 * access to it can trigger, so a bad one must be refused, never crash.
 * Input: the file. Its first line, whatever it is, is also presented as
 * a key ("Authorization: Bearer <line>") to the constant-time match.
 *
 * Oracle beyond the sanitizers: a refusal leaves the table empty and says
 * why in a terminated message naming the file; an accepted table holds
 * tenants whose names are 1..63 of [A-Za-z0-9._-], unique, with unique
 * hashes, a priority band, and a burst exactly when there is a request
 * rate; the constant-time match finds the same tenant as a plain search
 * over the hashes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/admission/api_keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_table(const struct dp_keys *k)
{
    for (size_t i = 0; i < k->n; i++) {
        const struct dp_tenant *t = &k->tenants[i];
        size_t nl = strnlen(t->name, sizeof(t->name));
        if (nl == 0 || nl >= sizeof(t->name) ||
            strspn(t->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                            "abcdefghijklmnopqrstuvwxyz0123456789._-") != nl)
            abort();
        if (t->priority <= DP_PRIO_UNSET || t->priority >= DP_PRIO_COUNT)
            abort();
        if ((t->requests_per_s > 0) != (t->burst > 0))
            abort();
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->name, k->tenants[j].name) == 0 ||
                memcmp(t->key_sha256, k->tenants[j].key_sha256, DP_KEY_HASH_LEN) == 0)
                abort();
    }
}

/* The tenant a plain (not constant-time) search finds for key. */
static const struct dp_tenant *plain_match(const struct dp_keys *k, const char *key, size_t len)
{
    uint8_t h[DP_KEY_HASH_LEN];
    dp_keys_sha256(key, len, h);
    for (size_t i = 0; i < k->n; i++)
        if (memcmp(h, k->tenants[i].key_sha256, DP_KEY_HASH_LEN) == 0)
            return &k->tenants[i];
    return NULL;
}

static void check_match(const struct dp_keys *k, const uint8_t *data, size_t size)
{
    const char *nl = memchr(data, '\n', size);
    size_t len = nl != NULL ? (size_t)(nl - (const char *)data) : size;
    char *header = malloc(len + 8);
    if (header == NULL)
        return;
    memcpy(header, "Bearer ", 7);
    memcpy(header + 7, data, len);
    header[7 + len] = '\0';
    /* The key as the match reads it: after "Bearer " and spaces, up to a
     * NUL, without trailing spaces and tabs. */
    const char *key = header + 7;
    while (*key == ' ')
        key++;
    size_t klen = strlen(key);
    while (klen > 0 && (key[klen - 1] == ' ' || key[klen - 1] == '\t'))
        klen--;
    const struct dp_tenant *want = klen > 0 ? plain_match(k, key, klen) : NULL;
    if (dp_keys_match(k, header) != want)
        abort();
    free(header);
    if (dp_keys_match(k, NULL) != NULL || dp_keys_match(k, "Basic dXNlcjpwYXNz") != NULL ||
        dp_keys_match(k, "Bearer ") != NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dp_keys k;
    char err[512];
    err[0] = '\0';
    memset(err + 1, 'x', sizeof(err) - 1); /* a missing terminator shows */
    int rc = dp_keys_parse(&k, "keys.yaml", (const char *)data, size, err, sizeof(err));
    if (rc != 0) {
        if (k.tenants != NULL || k.n != 0)
            abort();
        if (rc == -EINVAL &&
            (memchr(err, '\0', sizeof(err)) == NULL || strncmp(err, "keys.yaml", 9) != 0))
            abort();
        return 0;
    }
    check_table(&k);
    check_match(&k, data, size);
    dp_keys_fini(&k);
    return 0;
}
