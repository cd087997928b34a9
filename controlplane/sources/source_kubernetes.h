/*
 * The Kubernetes worker source (source tag 2): lists, then watches, the
 * pods of one namespace that match a label selector, and keeps its workers
 * in the registry equal to the pods that are workers
 * (source_kubernetes_pod.h), through the per-source registry sync. The
 * transport is source_kubernetes_http.h, on the control plane's loop; the
 * watch state machine is source_kubernetes.c, its registry side (proposal,
 * drains, the sweep of leaving workers) source_kubernetes_sync.c, sharing
 * source_kubernetes_internal.h.
 *
 * What a pod's life does to its worker:
 *  - Ready, Running, with an IP, not terminating: a worker (added with a new
 *    generation, routable at once, health probing on top).
 *  - turns NotReady (or loses its phase or IP while it exists): the worker
 *    stays in its slot, draining: no new requests, in-flight ones finish,
 *    its load stays attached. Ready again: no longer draining.
 *  - gets a deletionTimestamp, or is deleted: draining; removed once the
 *    pod is gone and the worker's load is 0 (at most dataplane.drain_timeout
 *    after the pod went).
 *  - re-created under the same name (new uid): the old worker is retired and
 *    a new one added, with a new generation.
 *  - two pods with one url (an IP reused while the old pod still drains):
 *    the worker already in its slot keeps it; the other pod is added once
 *    the url is free. The other pods' changes go on meanwhile.
 * The source only clears a drain it set itself, so an operator's drain of a
 * discovered worker (POST /workers/{id}/drain) stays.
 *
 * Watch correctness: the watch resumes from the last resourceVersion seen
 * (events and bookmarks); 410 Gone, as an HTTP status or as an ERROR event,
 * leads to a re-list; a watch that ends, is cut or stays silent past its
 * timeout is re-established (with backoff when it did not last); a full
 * re-list runs every `resync` even when the watch looks healthy, and marks
 * every pod it no longer lists as gone. The token file is re-read every
 * minute and on a 401.
 *
 * API server unreachable or failing: the source is stale: the registry is
 * left exactly as it is, a gauge and a log line say so, and it re-lists with
 * backoff until the server answers.
 *
 * After a control-plane restart the source finds its workers in the
 * registry (tag 2); the first list keeps each one whose pod still has the
 * same id and url in its slot, with its generation and load.
 *
 * Threading: the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_SOURCE_KUBERNETES_H
#define SY_CONTROLPLANE_SOURCE_KUBERNETES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/config.h"

struct cp_kube;
struct cp_registry;
struct prom_writer;

/*
 * Creates the source from cfg->discovery.kubernetes, resolving the
 * in-cluster defaults (api_server from KUBERNETES_SERVICE_HOST/_PORT, the
 * namespace from the service account's file). reg (the registry's writer,
 * registry_sync.h, over an open segment) and cfg are borrowed.
 * 0, or -EINVAL with a message in err (nothing to talk to), -ENOMEM.
 */
int cp_kube_create(struct cp_registry *reg, const struct cfg *cfg, struct cp_kube **out, char *err,
                   size_t err_len);
void cp_kube_destroy(struct cp_kube *k);

/* Points k at cfg, a reloaded config whose discovery.kubernetes settings
 * are the ones k runs with (a reload that changes them makes a new source
 * instead): the config k was made with may then be freed. */
void cp_kube_set_cfg(struct cp_kube *k, const struct cfg *cfg);

/* The descriptor to watch for EPOLLIN in the loop's epoll set. */
int cp_kube_fd(const struct cp_kube *k);

/* Runs due work: transfers, events, registry sync. Every loop pass. */
void cp_kube_run(struct cp_kube *k, uint64_t now_ms);

/* Milliseconds until cp_kube_run has work (-1 none, 0 now). */
int cp_kube_timeout_ms(const struct cp_kube *k, uint64_t now_ms);

/* Whether the source cannot see the API server right now (or not yet). */
bool cp_kube_is_stale(const struct cp_kube *k);

/* The pod behind a discovered worker: false when the source knows none.
 * The strings are borrowed until the next cp_kube_run. */
bool cp_kube_pod_of(const struct cp_kube *k, const char *worker_id, const char **ns,
                    const char **name, const char **uid);

/* GET /status's "kubernetes" member (new reference). */
json_t *cp_kube_status_json(const struct cp_kube *k, uint64_t now_ms);

/* The source's families on the control plane's /metrics page. */
void cp_kube_metrics(const struct cp_kube *k, struct prom_writer *w);

/*
 * Feeds bytes of a watch stream as if they arrived on a running watch
 * (events, bookmarks, errors), then syncs the registry as cp_kube_run
 * does, whenever the events changed the table: unlike cp_kube_run, also
 * before a first list and while stale, which is how the source stays after
 * cp_kube_reset. For the fuzz target, which has no API server: nothing is
 * started. false when the stream was refused (a real watch would be
 * dropped and re-established).
 */
bool cp_kube_feed_watch(struct cp_kube *k, const char *bytes, size_t len, uint64_t now_ms);

/*
 * Makes k what cp_kube_create made: no pods, no resource version, no
 * counters, no transfer, stale until a first list; it keeps its memory,
 * curl handle, token and api server. For the fuzz target, which runs
 * every input through one source (a new one costs a curl handle and an
 * epoll set). The registry is left as it is: emptying it of the source's
 * workers is the caller's part.
 */
void cp_kube_reset(struct cp_kube *k);

/* For the fuzz target: fn(user, event) sees every event the watch's line
 * splitter hands up, before the source acts on it (the event is borrowed
 * for the call). NULL: none, as in the control plane. Kept by a reset. */
void cp_kube_set_event_tap(struct cp_kube *k, void (*fn)(void *user, const json_t *event),
                           void *user);

#endif
