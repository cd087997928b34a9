/*
 * Hot restart handover protocol (see hot_restart.h).
 *
 * SOCK_SEQPACKET keeps message boundaries, so a message is one fixed-size
 * struct hr_msg (checked by size, magic and version) and the listening
 * sockets travel as SCM_RIGHTS ancillary data of the SOCKETS message.
 * Received fds are close-on-exec (MSG_CMSG_CLOEXEC). Every connected socket
 * gets send/receive timeouts so a hung peer costs at most HR_IO_TIMEOUT_MS.
 */
#include "dataplane/lifecycle/hot_restart.h"

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define HR_MAGIC          0x53594852u /* "SYHR" */
#define HR_VERSION        1u
#define HR_TMP_SUFFIX_MAX 12 /* ".PID" */

int hr_socket_path(const struct cfg *cfg, char *buf, size_t len)
{
    char host[CFG_ADDR_MAX];
    uint16_t port;
    if (cfg_parse_host_port(cfg->dataplane.listen, host, sizeof(host), &port) != 0)
        return -EINVAL;
    const char *sock = cfg->controlplane.admin_socket;
    const char *slash = strrchr(sock, '/');
    int dir_len = slash == NULL ? 1 : (int)(slash - sock);
    const char *dir = slash == NULL ? "." : sock;
    if (slash == sock)
        dir_len = 0; /* "/admin.sock": the root directory */
    size_t cap = len < HR_PATH_MAX ? len : HR_PATH_MAX;
    int n = snprintf(buf, cap, "%.*s/dataplane-%u.hot.sock", dir_len, dir, (unsigned)port);
    /* Room for the ".PID" of the temporary name hr_server_open binds first. */
    return n < 0 || (size_t)n + HR_TMP_SUFFIX_MAX >= cap ? -ENAMETOOLONG : 0;
}

static int hr_addr(const char *path, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa->sun_path))
        return -ENAMETOOLONG;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

static void hr_set_timeouts(int fd)
{
    struct timeval tv = {.tv_sec = HR_IO_TIMEOUT_MS / 1000,
                         .tv_usec = (HR_IO_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void hr_msg_init(struct hr_msg *m, enum hr_msg_type type)
{
    memset(m, 0, sizeof(*m));
    m->magic = HR_MAGIC;
    m->version = HR_VERSION;
    m->type = type;
    m->pid = (int32_t)getpid();
}

static int hr_send(int fd, const struct hr_msg *m, const int *fds, unsigned n)
{
    struct iovec iov = {.iov_base = (void *)m, .iov_len = sizeof(*m)};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * HR_MAX_SOCKETS)];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    }
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (w < 0)
        return -errno;
    return w == (ssize_t)sizeof(*m) ? 0 : -EIO;
}

/* One message and its fds (closed when there are more than max). Returns
 * 1, 0 on EOF, -errno (-EPROTO for a malformed message). */
static int hr_recv_fds(int fd, struct hr_msg *m, int flags, int *fds, unsigned max, unsigned *n)
{
    struct iovec iov = {.iov_base = m, .iov_len = sizeof(*m)};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * HR_MAX_SOCKETS)];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    *n = 0;
    ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        unsigned k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int got[HR_MAX_SOCKETS];
        memcpy(got, CMSG_DATA(c), sizeof(int) * (k < HR_MAX_SOCKETS ? k : HR_MAX_SOCKETS));
        for (unsigned i = 0; i < k && i < HR_MAX_SOCKETS; i++) {
            if (*n < max)
                fds[(*n)++] = got[i];
            else
                close(got[i]);
        }
    }
    if (r == 0)
        return 0;
    if (r != (ssize_t)sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
        m->magic != HR_MAGIC) {
        for (unsigned i = 0; i < *n; i++)
            close(fds[i]);
        *n = 0;
        return -EPROTO;
    }
    m->text[HR_TEXT_MAX - 1] = '\0';
    return 1;
}

int hr_recv(int fd, struct hr_msg *m)
{
    unsigned n;
    int rc = hr_recv_fds(fd, m, MSG_DONTWAIT, NULL, 0, &n);
    if (rc == -EAGAIN)
        return -EAGAIN;
    return rc == 1 ? 1 : 0;
}

/* ---- server ------------------------------------------------------------------- */

int hr_server_open(struct hr_server *s, const char *path, char *err, size_t err_len)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    char tmp[HR_PATH_MAX];
    struct sockaddr_un sa;
    int n = snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp) || hr_addr(tmp, &sa) != 0 ||
        strlen(path) >= sizeof(s->path)) {
        snprintf(err, err_len, "hot restart socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
    memcpy(s->path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, err_len, "hot restart socket: %s", strerror(-rc));
        return rc;
    }
    unlink(tmp);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || chmod(tmp, 0600) != 0 ||
        listen(fd, 8) != 0 || rename(tmp, path) != 0) {
        rc = -errno;
        snprintf(err, err_len, "hot restart socket %s: %s", path, strerror(-rc));
        unlink(tmp);
        close(fd);
        return rc;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        s->dev = st.st_dev;
        s->ino = st.st_ino;
    }
    s->fd = fd;
    return 0;
}

void hr_server_close(struct hr_server *s, bool unlink_path)
{
    if (s->fd < 0)
        return;
    struct stat st;
    if (unlink_path && stat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
        unlink(s->path);
    close(s->fd);
    s->fd = -1;
}

int hr_server_accept_peer(struct hr_server *s, struct ucred *cred)
{
    int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    socklen_t len = sizeof(*cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) != 0 || cred->uid != geteuid()) {
        close(fd);
        return -EPERM;
    }
    return fd;
}

int hr_server_read_hello(int fd, struct hr_msg *hello)
{
    unsigned n;
    int rc = hr_recv_fds(fd, hello, MSG_DONTWAIT, NULL, 0, &n);
    if (rc == -EAGAIN)
        return -EAGAIN;
    if (rc != 1 || hello->type != HR_MSG_HELLO)
        return rc == 1 ? -EPROTO : rc == 0 ? -ECONNRESET : rc;
    if (hello->version != HR_VERSION) {
        char why[HR_TEXT_MAX];
        snprintf(why, sizeof(why),
                 "hot restart protocol version %u is not supported (this dataplane speaks %u)",
                 hello->version, HR_VERSION);
        hr_send_refusal(fd, why);
        return -EPROTO;
    }
    return 1;
}

int hr_server_accept(struct hr_server *s, struct hr_msg *hello)
{
    struct ucred cred;
    struct pollfd pl = {.fd = s->fd, .events = POLLIN};
    if (poll(&pl, 1, HR_IO_TIMEOUT_MS) != 1)
        return -ETIMEDOUT;
    int fd = hr_server_accept_peer(s, &cred);
    if (fd < 0)
        return fd;
    pl.fd = fd;
    int rc = -EAGAIN;
    while (rc == -EAGAIN && poll(&pl, 1, HR_IO_TIMEOUT_MS) == 1)
        rc = hr_server_read_hello(fd, hello);
    if (rc != 1) {
        close(fd);
        return rc == -EAGAIN ? -ETIMEDOUT : rc;
    }
    return fd;
}

int hr_send_refusal(int fd, const char *why)
{
    struct hr_msg m;
    hr_msg_init(&m, HR_MSG_REFUSED);
    snprintf(m.text, sizeof(m.text), "%s", why);
    return hr_send(fd, &m, NULL, 0);
}

int hr_send_sockets(int fd, const int *fds, unsigned n)
{
    if (n > HR_MAX_SOCKETS)
        return -E2BIG;
    struct hr_msg m;
    hr_msg_init(&m, HR_MSG_SOCKETS);
    m.n_sockets = n;
    return hr_send(fd, &m, fds, n);
}

/* ---- client ------------------------------------------------------------------- */

static int hr_connect(const char *path)
{
    struct sockaddr_un sa;
    int rc = hr_addr(path, &sa);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    /* Sockets received from a process of another user would be its own
     * listeners: only a predecessor of our user is one. */
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
        close(fd);
        return -EPERM;
    }
    hr_set_timeouts(fd);
    return fd;
}

bool hr_is_listening(const char *path)
{
    int fd = hr_connect(path);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

int hr_takeover_begin(struct hr_takeover *t, const char *path, uint32_t lease, char *err,
                      size_t err_len)
{
    memset(t, 0, sizeof(*t));
    t->fd = -1;
    int fd = hr_connect(path);
    if (fd < 0) {
        snprintf(err, err_len, "%s: %s", path,
                 fd == -EPERM ? "served by a process of another user; not taking its sockets"
                              : strerror(-fd));
        return fd;
    }
    struct hr_msg m;
    hr_msg_init(&m, HR_MSG_HELLO);
    m.lease = lease;
    int rc = hr_send(fd, &m, NULL, 0);
    if (rc != 0) {
        snprintf(err, err_len, "saying hello on %s: %s", path, strerror(-rc));
        close(fd);
        return rc;
    }
    rc = hr_recv_fds(fd, &m, 0, t->sockets, HR_MAX_SOCKETS, &t->n_sockets);
    if (rc != 1) {
        rc = rc == 0 ? -ECONNRESET : rc;
        snprintf(err, err_len, "waiting for the running dataplane's answer on %s: %s", path,
                 rc == -EAGAIN ? "timed out" : strerror(-rc));
        close(fd);
        return rc;
    }
    t->peer = (pid_t)m.pid;
    if (m.type == HR_MSG_REFUSED) {
        snprintf(err, err_len, "the running dataplane (pid %d) refused: %s", (int)m.pid, m.text);
        hr_takeover_fini(t, false);
        close(fd);
        return -EBUSY;
    }
    if (m.type != HR_MSG_SOCKETS || t->n_sockets == 0 || t->n_sockets != m.n_sockets) {
        snprintf(err, err_len, "the running dataplane (pid %d) sent %u of %u listening sockets",
                 (int)m.pid, t->n_sockets, m.n_sockets);
        hr_takeover_fini(t, false);
        close(fd);
        return -EPROTO;
    }
    t->fd = fd;
    return 0;
}

int hr_takeover_ready(struct hr_takeover *t)
{
    struct hr_msg m;
    hr_msg_init(&m, HR_MSG_READY);
    return hr_send(t->fd, &m, NULL, 0);
}

void hr_takeover_fini(struct hr_takeover *t, bool close_conn)
{
    for (unsigned i = 0; i < t->n_sockets; i++) {
        if (t->sockets[i] >= 0)
            close(t->sockets[i]);
        t->sockets[i] = -1;
    }
    t->n_sockets = 0;
    if (close_conn && t->fd >= 0) {
        close(t->fd);
        t->fd = -1;
    }
}
