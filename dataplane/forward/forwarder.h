/*
 * The forwarding state machine of one request: validate and route it, run
 * attempts on workers under a load guard each, retry on connect failures
 * and on retry.on_status (while nothing reached the client, on another
 * worker, with doubling backoff), relay the chosen attempt's response
 * through a bounded buffer with backpressure (CURL_WRITEFUNC_PAUSE, the
 * relay of relay.h), and enforce first-byte and idle timeouts. A request
 * runs as a plan of legs (legs.h): the forwarder runs each leg's attempts
 * and reports every transition to the plan, whatever plan it is. It is
 * reached through handlers it registers with the listener and the
 * upstream side, neither of which names it.
 *
 * Accounting: every attempt owns one guard, released exactly once when its
 * transfer really ends: EOF, upstream error, timeout, client disconnect or
 * shutdown. A retried attempt keeps reading (and discarding) its error body
 * in the background and releases at its EOF, while the next attempt runs.
 *
 * Threading: the loop's thread only. The header and body handlers run
 * inside curl callbacks and so never detach a transfer; everything else
 * runs from the loop (epoll events, ticks, MHD callbacks) and may.
 */
#ifndef SY_DATAPLANE_FORWARDER_H
#define SY_DATAPLANE_FORWARDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <curl/curl.h>

#include "dataplane/types/forwarder_types.h"

struct dp_loop;
struct dp_request;

/* Frees the loop's forwarding state (after every attempt ended). */
void dp_fwd_fini(struct dp_loop *loop);

/* True while the loop has a live attempt (a transfer, or one draining). */
bool dp_fwd_has_attempts(const struct dp_loop *loop);

/* What a request's forwarding hung on it (its relay buffer, its plan's
 * state) goes; for the request's release function (request.h). */
void dp_fwd_release(struct dp_request *req);

/* The upload is complete: answer locally or start forwarding. After it,
 * either req->reply_status is set (queue that) or the request is forwarding
 * (suspend the connection). */
void dp_fwd_begin(struct dp_request *req);

/* The client went away (or the loop is stopping): abort every attempt of
 * req, releasing their guards. count_disconnect: count it in
 * switchyard_client_disconnects_total (false for shutdown aborts). */
void dp_fwd_cancel(struct dp_request *req, bool count_disconnect);

/* Periodic: retries whose backoff ended, first-byte and idle timeouts. */
void dp_fwd_tick(struct dp_loop *loop, uint64_t now_ms);

/* Aborts every attempt of the loop (shutdown). */
void dp_fwd_abort_all(struct dp_loop *loop);

/* The drain deadline passed: ends every request of the loop with a reply
 * the client can read (a stream: an SSE error event; still waiting for a
 * worker: 503), aborting every attempt and so releasing its guard. */
void dp_fwd_cut_all(struct dp_loop *loop, const char *msg);

/* The MHD content reader's body: copies relayed bytes into buf. Returns
 * bytes, 0 after suspending the connection, or an MHD_CONTENT_READER_END_*. */
ssize_t dp_fwd_read(struct dp_request *req, char *buf, size_t max);

/* What the forwarder registers with the upstream side (dp_up_init):
 * an attempt's response headers, body bytes and end. */
extern const struct dp_up_handlers dp_fwd_up_handlers;

/* What the forwarder registers with the listener (dp_listener_start):
 * dp_fwd_begin, dp_fwd_cancel, dp_fwd_read and dp_fwd_release. */
extern const struct dp_lst_handlers dp_fwd_lst_handlers;

/* What the forwarder registers with admission control (dp_adm_loop_init):
 * a queued request's dispatch (it picks a worker again) and its answer. */
extern const struct dp_adm_ops dp_fwd_adm_ops;

#endif
