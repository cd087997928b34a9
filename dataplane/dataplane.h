/*
 * The dataplane daemon's lifecycle: wait (bounded) for the control plane's
 * segment, claim a lease, serve, and on SIGTERM/SIGINT give the lease back.
 * The lease heartbeat runs on the main loop; if the control plane reaps our
 * lease (it judged us hung), we stop: counting into a lease we no longer
 * hold would corrupt nobody else's load, but it would be invisible.
 */
#ifndef SY_DATAPLANE_DATAPLANE_H
#define SY_DATAPLANE_DATAPLANE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"

struct dp_options {
    uint64_t segment_wait_ms; /* how long to wait for the control plane's segment */
    bool hot_restart;         /* take over from the dataplane running on this config */
};

/* Runs until a termination signal; returns the process exit code. */
int dp_run(const struct cfg *cfg, const struct dp_options *opts);

#endif
