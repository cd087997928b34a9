/*
 * libmicrohttpd's own messages go through the structured logger in both
 * daemons: a bind that fails because the test holds the port makes MHD
 * speak, and every line of the daemon's log must then be a log line
 * (timestamp, level=..., msg="...") with MHD's words inside a
 * "libmicrohttpd: ..." message, not raw text between the lines.
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/e2e/harness.h"

#define WAIT_MS 10000

/* A listening socket on 127.0.0.1:port without SO_REUSEPORT: nobody else binds it. */
static int hold_port(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 4), 0);
    return fd;
}

/* Every non-empty line of the log is structured; one carries MHD's message. */
static void expect_structured_mhd_line(const struct h_proc *p)
{
    FILE *f = fopen(p->log_path, "r");
    assert_non_null(f);
    char line[4096];
    bool mhd = false;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (line[0] == '\n')
            continue;
        if (strncmp(line, "20", 2) != 0 || strstr(line, " level=") == NULL ||
            strstr(line, " msg=\"") == NULL)
            fail_msg("%s: an unstructured line in the log: %s", p->name, line);
        if (strstr(line, "level=warn") != NULL && strstr(line, "msg=\"libmicrohttpd: ") != NULL)
            mhd = true;
    }
    fclose(f);
    /* MHD warns when its logger is not the first option: then early messages escape it. */
    if (h_proc_log_contains(p, "not the first option"))
        fail_msg("%s: MHD_OPTION_EXTERNAL_LOGGER must come first", p->name);
    if (!mhd) {
        h_proc_print_log(p, 40);
        fail_msg("%s: no libmicrohttpd message in the log", p->name);
    }
}

static void test_controlplane_routes_mhd_messages(void **state)
{
    (void)state;
    struct h_config cfg = {.health_interval = "1h"};
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    int held = hold_port(cfg.admin_port);
    struct h_proc *cp;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(cp, WAIT_MS, &status), 0);
    cp->expected = true;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    assert_true(h_proc_log_contains(cp, "admin API: cannot listen on"));
    expect_structured_mhd_line(cp);
    close(held);
}

static void test_dataplane_routes_mhd_messages(void **state)
{
    (void)state;
    uint16_t mport;
    assert_int_equal(h_free_port(&mport), 0);
    char extra[64];
    snprintf(extra, sizeof(extra), "metrics_listen: \"127.0.0.1:%u\"\n", (unsigned)mport);
    struct h_config cfg = {.health_interval = "1h", .dataplane_extra = extra};
    assert_int_equal(h_config_write(&cfg, NULL), 0);
    struct h_proc *cp, *dp;
    assert_int_equal(h_start_controlplane(cfg.path, &cp), 0);
    char url[128];
    assert_int_equal(h_url(url, sizeof(url), cfg.admin_port, "/status"), 0);
    assert_int_equal(h_wait_http_ok(url, WAIT_MS), 0);
    int held = hold_port(mport);
    assert_int_equal(h_start_dataplane(cfg.path, &dp), 0);
    int status = 0;
    assert_int_equal(h_proc_wait(dp, WAIT_MS, &status), 0);
    dp->expected = true;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    expect_structured_mhd_line(dp);
    close(held);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_controlplane_routes_mhd_messages),
        H_TEST(test_dataplane_routes_mhd_messages),
    };
    return cmocka_run_group_tests_name("mhd_log", tests, NULL, NULL);
}
