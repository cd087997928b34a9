/*
 * Unit tests of the hot restart handover protocol (dataplane/lifecycle/hot_restart.c):
 * the socket path derived from the config, a full handover (HELLO, the
 * listening sockets over SCM_RIGHTS, READY), a refusal, no listener or a
 * stale socket file, a malformed or foreign-version HELLO, and that closing
 * a server unlinks only its own socket file. The predecessor's side runs
 * in a thread of the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataplane/lifecycle/hot_restart.h"

/* ---- the derived path --------------------------------------------------------- */

static int path_for(const char *admin_socket, const char *listen, char *buf, size_t len)
{
    struct cfg cfg;
    cfg_init_defaults(&cfg);
    snprintf(cfg.controlplane.admin_socket, sizeof(cfg.controlplane.admin_socket), "%s",
             admin_socket);
    snprintf(cfg.dataplane.listen, sizeof(cfg.dataplane.listen), "%s", listen);
    int rc = hr_socket_path(&cfg, buf, len);
    cfg_fini(&cfg);
    return rc;
}

static void test_socket_path(void **state)
{
    (void)state;
    char p[HR_PATH_MAX];
    assert_int_equal(path_for("/run/switchyard/admin.sock", "127.0.0.1:8080", p, sizeof(p)), 0);
    assert_string_equal(p, "/run/switchyard/dataplane-8080.hot.sock");
    assert_int_equal(path_for("/admin.sock", "[::1]:9000", p, sizeof(p)), 0);
    assert_string_equal(p, "/dataplane-9000.hot.sock");
    assert_int_equal(path_for("admin.sock", "0.0.0.0:80", p, sizeof(p)), 0);
    assert_string_equal(p, "./dataplane-80.hot.sock");
    char longdir[200];
    memset(longdir, 'd', sizeof(longdir));
    longdir[0] = '/';
    memcpy(longdir + 90, "/a.sock", 8);
    assert_int_equal(path_for(longdir, "127.0.0.1:8080", p, sizeof(p)), -ENAMETOOLONG);
    assert_int_equal(path_for("/run/a.sock", "nonsense", p, sizeof(p)), -EINVAL);
}

/* ---- a predecessor in a thread ------------------------------------------------- */

enum pred_mode { PRED_HAND_OVER = 1, PRED_REFUSE };

struct pred {
    struct hr_server srv;
    enum pred_mode mode;
    int fds[2]; /* what it hands over */
    struct hr_msg hello;
    int accept_rc;
    bool got_ready;
    pthread_t thread;
};

static void *pred_main(void *arg)
{
    struct pred *p = arg;
    struct pollfd pfd = {.fd = p->srv.fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1) {
        p->accept_rc = -ETIMEDOUT;
        return NULL;
    }
    int fd = hr_server_accept(&p->srv, &p->hello);
    p->accept_rc = fd < 0 ? fd : 0;
    if (fd < 0)
        return NULL;
    if (p->mode == PRED_REFUSE) {
        hr_send_refusal(fd, "a hot restart is in progress");
        close(fd);
        return NULL;
    }
    if (hr_send_sockets(fd, p->fds, 2) == 0) {
        struct pollfd cfd = {.fd = fd, .events = POLLIN};
        struct hr_msg m;
        if (poll(&cfd, 1, 5000) == 1 && hr_recv(fd, &m) == 1)
            p->got_ready = m.type == HR_MSG_READY;
    }
    close(fd);
    return NULL;
}

static void tmp_sock_path(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/sy-hr-unit-%d-%s.sock", (int)getpid(), tag);
    unlink(buf);
}

static void pred_start(struct pred *p, const char *path, enum pred_mode mode)
{
    memset(p, 0, sizeof(*p));
    p->mode = mode;
    char err[256];
    assert_int_equal(hr_server_open(&p->srv, path, err, sizeof(err)), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
    assert_int_equal(pthread_create(&p->thread, NULL, pred_main, p), 0);
}

static void pred_finish(struct pred *p)
{
    pthread_join(p->thread, NULL);
    hr_server_close(&p->srv, true);
    close(p->fds[0]);
    close(p->fds[1]);
}

static void test_handover(void **state)
{
    (void)state;
    char path[HR_PATH_MAX];
    tmp_sock_path(path, sizeof(path), "ok");
    struct pred p;
    pred_start(&p, path, PRED_HAND_OVER);
    struct hr_takeover t;
    char err[256];
    assert_int_equal(hr_takeover_begin(&t, path, 7, err, sizeof(err)), 0);
    assert_int_equal(t.n_sockets, 2);
    assert_int_equal(t.peer, getpid());
    /* The received fds are the predecessor's sockets: data written to its
     * end of the pair arrives on our copy of the other end. */
    assert_int_equal(write(p.fds[0], "x", 1), 1);
    char c = 0;
    assert_int_equal(read(t.sockets[1], &c, 1), 1);
    assert_int_equal(c, 'x');
    assert_true((fcntl(t.sockets[0], F_GETFD) & FD_CLOEXEC) != 0);
    assert_int_equal(hr_takeover_ready(&t), 0);
    pred_finish(&p);
    assert_int_equal(p.accept_rc, 0);
    assert_int_equal(p.hello.type, HR_MSG_HELLO);
    assert_int_equal(p.hello.lease, 7);
    assert_true(p.got_ready);
    hr_takeover_fini(&t, true);
    assert_int_equal(t.fd, -1);
    assert_int_equal(access(path, F_OK), -1); /* its own file: unlinked */
}

static void test_refusal(void **state)
{
    (void)state;
    char path[HR_PATH_MAX];
    tmp_sock_path(path, sizeof(path), "refuse");
    struct pred p;
    pred_start(&p, path, PRED_REFUSE);
    struct hr_takeover t;
    char err[256];
    assert_int_equal(hr_takeover_begin(&t, path, 1, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "refused: a hot restart is in progress"));
    assert_int_equal(t.n_sockets, 0);
    assert_int_equal(t.fd, -1);
    pred_finish(&p);
}

static void test_nobody_listening(void **state)
{
    (void)state;
    char path[HR_PATH_MAX];
    tmp_sock_path(path, sizeof(path), "none");
    struct hr_takeover t;
    char err[256];
    assert_int_equal(hr_takeover_begin(&t, path, 1, err, sizeof(err)), -ENOENT);
    assert_false(hr_is_listening(path));
    /* A stale socket file (its owner died without unlinking it). */
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    assert_int_equal(hr_takeover_begin(&t, path, 1, err, sizeof(err)), -ECONNREFUSED);
    assert_false(hr_is_listening(path));
    /* A server replaces the stale file. */
    struct hr_server s;
    assert_int_equal(hr_server_open(&s, path, err, sizeof(err)), 0);
    assert_true(hr_is_listening(path));
    hr_server_close(&s, true);
    assert_int_equal(access(path, F_OK), -1);
}

static void test_bad_hello(void **state)
{
    (void)state;
    char path[HR_PATH_MAX], err[256];
    tmp_sock_path(path, sizeof(path), "bad");
    struct hr_server s;
    assert_int_equal(hr_server_open(&s, path, err, sizeof(err)), 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);

    /* Garbage. */
    int c = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(send(c, "hello", 5, 0), 5);
    struct hr_msg hello;
    assert_int_equal(hr_server_accept(&s, &hello), -EPROTO);
    close(c);

    /* A well-formed HELLO of another protocol version: refused with a reason. */
    c = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct hr_msg m = {.magic = 0x53594852u, .version = 99, .type = HR_MSG_HELLO};
    assert_int_equal(send(c, &m, sizeof(m), 0), (ssize_t)sizeof(m));
    assert_int_equal(hr_server_accept(&s, &hello), -EPROTO);
    struct hr_msg answer;
    assert_int_equal(recv(c, &answer, sizeof(answer), 0), (ssize_t)sizeof(answer));
    assert_int_equal(answer.type, HR_MSG_REFUSED);
    assert_non_null(strstr(answer.text, "version 99"));
    close(c);

    /* A probe that connects and leaves. */
    assert_true(hr_is_listening(path));
    assert_int_equal(hr_server_accept(&s, &hello), -ECONNRESET);
    hr_server_close(&s, true);
}

static void test_close_unlinks_only_own_file(void **state)
{
    (void)state;
    char path[HR_PATH_MAX], err[256];
    tmp_sock_path(path, sizeof(path), "own");
    struct hr_server a, b;
    assert_int_equal(hr_server_open(&a, path, err, sizeof(err)), 0);
    /* A successor binds the same path (rename over a's file). */
    assert_int_equal(hr_server_open(&b, path, err, sizeof(err)), 0);
    hr_server_close(&a, true);
    assert_int_equal(access(path, F_OK), 0);
    assert_true(hr_is_listening(path));
    hr_server_close(&b, true);
    assert_int_equal(access(path, F_OK), -1);
    hr_server_close(&b, true); /* idempotent */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_socket_path), cmocka_unit_test(test_handover),
        cmocka_unit_test(test_refusal),     cmocka_unit_test(test_nobody_listening),
        cmocka_unit_test(test_bad_hello),   cmocka_unit_test(test_close_unlinks_only_own_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
