/*
 * The HTTP side of one loop: its MHD daemon (external epoll mode, suspend/
 * resume, SO_REUSEPORT on the shared port), the access handler that
 * collects a request and does what its row in the route table says
 * (routes.h: 404, 405 with the row's Allow, a local answer, or the
 * forwarder), the content reader that relays a worker's body, MHD's
 * completion callback, and the client-fd watch that notices a disconnect
 * while the connection is suspended (MHD does not): EPOLLRDHUP only,
 * removed before MHD can close the fd.
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_LISTENER_H
#define SY_DATAPLANE_LISTENER_H

#include <stdint.h>

#include "dataplane/loop.h"

int dp_listener_start(struct dp_loop *loop);
/* Stops accepting new connections (drain); in-flight ones continue. */
void dp_listener_quiesce(struct dp_loop *loop);
void dp_listener_stop(struct dp_loop *loop);
/* Draining: closes keep-alive connections once they are idle (call again
 * as requests finish; each connection is handled once). */
void dp_listener_close_idle(struct dp_loop *loop);

/* Lets MHD process req again (resume) if it is suspended. */
void dp_listener_wake(struct dp_request *req);

/*
 * A parked request's client fd is watched for a hang-up (libmicrohttpd does
 * not notice one on a suspended connection) from the loop's next tick on,
 * not at once: a request answered within a tick never pays for the watch.
 * Detection of a disconnect is late by at most a tick (DP_TICK_MS).
 */
void dp_listener_watch_soon(struct dp_request *req);

/* The tick: starts watching every queued request still parked. */
void dp_listener_watch_queued(struct dp_loop *loop);

/* epoll reported EPOLLRDHUP/HUP/ERR on req's client fd. */
void dp_listener_client_event(struct dp_request *req, uint32_t events);

#endif
