/*
 * Test certificates and the harness's TLS client settings (see
 * harness_tls.h). The openssl command line is used because every machine
 * that builds switchyard has it (deploy/install-deps.sh); EC P-256 keys
 * keep generation fast.
 */
#include "tests/e2e/harness_tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
    char ca[H_PATH_MAX];
    char cert[H_PATH_MAX];
    char key[H_PATH_MAX];
} h_tls_client;

static int h_tls_sh(const char *cmd)
{
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "harness_tls: failed: %s\n", cmd);
        return -EIO;
    }
    return 0;
}

static int h_tls_path(const char *name, const char *ext, char *buf, size_t len)
{
    char file[H_NAME_MAX + 8];
    snprintf(file, sizeof(file), "%s.%s", name, ext);
    return h_tmp_path(file, buf, len);
}

static int h_tls_make_ca(const char *name, char *pem, char *key, size_t len)
{
    char cmd[4 * H_PATH_MAX];
    if (h_tls_path(name, "pem", pem, len) != 0 || h_tls_path(name, "key", key, len) != 0)
        return -ENOSPC;
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
             "-subj /CN=switchyard-test-%s -keyout '%s' -out '%s' 2>/dev/null",
             name, key, pem);
    return h_tls_sh(cmd);
}

int h_tls_make_leaf(const char *name, const char *ca_pem, const char *ca_key, bool client,
                    char *pem, char *key, size_t len)
{
    char csr[H_PATH_MAX], ext[H_PATH_MAX], srl[H_PATH_MAX];
    char cmd[8 * H_PATH_MAX];
    if (h_tls_path(name, "pem", pem, len) != 0 || h_tls_path(name, "key", key, len) != 0 ||
        h_tls_path(name, "csr", csr, sizeof(csr)) != 0 ||
        h_tls_path(name, "ext", ext, sizeof(ext)) != 0 ||
        h_tls_path(name, "srl", srl, sizeof(srl)) != 0)
        return -ENOSPC;
    FILE *f = fopen(ext, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n",
            client ? "clientAuth" : "serverAuth");
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=%s "
             "-keyout '%s' -out '%s' 2>/dev/null && openssl x509 -req -days 2 -in '%s' "
             "-CA '%s' -CAkey '%s' -CAserial '%s' -CAcreateserial -extfile '%s' -out '%s' "
             "2>/dev/null",
             client ? "switchyard-test-client" : "127.0.0.1", key, csr, csr, ca_pem, ca_key, srl,
             ext, pem);
    return h_tls_sh(cmd);
}

int h_tls_make_certs(struct h_tls_certs *c)
{
    memset(c, 0, sizeof(*c));
    int rc = h_tls_make_ca("ca", c->ca, c->ca_key, H_PATH_MAX);
    if (rc == 0)
        rc = h_tls_make_ca("wrong_ca", c->wrong_ca, c->wrong_ca_key, H_PATH_MAX);
    if (rc == 0)
        rc = h_tls_make_leaf("server", c->ca, c->ca_key, false, c->server, c->server_key,
                             H_PATH_MAX);
    if (rc == 0)
        rc =
            h_tls_make_leaf("client", c->ca, c->ca_key, true, c->client, c->client_key, H_PATH_MAX);
    if (rc == 0)
        rc = h_tls_make_leaf("wrong_client", c->wrong_ca, c->wrong_ca_key, true, c->wrong_client,
                             c->wrong_client_key, H_PATH_MAX);
    return rc;
}

void h_tls_client_use(const char *ca_file, const char *cert_file, const char *key_file)
{
    snprintf(h_tls_client.ca, sizeof(h_tls_client.ca), "%s", ca_file ? ca_file : "");
    snprintf(h_tls_client.cert, sizeof(h_tls_client.cert), "%s", cert_file ? cert_file : "");
    snprintf(h_tls_client.key, sizeof(h_tls_client.key), "%s", key_file ? key_file : "");
}

void h_tls_client_setup(CURL *easy)
{
    curl_easy_setopt(easy, CURLOPT_CAINFO, h_tls_client.ca[0] ? h_tls_client.ca : NULL);
    curl_easy_setopt(easy, CURLOPT_SSLCERT, h_tls_client.cert[0] ? h_tls_client.cert : NULL);
    curl_easy_setopt(easy, CURLOPT_SSLKEY, h_tls_client.key[0] ? h_tls_client.key : NULL);
}

bool h_tls_args_https(const char *const extra[])
{
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        if (strcmp(extra[i], "--tls-cert") == 0)
            return true;
    return false;
}

int h_tls_https_url(char *url, size_t len)
{
    size_t n = strlen(url);
    if (strncmp(url, "http://", 7) != 0)
        return 0;
    if (n + 2 > len)
        return -ENOSPC;
    memmove(url + 5, url + 4, n - 4 + 1);
    url[4] = 's';
    return 0;
}

static int h_tls_raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* Bounds every blocking read and write of the handshake and answer. */
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* Sends the request and reads the answer until the server closes; the
 * status of its first line, or 0. The session goes to *session_out (when
 * not NULL) once the answer starts: a TLS 1.3 ticket arrives after the
 * handshake, before the answer, and the server closes without a
 * close_notify, after which GnuTLS gives no session. */
static long h_tls_raw_exchange(gnutls_session_t s, const char *path, gnutls_datum_t *session_out,
                               int *session_rc)
{
    char req[H_PATH_MAX + 96];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    ssize_t w;
    do
        w = gnutls_record_send(s, req, (size_t)n);
    while (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED);
    if (w != n)
        return 0;
    char head[64] = "";
    size_t got = 0;
    int64_t deadline = h_now_ms() + 5000;
    for (;;) {
        char buf[4096];
        ssize_t r = gnutls_record_recv(s, buf, sizeof(buf));
        /* AGAIN also follows a post-handshake message (a TLS 1.3 ticket). */
        if ((r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) && h_now_ms() < deadline)
            continue;
        if (r <= 0)
            break; /* EOF, an alert, or the 5 s timeout */
        if (session_out != NULL && session_out->data == NULL)
            *session_rc = gnutls_session_get_data2(s, session_out);
        size_t take = (size_t)r < sizeof(head) - 1 - got ? (size_t)r : sizeof(head) - 1 - got;
        memcpy(head + got, buf, take);
        got += take;
        head[got] = '\0';
    }
    long status = 0;
    if (strncmp(head, "HTTP/1.", 7) == 0 && got >= 12)
        status = strtol(head + 9, NULL, 10);
    return status;
}

int h_tls_raw_get(uint16_t port, const char *path, const struct h_tls_raw *opt,
                  struct h_tls_raw_result *res)
{
    memset(res, 0, sizeof(*res));
    if (opt->session_out != NULL)
        *opt->session_out = (gnutls_datum_t){NULL, 0};
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_session_t s = NULL;
    int fd = -1, rc = -EINVAL;
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return -ENOMEM;
    if (gnutls_certificate_set_x509_trust_file(cred, opt->ca, GNUTLS_X509_FMT_PEM) <= 0)
        goto out_free;
    if (opt->cert != NULL &&
        gnutls_certificate_set_x509_key_file(cred, opt->cert, opt->key, GNUTLS_X509_FMT_PEM) < 0)
        goto out_free;
    if (gnutls_init(&s, GNUTLS_CLIENT) < 0)
        goto out_free;
    const char *prio = opt->priorities != NULL ? opt->priorities : "NORMAL";
    if (gnutls_priority_set_direct(s, prio, NULL) < 0 ||
        gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred) < 0)
        goto out_free;
    gnutls_session_set_verify_cert(s, NULL, 0); /* the chain; the test's certs name an IP */
    if (opt->resume != NULL && gnutls_session_set_data(s, opt->resume->data, opt->resume->size) < 0)
        goto out_free;
    fd = h_tls_raw_connect(port);
    if (fd < 0) {
        rc = fd;
        goto out_free;
    }
    gnutls_transport_set_int(s, fd);
    gnutls_handshake_set_timeout(s, 5000);
    int hs;
    do
        hs = gnutls_handshake(s);
    while (hs < 0 && gnutls_error_is_fatal(hs) == 0);
    res->handshake = hs < 0 ? hs : 0;
    rc = 0;
    if (hs < 0)
        goto out_free;
    res->resumed = gnutls_session_is_resumed(s) != 0;
    snprintf(res->version, sizeof(res->version), "%s",
             gnutls_protocol_get_name(gnutls_protocol_get_version(s)));
    const char *suite = gnutls_ciphersuite_get(s);
    snprintf(res->suite, sizeof(res->suite), "%s", suite != NULL ? suite : "?");
    int session_rc = 0;
    res->status = h_tls_raw_exchange(s, path, opt->session_out, &session_rc);
    if (session_rc < 0)
        rc = -EIO;
out_free:
    if (s != NULL)
        gnutls_deinit(s);
    if (fd >= 0)
        close(fd);
    gnutls_certificate_free_credentials(cred);
    return rc;
}
