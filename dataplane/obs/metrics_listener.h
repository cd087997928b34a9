/*
 * /metrics on an address of its own (dataplane.metrics_listen), so that an
 * operator can keep the Prometheus endpoint off the client-facing listener:
 * on the data plane's public port anyone who can send a completion could
 * also read every worker's load and the fleet's shape. When the key is set,
 * the client listener answers /metrics with 404 (listener.c) and only this
 * one serves it.
 *
 * One libmicrohttpd daemon with its own internal thread: scrapes are rare,
 * read only atomics and the segment, and must neither wait behind nor slow
 * an event loop. SO_REUSEPORT lets a hot-restarted data plane bind the same
 * address while its predecessor drains.
 *
 * Threading: created and destroyed by the main thread; the daemon's thread
 * reads the metrics (atomics), the guards' live table and the segment's
 * registry, which are all safe to read from any thread.
 */
#ifndef SY_DATAPLANE_METRICS_LISTENER_H
#define SY_DATAPLANE_METRICS_LISTENER_H

#include "dataplane/core/guard.h"
#include "dataplane/obs/metrics.h"
#include "shm/segment.h"

struct dp_metrics_listener;

/*
 * Listens on addr (HOST:PORT) and serves GET /metrics from m and guards
 * (both borrowed, outliving the listener) with a registry snapshot of seg.
 * 0 and *out, or a negative errno (the reason is logged).
 */
int dp_metrics_listener_start(const char *addr, const struct dp_metrics *m,
                              const struct dp_guards *guards, const struct shm_segment *seg,
                              struct dp_metrics_listener **out);

/* Stops the daemon and frees l; NULL is a no-op. */
void dp_metrics_listener_stop(struct dp_metrics_listener *l);

#endif
