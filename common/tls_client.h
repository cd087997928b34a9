/*
 * How a curl handle reaches an https:// worker: the one function every
 * curl user of both daemons calls on its easy handles (the data plane's
 * forwarded requests, the control plane's health probes, and whoever
 * scrapes a worker's /metrics or calls a discovery API), so that
 * dataplane.upstream_tls means the same thing on every path to a worker.
 * A handle set up elsewhere would judge a worker by another trust store,
 * or worse talk to it without checking its certificate.
 *
 * What it sets: the protocols (http and https only, also on redirects),
 * TLS 1.2 at least, the CA bundle (or the system's), peer and host-name
 * verification (on unless upstream_tls.verify is false) and the client
 * certificate and key for workers that want mTLS. A certificate failure
 * is an error of the transfer (tls_client_is_tls_error): there is no
 * fallback to plain HTTP, and the URL's scheme alone decides whether TLS
 * is spoken.
 *
 * Reuse: connections are kept in the multi handle's cache as for plain
 * HTTP, so a second request to a worker normally needs no handshake at
 * all. When a connection does have to be made again (the worker closed
 * it, the pool was full), the TLS session cache lets it resume instead
 * of doing a full handshake; that cache is per easy handle in libcurl,
 * so users that pool several easy handles attach them to one share
 * (tls_client_share_create) holding the sessions of one thread.
 *
 * Threading: tls_client_apply touches only the given handle; a share is
 * used by one thread (it has no lock callbacks).
 */
#ifndef SY_COMMON_TLS_CLIENT_H
#define SY_COMMON_TLS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "common/config.h"

/*
 * Sets t's TLS options (and the allowed protocols) on easy; t is read now,
 * its strings are copied by curl. Call it once per handle, again after a
 * curl_easy_reset. Returns 0, or -EINVAL when curl refused an option (a
 * libcurl built without TLS).
 */
int tls_client_apply(CURL *easy, const struct cfg_upstream_tls *t);

/*
 * Checks at start that the files t names can be read, so a typo fails the
 * daemon with a message instead of every https:// request later. 0, or the
 * open() errno (negative) with "dataplane.upstream_tls.KEY: PATH: reason"
 * in err.
 */
int tls_client_check(const struct cfg_upstream_tls *t, char *err, size_t err_len);

/* A share of TLS sessions for the easy handles of one thread (set with
 * CURLOPT_SHARE), or NULL without memory: handles then resume only their
 * own sessions. tls_client_share_destroy(NULL) is a no-op; destroy it
 * after every handle using it was cleaned up. */
CURLSH *tls_client_share_create(void);
void tls_client_share_destroy(CURLSH *share);

/* Whether a transfer's result is a TLS failure (handshake, certificate,
 * verification, client certificate): a kind of upstream error of its own. */
bool tls_client_is_tls_error(CURLcode result);

#endif
