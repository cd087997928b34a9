/*
 * Unit tests of TLS set-up: the data plane's server credentials
 * (dataplane/http/tls_server.h: load, refuse a bad certificate on reload and
 * keep the old one, min_version's priorities) and the client side
 * (common/tls_client.h: file checks at start, which curl results are TLS
 * errors, options a handle accepts). Certificates are made with the openssl
 * command in a temporary directory.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/tls_client.h"
#include "dataplane/http/tls_server.h"

static char dir[64];

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    assert_int_equal(system(cmd), 0);
}

static void path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* ca.pem, good.pem/key (127.0.0.1), other.pem/key, expired.pem (good.key's). */
static int make_certs(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sy-unit-tls-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    sh("cd %s && openssl req -x509 %s -days 2 -subj /CN=ca -keyout ca.key -out ca.pem 2>/dev/null "
       "&& printf 'subjectAltName=IP:127.0.0.1\\n' > ext "
       "&& openssl req %s -subj /CN=127.0.0.1 -keyout good.key -out good.csr 2>/dev/null "
       "&& openssl x509 -req -days 2 -in good.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
       "-extfile ext -out good.pem 2>/dev/null "
       "&& openssl x509 -req -days -1 -in good.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
       "-extfile ext -out expired.pem 2>/dev/null "
       "&& openssl req -x509 %s -days 2 -subj /CN=other -keyout other.key -out other.pem "
       "2>/dev/null",
       dir, ec, ec, ec);
    return 0;
}

static int remove_certs(void **state)
{
    (void)state;
    sh("rm -rf %s", dir);
    return 0;
}

static void tls_cfg(struct cfg_dataplane_tls *t, const char *cert, const char *key, const char *ca)
{
    memset(t, 0, sizeof(*t));
    path(t->cert_file, sizeof(t->cert_file), cert);
    path(t->key_file, sizeof(t->key_file), key);
    if (ca != NULL)
        path(t->client_ca_file, sizeof(t->client_ca_file), ca);
    snprintf(t->min_version, sizeof(t->min_version), "1.2");
}

static void test_server_off_without_cert(void **state)
{
    (void)state;
    struct cfg_dataplane_tls t = {.min_version = "1.2"};
    struct dp_tls *tls = (struct dp_tls *)1;
    char err[256] = "";
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    assert_null(tls);
    assert_int_equal(dp_tls_daemon_flag(NULL), 0);
    struct MHD_OptionItem items[DP_TLS_OPTIONS_MAX];
    dp_tls_mhd_options(NULL, items);
    assert_int_equal(items[0].option, MHD_OPTION_END);
    assert_null(dp_tls_conn_start(NULL, NULL));
}

static void test_server_refuses_bad_start(void **state)
{
    (void)state;
    struct cfg_dataplane_tls t;
    struct dp_tls *tls = NULL;
    char err[512];
    tls_cfg(&t, "missing.pem", "good.key", NULL);
    assert_int_not_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    assert_null(tls);
    assert_non_null(strstr(err, "dataplane.tls.cert_file"));
    tls_cfg(&t, "good.pem", "other.key", NULL); /* not its key */
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), -EINVAL);
    tls_cfg(&t, "expired.pem", "good.key", NULL);
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "expired"));
    tls_cfg(&t, "good.pem", "good.key", "missing-ca.pem");
    assert_int_not_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "client_ca_file"));
}

/* A reload that fails leaves the current credentials; one that loads
 * replaces them. The config is re-read from the same paths. */
static void test_server_reload(void **state)
{
    (void)state;
    struct cfg_dataplane_tls t;
    struct dp_tls *tls = NULL;
    char err[512];
    char from[300], to[300];
    tls_cfg(&t, "live.pem", "live.key", "ca.pem");
    sh("cp %s/good.pem %s/live.pem && cp %s/good.key %s/live.key", dir, dir, dir, dir);
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    assert_non_null(tls);
    assert_int_equal(dp_tls_daemon_flag(tls), MHD_USE_TLS);
    struct MHD_OptionItem items[DP_TLS_OPTIONS_MAX];
    dp_tls_mhd_options(tls, items);
    int n = 0;
    while (items[n].option != MHD_OPTION_END)
        n++;
    assert_int_equal(n, 4); /* cert, key, trust, priorities */
    assert_non_null(strstr(items[3].ptr_value, "+VERS-TLS1.2"));

    path(from, sizeof(from), "other.pem");
    path(to, sizeof(to), "live.pem");
    sh("cp %s %s", from, to); /* another certificate, the old key */
    assert_int_equal(dp_tls_reload(tls, err, sizeof(err)), -EINVAL);
    sh("cp %s/expired.pem %s/live.pem", dir, dir);
    assert_int_equal(dp_tls_reload(tls, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "expired"));
    sh("printf 'garbage' > %s/live.pem", dir);
    assert_int_not_equal(dp_tls_reload(tls, err, sizeof(err)), 0);
    sh("printf -- '-----BEGIN CERTIFICATE-----\\nnot one\\n' > %s/live.pem", dir);
    assert_int_not_equal(dp_tls_reload(tls, err, sizeof(err)), 0);
    sh("cp %s/other.pem %s/live.pem && cp %s/other.key %s/live.key", dir, dir, dir, dir);
    assert_int_equal(dp_tls_reload(tls, err, sizeof(err)), 0);
    assert_int_equal(dp_tls_reload(tls, err, sizeof(err)), 0); /* retires one more */
    dp_tls_destroy(tls);
    dp_tls_destroy(NULL);
}

static void test_server_min_version_13(void **state)
{
    (void)state;
    struct cfg_dataplane_tls t;
    struct dp_tls *tls = NULL;
    char err[512];
    tls_cfg(&t, "good.pem", "good.key", NULL);
    snprintf(t.min_version, sizeof(t.min_version), "1.3");
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    struct MHD_OptionItem items[DP_TLS_OPTIONS_MAX];
    dp_tls_mhd_options(tls, items);
    assert_int_equal(items[2].option, MHD_OPTION_HTTPS_PRIORITIES);
    /* The default string, then the versions below the minimum removed. */
    assert_true(strncmp(items[2].ptr_value, DP_TLS_DEFAULT_PRIORITIES,
                        strlen(DP_TLS_DEFAULT_PRIORITIES)) == 0);
    assert_non_null(strstr(items[2].ptr_value, ":-VERS-TLS1.2"));
    dp_tls_destroy(tls);

    /* A configured string replaces the default; one GnuTLS rejects fails. */
    snprintf(t.priorities, sizeof(t.priorities), "NORMAL:-VERS-TLS1.3");
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), 0);
    dp_tls_mhd_options(tls, items);
    assert_true(strncmp(items[2].ptr_value, "NORMAL:-VERS-TLS1.3:", 20) == 0);
    dp_tls_destroy(tls);
    snprintf(t.priorities, sizeof(t.priorities), "NORMAL:+BOGUS");
    assert_int_equal(dp_tls_create(&t, &tls, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "at character 8 ('+BOGUS')"));
}

static void test_client_check_files(void **state)
{
    (void)state;
    struct cfg_upstream_tls t = {.verify = true};
    char err[512] = "";
    assert_int_equal(tls_client_check(&t, err, sizeof(err)), 0);
    path(t.ca_file, sizeof(t.ca_file), "ca.pem");
    path(t.client_cert_file, sizeof(t.client_cert_file), "good.pem");
    path(t.client_key_file, sizeof(t.client_key_file), "nope.key");
    assert_int_equal(tls_client_check(&t, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "dataplane.upstream_tls.client_key_file"));
    path(t.client_key_file, sizeof(t.client_key_file), "good.key");
    assert_int_equal(tls_client_check(&t, err, sizeof(err)), 0);

    CURL *e = curl_easy_init();
    assert_non_null(e);
    assert_int_equal(tls_client_apply(e, &t), 0);
    t.verify = false;
    t.ca_file[0] = t.client_cert_file[0] = t.client_key_file[0] = '\0';
    assert_int_equal(tls_client_apply(e, &t), 0);
    curl_easy_cleanup(e);
    CURLSH *share = tls_client_share_create();
    assert_non_null(share);
    tls_client_share_destroy(share);
    tls_client_share_destroy(NULL);
}

static void test_client_tls_errors(void **state)
{
    (void)state;
    assert_true(tls_client_is_tls_error(CURLE_PEER_FAILED_VERIFICATION));
    assert_true(tls_client_is_tls_error(CURLE_SSL_CONNECT_ERROR));
    assert_true(tls_client_is_tls_error(CURLE_SSL_CERTPROBLEM));
    assert_false(tls_client_is_tls_error(CURLE_OK));
    assert_false(tls_client_is_tls_error(CURLE_COULDNT_CONNECT));
    assert_false(tls_client_is_tls_error(CURLE_RECV_ERROR));
    assert_false(tls_client_is_tls_error(CURLE_OPERATION_TIMEDOUT));
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_off_without_cert),
        cmocka_unit_test(test_server_refuses_bad_start),
        cmocka_unit_test(test_server_reload),
        cmocka_unit_test(test_server_min_version_13),
        cmocka_unit_test(test_client_check_files),
        cmocka_unit_test(test_client_tls_errors),
    };
    int rc = cmocka_run_group_tests(tests, make_certs, remove_certs);
    curl_global_cleanup();
    return rc;
}
