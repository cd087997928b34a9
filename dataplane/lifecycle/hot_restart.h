/*
 * Hot restart handover between two dataplanes on the same config: the
 * running one (the predecessor) listens on a Unix SOCK_SEQPACKET socket
 * whose path is derived from the config (hr_socket_path); a process started
 * with --hot-restart (the successor) connects, says HELLO, and receives the
 * predecessor's listening sockets with SCM_RIGHTS in one SOCKETS message
 * (or one REFUSED message saying why not). Once it serves on them it sends
 * READY, and the predecessor drains and exits. The successor keeps the
 * connection open: its EOF tells it that the predecessor is gone, and until
 * then the successor refuses hot restarts of its own (one at a time).
 *
 * The listening sockets are the same kernel sockets in both processes, so
 * no connection waiting in an accept queue is lost: whoever accepts first
 * serves it, and the predecessor merely closes its copies when it drains.
 *
 * This module only speaks the protocol; hot_restart_run.c decides when. The
 * predecessor's side never blocks (a silent peer would stall the main
 * thread, which beats the lease): it accepts and reads the HELLO as the
 * main loop reports them readable. The successor's calls block, bounded by
 * HR_IO_TIMEOUT_MS, before it serves. Only a peer of our uid is accepted;
 * hot_restart_run.c also checks that it holds the lease it names. Functions return 0 or a negative
 * errno; those that can fail for a reason an operator must read fill an err buffer.
 */
#ifndef SY_DATAPLANE_HOT_RESTART_H
#define SY_DATAPLANE_HOT_RESTART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "common/config.h"

#define HR_PATH_MAX      108 /* sizeof(sockaddr_un.sun_path) */
#define HR_MAX_SOCKETS   64u /* listening sockets handed over at most */
#define HR_IO_TIMEOUT_MS 2000
#define HR_TEXT_MAX      200

enum hr_msg_type {
    HR_MSG_UNSET = 0,
    HR_MSG_HELLO,   /* successor -> predecessor: pid, lease */
    HR_MSG_SOCKETS, /* predecessor -> successor: pid, n_sockets fds attached */
    HR_MSG_REFUSED, /* predecessor -> successor: text says why */
    HR_MSG_READY,   /* successor -> predecessor: serving, drain now */
};

/* One message; fixed size, one SEQPACKET datagram. */
struct hr_msg {
    uint32_t magic;
    uint32_t version;
    uint32_t type; /* enum hr_msg_type */
    int32_t pid;
    uint32_t lease;
    uint32_t n_sockets;
    char text[HR_TEXT_MAX]; /* NUL-terminated */
};

/*
 * The handover socket of cfg: "<dir of controlplane.admin_socket>/
 * dataplane-<port of dataplane.listen>.hot.sock". 0, -EINVAL (bad listen)
 * or -ENAMETOOLONG (it must leave room for a temporary ".PID" suffix in
 * sun_path: at most 95 characters).
 */
int hr_socket_path(const struct cfg *cfg, char *buf, size_t len);

/* ---- the predecessor: the server side --------------------------------------- */

/* The handover listener of the running dataplane. Caller storage. */
struct hr_server {
    char path[HR_PATH_MAX];
    int fd; /* listening; -1 when closed */
    dev_t dev;
    ino_t ino; /* of the socket file we bound, to unlink only our own */
};

/*
 * Binds path (atomically replacing a stale or a predecessor's socket file:
 * bind to a temporary name, then rename), mode 0600, listening. 0 or
 * -errno with err filled.
 */
int hr_server_open(struct hr_server *s, const char *path, char *err, size_t err_len);

/* Stops listening. unlink_path: remove the file if it is still the one we
 * bound (a successor's file is left alone). Idempotent. */
void hr_server_close(struct hr_server *s, bool unlink_path);

/*
 * Accepts one waiting connection without blocking and fills *cred with the
 * peer's credentials (SO_PEERCRED). A peer of another uid is closed at once
 * (-EPERM). Returns the connection's fd (>= 0, non-blocking), -EAGAIN when
 * none waits, or another negative errno.
 */
int hr_server_accept_peer(struct hr_server *s, struct ucred *cred);

/*
 * Reads the HELLO of a connection from hr_server_accept_peer without
 * blocking: 1 and *hello; -EAGAIN when it has not arrived yet; another
 * negative errno when the peer sent something else or left (a version we
 * do not speak is answered with REFUSED first). The caller closes fd on
 * any result but 1 and -EAGAIN.
 */
int hr_server_read_hello(int fd, struct hr_msg *hello);

/*
 * Both of the above, blocking up to HR_IO_TIMEOUT_MS each (tests and
 * tools; the data plane's main loop uses the non-blocking pair). Returns
 * the connection's fd and fills *hello, or a negative errno (the
 * connection, if any, is closed).
 */
int hr_server_accept(struct hr_server *s, struct hr_msg *hello);

/* Sends REFUSED with the reason. 0 or -errno. */
int hr_send_refusal(int fd, const char *why);

/* Sends SOCKETS with fds[0..n) attached (n <= HR_MAX_SOCKETS). 0 or -errno. */
int hr_send_sockets(int fd, const int *fds, unsigned n);

/* ---- the successor: the client side ---------------------------------------- */

/* A takeover in progress. Caller storage; hr_takeover_fini closes what is left. */
struct hr_takeover {
    int fd;     /* connection to the predecessor; -1 when none */
    pid_t peer; /* the predecessor's pid (as it reported it) */
    int sockets[HR_MAX_SOCKETS];
    unsigned n_sockets; /* received; the caller may take them (set to -1 in sockets[]) */
};

/*
 * Connects to path, says HELLO (pid, lease) and waits (bounded) for the
 * predecessor's answer. 0: t->sockets received. -ENOENT / -ECONNREFUSED: no
 * dataplane listens there (gone or never started). -EBUSY: refused, err says
 * why. Other -errno: err says what failed.
 */
int hr_takeover_begin(struct hr_takeover *t, const char *path, uint32_t lease, char *err,
                      size_t err_len);

/* Tells the predecessor to drain. 0 or -errno. */
int hr_takeover_ready(struct hr_takeover *t);

/* Closes the received sockets not taken and, with close_conn, the connection. */
void hr_takeover_fini(struct hr_takeover *t, bool close_conn);

/* True when something (a dataplane) accepts connections on path. */
bool hr_is_listening(const char *path);

/* Reads one message from a peer connection without blocking: 1 and *m,
 * 0 on EOF or error (the peer is gone), -EAGAIN when nothing is there. */
int hr_recv(int fd, struct hr_msg *m);

#endif
