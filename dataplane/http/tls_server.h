/*
 * HTTPS on the data plane's listener (dataplane.tls): libmicrohttpd's
 * GnuTLS, with certificates that can be replaced while the daemon serves.
 *
 * libmicrohttpd 0.9.75 reads its certificate once, at daemon start, and
 * has no call to swap it; its certificate callback returns only the
 * certificate, not the client CA. So the credentials are ours: a GnuTLS
 * credentials object (certificate, key, client CA) that each new
 * connection gets from the listener's connection-start callback, before
 * its handshake (dp_tls_conn_start), replacing the ones libmicrohttpd set
 * up from the same files at start. A reload (SIGHUP) builds a new object
 * from the files and, only when all of it loaded and the certificate is
 * current, makes it the one new connections get; connections already open
 * keep theirs until they close. A bad file is refused with a message and
 * changes nothing. Restarting daemons on the listening socket was the
 * other way; it would have to hand over every kept-alive connection and
 * parked stream, which this does not touch at all.
 *
 * Session tickets are on: a client that reconnects resumes its session
 * (TLS 1.2 ticket or TLS 1.3 PSK, no certificate exchange) instead of a
 * full handshake. GnuTLS verifies no client certificate on a resumption,
 * so a ticket must never outlive the files that verified it: each
 * generation of credentials has its own ticket key, made when it loads,
 * kept in memory only and never written. A reload therefore invalidates
 * every ticket issued before it (their clients do one full handshake,
 * against the new client CA), and so does a hot restart. There is no
 * session cache to drop: libmicrohttpd sets no GnuTLS session database, so
 * session-ID resumption is off.
 *
 * With client_ca_file every full handshake requires a client certificate
 * that CA signed (GnuTLS verifies it during the handshake): a client
 * without one gets a TLS alert and no HTTP answer at all.
 *
 * The cipher suites: dataplane.tls.priorities, or DP_TLS_DEFAULT_PRIORITIES
 * when it is "", with the versions below min_version removed after it. The
 * key file must be closed to other users (common/secret_file.h), at start
 * and on reload.
 *
 * Threading: dp_tls_conn_start/end run on every loop's thread; reload and
 * destroy on the main thread (destroy after the loops stopped). The
 * current credentials and their reference counts are under one mutex,
 * taken once per connection, never per request.
 */
#ifndef SY_DATAPLANE_TLS_SERVER_H
#define SY_DATAPLANE_TLS_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "common/config.h"

struct dp_tls;

/* AEAD suites only (AES-GCM, ChaCha20-Poly1305) with ECDHE or DHE key
 * exchange, TLS 1.3 and 1.2: no CBC, no SHA-1 or SHA-2 MACs, no static RSA
 * key exchange (no forward secrecy). docs/security.md shows it. */
#define DP_TLS_DEFAULT_PRIORITIES                                                                  \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+CHACHA20-POLY1305:"      \
    "+AES-128-GCM:-MAC-ALL:+AEAD:-RSA"

/* Options dp_tls_mhd_options writes, MHD_OPTION_END included. */
#define DP_TLS_OPTIONS_MAX 8

/*
 * Loads t's files (borrowed: t must outlive the result) and checks its
 * priority string. *out is NULL when TLS is off (no cert_file). 0, or
 * -errno with "dataplane.tls.KEY: PATH: reason" (or GnuTLS's complaint
 * about the priority string, with its position) in err.
 */
int dp_tls_create(const struct cfg_dataplane_tls *t, struct dp_tls **out, char *err,
                  size_t err_len);
void dp_tls_destroy(struct dp_tls *tls);

/* Re-reads the files. 0: new connections get the new certificate. Else
 * -errno with the reason in err, and the previous one keeps serving. */
int dp_tls_reload(struct dp_tls *tls, char *err, size_t err_len);

/* MHD_USE_TLS, or 0 for NULL; and MHD's options (to pass with
 * MHD_OPTION_ARRAY; only MHD_OPTION_END for NULL). */
unsigned dp_tls_daemon_flag(const struct dp_tls *tls);
void dp_tls_mhd_options(struct dp_tls *tls, struct MHD_OptionItem items[DP_TLS_OPTIONS_MAX]);

/* A connection starts (before its handshake): it gets the current
 * credentials. Returns what dp_tls_conn_end takes back (NULL: nothing). */
void *dp_tls_conn_start(struct dp_tls *tls, struct MHD_Connection *conn);
void dp_tls_conn_end(struct dp_tls *tls, void *held);

#endif
