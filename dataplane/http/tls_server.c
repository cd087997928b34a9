/*
 * The data plane's TLS credentials and their replacement (see
 * tls_server.h). A struct dp_tls_cred is one generation of the files and
 * its own session-ticket key; retired generations wait on a list until no
 * connection holds them and the last one let go a while ago
 * (libmicrohttpd tells of a connection's end just before it deinitialises
 * the GnuTLS session), then are freed by a later reload or by destroy.
 */
#include "dataplane/http/tls_server.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "common/proc.h"
#include "common/secret_file.h"

#define DP_TLS_RETIRED_GRACE_MS 2000u

struct dp_tls_cred {
    gnutls_certificate_credentials_t cred;
    /* This generation's session-ticket key (NULL data: no tickets). A
     * ticket resumes only a connection of the generation that issued it,
     * so it never outlives the client CA that verified its certificate:
     * GnuTLS does not verify again on resumption. */
    gnutls_datum_t ticket_key;
    unsigned refs;        /* connections holding it; under dp_tls.lock */
    uint64_t last_end_ms; /* when the last holder let go */
    struct dp_tls_cred *next_retired;
};

struct dp_tls {
    const struct cfg_dataplane_tls *cfg; /* borrowed */
    bool mtls;
    char priorities[CFG_PATH_MAX + 64]; /* the string, then min_version's removals */
    /* The files as read at start, for libmicrohttpd's own set-up. */
    gnutls_datum_t cert_pem, key_pem, ca_pem;
    pthread_mutex_t lock;
    struct dp_tls_cred *current;
    struct dp_tls_cred *retired;
};

static void cred_free(struct dp_tls_cred *c)
{
    if (c == NULL)
        return;
    gnutls_certificate_free_credentials(c->cred);
    if (c->ticket_key.data != NULL)
        gnutls_memset(c->ticket_key.data, 0, c->ticket_key.size);
    gnutls_free(c->ticket_key.data);
    free(c);
}

static int tls_fail(char *err, size_t err_len, const char *key, const char *path, int gerr)
{
    snprintf(err, err_len, "dataplane.tls.%s: %s: %s", key, path, gnutls_strerror(gerr));
    return gerr == GNUTLS_E_FILE_ERROR ? -ENOENT : -EINVAL;
}

/* PEM certificates of a file, parsed (a chain, or a CA bundle). 0 or an
 * error with the message in err. GnuTLS's own file loaders leak what they
 * allocated on some malformed PEM (Debian 12's 3.7.9): parsing first keeps
 * a refused reload from costing memory. */
static int crts_load(const char *key, const char *path, gnutls_x509_crt_t **crts, unsigned *n,
                     char *err, size_t err_len)
{
    gnutls_datum_t pem = {NULL, 0};
    int rc = gnutls_load_file(path, &pem);
    if (rc < 0)
        return tls_fail(err, err_len, key, path, rc);
    rc = gnutls_x509_crt_list_import2(crts, n, &pem, GNUTLS_X509_FMT_PEM, 0);
    gnutls_free(pem.data);
    if (rc < 0)
        return tls_fail(err, err_len, key, path, rc);
    if (*n == 0) {
        gnutls_free(*crts);
        *crts = NULL;
        snprintf(err, err_len, "dataplane.tls.%s: %s: no certificate", key, path);
        return -EINVAL;
    }
    return 0;
}

static void crts_free(gnutls_x509_crt_t *crts, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
}

/* The key file's mode (common/secret_file.h), at start and on reload. */
static int key_check_mode(const char *path, char *err, size_t err_len)
{
    struct stat st;
    char why[160];
    if (stat(path, &st) != 0) {
        int rc = -errno;
        snprintf(err, err_len, "dataplane.tls.key_file: %s: %s", path, strerror(-rc));
        return rc;
    }
    if (secret_file_check(&st, why, sizeof(why)) != 0) {
        snprintf(err, err_len, "dataplane.tls.key_file: %s is %s", path, why);
        return -EPERM;
    }
    return 0;
}

static int key_load(const char *path, gnutls_x509_privkey_t *key, char *err, size_t err_len)
{
    gnutls_datum_t pem = {NULL, 0};
    int rc = key_check_mode(path, err, err_len);
    if (rc != 0)
        return rc;
    rc = gnutls_load_file(path, &pem);
    if (rc < 0)
        return tls_fail(err, err_len, "key_file", path, rc);
    rc = gnutls_x509_privkey_init(key);
    if (rc == 0) {
        rc = gnutls_x509_privkey_import2(*key, &pem, GNUTLS_X509_FMT_PEM, NULL, 0);
        if (rc < 0) {
            gnutls_x509_privkey_deinit(*key);
            *key = NULL;
        }
    }
    gnutls_free(pem.data);
    return rc < 0 ? tls_fail(err, err_len, "key_file", path, rc) : 0;
}

/* The leaf (the first certificate) is valid now. */
static int crt_check_dates(gnutls_x509_crt_t leaf, const char *path, char *err, size_t err_len)
{
    time_t now = time(NULL);
    time_t not_after = gnutls_x509_crt_get_expiration_time(leaf);
    time_t not_before = gnutls_x509_crt_get_activation_time(leaf);
    if (not_after >= now && not_before <= now)
        return 0;
    snprintf(err, err_len, "dataplane.tls.cert_file: %s: %s", path,
             not_after < now ? "expired" : "not valid yet");
    return -EINVAL;
}

/* One generation of credentials from the files, all of it or nothing. */
static int cred_load(const struct cfg_dataplane_tls *t, struct dp_tls_cred **out, char *err,
                     size_t err_len)
{
    gnutls_x509_crt_t *chain = NULL, *cas = NULL;
    unsigned n_chain = 0, n_cas = 0;
    gnutls_x509_privkey_t key = NULL;
    struct dp_tls_cred *c = NULL;
    int rc = crts_load("cert_file", t->cert_file, &chain, &n_chain, err, err_len);
    if (rc == 0)
        rc = crt_check_dates(chain[0], t->cert_file, err, err_len);
    if (rc == 0)
        rc = key_load(t->key_file, &key, err, err_len);
    if (rc == 0 && t->client_ca_file[0] != '\0')
        rc = crts_load("client_ca_file", t->client_ca_file, &cas, &n_cas, err, err_len);
    if (rc != 0)
        goto out_free;
    c = calloc(1, sizeof(*c));
    if (c == NULL || gnutls_certificate_allocate_credentials(&c->cred) < 0) {
        free(c);
        c = NULL;
        snprintf(err, err_len, "dataplane.tls: out of memory");
        rc = -ENOMEM;
        goto out_free;
    }
    if (gnutls_session_ticket_key_generate(&c->ticket_key) < 0)
        c->ticket_key.data = NULL; /* no tickets: full handshakes only */
    /* Copies the chain and key; refuses a key that is not the leaf's. */
    rc = gnutls_certificate_set_x509_key(c->cred, chain, n_chain, key);
    if (rc < 0) {
        rc = tls_fail(err, err_len, "key_file", t->key_file, rc);
        goto out_free;
    }
    if (n_cas > 0) {
        rc = gnutls_certificate_set_x509_trust(c->cred, cas, (int)n_cas);
        if (rc < 0) {
            rc = tls_fail(err, err_len, "client_ca_file", t->client_ca_file, rc);
            goto out_free;
        }
    }
    *out = c;
    c = NULL;
    rc = 0;
out_free:
    cred_free(c);
    crts_free(chain, n_chain);
    crts_free(cas, n_cas);
    if (key != NULL)
        gnutls_x509_privkey_deinit(key);
    return rc;
}

static int load_pem(const char *key, const char *path, gnutls_datum_t *out, char *err,
                    size_t err_len)
{
    if (path[0] == '\0')
        return 0;
    int rc = gnutls_load_file(path, out);
    if (rc < 0)
        return tls_fail(err, err_len, key, path, rc);
    return 0;
}

/* What dataplane.tls.priorities says ("" = DP_TLS_DEFAULT_PRIORITIES),
 * with the versions below min_version taken out after it, checked by
 * GnuTLS here so that a bad string stops the start with its position. */
static int priorities_build(struct dp_tls *tls, const struct cfg_dataplane_tls *t, char *err,
                            size_t err_len)
{
    const char *base = t->priorities[0] != '\0' ? t->priorities : DP_TLS_DEFAULT_PRIORITIES;
    snprintf(tls->priorities, sizeof(tls->priorities),
             "%s:-VERS-SSL3.0:-VERS-TLS1.0:-VERS-TLS1.1%s", base,
             strcmp(t->min_version, "1.3") == 0 ? ":-VERS-TLS1.2" : "");
    gnutls_priority_t cache;
    const char *at = NULL;
    int rc = gnutls_priority_init2(&cache, tls->priorities, &at, 0);
    if (rc == 0) {
        gnutls_priority_deinit(cache);
        return 0;
    }
    size_t pos = at != NULL && at >= tls->priorities ? (size_t)(at - tls->priorities) : 0;
    size_t base_len = strlen(base);
    snprintf(err, err_len,
             "dataplane.tls.priorities: GnuTLS rejects '%s' at character %zu ('%.*s'): %s", base,
             pos + 1, (int)(pos < base_len ? base_len - pos : 0), pos < base_len ? base + pos : "",
             gnutls_strerror(rc));
    return -EINVAL;
}

int dp_tls_create(const struct cfg_dataplane_tls *t, struct dp_tls **out, char *err, size_t err_len)
{
    *out = NULL;
    if (t->cert_file[0] == '\0')
        return 0;
    struct dp_tls *tls = calloc(1, sizeof(*tls));
    if (tls == NULL)
        return -ENOMEM;
    tls->cfg = t;
    tls->mtls = t->client_ca_file[0] != '\0';
    pthread_mutex_init(&tls->lock, NULL);
    int rc = priorities_build(tls, t, err, err_len);
    if (rc == 0)
        rc = cred_load(t, &tls->current, err, err_len);
    if (rc == 0)
        rc = load_pem("cert_file", t->cert_file, &tls->cert_pem, err, err_len);
    if (rc == 0)
        rc = load_pem("key_file", t->key_file, &tls->key_pem, err, err_len);
    if (rc == 0)
        rc = load_pem("client_ca_file", t->client_ca_file, &tls->ca_pem, err, err_len);
    if (rc != 0) {
        dp_tls_destroy(tls);
        return rc;
    }
    *out = tls;
    return 0;
}

void dp_tls_destroy(struct dp_tls *tls)
{
    if (tls == NULL)
        return;
    cred_free(tls->current);
    while (tls->retired != NULL) {
        struct dp_tls_cred *c = tls->retired;
        tls->retired = c->next_retired;
        cred_free(c);
    }
    gnutls_free(tls->cert_pem.data);
    gnutls_free(tls->key_pem.data);
    gnutls_free(tls->ca_pem.data);
    pthread_mutex_destroy(&tls->lock);
    free(tls);
}

int dp_tls_reload(struct dp_tls *tls, char *err, size_t err_len)
{
    struct dp_tls_cred *fresh = NULL;
    int rc = cred_load(tls->cfg, &fresh, err, err_len);
    if (rc != 0)
        return rc;
    uint64_t now = proc_monotonic_ms();
    struct dp_tls_cred *to_free = NULL;
    pthread_mutex_lock(&tls->lock);
    tls->current->next_retired = tls->retired;
    tls->current->last_end_ms = now;
    tls->retired = tls->current;
    tls->current = fresh;
    for (struct dp_tls_cred **pp = &tls->retired; *pp != NULL;) {
        struct dp_tls_cred *c = *pp;
        if (c->refs == 0 && now - c->last_end_ms >= DP_TLS_RETIRED_GRACE_MS) {
            *pp = c->next_retired;
            c->next_retired = to_free;
            to_free = c;
        } else {
            pp = &c->next_retired;
        }
    }
    pthread_mutex_unlock(&tls->lock);
    while (to_free != NULL) {
        struct dp_tls_cred *c = to_free;
        to_free = c->next_retired;
        cred_free(c);
    }
    return 0;
}

unsigned dp_tls_daemon_flag(const struct dp_tls *tls)
{
    return tls != NULL ? (unsigned)MHD_USE_TLS : 0u;
}

void dp_tls_mhd_options(struct dp_tls *tls, struct MHD_OptionItem items[DP_TLS_OPTIONS_MAX])
{
    size_t n = 0;
    if (tls != NULL) {
        /* libmicrohttpd's own credentials from the same files: a
         * connection that could not get ours (no memory for its record)
         * still serves the start-up certificate and still asks for a
         * client certificate. */
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, tls->cert_pem.data};
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, tls->key_pem.data};
        if (tls->mtls)
            items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, tls->ca_pem.data};
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, tls->priorities};
    }
    items[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

void *dp_tls_conn_start(struct dp_tls *tls, struct MHD_Connection *conn)
{
    if (tls == NULL)
        return NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ci == NULL || ci->tls_session == NULL)
        return NULL;
    gnutls_session_t session = (gnutls_session_t)ci->tls_session;
    if (tls->mtls) {
        /* Required and verified in the handshake, not merely asked. */
        gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
        gnutls_session_set_verify_cert(session, NULL, 0);
    }
    pthread_mutex_lock(&tls->lock);
    struct dp_tls_cred *c = tls->current;
    c->refs++;
    pthread_mutex_unlock(&tls->lock);
    if (gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, c->cred) < 0) {
        dp_tls_conn_end(tls, c);
        return NULL; /* libmicrohttpd's credentials, and no tickets */
    }
    /* Only with c's credentials: the key and the CA that its tickets'
     * certificates were verified against go together. GnuTLS copies it. */
    if (c->ticket_key.data != NULL)
        (void)gnutls_session_ticket_enable_server(session, &c->ticket_key);
    return c;
}

void dp_tls_conn_end(struct dp_tls *tls, void *held)
{
    struct dp_tls_cred *c = held;
    if (tls == NULL || c == NULL)
        return;
    uint64_t now = proc_monotonic_ms();
    pthread_mutex_lock(&tls->lock);
    c->refs--;
    c->last_end_ms = now;
    pthread_mutex_unlock(&tls->lock);
}
