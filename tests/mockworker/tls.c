/*
 * The mock worker's HTTPS (see tls.h). libmicrohttpd asks for a client
 * certificate when given a trust list but does not require one: a
 * connection-start callback, run before the handshake, makes GnuTLS
 * require it and verify it against that list during the handshake, which
 * is what a TLS server with client verification does.
 */
#include "tests/mockworker/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MW_PEM_MAX (1u << 20)

static int read_pem(const char *flag, const char *path, char **out, char *err, size_t err_len)
{
    if (path[0] == '\0')
        return 0;
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        int rc = -errno;
        snprintf(err, err_len, "%s: %s: %s", flag, path, strerror(-rc));
        return rc;
    }
    char *text = malloc(MW_PEM_MAX);
    size_t n = text != NULL ? fread(text, 1, MW_PEM_MAX - 1, f) : 0;
    fclose(f);
    if (text == NULL || n == 0) {
        free(text);
        snprintf(err, err_len, "%s: %s: %s", flag, path, text == NULL ? "out of memory" : "empty");
        return text == NULL ? -ENOMEM : -EINVAL;
    }
    text[n] = '\0';
    *out = text;
    return 0;
}

int mw_tls_load(struct mw_tls *t, const struct mw_options *opts, char *err, size_t err_len)
{
    atomic_init(&t->connections, 0);
    atomic_init(&t->resumed, 0);
    if ((opts->tls_cert[0] != '\0') != (opts->tls_key[0] != '\0')) {
        snprintf(err, err_len, "--tls-cert and --tls-key come together");
        return -EINVAL;
    }
    if (opts->tls_client_ca[0] != '\0' && opts->tls_cert[0] == '\0') {
        snprintf(err, err_len, "--tls-client-ca needs --tls-cert and --tls-key");
        return -EINVAL;
    }
    int rc = read_pem("--tls-cert", opts->tls_cert, &t->cert, err, err_len);
    if (rc == 0)
        rc = read_pem("--tls-key", opts->tls_key, &t->key, err, err_len);
    if (rc == 0)
        rc = read_pem("--tls-client-ca", opts->tls_client_ca, &t->client_ca, err, err_len);
    if (rc == 0 && t->cert != NULL && gnutls_session_ticket_key_generate(&t->ticket_key) < 0)
        t->ticket_key.data = NULL; /* no tickets: full handshakes only */
    if (rc != 0)
        mw_tls_fini(t);
    return rc;
}

void mw_tls_fini(struct mw_tls *t)
{
    free(t->cert);
    free(t->key);
    free(t->client_ca);
    t->cert = t->key = t->client_ca = NULL;
    gnutls_free(t->ticket_key.data);
    t->ticket_key.data = NULL;
}

bool mw_tls_is_on(const struct mw_tls *t)
{
    return t->cert != NULL;
}

unsigned mw_tls_daemon_flag(const struct mw_tls *t)
{
    return mw_tls_is_on(t) ? (unsigned)MHD_USE_TLS : 0u;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct mw_tls *t = cls;
    if (code != MHD_CONNECTION_NOTIFY_STARTED) {
        free(*socket_context); /* the "counted" flag of mw_tls_on_request */
        *socket_context = NULL;
        return;
    }
    *socket_context = calloc(1, sizeof(bool));
    atomic_fetch_add_explicit(&t->connections, 1, memory_order_relaxed);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ci == NULL || ci->tls_session == NULL)
        return;
    gnutls_session_t session = (gnutls_session_t)ci->tls_session;
    if (t->ticket_key.data != NULL)
        (void)gnutls_session_ticket_enable_server(session, &t->ticket_key);
    if (t->client_ca == NULL)
        return;
    /* Required, and checked in the handshake against MHD's trust list. */
    gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(session, NULL, 0);
}

void mw_tls_mhd_options(struct mw_tls *t, struct MHD_OptionItem *items)
{
    size_t n = 0;
    if (mw_tls_is_on(t)) {
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert};
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->key};
        if (t->client_ca != NULL)
            items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, t->client_ca};
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION,
                                             (intptr_t)(void *)on_connection, t};
    }
    items[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

void mw_tls_on_request(struct mw_tls *t, struct MHD_Connection *conn)
{
    if (!mw_tls_is_on(t))
        return;
    const union MHD_ConnectionInfo *sc =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    bool *counted = sc != NULL ? sc->socket_context : NULL;
    if (counted == NULL || *counted)
        return;
    *counted = true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ci != NULL && ci->tls_session != NULL &&
        gnutls_session_is_resumed((gnutls_session_t)ci->tls_session))
        atomic_fetch_add_explicit(&t->resumed, 1, memory_order_relaxed);
}

void mw_tls_to_json(struct mw_tls *t, json_t *obj)
{
    if (!mw_tls_is_on(t))
        return;
    uint64_t n = atomic_load_explicit(&t->connections, memory_order_relaxed);
    json_object_set_new(obj, "tls_connections", json_integer((json_int_t)n));
    n = atomic_load_explicit(&t->resumed, memory_order_relaxed);
    json_object_set_new(obj, "tls_resumed", json_integer((json_int_t)n));
}
