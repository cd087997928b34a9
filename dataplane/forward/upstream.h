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

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "dataplane/types/upstream_types.h"

struct dp_attempt;
struct dp_loop;

/* What a transfer delivers, reported to the layer above (the forwarder),
 * which registers them at dp_up_init. on_header and on_body run inside
 * curl callbacks and return what curl's header and write callbacks return;
 * on_done runs from the loop once the transfer is over. */
struct dp_up_handlers {
    size_t (*on_header)(struct dp_attempt *a, const char *line, size_t len);
    size_t (*on_body)(struct dp_attempt *a, const char *data, size_t len);
    void (*on_done)(struct dp_attempt *a, CURLcode result);
};

/* Sets up loop->up; handlers receive every transfer's data and end. 0 or -errno. */
int dp_up_init(struct dp_loop *loop, const struct dp_up_handlers *handlers);
void dp_up_fini(struct dp_loop *loop);

/* Starts a's POST of a->body (borrowed from its request) to url. 0 or -errno (nothing started). */
int dp_up_start(struct dp_attempt *a, const char *url);

/* a's request went out whole, its response has begun and no attempt of its
 * request follows: frees curl's upload buffer (64 KiB, taken for a body
 * over 64 KiB and otherwise kept until the transfer ends) and the request's
 * upstream header list (req->up_headers, NULL after). */
void dp_up_request_sent(struct dp_attempt *a);

/* Removes a's transfer from the multi (closing its connection if mid-body)
 * and returns its easy handle to the pool. Idempotent. */
void dp_up_detach(struct dp_attempt *a);

/* Resumes a paused transfer (may call the write callback synchronously). */
void dp_up_unpause(struct dp_attempt *a);

/*
 * A transfer on the loop's multi that is not a request's attempt (the
 * tokenize client's POST /tokenize, tokenize.h). Its owner makes and
 * configures the easy handle (dp_up_side_easy gives one with the loop's
 * connection and TLS settings), embeds this struct and is told of the end
 * through on_done, from the loop; it must then (or to cancel) call
 * dp_up_side_detach, and clean the handle up itself.
 */
struct dp_up_side {
    void (*on_done)(struct dp_up_side *s, CURLcode result);
    CURL *easy;
};

/* A new easy handle set up as the loop's attempts' are (no proxy, connect
 * timeout, TLS to the workers), without their callbacks; NULL on failure. */
CURL *dp_up_side_easy(struct dp_loop *loop);

/* Adds s->easy to the multi. 0 or -errno (nothing started). */
int dp_up_side_start(struct dp_loop *loop, struct dp_up_side *s);

/* Removes s->easy from the multi (idempotent; s->easy stays the owner's). */
void dp_up_side_detach(struct dp_loop *loop, struct dp_up_side *s);

/* Events from epoll for a curl socket (the transfers they finish wait for
 * dp_up_collect), and the curl timer. */
void dp_up_socket_event(struct dp_loop *loop, int fd, uint32_t events);
/* When curl's timer wants dp_up_timer_due (monotonic ms), -1 = never. */
int64_t dp_up_deadline_ms(const struct dp_loop *loop);
void dp_up_timer_due(struct dp_loop *loop, uint64_t now_ms);

/* Hands finished transfers to the registered on_done. */
void dp_up_collect(struct dp_loop *loop);

#endif
