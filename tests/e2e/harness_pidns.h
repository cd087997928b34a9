/*
 * Daemons in PID namespaces of their own for end-to-end tests: the harness
 * starts `unshare --pid --fork --mount-proc --kill-child -- BIN ARGS...`, so
 * the daemon runs as pid 1 of a fresh PID namespace with a /proc of its own,
 * as a container's main process does when the pod does not share its PID
 * namespace (Kubernetes' default). The new mount namespace is a copy of the
 * test's: /dev/shm and the admin socket's directory are the same file
 * systems, so the daemons share the segment and the socket as the
 * containers of a pod share their emptyDir volumes; the test keeps its own
 * /proc and finds the daemon's pid as seen from its namespace.
 *
 * Processes. The harness (harness.c) owns the outer `unshare` process and
 * stops it at teardown. unshare blocks SIGTERM and SIGINT while it waits
 * for its child, so signals meant for the daemon go to the inner pid
 * (h_pidns_signal, h_pidns_stop); unshare then exits with the daemon's
 * status (re-raising a fatal signal on itself). --kill-child makes the
 * daemon die with unshare, so a test binary killed by its time limit leaves
 * nothing behind (PR_SET_PDEATHSIG on unshare, then on the daemon).
 *
 * Main thread only, like every process function of the harness. Functions
 * return 0 or a negative errno; nothing asserts.
 */
#ifndef SY_TESTS_E2E_HARNESS_PIDNS_H
#define SY_TESTS_E2E_HARNESS_PIDNS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tests/e2e/harness.h"

/* A daemon in its own PID namespace. Caller storage; the processes belong
 * to the harness context. */
struct h_pidns_proc {
    struct h_proc *outer; /* the unshare process */
    pid_t inner;          /* the daemon, as seen from the test's namespace */
    uint64_t ns_inode;    /* inode of the daemon's PID namespace */
};

/*
 * Checks that `unshare --pid --fork --mount-proc` works here (the binary
 * exists, we may create PID and mount namespaces). Returns 0, or a negative errno with a sentence
 * saying why not in why (for a clear skip message).
 */
int h_pidns_probe(char *why, size_t why_len);

/* Inode of the test's own PID namespace (0 on error). */
uint64_t h_pidns_self(void);

/*
 * Starts argv (argv[0] a path) under unshare and waits (up to
 * H_READY_TIMEOUT_MS) until the daemon has been exec'd in its new
 * namespace. Returns 0 and fills out, or a negative errno.
 */
int h_pidns_spawn(const char *name, const char *const argv[], struct h_pidns_proc *out);

/* switchyard-controlplane / switchyard-dataplane --config <path>, each in a
 * new PID namespace. */
int h_pidns_start_controlplane(const char *config_path, struct h_pidns_proc *out);
int h_pidns_start_dataplane(const char *config_path, struct h_pidns_proc *out);

/* Sends sig to the daemon; the test then expects it (and unshare) to exit
 * unless sig is SIGSTOP/SIGCONT. */
int h_pidns_signal(struct h_pidns_proc *p, int sig);

/* SIGTERM to the daemon, wait up to timeout_ms for unshare to exit, then
 * SIGKILL both. 0 if it exited in time, else -ETIMEDOUT. */
int h_pidns_stop(struct h_pidns_proc *p, int timeout_ms);

#endif
