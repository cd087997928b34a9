/*
 * The driver of the dataplane's event loops (struct dp_loop, loop.h): sets
 * a loop up (its fds, then each module's state: workers, policies, P/D,
 * upstream, listener, with the forwarder's handlers registered), runs its
 * thread (one epoll_wait, each event dispatched to the module it belongs
 * to, the drain and its deadline), and tears it down. It is the one place
 * that calls every module; the modules themselves include only loop.h.
 *
 * Threading: dp_loop_init, dp_loop_start, dp_loop_command, dp_loop_join
 * and dp_loop_fini run on the main thread; the loop then runs on its own.
 */
#ifndef SY_DATAPLANE_LOOP_RUN_H
#define SY_DATAPLANE_LOOP_RUN_H

#include "dataplane/core/loop.h"

/* Sets up the loop's fds, daemon and multi handle (main thread). 0 or -errno. */
int dp_loop_init(struct dp_loop *loop, struct dp_shared *sh, unsigned index);
int dp_loop_start(struct dp_loop *loop);
/* Main thread: asks the loop to drain (until dataplane.drain_timeout_ms
 * from when it reads cmd) or to stop. */
void dp_loop_command(struct dp_loop *loop, enum dp_cmd cmd);
void dp_loop_join(struct dp_loop *loop);
void dp_loop_fini(struct dp_loop *loop);

#endif
