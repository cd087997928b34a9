/*
 * The control plane's end of the admin channel (proto/admin.proto, framed by
 * proto/frame.h): a Unix stream socket at controlplane.admin_socket, mode
 * 0600, a stale socket file unlinked first. Every dataplane connects, says
 * Hello with its lease (index + claim nonce) and stays connected; the
 * control plane accepts a Hello only for a lease that is ACTIVE with that
 * nonce. It then asks questions (InflightRequest) and the answers come back
 * through the reply callback.
 *
 * A malformed, oversized or unknown frame closes that connection with a log
 * line; nothing else is affected. A connection that goes away after its
 * Hello is remembered per lease as "lost" (adm_chan_is_lost) until the same
 * holding reconnects or the lease changes hands: the lease reaper combines
 * it with a stale heartbeat as a liveness signal (invariant 7).
 *
 * Threading: owned by the control plane's loop thread; every function runs
 * there. One descriptor (an inner epoll set) goes into the loop's epoll set.
 */
#ifndef SY_CONTROLPLANE_ADMIN_CHANNEL_H
#define SY_CONTROLPLANE_ADMIN_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/segment.h"

#define ADM_CHAN_MAX_CONNS 128

struct adm_channel;

/* Called for every answer to adm_chan_ask_inflight, and with ok = false when
 * the connection asked went away before answering or answered Error. */
typedef void (*adm_chan_reply_fn)(void *arg, uint32_t lease, uint64_t request_id, bool ok,
                                  uint64_t count);

/* A connected dataplane that has said Hello. */
struct adm_chan_peer {
    uint32_t lease;
    uint64_t nonce;
    int32_t pid;
    uint64_t connected_ms; /* monotonic */
};

/* Binds socket_path. seg is borrowed. 0 or a negative errno (logged). */
int adm_chan_create(const char *socket_path, struct shm_segment *seg, adm_chan_reply_fn on_reply,
                    void *arg, struct adm_channel **out);

/* Closes every connection and unlinks the socket. NULL is a no-op. */
void adm_chan_destroy(struct adm_channel *ch);

int adm_chan_fd(const struct adm_channel *ch);

/* Accepts, reads, answers, writes. Call when adm_chan_fd is readable. */
void adm_chan_run(struct adm_channel *ch, uint64_t now_ms);

/* True when the holding (lease, nonce) has a connection that said Hello. */
bool adm_chan_is_connected(const struct adm_channel *ch, uint32_t lease, uint64_t nonce);

/* True when (lease, nonce) had a connection and lost it; *since_ms (may be
 * NULL) gets the monotonic time of the loss. */
bool adm_chan_is_lost(const struct adm_channel *ch, uint32_t lease, uint64_t nonce,
                      uint64_t *since_ms);

/* Sends InflightRequest(slot, generation) to the holding (lease, nonce).
 * 0, -ENOTCONN, or a negative errno (the connection was closed). */
int adm_chan_ask_inflight(struct adm_channel *ch, uint32_t lease, uint64_t nonce,
                          uint64_t request_id, uint32_t slot, uint32_t generation);

/* Copies the connected peers (up to cap); returns how many. */
size_t adm_chan_peers(const struct adm_channel *ch, struct adm_chan_peer *out, size_t cap);

#endif
