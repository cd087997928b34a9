/*
 * The HTTP side of one loop: its MHD daemon (external epoll mode, suspend/
 * resume, SO_REUSEPORT on the shared port), the access handler that
 * collects a request and does what its row in the route table says
 * (routes.h: 404, 405 with the row's Allow, a local answer, or the handlers
 * registered at start, the forwarder's), the content reader that relays a
 * worker's body, MHD's completion callback, and the client-fd watch that
 * notices a disconnect while the connection is suspended (libmicrohttpd
 * reports none on a suspended connection): EPOLLRDHUP only, removed before
 * MHD can close the fd.
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_LISTENER_H
#define SY_DATAPLANE_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dataplane/types/listener_types.h"

struct MHD_Connection;
struct dp_loop;
struct dp_request;

/*
 * One client connection MHD holds open, tracked so a draining loop can
 * close the idle keep-alive ones. Owned by its loop's listener: created
 * and freed by MHD's connection notifications.
 */
struct dp_conn {
    struct MHD_Connection *conn;
    struct dp_request *req; /* the request in progress on it, or NULL when idle */
    bool closing;           /* given a short timeout to close while idle */
    bool cut;               /* shut down as a slow client (dp_listener_enforce_deadlines) */
    uint64_t idle_since_ms; /* accepted, or its last request completed (monotonic) */
    struct list_node link;  /* loop->lst.conns */
    void *tls;              /* its TLS credentials' hold (tls_server.h), or NULL */
};

/* What the listener hands a request to (the forwarder), registered at
 * dp_listener_start: this module never names the forwarder. */
struct dp_lst_handlers {
    /* The headers are complete, no body byte is buffered yet, and the
     * request is to be forwarded: false when it was refused (reply_status
     * set), so its body is never read (the key is checked here). */
    bool (*screen)(struct dp_request *req);
    /* The upload is complete and the request is to be forwarded: after it,
     * either req->reply_status is set or the request is forwarding. */
    void (*begin)(struct dp_request *req);
    /* The client went away; count_disconnect: count it as a disconnect. */
    void (*cancel)(struct dp_request *req, bool count_disconnect);
    /* The content reader of a relayed response (MHD's contract). */
    ssize_t (*read)(struct dp_request *req, char *buf, size_t max);
    /* The request's last reference went: free what forwarding hung on it. */
    void (*release)(struct dp_request *req);
};

/* Starts the loop's daemon: on the predecessor's socket after a hot
 * restart, else bound to the listen address; requests go to handlers.
 * 0 or -errno. */
int dp_listener_start(struct dp_loop *loop, const struct dp_lst_handlers *handlers);
/* Stops accepting new connections (drain); in-flight ones continue. */
void dp_listener_quiesce(struct dp_loop *loop);
void dp_listener_stop(struct dp_loop *loop);
/* Draining: closes keep-alive connections once they are idle (call again
 * as requests finish; each connection is handled once). */
void dp_listener_close_idle(struct dp_loop *loop);

/*
 * Slow clients (docs/security.md): shuts down a connection whose request
 * headers are not complete within dataplane.header_timeout of its accept
 * or of its previous request's end, and one whose body arrives slower than
 * dataplane.upload_min_rate on average once header_timeout has passed.
 * MHD's own timeout is for inactivity only: a byte every few minutes would
 * hold a connection forever. Call from the loop's tick; it scans the
 * connections at most every DP_LST_SWEEP_MS.
 */
void dp_listener_enforce_deadlines(struct dp_loop *loop, uint64_t now_ms);

/* True from a successful dp_listener_start to dp_listener_stop: the daemon
 * owns the socket it serves (an inherited one is closed when it stops). */
bool dp_listener_is_running(const struct dp_loop *loop);

/* The daemon's listening socket, or -1 (not started, or quiesced). */
int dp_listener_socket(const struct dp_loop *loop);

/* Milliseconds until MHD wants to run: 0 when a resume is pending, -1 when
 * it has no timer. */
int64_t dp_listener_timeout_ms(const struct dp_loop *loop);

/* Runs MHD when it has work: events (its epoll fd was ready), a pending
 * resume, or an expired timer. */
void dp_listener_run(struct dp_loop *loop, bool events);

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
