/*
 * A router plus mock workers for end-to-end tests (see harness_fleet.h).
 */
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_tls.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm/load.h"
#include "shm/registry.h"

/* Every configured worker is in the registry (the segment is attachable
 * before the control plane has written it). */
static bool h_fleet_registry_complete(void *arg)
{
    struct h_fleet *f = arg;
    struct shm_worker_info w[H_FLEET_MAX_MOCKS + 1];
    return shm_registry_snapshot(&f->seg, w, H_FLEET_MAX_MOCKS + 1) >= f->cfg.n_workers;
}

bool h_fleet_attach(void *arg)
{
    struct h_fleet *f = arg;
    char err[256];
    return shm_segment_attach(&f->seg, f->cfg.shm_name, err, sizeof(err)) == 0;
}

void h_fleet_start(struct h_fleet *f, const struct h_fleet_opts *o)
{
    memset(f, 0, sizeof(*f));
    f->n = o->n;
    for (size_t i = 0; i < o->n; i++) {
        const char *argv[16] = {"--model", o->model ? o->model : H_FLEET_MODEL, "--seed", "7"};
        size_t k = 4;
        for (size_t j = 0; o->mock_args != NULL && o->mock_args[j] != NULL && k < 15; j++)
            argv[k++] = o->mock_args[j];
        argv[k] = NULL;
        assert_int_equal(h_mock_startv(&f->mock[i], argv), 0);
        char id[32];
        snprintf(id, sizeof(id), "w%zu", i + 1);
        const char *model = o->learn_model ? NULL : o->model ? o->model : H_FLEET_MODEL;
        assert_int_equal(h_config_add_worker(&f->cfg, f->mock[i].url, id, model, NULL), 0);
    }
    h_fleet_start_router(f, o);
}

void h_fleet_start_router(struct h_fleet *f, const struct h_fleet_opts *o)
{
    f->cfg.policy = o->policy;
    f->cfg.policy_extra = o->policy_extra;
    f->cfg.dataplane_extra = o->dataplane_extra;
    f->cfg.health_extra = o->health_extra;
    f->cfg.health_interval = o->health_interval;
    f->cfg.controlplane_extra = o->controlplane_extra;
    f->cfg.extra_yaml = o->extra_yaml;
    assert_int_equal(h_config_write(&f->cfg, NULL), 0);
    assert_int_equal(h_start_controlplane(f->cfg.path, &f->cp), 0);
    assert_int_equal(h_wait_until(h_fleet_attach, f, H_READY_TIMEOUT_MS), 0);
    f->attached = true;
    assert_int_equal(h_wait_until(h_fleet_registry_complete, f, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_start_dataplane(f->cfg.path, &f->dp), 0);
    assert_int_equal(h_url(f->base, sizeof(f->base), f->cfg.dataplane_port, NULL), 0);
    if (o->https)
        assert_int_equal(h_tls_https_url(f->base, sizeof(f->base)), 0);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", f->base);
    assert_int_equal(h_wait_http_ok(url, H_READY_TIMEOUT_MS), 0);
}

void h_fleet_stop(struct h_fleet *f)
{
    if (f->attached)
        shm_segment_close(&f->seg);
    f->attached = false;
}

long long h_fleet_load(struct h_fleet *f, size_t i)
{
    char id[32];
    snprintf(id, sizeof(id), "w%zu", i + 1);
    struct shm_worker_info w;
    if (shm_registry_find(&f->seg, id, &w) != 0)
        return -1;
    return (long long)shm_load_of(&f->seg, w.slot, w.generation);
}

long long h_fleet_mock_stat(struct h_fleet *f, size_t i, const char *key)
{
    long long v = -1;
    if (h_mock_stat_int(f->mock[i].url, key, &v) != 0)
        return -1;
    return v;
}

/* The data plane's /metrics page into url. */
static void h_fleet_metrics_url(const struct h_fleet *f, char *url, size_t len)
{
    snprintf(url, len, "%s/metrics", f->base);
}

long long h_fleet_dp_metric(const struct h_fleet *f, const char *sample)
{
    char url[128];
    h_fleet_metrics_url(f, url, sizeof(url));
    return h_metric_at(url, sample);
}

long long h_fleet_dp_metric_checked(const struct h_fleet *f, const char *sample)
{
    char url[128];
    h_fleet_metrics_url(f, url, sizeof(url));
    long long v;
    int rc = h_metric_get(url, sample, &v);
    if (rc != 0 && rc != -ENOENT)
        fail_msg("GET %s: %s", url, strerror(-rc));
    return v;
}
