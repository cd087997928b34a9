/*
 * The control-plane daemon: owns the segment and the registry. Lifecycle:
 * open or re-attach the segment (never resetting a lease), repair slots a
 * dead predecessor left half-written, publish the configured workers, then
 * run one event loop until SIGTERM/SIGINT that heartbeats and reaps dead
 * dataplane leases, probes worker health (health_prober.h), serves the
 * admin REST API (admin_http.h) and the admin channel (admin_channel.h),
 * and runs reset_load (reset_load.h). On exit the segment stays: the registry outlives us, and
 * running dataplanes keep routing on it.
 *
 * Single-threaded: everything runs on the loop thread.
 */
#ifndef SY_CONTROLPLANE_CONTROLPLANE_H
#define SY_CONTROLPLANE_CONTROLPLANE_H

#include "common/config.h"

/* Runs until a termination signal; returns the process exit code. */
int cp_run(const struct cfg *cfg);

#endif
