/*
 * Worker sources: the things that may put workers in the registry. Today
 * the static config, the admin API and Kubernetes discovery. Each source owns the
 * workers it added (invariant 12): it proposes its desired set and the
 * registry sync (controlplane/sources/registry_sync.h) applies that set to its own
 * workers only, never to another source's. A source that cannot see its
 * truth (an API server down) keeps what it had by not syncing until it
 * sees it again: the guard is the source's own (the Kubernetes source's
 * cp_kube_run), because what it does around the sync (retiring re-created
 * pods' workers, setting drains) must wait as well.
 *
 * Which source added a worker is stored in its slot as a small tag
 * (shm_worker_info.source), so ownership survives control-plane restarts.
 * A new source is one new file (source_NAME.c) plus its row here.
 *
 * Types only, plus the kinds' names table (source.c). Control plane only.
 */
#ifndef SY_CONTROLPLANE_SOURCE_H
#define SY_CONTROLPLANE_SOURCE_H

#include <stddef.h>

#include "common/config.h"

/*
 * The kind of a source is also its tag in the slot (0..31). Unlike the
 * house rule, 0 is a real kind, the config: slots written before sources
 * existed hold 0 for configured workers and 1 (their FROM_API bit) for
 * API-added ones, so these two values are fixed.
 */
enum cp_source_kind {
    CP_SOURCE_STATIC = 0,     /* the config file's workers: list */
    CP_SOURCE_API = 1,        /* POST /workers */
    CP_SOURCE_KUBERNETES = 2, /* discovery.kubernetes: pods (source_kubernetes.h) */
    CP_SOURCE_COUNT,
};

/* "static config", "admin API"; "unknown source" for any other value. */
const char *cp_source_name(unsigned kind);

/* The short name GET /workers shows: "static", "api", "kubernetes"; "unknown". */
const char *cp_source_key(unsigned kind);

/* One worker as a source proposes it. An empty model means "learn it from
 * the worker": a learned model in the slot is then no change. */
struct cp_source_worker {
    char id[CFG_ID_MAX];
    char url[CFG_URL_MAX];
    char model[CFG_MODEL_MAX];
    enum cfg_role role;
    struct cfg_kv_events kv_events; /* endpoint "" = none; carried by the registry */
};

/*
 * What one source proposes: all of its workers (a source that cannot see
 * its truth makes no proposal, see above). Caller storage; workers is
 * borrowed for the call.
 */
struct cp_source_set {
    enum cp_source_kind kind;
    const struct cp_source_worker *workers;
    size_t n;
};

#endif
