/*
 * Fleet mode of the mock worker (--workers N): N simulated vLLM servers in
 * one process, for the fleet-scale benchmark (docs/benchmarks.md, "Fleet
 * scale"). Worker i is a whole mw_server of its own -- listener on
 * --listen's port + i, engine (prefix cache, scheduler), stats, faults,
 * /metrics page, and, with --kv-events-endpoint tcp://H:P, a KV-event
 * publisher on port P + i (replay on the replay endpoint's port + i), as
 * vLLM's data-parallel ranks number their ports -- so the router sees N
 * independent workers. --threads counts each worker's event loops in this
 * mode (give 1). Process-wide: the LoRA adapter set and the log.
 *
 * Cost per worker: one thread and seven descriptors (listener and its dup,
 * epoll, timerfd, eventfd, libmicrohttpd's epoll and ITC) plus its
 * connections; a KV publisher adds a ZeroMQ context (two threads) and its
 * sockets. The descriptor limit (ulimit -n) bounds N per process: spread a
 * large fleet over several processes.
 *
 * Threading: mw_fleet_run on the main thread, with SIGTERM and SIGINT
 * blocked (as mw_server_run).
 */
#ifndef SY_TESTS_MOCKWORKER_FLEET_H
#define SY_TESTS_MOCKWORKER_FLEET_H

#include "tests/mockworker/options.h"

#include <stddef.h>

/*
 * Serves opts->workers workers until SIGTERM or SIGINT. Returns 0 after a
 * clean stop, or a negative errno with a message in err when a worker could
 * not start (the ones started are stopped).
 */
int mw_fleet_run(const struct mw_options *opts, char *err, size_t err_len);

#endif
