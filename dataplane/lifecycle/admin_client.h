/*
 * The dataplane's end of the admin channel (proto/admin.proto over
 * proto/frame.h): connects to controlplane.admin_socket, says Hello with the
 * dataplane's lease (index + claim nonce), answers the control plane's
 * questions, and reconnects (100 ms, doubling to 2 s) whenever the
 * connection goes away, e.g. when the control plane restarts.
 *
 * Questions answered: Ping (Pong) and InflightRequest(slot, generation),
 * answered with the dataplane's OWN count of live guards on that worker
 * incarnation, supplied by the callback (never the shared counter: that is
 * what reset_load checks against).
 *
 * Wiring: put adm_client_fd() (a stable epoll descriptor, unchanged across
 * reconnects) in the loop's epoll set for EPOLLIN; call adm_client_run()
 * when it is readable and at least every heartbeat (100 ms) for reconnects.
 * Threading: one thread owns the client (all calls, and the callback, run
 * on it); the callback must be cheap and must not block.
 */
#ifndef SY_DATAPLANE_ADMIN_CLIENT_H
#define SY_DATAPLANE_ADMIN_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/lease.h"

/* How many requests this dataplane has in flight on (slot, generation). */
typedef uint64_t (*adm_client_inflight_fn)(void *arg, uint32_t slot, uint32_t generation);

struct adm_client;

/*
 * Creates a client and tries a first connection (failing that is not an
 * error: it retries). lease is borrowed and must outlive the client; its
 * index and nonce are read at every (re)connect. Returns 0 or -errno.
 */
int adm_client_create(const char *socket_path, const struct shm_lease_handle *lease,
                      adm_client_inflight_fn inflight, void *arg, struct adm_client **out);

/* Closes the connection and frees. NULL is a no-op. */
void adm_client_destroy(struct adm_client *c);

/* A planned exit: tells a connected control plane why, best effort (one
 * frame on a non-blocking socket), before adm_client_destroy. */
void adm_client_goodbye(struct adm_client *c, const char *reason);

/* Stable descriptor for the caller's epoll set (EPOLLIN). */
int adm_client_fd(const struct adm_client *c);

/* Reads and answers what arrived, flushes, reconnects when due. */
void adm_client_run(struct adm_client *c, uint64_t now_ms);

/* True after the control plane accepted our Hello on the current connection. */
bool adm_client_is_connected(const struct adm_client *c);

#endif
