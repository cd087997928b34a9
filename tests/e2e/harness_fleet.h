/*
 * A whole router for an end-to-end test: a control plane and a dataplane
 * in front of n mock workers (ids w1..wn), started with the harness and
 * attached to the segment so a test can read loads. Main thread only; the
 * processes belong to the harness context (teardown stops them).
 * Functions assert (cmocka): a fleet that cannot start fails the test.
 */
#ifndef SY_TESTS_E2E_HARNESS_FLEET_H
#define SY_TESTS_E2E_HARNESS_FLEET_H

#include <stdbool.h>
#include <stddef.h>

#include "shm/segment.h"
#include "tests/e2e/harness.h"

#define H_FLEET_MODEL     "mock-model"
#define H_FLEET_MAX_MOCKS 8

/* One router (control plane + dataplane) in front of n mock workers. */
struct h_fleet {
    struct h_config cfg;
    struct h_mock mock[H_FLEET_MAX_MOCKS];
    size_t n;
    struct h_proc *cp, *dp;
    struct shm_segment seg;
    bool attached;
    char base[64]; /* http://127.0.0.1:PORT of the dataplane */
};

struct h_fleet_opts {
    size_t n;
    const char *const *mock_args; /* NULL-terminated extra mock flags, or NULL */
    const char *policy;
    const char *policy_extra; /* more policy keys, one per line ("balance_abs_threshold: 2\n") */
    const char *dataplane_extra;
    const char *health_extra;    /* more controlplane.health keys, one per line */
    const char *model;           /* NULL = H_FLEET_MODEL */
    const char *health_interval; /* NULL = the harness default */
    bool learn_model;            /* workers configured without a model: learned from /v1/models */
    const char *controlplane_extra; /* more controlplane keys (e.g. a load_reports mapping) */
    const char *extra_yaml;         /* top-level sections (e.g. "admission:\n  ...") */
    bool https; /* the data plane serves HTTPS (dataplane_extra has tls:): base is https:// */
};

/* Starts the mocks, writes the config, starts both daemons, waits for /health. */
void h_fleet_start(struct h_fleet *f, const struct h_fleet_opts *o);
/* h_fleet_start's second half, for a fixture that starts its mocks itself
 * (zeroed f, f->n set, f->mock[0..n) running and added to f->cfg as workers): writes
 * the config with o's sections (o's mock fields are not read), starts both
 * daemons, attaches f->seg once the registry lists every worker, waits for
 * the data plane's /health. */
void h_fleet_start_router(struct h_fleet *f, const struct h_fleet_opts *o);
/* h_wait_until condition: attaches f->seg to the fleet's segment. */
bool h_fleet_attach(void *arg);
/* Detaches from the segment (the processes stop at teardown). */
void h_fleet_stop(struct h_fleet *f);
/* Router load of worker i (0-based, id "w<i+1>") from the segment; -1 if absent. */
long long h_fleet_load(struct h_fleet *f, size_t i);
/* The value of one sample of the data plane's /metrics, e.g.
 * "switchyard_slow_clients_total{phase=\"body\"}"; -1 when absent or when
 * the scrape failed (h_metric_at). */
long long h_fleet_dp_metric(const struct h_fleet *f, const char *sample);
/* The same, for a test that wants a failed scrape reported as such: fails
 * the test unless the data plane answers /metrics with 200; -1 only when
 * the sample is absent. */
long long h_fleet_dp_metric_checked(const struct h_fleet *f, const char *sample);
/* One integer field of mock i's /mock/stats; -1 on error. */
long long h_fleet_mock_stat(struct h_fleet *f, size_t i, const char *key);

#endif
