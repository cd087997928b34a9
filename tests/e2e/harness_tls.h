/*
 * TLS for end-to-end tests: certificates made at test time with the
 * openssl command (into the test's temporary directory, never checked in,
 * so none expires or leaks), and the client side of the harness's HTTP
 * helpers (h_http, h_async_start, h_wait_http_ok, /mock/stats) for
 * https:// URLs.
 *
 * h_tls_make_certs writes, in h_tmpdir():
 *   ca.pem, ca.key            the test CA
 *   server.pem, server.key    signed by ca, CN and IP SAN 127.0.0.1
 *   client.pem, client.key    signed by ca, for mTLS (clientAuth)
 *   wrong_ca.pem, wrong_ca.key  another CA, which signed none of them
 *   wrong_client.pem, wrong_client.key  a client certificate of wrong_ca
 *
 * h_tls_raw_get is a second client, GnuTLS's own API, for what curl does
 * not let a test choose: the exact priority string (cipher suites and
 * versions offered), and a saved session to resume.
 *
 * Threading: the client settings are process-wide, set by the test's own
 * thread before it starts requests (h_tls_client_use), cleared by
 * h_tls_client_use(NULL, NULL, NULL).
 */
#ifndef SY_TESTS_E2E_HARNESS_TLS_H
#define SY_TESTS_E2E_HARNESS_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>
#include <gnutls/gnutls.h>

#include "tests/e2e/harness.h"

struct h_tls_certs {
    char ca[H_PATH_MAX], ca_key[H_PATH_MAX];
    char server[H_PATH_MAX], server_key[H_PATH_MAX];
    char client[H_PATH_MAX], client_key[H_PATH_MAX];
    char wrong_ca[H_PATH_MAX], wrong_ca_key[H_PATH_MAX];
    char wrong_client[H_PATH_MAX], wrong_client_key[H_PATH_MAX];
};

/* Makes the set above (about 100 ms of openssl). 0, or -EIO with the
 * failing command on stderr. */
int h_tls_make_certs(struct h_tls_certs *c);

/* One more certificate for 127.0.0.1 signed by ca_pem/ca_key, as
 * NAME.pem and NAME.key in h_tmpdir() (e.g. a rotated server certificate).
 * 0 or -EIO. */
int h_tls_make_leaf(const char *name, const char *ca_pem, const char *ca_key, bool client,
                    char *pem, char *key, size_t len);

/* The harness's client trusts ca_file (NULL: curl's default store) and
 * presents cert_file/key_file (NULL: no client certificate) on https://
 * URLs from now on. */
void h_tls_client_use(const char *ca_file, const char *cert_file, const char *key_file);

/* Applies the settings above to a harness handle (harness_http.c). */
void h_tls_client_setup(CURL *easy);

/* Whether a mock's extra arguments make it serve HTTPS (--tls-cert). */
bool h_tls_args_https(const char *const extra[]);

/* What h_tls_raw_get offers. */
struct h_tls_raw {
    const char *priorities;       /* GnuTLS priority string; NULL = "NORMAL" */
    const char *ca;               /* the server's CA (its chain is verified) */
    const char *cert, *key;       /* client certificate, or NULL */
    const gnutls_datum_t *resume; /* a session from an earlier call to offer, or NULL */
    gnutls_datum_t *session_out;  /* gets this one (gnutls_free its data), or NULL */
};

/* What came of it. */
struct h_tls_raw_result {
    int handshake;    /* 0, or GnuTLS's error code */
    bool resumed;     /* the server resumed the offered session */
    long status;      /* the HTTP status, 0 for none (closed, alert) */
    char version[16]; /* "TLS1.2", ... ("" without a handshake) */
    char suite[64];   /* the negotiated cipher suite ("" without one) */
};

/* One GET of path at https://127.0.0.1:port over a connection of its own,
 * with every wait bounded (5 s). 0 whatever the server did (see *res), or
 * a negative errno when the client could not even try. */
int h_tls_raw_get(uint16_t port, const char *path, const struct h_tls_raw *opt,
                  struct h_tls_raw_result *res);

/* Rewrites an "http://..." URL in place to "https://...". 0 or -ENOSPC. */
int h_tls_https_url(char *url, size_t len);

#endif
