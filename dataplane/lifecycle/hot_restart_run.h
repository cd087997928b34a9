/*
 * Hot restart, orchestrated (the protocol itself is hot_restart.h): when a
 * dataplane asks its predecessor for its listening sockets, makes it drain
 * once it serves, and how a running dataplane serves a successor that asks
 * the same. The lifecycle (dataplane.c) decides when each step runs and
 * hands this module what it needs of the daemon as registered callbacks:
 * watching a connection in its main epoll set, the loops' listening
 * sockets, whether it drains, and starting the drain.
 *
 * At most one handover at a time: a running dataplane refuses a successor
 * while another takes over, while its own predecessor still drains, and
 * once it drains itself.
 *
 * Threading: the main thread only; every call is bounded (HR_IO_TIMEOUT_MS).
 */
#ifndef SY_DATAPLANE_HOT_RESTART_RUN_H
#define SY_DATAPLANE_HOT_RESTART_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "common/config.h"
#include "dataplane/lifecycle/hot_restart.h"

/* What the orchestration asks of the daemon; every callback gets ctx. */
struct dp_hot_ops {
    void *ctx;
    /* Adds fd to the main loop's epoll set (readable). 0 or -errno. */
    int (*watch)(void *ctx, int fd);
    void (*unwatch)(void *ctx, int fd);
    /* The listening sockets a successor would take, at most max into fds. */
    unsigned (*sockets)(void *ctx, int *fds, unsigned max);
    bool (*is_draining)(void *ctx);
    /* A successor serves: drain (and so exit). */
    void (*drain)(void *ctx);
    /* Whether lease is held by the process numbered pid in the PID
     * namespace ns_inode (what the lease recorded at its claim). */
    bool (*holds_lease)(void *ctx, uint32_t lease, uint64_t ns_inode, pid_t pid);
};

/* The handover state of one dataplane. Caller storage (dp_run's frame). */
struct dp_hot {
    const struct cfg *cfg; /* borrowed */
    struct dp_hot_ops ops;
    char path[HR_PATH_MAX];  /* the handover socket; "" when hot restart is disabled */
    struct hr_server server; /* where a successor finds us; fd -1 when not listening */
    /* A connection whose HELLO has not arrived: -1 when none; closed at
     * pending_deadline_ms (monotonic). One at a time. */
    int pending_fd;
    struct ucred pending_cred;
    uint64_t pending_deadline_ms;
    int succ_fd; /* a successor being handed our sockets, -1 when none */
    pid_t succ_pid;
    bool handed_over; /* a successor serves on our sockets: the path is its own */
    int pred_fd;      /* our predecessor, still draining; -1 when gone */
    pid_t pred_pid;
};

/*
 * Sets up h for cfg and derives the handover path. hot_restart: this
 * process was asked to take over. Returns 0, or -1 when the process must
 * not start (the path is too long for a requested hot restart, or a
 * dataplane already serves this config and no hot restart was asked for);
 * the reason is logged.
 */
int dp_hot_init(struct dp_hot *h, const struct cfg *cfg, const struct dp_hot_ops *ops,
                bool hot_restart);

/*
 * --hot-restart, before the loops start: asks the dataplane running on this
 * config for its listening sockets, saying lease. 0 with t->sockets taken
 * when they are bound to listen_addr (or none when nobody runs there or it
 * listens elsewhere: bind ourselves), -1 when refused or failed: the
 * caller exits, the running one is untouched.
 */
int dp_hot_takeover(struct dp_hot *h, struct hr_takeover *t, uint32_t lease,
                    const struct sockaddr_storage *listen_addr);

/* After the loops started: tells the predecessor (if any) to drain, then
 * listens on the handover path so the next hot restart finds us. The loops
 * own t's sockets now. */
void dp_hot_serve(struct dp_hot *h, struct hr_takeover *t);

/* An event on fd of the main epoll set: true when fd was one of ours
 * (the handover listener, a successor, our predecessor) and was handled. */
bool dp_hot_event(struct dp_hot *h, int fd);

/* Closes a handover connection that did not say HELLO in time. Call from
 * the main loop's tick. */
void dp_hot_tick(struct dp_hot *h, uint64_t now_ms);

/* Stops listening on the handover path (unlinking it unless a successor
 * took it over). */
void dp_hot_close_server(struct dp_hot *h);

/* Closes the connections to a successor and a predecessor: call once the
 * lease is given back, since a successor takes this connection's end for
 * "the previous dataplane is gone, lease included". */
void dp_hot_fini(struct dp_hot *h);

#endif
