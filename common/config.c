/*
 * The config loader's entry points (contract in config.h, every key with its
 * range in docs/configuration.md) and the checks that span keys.
 *
 * Loading is: defaults from the schema rows (config_schema.c), then the
 * walker (config_yaml.c) reads the file over them, with scalar syntax from
 * config_values.c. What no single key can decide is checked here, once the
 * mapping or the document it spans has been read: retry.backoff <=
 * retry.backoff_max (after dataplane.retry), a workers entry's url present
 * and canonical and its id given or derivable from the url (after each
 * entry), unique worker ids and urls and no more workers than
 * shm.max_workers (after the document). Their messages use the walker's
 * marks and key path, so they read like every other:
 *
 *   FILE:LINE:COL: key.path: expected ..., got '...'
 *
 * Loading writes no globals: each call owns its parser on its stack. A
 * struct cfg is filled by one thread and only read afterwards.
 */
#include "common/config.h"
#include "common/buf.h"
#include "common/config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_FILE_MAX (16u << 20) /* largest config file cfg_load_file reads */

/* ---- defaults ------------------------------------------------------------ */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

/* The defaults are the schema rows' (config_schema.c), nowhere else. */
void cfg_init_defaults(struct cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg_schema_apply_defaults(cfg_schema_root, cfg);
}

void cfg_fini(struct cfg *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->workers);
    cfg_init_defaults(cfg);
}

/* ---- checks across the keys of one mapping --------------------------------------- */

int cfg_check_retry(struct cfg_parser *p, const struct cfg_key *table, void *base,
                    const struct cfg_map_seen *seen)
{
    const struct cfg_retry *retry = base;
    int b = cfg_key_index(table, "backoff");
    int bm = cfg_key_index(table, "backoff_max");
    char backoff[32];
    char backoff_max[32];

    if (retry->backoff_ms <= retry->backoff_max_ms)
        return 0;
    cfg_format_duration(retry->backoff_ms, backoff, sizeof(backoff));
    cfg_format_duration(retry->backoff_max_ms, backoff_max, sizeof(backoff_max));
    if (seen->mask & (UINT32_C(1) << b)) {
        cfg_yaml_path_push_key(p, "backoff");
        return cfg_yaml_fail_at(p, seen->value_mark[b],
                                "expected at most backoff_max (%s), got '%s'", backoff_max,
                                backoff);
    }
    cfg_yaml_path_push_key(p, "backoff_max");
    return cfg_yaml_fail_at(p, seen->value_mark[bm], "expected at least backoff (%s), got '%s'",
                            backoff, backoff_max);
}

int cfg_check_kubernetes(struct cfg_parser *p, const struct cfg_key *table, void *base,
                         const struct cfg_map_seen *seen)
{
    struct cfg_kubernetes *k = base;
    int api = cfg_key_index(table, "api_server");

    k->enabled = true;
    if (strncmp(k->api_server, "http://", 7) == 0 && !k->insecure_http) {
        cfg_yaml_path_push_key(p, "api_server");
        return cfg_yaml_fail_at(p, seen->value_mark[api],
                                "expected an https:// URL (plain http needs insecure_http: true), "
                                "got '%s'",
                                k->api_server);
    }
    return 0;
}

int cfg_check_upstream_tls(struct cfg_parser *p, const struct cfg_key *table, void *base,
                           const struct cfg_map_seen *seen)
{
    const struct cfg_upstream_tls *t = base;
    bool has_cert = t->client_cert_file[0] != '\0';
    bool has_key = t->client_key_file[0] != '\0';
    const char *given = has_cert ? "client_cert_file" : "client_key_file";
    const char *missing = has_cert ? "client_key_file" : "client_cert_file";
    int i = cfg_key_index(table, given);

    if (has_cert == has_key)
        return 0;
    cfg_yaml_path_push_key(p, given);
    return cfg_yaml_fail_at(p, seen->value_mark[i],
                            "expected %s too (a client certificate needs "
                            "its key), got only '%s'",
                            missing, has_cert ? t->client_cert_file : t->client_key_file);
}

int cfg_check_dataplane_tls(struct cfg_parser *p, const struct cfg_key *table, void *base,
                            const struct cfg_map_seen *seen)
{
    const struct cfg_dataplane_tls *t = base;
    bool has_cert = t->cert_file[0] != '\0';
    bool has_key = t->key_file[0] != '\0';
    int i;

    if (has_cert != has_key) {
        const char *given = has_cert ? "cert_file" : "key_file";
        i = cfg_key_index(table, given);
        cfg_yaml_path_push_key(p, given);
        return cfg_yaml_fail_at(
            p, seen->value_mark[i], "expected %s too (a certificate needs its key), got only '%s'",
            has_cert ? "key_file" : "cert_file", has_cert ? t->cert_file : t->key_file);
    }
    if (t->client_ca_file[0] != '\0' && !has_cert) {
        i = cfg_key_index(table, "client_ca_file");
        cfg_yaml_path_push_key(p, "client_ca_file");
        return cfg_yaml_fail_at(p, seen->value_mark[i],
                                "expected cert_file and key_file too (client certificates are "
                                "asked only over TLS), got only '%s'",
                                t->client_ca_file);
    }
    return 0;
}

/* A replay endpoint only makes sense beside an endpoint to replay. */
int cfg_check_kv_events(struct cfg_parser *p, const struct cfg_key *table, void *base,
                        const struct cfg_map_seen *seen)
{
    const struct cfg_kv_events *k = base;
    int i = cfg_key_index(table, "replay_endpoint");

    if (k->replay_endpoint[0] == '\0' || k->endpoint[0] != '\0')
        return 0;
    cfg_yaml_path_push_key(p, "replay_endpoint");
    return cfg_yaml_fail_at(p, seen->value_mark[i],
                            "expected an endpoint beside replay_endpoint, got none");
}

/* Runs after each entry, while the walker's key path still names it. */
int cfg_check_worker(struct cfg_parser *p, const struct cfg_key *table, void *base,
                     const struct cfg_map_seen *seen)
{
    struct cfg_worker *w = base;
    struct cfg_worker_pos *pos = &p->pos[w - p->cfg->workers];
    int url_i = cfg_key_index(table, "url");
    uint32_t url_bit = UINT32_C(1) << url_i;
    int id_i = cfg_key_index(table, "id");
    bool has_id = (seen->mask & (UINT32_C(1) << id_i)) != 0;
    char canon[CFG_URL_MAX];
    char id[CFG_ID_MAX];
    char reason[128];
    char shown[CFG_SHOW_BUF];
    int rc;

    if (!(seen->mask & url_bit))
        return cfg_yaml_fail_at(p, pos->entry, "missing required key 'url'");
    pos->url = seen->value_mark[url_i];
    pos->id = has_id ? seen->value_mark[id_i] : pos->url;
    cfg_yaml_path_push_key(p, "url");
    rc = cfg_canon_worker_url(w->url, canon, sizeof(canon), id, sizeof(id), reason, sizeof(reason));
    if (rc == -ENOMEM)
        return cfg_yaml_fail_oom(p);
    cfg_yaml_show_text(w->url, strlen(w->url), shown, sizeof(shown));
    if (rc != 0)
        return cfg_yaml_fail_at(p, pos->url, "expected an http(s)://HOST:PORT URL (%s), got '%s'",
                                reason, shown);
    if (!has_id && !cfg_worker_id_is_valid(id))
        return cfg_yaml_fail_at(p, pos->url,
                                "expected a HOST:PORT usable as worker id (1..63 characters of "
                                "[A-Za-z0-9._:-]) or an explicit id, got '%s'",
                                shown);
    memcpy(w->url, canon, sizeof(canon));
    if (!has_id)
        memcpy(w->id, id, sizeof(id));
    return 0;
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
        cfg_yaml_path_push_key(p, "workers");
        return cfg_yaml_fail_at(p, p->pos[cfg->shm.max_workers].entry,
                                "expected at most %" PRIu32 " workers (shm.max_workers), got %zu",
                                cfg->shm.max_workers, n);
    }
    if (n < 2)
        return 0;
    refs = malloc(n * sizeof(*refs));
    if (refs == NULL)
        return cfg_yaml_fail_oom(p);
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct dup_ref){.key = cfg->workers[i].id, .index = i};
    id_dup = first_duplicate(refs, n, &id_first);
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct dup_ref){.key = cfg->workers[i].url, .index = i};
    url_dup = first_duplicate(refs, n, &url_first);
    free(refs);

    if (url_dup < n && url_dup <= id_dup) {
        const struct cfg_worker *w = &cfg->workers[url_dup];
        cfg_yaml_show_text(w->url, strlen(w->url), shown, sizeof(shown));
        cfg_yaml_path_push(p, "workers[%zu].url", url_dup);
        return cfg_yaml_fail_at(p, p->pos[url_dup].url,
                                "expected a unique url, got '%s' (also workers[%zu] at line %d)",
                                shown, url_first, cfg->workers[url_first].line);
    }
    if (id_dup < n) {
        const struct cfg_worker *w = &cfg->workers[id_dup];
        cfg_yaml_show_text(w->id, strlen(w->id), shown, sizeof(shown));
        cfg_yaml_path_push(p, "workers[%zu].id", id_dup);
        return cfg_yaml_fail_at(p, p->pos[id_dup].id,
                                "expected a unique id, got '%s' (also workers[%zu] at line %d)",
                                shown, id_first, cfg->workers[id_first].line);
    }
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
    rc = cfg_yaml_init(&p, cfg, name, yaml, len, err, err_len);
    if (rc != 0)
        goto out_fini_cfg;
    rc = cfg_yaml_walk(&p, cfg_schema_root);
    if (rc == 0)
        rc = check_workers(&p);
    if (rc == 0)
        copy_str(cfg->path, sizeof(cfg->path), name);
    cfg_yaml_fini(&p);
out_fini_cfg:
    if (rc != 0)
        cfg_fini(cfg);
    return rc;
}

/* Reads the whole file (at most CFG_FILE_MAX bytes) into a malloc'ed buffer. */
static int read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_len)
{
    struct stat st;
    struct buf text;
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
    buf_init(&text, CFG_FILE_MAX);
    for (;;) {
        char chunk[16384];
        ssize_t got = read(fd, chunk, sizeof(chunk));

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            cfg_set_err(err, err_len, "%s: cannot read: %s", path, strerror(-rc));
            goto out_free_buf;
        }
        if (got == 0)
            break;
        rc = buf_append(&text, chunk, (size_t)got);
        if (rc == -E2BIG) {
            rc = -EFBIG;
            cfg_set_err(err, err_len, "%s: cannot read: larger than %u bytes", path, CFG_FILE_MAX);
            goto out_free_buf;
        }
        if (rc != 0) {
            cfg_set_err(err, err_len, "%s: out of memory", path);
            goto out_free_buf;
        }
    }
    *out = buf_detach(&text, out_len);
    if (*out == NULL) {
        rc = -ENOMEM;
        cfg_set_err(err, err_len, "%s: out of memory", path);
    }

out_free_buf:
    buf_fini(&text);
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
