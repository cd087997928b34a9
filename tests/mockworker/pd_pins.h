/*
 * The KV blocks a mock prefill worker holds for remote decodes (docs/
 * mockworker.md), as vLLM's NixlConnector does: the blocks of each prefill
 * answer stay pinned until the decode side consumes them (reads them, or
 * rejects or aborts the request, which frees them in vLLM too) or a lease
 * expires (--kv-lease-ms, 30 s by default as in vLLM since May 2026).
 *
 * A decode mock tells the prefill mock named in the params it received
 * (remote_host, remote_port) that it consumed remote_request_id's blocks
 * with POST /mock/kv_read {"remote_request_id": ...}: a plain HTTP/1.1
 * request from mw_pd_pins_notify. A second consumption of the same blocks
 * is what corrupts output with vLLM (the blocks are free, or another
 * request's, by then); the prefill mock counts it in blocks_read_twice, so
 * a router that sends the same params to two decode workers is caught.
 *
 * Threading: a pin table is shared by the server's loops (a mutex);
 * mw_pd_pins_notify blocks the calling loop for one local round trip.
 */
#ifndef SY_TESTS_MOCKWORKER_PD_PINS_H
#define SY_TESTS_MOCKWORKER_PD_PINS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define MW_PD_PINS_MAX 8192 /* remembered prefill answers; the oldest is forgotten */

struct mw_pd_pin {
    uint64_t id_hash; /* XXH3 of remote_request_id; 0 = free slot */
    uint32_t blocks;
    uint64_t expiry_ns;
    bool pinned; /* not yet consumed, lease running */
};

struct mw_pd_pins {
    pthread_mutex_t mu;
    uint64_t lease_ns;
    struct mw_pd_pin ring[MW_PD_PINS_MAX];
    size_t next;
    uint64_t pinned_blocks, pinned_requests;
    uint64_t reads, read_twice, read_unknown, expired;
};

int mw_pd_pins_init(struct mw_pd_pins *p, uint64_t lease_ms);
void mw_pd_pins_fini(struct mw_pd_pins *p);

/* Pins blocks for the answer naming request_id, until now + the lease. */
void mw_pd_pins_add(struct mw_pd_pins *p, const char *request_id, uint32_t blocks);

/* The decode side consumed request_id's blocks. 0; -EALREADY when they had
 * been consumed before (counted in read_twice); -ENOENT when unknown or
 * expired. */
int mw_pd_pins_read(struct mw_pd_pins *p, const char *request_id);

/* pinned_blocks, pinned_requests, kv_reads, blocks_read_twice,
 * kv_reads_unknown, kv_lease_expired into obj (expired leases dropped first). */
void mw_pd_pins_to_json(struct mw_pd_pins *p, json_t *obj);

/* Zeroes the counters; pins stay. */
void mw_pd_pins_reset(struct mw_pd_pins *p);

/* POST /mock/kv_read for request_id to host:port (the prefill mock). 0 on
 * a 2xx answer, -errno otherwise. At most about 1 s. */
int mw_pd_pins_notify(const char *host, uint16_t port, const char *request_id);

#endif
