/*
 * End-to-end tests of the data plane's client-facing TLS against the
 * attacks of docs/security.md (review II), each through the real daemons:
 *
 *  - mTLS and session resumption: a client that made a TLS 1.2 session
 *    with a certificate of the old client CA resumes it after the CA was
 *    replaced and the data plane reloaded (SIGHUP). GnuTLS does not verify
 *    a client certificate again on a resumption, so a ticket that survived
 *    the reload would have been served with the old CA's trust. Also: a
 *    reload with unchanged files still ends every earlier session.
 *  - Cipher suites: a TLS 1.2 client offering only CBC suites with SHA-1
 *    MACs is refused in the handshake; AEAD suites and TLS 1.3 serve;
 *    dataplane.tls.priorities replaces the default, min_version still
 *    applies on top of it, and a string GnuTLS rejects stops the start
 *    with GnuTLS's position.
 *  - The private key file: one other users may read (0644) is refused at
 *    start and on reload (the old certificate keeps serving), as the token
 *    files are.
 *
 * The client is GnuTLS's own API (harness_tls.h, h_tls_raw_get), so a test
 * chooses the exact suites offered and the session to resume. Certificates
 * are made per test (harness_tls.h). Every wait has a deadline.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

static const char *const TLS12 = "NORMAL:-VERS-ALL:+VERS-TLS1.2";
static const char *const TLS13 = "NORMAL:-VERS-ALL:+VERS-TLS1.3";
/* What a client stuck on 2010's suites offers: CBC with HMAC-SHA1 only. */
static const char *const TLS12_CBC_SHA1 =
    "NORMAL:-VERS-ALL:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-CBC:+AES-256-CBC:-MAC-ALL:+SHA1";

static void tls_yaml(char *buf, size_t len, const char *cert, const char *key,
                     const char *client_ca, const char *more)
{
    int n = snprintf(buf, len, "tls:\n  cert_file: %s\n  key_file: %s\n", cert, key);
    if (client_ca != NULL)
        n += snprintf(buf + n, len - (size_t)n, "  client_ca_file: %s\n", client_ca);
    if (more != NULL)
        snprintf(buf + n, len - (size_t)n, "%s", more);
}

/* Lines of p's log that contain needle. */
static int log_count(const struct h_proc *p, const char *needle)
{
    FILE *f = fopen(p->log_path, "re");
    if (f == NULL)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

struct log_cond {
    const struct h_proc *p;
    const char *needle;
    int want;
};

static bool log_reached(void *arg)
{
    const struct log_cond *c = arg;
    return log_count(c->p, c->needle) >= c->want;
}

/* SIGHUP, then waits for the data plane to say it applied the files. */
static void reload_applied(struct h_fleet *f)
{
    static const char done[] = "received SIGHUP: TLS certificate reloaded";
    struct log_cond c = {f->dp, done, log_count(f->dp, done) + 1};
    assert_int_equal(h_proc_signal(f->dp, SIGHUP), 0);
    f->dp->expected = false; /* h_proc_signal expects an exit; SIGHUP is not one */
    assert_int_equal(h_wait_until(log_reached, &c, 5000), 0);
}

static void reload_refused(struct h_fleet *f, const char *why)
{
    static const char refused[] = "new TLS certificate refused";
    struct log_cond c = {f->dp, refused, log_count(f->dp, refused) + 1};
    assert_int_equal(h_proc_signal(f->dp, SIGHUP), 0);
    f->dp->expected = false;
    assert_int_equal(h_wait_until(log_reached, &c, 5000), 0);
    if (!h_proc_log_contains(f->dp, why)) {
        h_proc_print_log(f->dp, 20);
        fail_msg("the data plane's log lacks \"%s\"", why);
    }
}

static struct h_tls_raw_result get(const struct h_fleet *f, const struct h_tls_raw *opt)
{
    struct h_tls_raw_result r;
    assert_int_equal(h_tls_raw_get(f->cfg.dataplane_port, "/health", opt, &r), 0);
    return r;
}

static int copy_file(const char *from, const char *to)
{
    char cmd[5 * H_PATH_MAX];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s.new' && mv '%s.new' '%s'", from, to, to, to);
    return system(cmd) == 0 ? 0 : -EIO;
}

/* security 15: a session of the old client CA must not survive a reload. */
static void resume_across_ca_change(const char *version)
{
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char client_ca[H_PATH_MAX], extra[1024];
    assert_int_equal(h_tmp_path("client_ca.pem", client_ca, sizeof(client_ca)), 0);
    assert_int_equal(copy_file(c.ca, client_ca), 0);
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, client_ca, NULL);
    h_tls_client_use(c.ca, c.client, c.client_key); /* the harness's readiness check */
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});

    /* A full handshake with CA1's client certificate; the session kept. */
    gnutls_datum_t saved = {NULL, 0};
    struct h_tls_raw ca1 = {.priorities = version,
                            .ca = c.ca,
                            .cert = c.client,
                            .key = c.client_key,
                            .session_out = &saved};
    struct h_tls_raw_result r = get(&f, &ca1);
    assert_int_equal(r.handshake, 0);
    assert_int_equal(r.status, 200);
    assert_false(r.resumed);
    assert_non_null(saved.data);
    /* Resumption works while nothing changed: the attack below is real. */
    gnutls_datum_t again = {NULL, 0};
    struct h_tls_raw resume1 = {.priorities = version,
                                .ca = c.ca,
                                .cert = c.client,
                                .key = c.client_key,
                                .resume = &saved,
                                .session_out = &again};
    r = get(&f, &resume1);
    assert_int_equal(r.status, 200);
    assert_true(r.resumed);
    gnutls_free(again.data);

    /* The operator replaces the client CA and reloads. */
    assert_int_equal(copy_file(c.wrong_ca, client_ca), 0);
    reload_applied(&f);

    /* The old session is not resumed, and CA1's certificate no longer
     * passes the full handshake: no answer at all. */
    struct h_tls_raw resume = {
        .priorities = version, .ca = c.ca, .cert = c.client, .key = c.client_key, .resume = &saved};
    r = get(&f, &resume);
    assert_int_equal(r.status, 0);
    assert_false(r.resumed);
    gnutls_free(saved.data);

    /* CA2's clients are served; and a reload that changes no file still
     * ends the sessions made before it (every reload makes a new ticket
     * key), which then cost one full handshake. */
    saved = (gnutls_datum_t){NULL, 0};
    struct h_tls_raw ca2 = {.priorities = version,
                            .ca = c.ca,
                            .cert = c.wrong_client,
                            .key = c.wrong_client_key,
                            .session_out = &saved};
    r = get(&f, &ca2);
    assert_int_equal(r.status, 200);
    reload_applied(&f);
    ca2.resume = &saved;
    ca2.session_out = NULL;
    r = get(&f, &ca2);
    assert_int_equal(r.handshake, 0);
    assert_false(r.resumed);
    assert_int_equal(r.status, 200);
    gnutls_free(saved.data);
    /* Refused clients never reached a worker: /health is the router's. */
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

static void test_tls12_resumption_after_client_ca_change(void **state)
{
    (void)state;
    resume_across_ca_change(TLS12);
}

static void test_tls13_resumption_after_client_ca_change(void **state)
{
    (void)state;
    resume_across_ca_change(TLS13);
}

/* security 22: no CBC, no SHA-1 MAC in TLS 1.2 by default. */
static void test_cbc_sha1_suites_refused(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, NULL, NULL);
    h_tls_client_use(c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});

    struct h_tls_raw cbc = {.priorities = TLS12_CBC_SHA1, .ca = c.ca};
    struct h_tls_raw_result r = get(&f, &cbc);
    assert_int_not_equal(r.handshake, 0);
    assert_int_equal(r.status, 0);

    struct h_tls_raw aead = {.priorities = TLS12, .ca = c.ca};
    r = get(&f, &aead);
    assert_int_equal(r.handshake, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.version, "TLS1.2");
    assert_non_null(strstr(r.suite, "_GCM_"));

    struct h_tls_raw tls13 = {.priorities = TLS13, .ca = c.ca};
    r = get(&f, &tls13);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.version, "TLS1.3");
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

/* A configured string replaces the default; min_version applies on top. */
static void test_custom_priorities(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char extra[1024];
    /* An operator who must serve an old client: CBC back, TLS 1.3 off. */
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, NULL,
             "  priorities: \"NORMAL:-VERS-TLS1.3\"\n");
    h_tls_client_use(c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    struct h_tls_raw cbc = {.priorities = TLS12_CBC_SHA1, .ca = c.ca};
    struct h_tls_raw_result r = get(&f, &cbc);
    assert_int_equal(r.handshake, 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.suite, "_CBC_"));
    struct h_tls_raw tls13 = {.priorities = TLS13, .ca = c.ca};
    r = get(&f, &tls13);
    assert_int_not_equal(r.handshake, 0);
    h_fleet_stop(&f);

    /* min_version 1.3 on top of a string that allows TLS 1.2. */
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, NULL,
             "  priorities: \"NORMAL\"\n  min_version: \"1.3\"\n");
    struct h_fleet f2;
    h_fleet_start(&f2, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    struct h_tls_raw tls12 = {.priorities = TLS12, .ca = c.ca};
    r = get(&f2, &tls12);
    assert_int_not_equal(r.handshake, 0);
    r = get(&f2, &tls13);
    assert_int_equal(r.status, 200);
    h_fleet_stop(&f2);
    h_tls_client_use(NULL, NULL, NULL);
}

/* The data plane started on config must exit non-zero, its log saying want. */
static void assert_dataplane_refuses(const char *config, const char *want)
{
    struct h_proc *p = NULL;
    assert_int_equal(h_start_dataplane(config, &p), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(p, 10000, &status), 0);
    assert_true(WIFEXITED(status));
    assert_int_not_equal(WEXITSTATUS(status), 0);
    if (!h_proc_log_contains(p, want)) {
        h_proc_print_log(p, 20);
        fail_msg("the data plane's log lacks \"%s\"", want);
    }
}

static void write_tls_config(struct h_config *cfg, const char *extra)
{
    memset(cfg, 0, sizeof(*cfg));
    assert_int_equal(h_config_add_worker(cfg, "http://127.0.0.1:9", "w1", "mock", NULL), 0);
    cfg->dataplane_extra = extra;
    assert_int_equal(h_config_write(cfg, NULL), 0);
}

static void test_bad_priorities_stop_the_start(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char extra[1024];
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, NULL,
             "  priorities: \"NORMAL:+NO-SUCH-SUITE\"\n");
    struct h_config cfg;
    write_tls_config(&cfg, extra);
    assert_dataplane_refuses(cfg.path, "dataplane.tls.priorities: GnuTLS rejects "
                                       "'NORMAL:+NO-SUCH-SUITE' at character 8 "
                                       "('+NO-SUCH-SUITE'): The request is invalid.");
}

/* security 22: a private key others may read is refused like a token. */
static void test_key_file_open_to_others_refused(void **state)
{
    (void)state;
    struct h_tls_certs c;
    assert_int_equal(h_tls_make_certs(&c), 0);
    char extra[1024], want[H_PATH_MAX + 96];
    tls_yaml(extra, sizeof(extra), c.server, c.server_key, NULL, NULL);
    assert_int_equal(chmod(c.server_key, 0644), 0);
    struct h_config cfg;
    write_tls_config(&cfg, extra);
    snprintf(want, sizeof(want), "dataplane.tls.key_file: %s is open to other users (mode 0644",
             c.server_key);
    assert_dataplane_refuses(cfg.path, want);

    /* Private (0600, or 0640 with our own group): it serves. */
    assert_int_equal(chmod(c.server_key, 0640), 0);
    h_tls_client_use(c.ca, NULL, NULL);
    struct h_fleet f;
    h_fleet_start(&f, &(struct h_fleet_opts){.n = 1, .dataplane_extra = extra, .https = true});
    struct h_tls_raw any = {.ca = c.ca};
    struct h_tls_raw_result r = get(&f, &any);
    assert_int_equal(r.status, 200);

    /* A new certificate whose key others may read is refused on reload;
     * the old one keeps serving. */
    char next[H_PATH_MAX], next_key[H_PATH_MAX];
    assert_int_equal(h_tls_make_leaf("next", c.ca, c.ca_key, false, next, next_key, sizeof(next)),
                     0);
    assert_int_equal(chmod(next_key, 0644), 0);
    assert_int_equal(rename(next, c.server), 0);
    assert_int_equal(rename(next_key, c.server_key), 0);
    reload_refused(&f, want);
    r = get(&f, &any);
    assert_int_equal(r.status, 200);
    assert_int_equal(chmod(c.server_key, 0600), 0);
    reload_applied(&f);
    r = get(&f, &any);
    assert_int_equal(r.status, 200);
    assert_true(h_proc_is_running(f.dp));
    h_fleet_stop(&f);
    h_tls_client_use(NULL, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_tls12_resumption_after_client_ca_change),
        H_TEST(test_tls13_resumption_after_client_ca_change),
        H_TEST(test_cbc_sha1_suites_refused),
        H_TEST(test_custom_priorities),
        H_TEST(test_bad_priorities_stop_the_start),
        H_TEST(test_key_file_open_to_others_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
