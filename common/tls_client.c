/*
 * dataplane.upstream_tls applied to curl handles (contract in tls_client.h).
 * Every option is set on every call, also those at their default, so a
 * handle reused with another config (or a test's) never keeps a stale one.
 */
#include "common/tls_client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int tls_client_apply(CURL *easy, const struct cfg_upstream_tls *t)
{
    CURLcode rc = CURLE_OK;
    bool has_cert = t->client_cert_file[0] != '\0';

    rc |= curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(easy, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    rc |= curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, t->verify ? 1L : 0L);
    rc |= curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, t->verify ? 2L : 0L);
    /* NULL restores curl's built-in bundle (the system's store). */
    rc |= curl_easy_setopt(easy, CURLOPT_CAINFO, t->ca_file[0] != '\0' ? t->ca_file : NULL);
    rc |= curl_easy_setopt(easy, CURLOPT_SSLCERT, has_cert ? t->client_cert_file : NULL);
    rc |= curl_easy_setopt(easy, CURLOPT_SSLKEY, has_cert ? t->client_key_file : NULL);
    rc |= curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
    rc |= curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
    rc |= curl_easy_setopt(easy, CURLOPT_SSL_SESSIONID_CACHE, 1L);
    return rc == CURLE_OK ? 0 : -EINVAL;
}

static int check_file(const char *key, const char *path, char *err, size_t err_len)
{
    int fd;

    if (path[0] == '\0')
        return 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, err_len, "dataplane.upstream_tls.%s: %s: %s", key, path, strerror(-rc));
        return rc;
    }
    close(fd);
    return 0;
}

int tls_client_check(const struct cfg_upstream_tls *t, char *err, size_t err_len)
{
    int rc = check_file("ca_file", t->ca_file, err, err_len);

    if (rc == 0)
        rc = check_file("client_cert_file", t->client_cert_file, err, err_len);
    if (rc == 0)
        rc = check_file("client_key_file", t->client_key_file, err, err_len);
    return rc;
}

CURLSH *tls_client_share_create(void)
{
    CURLSH *share = curl_share_init();

    if (share == NULL)
        return NULL;
    if (curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
        curl_share_cleanup(share);
        return NULL;
    }
    return share;
}

void tls_client_share_destroy(CURLSH *share)
{
    if (share != NULL)
        curl_share_cleanup(share);
}

bool tls_client_is_tls_error(CURLcode result)
{
    switch (result) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED:
        return true;
    default:
        return false;
    }
}
