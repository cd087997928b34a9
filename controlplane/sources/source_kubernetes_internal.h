/*
 * What the Kubernetes worker source's files share, and nobody else sees
 * (the contract is source_kubernetes.h): the source's struct and its table
 * of pods, for the two halves of the source. source_kubernetes.c is the
 * watch state machine that keeps the table equal to what the API server
 * says (events, lists, backoff, staleness); source_kubernetes_sync.c turns
 * the table into a proposal for the per-source registry sync, applies it,
 * and sets or clears the drains it owns. The state machine only marks the
 * table dirty; it calls the sync once per loop pass, and never while the
 * source is stale (invariant 12: what it cannot see, it does not decide).
 *
 * Threading: the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_SOURCE_KUBERNETES_INTERNAL_H
#define SY_CONTROLPLANE_SOURCE_KUBERNETES_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/config.h"
#include "common/rng.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_kubernetes.h"
#include "controlplane/sources/source_kubernetes_pod.h"
#include "shm/registry.h"
#include "shm/segment.h"

#define KUBE_TOKEN_MAX 8192

struct kube_api;

enum kube_state {
    KUBE_IDLE = 1,
    KUBE_LISTING,
    KUBE_WATCHING,
};

enum kube_ev_type {
    KUBE_EV_ADDED,
    KUBE_EV_MODIFIED,
    KUBE_EV_DELETED,
    KUBE_EV_BOOKMARK,
    KUBE_EV_ERROR,
    KUBE_EV_COUNT,
};

/* Why a pod (or a list item) was ignored or held back, for the warning
 * tally: one line per reason per list, or per second of a watch, with a
 * count and the first name, however many items deserve one. */
enum kube_skip {
    KUBE_SKIP_NO_NAME,   /* an item without metadata.name or uid: no pod */
    KUBE_SKIP_BAD_KV,    /* a kv-events annotation that is no endpoint */
    KUBE_SKIP_NO_PORT,   /* no container port named port_name */
    KUBE_SKIP_BAD_MODEL, /* a model label no model name can be */
    KUBE_SKIP_BAD_ROLE,  /* a role label that is no role */
    KUBE_SKIP_MAX_PODS,  /* a watch event adding a pod beyond max_pods: dropped */
    KUBE_SKIP_CONFLICT,  /* another source's worker has its id or url */
    KUBE_SKIP_WAITING,   /* another pod's worker has its id or url */
    KUBE_SKIP_COUNT,
};

struct kube_tally {
    uint64_t n[KUBE_SKIP_COUNT];
    char first[KUBE_SKIP_COUNT][KUBE_NAME_MAX + 16];
    bool pending;
};

/* One pod (or one adopted worker). Owned by the table. */
struct kube_entry {
    struct kube_pod pod; /* last known state; pod.uid "" for an adopted worker not listed yet */
    bool exists;         /* the API server has the pod */
    bool registered;     /* its worker is in the registry (as of the last sync) */
    bool drained_by_us;
    bool seen;     /* listed in the current list */
    bool replaced; /* re-created under a new uid: retire the old worker first */
    bool warned;   /* a conflict or bad label was logged */
    uint64_t gone_ms;
    long prop; /* its index in the last proposal, -1 when not proposed */
};

/* Owned by the control plane (cp_kube_create/destroy); loop thread only. */
struct cp_kube {
    struct cp_registry *reg;         /* borrowed: the registry's writer */
    struct shm_segment *seg;         /* borrowed: reg->seg */
    const struct cfg *cfg;           /* borrowed */
    const struct cfg_kubernetes *kc; /* &cfg->discovery.kubernetes */
    struct kube_api *api;
    char base[CFG_URL_MAX]; /* api server, no trailing '/' */
    char ns[CFG_ID_MAX];
    char *selector_q; /* url-escaped label selector */
    char token[KUBE_TOKEN_MAX];
    uint64_t token_read_ms;
    bool token_retried; /* a 401 already re-read the token for this attempt */
    struct rng rng;

    enum kube_state state;
    uint64_t next_attempt_ms;
    bool next_is_watch;
    uint32_t failures; /* consecutive */
    bool stale;
    bool listed_once;
    uint64_t stale_since_ms;
    uint64_t last_list_ms;
    uint64_t watch_started_ms;
    char rv[KUBE_RV_MAX];
    char cont[1024]; /* continue token of the list in progress */
    char list_rv[KUBE_RV_MAX];
    bool want_relist; /* a 410 ERROR event */
    bool watch_error; /* another ERROR event */

    struct kube_entry *entries;
    size_t n, cap;
    /* The list page being read (kube_on_item): every item counted, the
     * pods among them staged until the page is whole, so a refused page
     * changes nothing. At most max_list_items of them. */
    struct kube_pod *page;
    size_t page_n, page_cap;
    size_t page_items; /* items of this page so far */
    size_t list_items; /* items of the list's earlier pages */
    char refusal[160]; /* why kube_on_item refused the page; "" = it did not */
    struct kube_tally tally;
    uint64_t next_tally_ms; /* a watch's tally is written at most once a second */
    bool dirty;             /* the table changed since the last sync */
    /* The sync's (source_kubernetes_sync.c); allocated by cp_kube_create. */
    uint64_t next_sweep_ms;
    struct shm_worker_info *snap; /* max_workers scratch */
    size_t *snap_ix;              /* snap's indices sorted by id */
    size_t n_snap;
    struct cp_source_worker *proposal;
    size_t proposal_cap;
    bool *drain;

    uint64_t events[KUBE_EV_COUNT];
    uint64_t relists, errors, watches;
    uint64_t refused_pages[2]; /* by max_list_items, max_pods */
    uint64_t dropped_pods;     /* watch events adding pods beyond max_pods */

    void (*tap)(void *user, const json_t *event); /* cp_kube_set_event_tap */
    void *tap_user;
};

/* ---- source_kubernetes_warn.c ---------------------------------------------- */

/* Counts one skipped item or pod under why (name: the first one's, for the
 * line). */
void kube_tally_add(struct cp_kube *k, enum kube_skip why, const char *name);

/* Writes one line per reason counted since the last flush ("list" or
 * "watch" says where they came from), then starts over. */
void kube_tally_flush(struct cp_kube *k, const char *where);

/* ---- source_kubernetes_sync.c ---------------------------------------------- */

/*
 * Turns the table into one proposal and applies it: retires the workers of
 * re-created pods first, syncs the registry (cp_registry_sync), sets or
 * clears the drains the source owns, and forgets pods whose pod and worker
 * are both gone. Clears dirty (sets it again when out of memory) and
 * schedules the next sweep of leaving workers. Only on a view the source
 * trusts: the caller checks listed_once and stale.
 */
void kube_sync(struct cp_kube *k, uint64_t now_ms);

/* Whether a worker whose pod went is still registered: a later sync (the
 * sweep, every KUBE_SWEEP_MS) removes it once idle. */
bool kube_sync_has_leaving(const struct cp_kube *k);

/* Takes a registry snapshot into k->snap (n_snap workers), sorted by id. */
void kube_sync_snapshot(struct cp_kube *k);

#endif
