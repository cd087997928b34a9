/*
 * What the admin REST routes share: borrowed pointers to the control
 * plane's parts, and the hooks through which the admin server reports up to
 * the routes without the routes naming it. Types only; the objects are
 * created and destroyed by controlplane.c, which outlives every request.
 * The reply type every route fills is in admin_reply.h. Everything here is
 * touched by the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_ADMIN_CTX_H
#define SY_CONTROLPLANE_ADMIN_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "shm/segment.h"

struct hc_prober;
struct lr_scraper;
struct adm_channel;
struct cp_reset;
struct cp_decisions;
struct adm_http;
struct prom_writer;
struct cp_kube;
struct cp_registry;
struct kv_subscriber;

/* Appends a module's own families to the /metrics page (common/prom.h);
 * failures stay in the writer, which the page checks once at the end. */
typedef void (*adm_metrics_fn)(const void *arg, struct prom_writer *w);

/* Reloads the config (controlplane/admin/reload.h): 0 with a summary in msg, or a
 * negative errno (-EINVAL bad file, -EPERM / -EEXIST refused) with the reason. */
typedef int (*adm_reload_fn)(void *arg, char *msg, size_t msg_len);

/* Borrowed by every route; lives as long as the control plane's loop. */
struct adm_ctx {
    const struct cfg *cfg;
    struct shm_segment *seg;
    struct cp_registry *reg; /* the registry's writer (sources/registry_sync.h): adds, deletes */
    struct hc_prober *hc;
    struct lr_scraper *lr; /* load-report scraper (load_reports.h) */
    struct adm_channel *chan;
    struct cp_reset *reset;
    struct cp_decisions *decisions; /* GET /decisions */
    struct adm_http *http;          /* stored for controlplane.c; the routes never call it */
    struct cp_kube *kube;           /* Kubernetes discovery; NULL when not configured */
    struct kv_subscriber *kvs;      /* KV-event subscriber; NULL until a worker has kv_events */
    /* Registered by adm_http_create: the admin server's request counters. */
    adm_metrics_fn http_metrics;
    const void *http_metrics_arg;
    uint64_t started_ms; /* monotonic */
    /* Registered by controlplane.c: the KV event index's families; NULL
     * when there is no KV holder index. */
    adm_metrics_fn kv_metrics;
    const void *kv_metrics_arg;
    /* Registered by controlplane.c: POST /reload. */
    adm_reload_fn reload;
    void *reload_arg;
};

#endif
