/*
 * The mock worker's event loops: N threads (--threads), each with its own
 * libmicrohttpd daemon in external epoll mode accepting from one shared
 * listening socket, a timerfd for the simulated latencies and an eventfd
 * that other loops write when the engine admits one of this loop's queued
 * requests. One epoll_wait per loop iteration covers all of them plus the
 * client fds of parked requests.
 *
 * Parking is how a request waits without a thread: the connection is
 * MHD-suspended, its fd is added to the loop's epoll with EPOLLRDHUP only
 * (MHD stops watching suspended connections; see docs/architecture.md,
 * "Library facts the code relies on"), and an optional deadline goes into
 * the loop's timer heap. Whichever comes first -- the
 * deadline, an engine admission, a hang-up, shutdown -- unparks it (watch
 * and timer removed, connection resumed) and MHD calls the handler or the
 * content reader again. A hang-up is reported to the handlers at once so
 * inflight drops without waiting for MHD.
 *
 * Threading: mw_server_init/run/fini on the main thread; mw_park and
 * mw_unpark on the request's loop thread only; mw_server_wake from any.
 */
#ifndef SY_TESTS_MOCKWORKER_SERVER_H
#define SY_TESTS_MOCKWORKER_SERVER_H

#include "tests/mockworker/request.h"

#include <stdint.h>

/*
 * Binds the listening socket and sets up the shared state. Returns 0, or a
 * negative errno with a message in err.
 */
int mw_server_init(struct mw_server *s, const struct mw_options *opts, char *err, size_t err_len);

/*
 * Starts the loops and serves until SIGTERM or SIGINT, which the caller must
 * have blocked in every thread beforehand. Returns 0 after a clean stop, or a
 * negative errno when the loops could not start.
 */
int mw_server_run(struct mw_server *s);

void mw_server_fini(struct mw_server *s);

/*
 * mw_server_run in two halves, for a process serving many servers (fleet.h):
 * start runs the loops and returns (0 or a negative errno; stop must follow
 * either way), stop ends and joins them. Main thread only.
 */
int mw_server_start(struct mw_server *s);
void mw_server_stop(struct mw_server *s);

/* Monotonic clock in nanoseconds. */
uint64_t mw_now_ns(void);

/*
 * Parks req (see the file comment) until deadline_ns (0 = none). Call from
 * the access handler (then return MHD_YES) or the content reader (then
 * return 0). Returns 0 or a negative errno; on failure nothing is parked.
 */
int mw_park(struct mw_req *req, uint64_t deadline_ns);

/*
 * Asks req's loop to run MHD once more before it sleeps. libmicrohttpd 0.9.75
 * closes a connection that a callback failed (MHD_NO, END_WITH_ERROR) only
 * on its next pass, which in external epoll mode may never come by itself.
 */
void mw_loop_kick(struct mw_loop *loop);

/* Wakes the loops in mask (bit i = loop i) to take their admitted requests. */
void mw_server_wake(struct mw_server *s, uint64_t mask);

/* Index of the loop: the owner id of its engine entries. */
unsigned mw_loop_index(const struct mw_loop *loop);

#endif
