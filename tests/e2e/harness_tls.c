/*
 * Test certificates and the harness's TLS client settings (see
 * harness_tls.h). The openssl command line is used because every machine
 * that builds switchyard has it (deploy/install-deps.sh); EC P-256 keys
 * keep generation fast.
 */
#include "tests/e2e/harness_tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
