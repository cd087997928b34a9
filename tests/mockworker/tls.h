/*
 * HTTPS for the mock worker (--tls-cert, --tls-key, --tls-client-ca), as a
 * vLLM behind TLS serves it (uvicorn's --ssl-certfile / --ssl-keyfile /
 * --ssl-ca-certs with client certificates required): libmicrohttpd's GnuTLS
 * with the certificate and key read into memory at start. With a client CA
 * a client must present a certificate that CA signed, checked during the
 * handshake: a client without one, or with one from another CA, never gets
 * an HTTP answer.
 *
 * connections counts the TLS connections accepted (one handshake each), so
 * a test can tell a router that reuses its connections from one that opens
 * a new one per request; resumed counts those whose handshake resumed an
 * earlier session from a session ticket (as uvicorn's OpenSSL issues them
 * by default), so a test can tell a client that resumes from one that
 * does a full handshake on every new connection.
 *
 * Threading: loaded in main before the loops start; read-only after, but
 * for connections (a relaxed atomic, bumped by every loop).
 */
#ifndef SY_TESTS_MOCKWORKER_TLS_H
#define SY_TESTS_MOCKWORKER_TLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gnutls/gnutls.h>
#include <jansson.h>
#include <microhttpd.h>

#include "tests/mockworker/options.h"

/* The PEM texts (owned; NULL = not given). Caller storage, zeroed = off. */
struct mw_tls {
    char *cert;
    char *key;
    char *client_ca;
    gnutls_datum_t ticket_key;
    _Atomic uint64_t connections;
    _Atomic uint64_t resumed;
};

/* Reads the files opts names. 0 (also when TLS is off), or -errno with
 * "--tls-cert: PATH: reason" in err. */
int mw_tls_load(struct mw_tls *t, const struct mw_options *opts, char *err, size_t err_len);
void mw_tls_fini(struct mw_tls *t);

bool mw_tls_is_on(const struct mw_tls *t);

/* The daemon flag (MHD_USE_TLS or 0), and MHD's options for it in items
 * (at most MW_TLS_OPTIONS_MAX, ending with MHD_OPTION_END), to pass with
 * MHD_OPTION_ARRAY. t must outlive the daemon. */
#define MW_TLS_OPTIONS_MAX 8
unsigned mw_tls_daemon_flag(const struct mw_tls *t);
void mw_tls_mhd_options(struct mw_tls *t, struct MHD_OptionItem *items);

/* A request arrived on conn (the access handler's first call): counts its
 * connection's resumption once. */
void mw_tls_on_request(struct mw_tls *t, struct MHD_Connection *conn);

/* Adds "tls_connections" and "tls_resumed" to obj (only when TLS is on). */
void mw_tls_to_json(struct mw_tls *t, json_t *obj);

#endif
