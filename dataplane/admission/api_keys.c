/*
 * The keys file (see api_keys.h). libyaml's document API loads the whole
 * (small) file into a node tree, which is then walked: the file has one
 * fixed shape, so a tree is simpler than the event walker the main config
 * needs for its large schema. Marks are 0-based in libyaml and printed
 * 1-based.
 */
#include "dataplane/admission/api_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/sha2.h>
#include <yaml.h>

#include "common/secret_file.h"

#define DP_KEYS_FILE_MAX (1u << 20)

const char *dp_prio_name(enum dp_prio p)
{
    switch (p) {
    case DP_PRIO_HIGH:
        return "high";
    case DP_PRIO_NORMAL:
        return "normal";
    case DP_PRIO_LOW:
        return "low";
    default:
        return "unset";
    }
}

void dp_keys_sha256(const void *data, size_t len, uint8_t out[DP_KEY_HASH_LEN])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, DP_KEY_HASH_LEN, out);
}

struct keys_parse {
    const char *name;
    yaml_document_t *doc;
    char *err;
    size_t err_len;
};

static int keys_fail(struct keys_parse *p, const yaml_node_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int keys_fail(struct keys_parse *p, const yaml_node_t *at, const char *fmt, ...)
{
    int n = snprintf(p->err, p->err_len, "%s:%zu:%zu: ", p->name,
                     at != NULL ? at->start_mark.line + 1 : 1,
                     at != NULL ? at->start_mark.column + 1 : 1);
    if (n >= 0 && (size_t)n < p->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static const char *keys_scalar(const yaml_node_t *n)
{
    return n != NULL && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool keys_name_is_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= DP_TENANT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static int keys_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool keys_parse_hash(const char *s, uint8_t out[DP_KEY_HASH_LEN])
{
    if (strlen(s) != 2 * DP_KEY_HASH_LEN)
        return false;
    for (size_t i = 0; i < DP_KEY_HASH_LEN; i++) {
        int hi = keys_hex(s[2 * i]), lo = keys_hex(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool keys_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return false;
    *out = v;
    return true;
}

/* One entry of tenants: i is its index, for messages. */
static int keys_tenant(struct keys_parse *p, const yaml_node_t *m, size_t i, struct dp_tenant *t)
{
    if (m->type != YAML_MAPPING_NODE)
        return keys_fail(p, m, "tenants[%zu]: expected a mapping with name and key_sha256", i);
    memset(t, 0, sizeof(*t));
    t->priority = DP_PRIO_NORMAL;
    bool have_name = false, have_hash = false, have_burst = false;
    for (yaml_node_pair_t *pair = m->data.mapping.pairs.start; pair < m->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        const yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);
        const char *key = keys_scalar(kn);
        const char *val = keys_scalar(vn);
        if (key == NULL)
            return keys_fail(p, kn, "tenants[%zu]: expected a key", i);
        if (val == NULL)
            return keys_fail(p, vn, "tenants[%zu].%s: expected a scalar", i, key);
        uint64_t u;
        if (strcmp(key, "name") == 0) {
            if (!keys_name_is_valid(val))
                return keys_fail(p, vn,
                                 "tenants[%zu].name: expected 1..63 characters of "
                                 "[A-Za-z0-9._-]",
                                 i);
            snprintf(t->name, sizeof(t->name), "%s", val);
            have_name = true;
        } else if (strcmp(key, "key_sha256") == 0) {
            /* The value is a secret's hash: never quoted in a message. */
            if (!keys_parse_hash(val, t->key_sha256))
                return keys_fail(p, vn, "tenants[%zu].key_sha256: expected 64 hexadecimal digits",
                                 i);
            have_hash = true;
        } else if (strcmp(key, "priority") == 0) {
            if (strcmp(val, "high") == 0)
                t->priority = DP_PRIO_HIGH;
            else if (strcmp(val, "normal") == 0)
                t->priority = DP_PRIO_NORMAL;
            else if (strcmp(val, "low") == 0)
                t->priority = DP_PRIO_LOW;
            else
                return keys_fail(p, vn,
                                 "tenants[%zu].priority: expected one of high|normal|low, "
                                 "got '%.32s'",
                                 i, val);
        } else if (strcmp(key, "requests_per_s") == 0) {
            char *end;
            errno = 0;
            double d = strtod(val, &end);
            if (errno != 0 || end == val || *end != '\0' || !isfinite(d) || d <= 0 || d > 1e6)
                return keys_fail(p, vn,
                                 "tenants[%zu].requests_per_s: expected a number in (0, 1000000], "
                                 "got '%.32s'",
                                 i, val);
            t->requests_per_s = d;
        } else if (strcmp(key, "burst") == 0) {
            if (!keys_parse_u64(val, 1000000, &u) || u == 0)
                return keys_fail(p, vn,
                                 "tenants[%zu].burst: expected an integer in 1..1000000, got "
                                 "'%.32s'",
                                 i, val);
            t->burst = (uint32_t)u;
            have_burst = true;
        } else if (strcmp(key, "tokens_per_min") == 0) {
            if (!keys_parse_u64(val, UINT64_C(1000000000000), &u) || u == 0)
                return keys_fail(p, vn,
                                 "tenants[%zu].tokens_per_min: expected an integer in "
                                 "1..1000000000000, got '%.32s'",
                                 i, val);
            t->tokens_per_min = u;
        } else if (strcmp(key, "cache_isolation") == 0) {
            if (strcmp(val, "true") == 0)
                t->cache_isolation = true;
            else if (strcmp(val, "false") == 0)
                t->cache_isolation = false;
            else
                return keys_fail(p, vn,
                                 "tenants[%zu].cache_isolation: expected true or false, got "
                                 "'%.32s'",
                                 i, val);
        } else {
            return keys_fail(p, kn,
                             "tenants[%zu]: unknown key '%.64s' (expected "
                             "name|key_sha256|priority|requests_per_s|burst|tokens_per_min|"
                             "cache_isolation)",
                             i, key);
        }
    }
    if (!have_name)
        return keys_fail(p, m, "tenants[%zu]: name is required", i);
    if (!have_hash)
        return keys_fail(p, m, "tenants[%zu]: key_sha256 is required", i);
    if (have_burst && t->requests_per_s == 0)
        return keys_fail(p, m, "tenants[%zu].burst: needs requests_per_s", i);
    if (!have_burst && t->requests_per_s > 0)
        t->burst = (uint32_t)ceil(t->requests_per_s);
    return 0;
}

static int keys_walk(struct keys_parse *p, struct dp_keys *out)
{
    const yaml_node_t *root = yaml_document_get_root_node(p->doc);
    if (root == NULL)
        return keys_fail(p, NULL, "expected a mapping with 'tenants'");
    if (root->type != YAML_MAPPING_NODE)
        return keys_fail(p, root, "expected a mapping with 'tenants'");
    const yaml_node_t *list = NULL;
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        const yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        const char *key = keys_scalar(kn);
        if (key == NULL || strcmp(key, "tenants") != 0)
            return keys_fail(p, kn, "unknown key '%.64s' (expected tenants)",
                             key != NULL ? key : "?");
        list = yaml_document_get_node(p->doc, pair->value);
    }
    if (list == NULL)
        return keys_fail(p, root, "tenants is required");
    if (list->type == YAML_SCALAR_NODE && list->data.scalar.length == 0)
        return 0; /* "tenants:" with nothing: no tenant */
    if (list->type != YAML_SEQUENCE_NODE)
        return keys_fail(p, list, "tenants: expected a list");
    size_t n = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    if (n == 0)
        return 0;
    out->tenants = calloc(n, sizeof(*out->tenants));
    if (out->tenants == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = yaml_document_get_node(p->doc, list->data.sequence.items.start[i]);
        int rc = keys_tenant(p, m, i, &out->tenants[i]);
        if (rc != 0)
            return rc;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(out->tenants[j].name, out->tenants[i].name) == 0)
                return keys_fail(p, m, "tenants[%zu].name: '%s' is also tenants[%zu]'s", i,
                                 out->tenants[i].name, j);
            if (memcmp(out->tenants[j].key_sha256, out->tenants[i].key_sha256, DP_KEY_HASH_LEN) ==
                0)
                return keys_fail(p, m, "tenants[%zu].key_sha256: the same as tenants[%zu]'s", i, j);
        }
        out->n = i + 1;
    }
    return 0;
}

int dp_keys_parse(struct dp_keys *out, const char *name, const char *yaml, size_t len, char *err,
                  size_t err_len)
{
    out->tenants = NULL;
    out->n = 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, err_len, "%s:%zu:%zu: %s", name, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1,
                 parser.problem != NULL ? parser.problem : "malformed YAML");
        yaml_parser_delete(&parser);
        return -EINVAL;
    }
    struct keys_parse p = {.name = name, .doc = &doc, .err = err, .err_len = err_len};
    rc = keys_walk(&p, out);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc != 0)
        dp_keys_fini(out);
    return rc;
}

static int keys_read_file(const char *path, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char *buf = malloc(DP_KEYS_FILE_MAX + 1);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, DP_KEYS_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            close(fd);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > DP_KEYS_FILE_MAX) {
            free(buf);
            close(fd);
            return -EFBIG;
        }
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int dp_keys_load_file(struct dp_keys *out, const char *path, char *err, size_t err_len)
{
    out->tenants = NULL;
    out->n = 0;
    char *data;
    size_t len;
    int rc = keys_read_file(path, &data, &len);
    if (rc != 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(-rc));
        return rc;
    }
    rc = dp_keys_parse(out, path, data, len, err, err_len);
    /* The buffer held hashes only, but wipe it like a secret anyway. */
    explicit_bzero(data, len);
    free(data);
    return rc;
}

void dp_keys_fini(struct dp_keys *k)
{
    free(k->tenants);
    k->tenants = NULL;
    k->n = 0;
}

const struct dp_tenant *dp_keys_match(const struct dp_keys *k, const char *authorization)
{
    if (authorization == NULL || strncasecmp(authorization, "bearer ", 7) != 0)
        return NULL;
    return dp_keys_match_key(k, authorization + 7);
}

const struct dp_tenant *dp_keys_match_key(const struct dp_keys *k, const char *key)
{
    if (key == NULL)
        return NULL;
    while (*key == ' ' || *key == '\t')
        key++;
    size_t len = strlen(key);
    while (len > 0 && (key[len - 1] == ' ' || key[len - 1] == '\t'))
        len--;
    if (len == 0)
        return NULL;
    uint8_t h[DP_KEY_HASH_LEN];
    dp_keys_sha256(key, len, h);
    /* Every tenant is compared in full, and the match is selected without
     * a branch on secret data. */
    uintptr_t found = 0;
    for (size_t i = 0; i < k->n; i++) {
        uint8_t diff = 0;
        for (size_t j = 0; j < DP_KEY_HASH_LEN; j++)
            diff |= (uint8_t)(h[j] ^ k->tenants[i].key_sha256[j]);
        /* all ones when diff == 0, else zero */
        uintptr_t mask = (uintptr_t)0 - (uintptr_t)(((unsigned)diff - 1u) >> 8 & 1u);
        found |= mask & (uintptr_t)&k->tenants[i];
    }
    explicit_bzero(h, sizeof(h));
    return (const struct dp_tenant *)found;
}

int dp_keys_check_isolation(const struct dp_keys *k, const char *name, bool have_salt_key,
                            char *err, size_t err_len)
{
    for (size_t i = 0; i < k->n && !have_salt_key; i++)
        if (k->tenants[i].cache_isolation) {
            snprintf(err, err_len,
                     "%s: tenants[%zu] ('%s') asks for cache_isolation, but "
                     "dataplane.cache_salt_key_file is not set (the salts derive from its "
                     "secret)",
                     name, i, k->tenants[i].name);
            return -EINVAL;
        }
    return 0;
}

int dp_keys_read_secret(const char *path, char *out, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if (secret_file_check(&st, NULL, 0) != 0)
        return -EPERM; /* a secret other users can read is not one */
    char *data;
    size_t len;
    int rc = keys_read_file(path, &data, &len);
    if (rc != 0)
        return rc;
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' ' ||
                       data[len - 1] == '\t'))
        len--;
    rc = 0;
    if (len == 0 || len >= cap || memchr(data, '\n', len) != NULL)
        rc = -EINVAL;
    else {
        memcpy(out, data, len);
        out[len] = '\0';
    }
    explicit_bzero(data, len);
    free(data);
    return rc;
}
