/*
 * Pod to worker: what the Kubernetes worker source reads from one Pod
 * object (a list item or a watch event's object) and the rule that decides
 * whether the pod is a worker. Pure functions over jansson values; no I/O,
 * no registry.
 *
 * A pod is a worker when status.podIP is set, status.phase is Running, its
 * Ready condition is True and it has no metadata.deletionTimestamp (the
 * label selector is applied by the API server). Its worker id is the pod's
 * name (names longer than a worker id are cut and suffixed with a hash of
 * the whole name), its url scheme://podIP:port with port the configured
 * number or the container port named port_name, its model the value of
 * model_label ("" = learn it from the pod's /v1/models), its role the value
 * of role_label (regular when absent or not a role). Its KV-cache event
 * endpoints come from the annotations switchyard.io/kv-events-endpoint and
 * switchyard.io/kv-events-replay-endpoint (tcp://HOST:PORT; a HOST of '*',
 * as in the default endpoint of vLLM, or none means the pod's IP); an
 * annotation that is no such endpoint is ignored (bad_kv_events).
 */
#ifndef SY_CONTROLPLANE_SOURCE_KUBERNETES_POD_H
#define SY_CONTROLPLANE_SOURCE_KUBERNETES_POD_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "common/config.h"

#define KUBE_NAME_MAX 254 /* a pod name: a DNS subdomain of at most 253 */
#define KUBE_UID_MAX  64
#define KUBE_RV_MAX   64

/* What one pod says about itself. Caller storage. */
struct kube_pod {
    char name[KUBE_NAME_MAX];
    char uid[KUBE_UID_MAX];
    char resource_version[KUBE_RV_MAX];
    char id[CFG_ID_MAX];       /* the worker id it gets */
    char url[CFG_URL_MAX];     /* "" when it has no address or port yet */
    char model[CFG_MODEL_MAX]; /* "" = learn */
    enum cfg_role role;
    bool running; /* status.phase == Running */
    bool ready;   /* condition Ready == True */
    bool terminating;
    bool bad_role;                  /* role_label held something else than a role */
    bool bad_model;                 /* model_label held something no worker model can be */
    bool no_port;                   /* port_name given and no container port has that name */
    struct cfg_kv_events kv_events; /* from the annotations; endpoint "" = none */
    bool bad_kv_events;             /* an annotation was not a tcp://HOST:PORT endpoint */
};

#define KUBE_KV_EVENTS_ANNOTATION        "switchyard.io/kv-events-endpoint"
#define KUBE_KV_EVENTS_REPLAY_ANNOTATION "switchyard.io/kv-events-replay-endpoint"

/*
 * Reads a Pod object. Returns 0, or -EINVAL when it has no
 * metadata.name or uid (not a pod).
 */
int kube_pod_parse(const json_t *pod, const struct cfg_kubernetes *k, struct kube_pod *out);

/* Whether the pod is a worker right now (see above). */
bool kube_pod_is_worker(const struct kube_pod *p);

/* The worker id for a pod name (see above). */
void kube_pod_worker_id(const char *name, char *id, size_t id_len);

#endif
