/*
 * libcurl glue of one loop: the CURLM driven by curl_multi_socket_action
 * (its sockets in the loop's epoll set, kept there while their connection
 * is idle; its timer as the loop's deadline), a pool of easy handles with
 * their fixed options set, and starting / detaching one attempt's
 * transfer. Connections stay in the multi's cache between attempts, so
 * requests to a worker reuse keep-alive connections; a transfer detached
 * mid-body closes its connection, which is how the worker learns of a
 * cancel.
 *
 * Threading: the loop's thread only. dp_up_detach and dp_up_unpause must
 * not be called from inside a curl callback (libcurl forbids it).
 */
#ifndef SY_DATAPLANE_UPSTREAM_H
#define SY_DATAPLANE_UPSTREAM_H

#include <stdint.h>

#include "dataplane/loop.h"

int dp_up_init(struct dp_loop *loop);
void dp_up_fini(struct dp_loop *loop);

/* Starts a's POST of a->body (borrowed from its request) to url. 0 or -errno (nothing started). */
int dp_up_start(struct dp_attempt *a, const char *url);

/* Removes a's transfer from the multi (closing its connection if mid-body)
 * and returns its easy handle to the pool. Idempotent. */
void dp_up_detach(struct dp_attempt *a);

/* Resumes a paused transfer (may call the write callback synchronously). */
void dp_up_unpause(struct dp_attempt *a);

/* Events from epoll for a curl socket, and the curl timer. */
void dp_up_socket_event(struct dp_loop *loop, int fd, uint32_t events);
void dp_up_timer_due(struct dp_loop *loop, uint64_t now_ms);

/* Hands finished transfers to the forwarder (dp_fwd_on_done). */
void dp_up_collect(struct dp_loop *loop);

#endif
