/*
 * Pod to worker (see source_kubernetes_pod.h). Every read tolerates a
 * missing or mistyped field: a pod the API server sends half-filled (no IP
 * yet, no conditions yet) is simply not a worker yet.
 */
#include "controlplane/sources/source_kubernetes_pod.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

static const char *kube_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

void kube_pod_worker_id(const char *name, char *id, size_t id_len)
{
    size_t n = strlen(name);
    if (n < id_len) {
        snprintf(id, id_len, "%s", name);
        return;
    }
    /* Cut, then a hash of the whole name so two long names stay apart. */
    unsigned long long h = (unsigned long long)XXH3_64bits(name, n);
    int keep = (int)id_len - 1 - 17;
    snprintf(id, id_len, "%.*s-%016llx", keep > 0 ? keep : 0, name, h);
}

static bool kube_is_ready(const json_t *status)
{
    const json_t *conds = json_object_get(status, "conditions");
    size_t i;
    const json_t *c;
    json_array_foreach(conds, i, c)
    {
        const char *type = kube_str(c, "type");
        if (type != NULL && strcmp(type, "Ready") == 0) {
            const char *st = kube_str(c, "status");
            return st != NULL && strcmp(st, "True") == 0;
        }
    }
    return false;
}

/* The containerPort named name, 0 when none has it. */
static long kube_named_port(const json_t *spec, const char *name)
{
    size_t i, j;
    const json_t *ctr, *port;
    json_array_foreach(json_object_get(spec, "containers"), i, ctr)
    {
        json_array_foreach(json_object_get(ctr, "ports"), j, port)
        {
            const char *n = kube_str(port, "name");
            if (n != NULL && strcmp(n, name) == 0)
                return (long)json_integer_value(json_object_get(port, "containerPort"));
        }
    }
    return 0;
}

static bool kube_model_ok(const char *m)
{
    if (strlen(m) >= CFG_MODEL_MAX)
        return false;
    for (; *m != '\0'; m++)
        if ((unsigned char)*m < 0x20 || *m == 0x7f)
            return false;
    return true;
}

int kube_pod_parse(const json_t *pod, const struct cfg_kubernetes *k, struct kube_pod *out)
{
    memset(out, 0, sizeof(*out));
    out->role = CFG_ROLE_REGULAR;
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *status = json_object_get(pod, "status");
    const char *name = kube_str(meta, "name");
    const char *uid = kube_str(meta, "uid");
    if (name == NULL || uid == NULL || name[0] == '\0' || strlen(name) >= KUBE_NAME_MAX ||
        strlen(uid) >= KUBE_UID_MAX)
        return -EINVAL;
    snprintf(out->name, sizeof(out->name), "%s", name);
    snprintf(out->uid, sizeof(out->uid), "%s", uid);
    const char *rv = kube_str(meta, "resourceVersion");
    snprintf(out->resource_version, sizeof(out->resource_version), "%s", rv != NULL ? rv : "");
    kube_pod_worker_id(name, out->id, sizeof(out->id));

    const char *phase = kube_str(status, "phase");
    out->running = phase != NULL && strcmp(phase, "Running") == 0;
    out->ready = kube_is_ready(status);
    const json_t *del = json_object_get(meta, "deletionTimestamp");
    out->terminating = del != NULL && !json_is_null(del);

    const json_t *labels = json_object_get(meta, "labels");
    const char *model = k->model_label[0] != '\0' ? kube_str(labels, k->model_label) : NULL;
    if (model != NULL && kube_model_ok(model))
        snprintf(out->model, sizeof(out->model), "%s", model);
    else if (model != NULL)
        out->bad_model = true;
    const char *role = k->role_label[0] != '\0' ? kube_str(labels, k->role_label) : NULL;
    if (role != NULL && cfg_role_parse(role, &out->role) != 0) {
        out->role = CFG_ROLE_REGULAR;
        out->bad_role = true;
    }

    const json_t *notes = json_object_get(meta, "annotations");
    const char *kv = kube_str(notes, KUBE_KV_EVENTS_ANNOTATION);
    const char *kv_replay = kube_str(notes, KUBE_KV_EVENTS_REPLAY_ANNOTATION);
    out->kv_events.data_parallel_size = 1;
    if (kv != NULL && strlen(kv) < CFG_URL_MAX && cfg_kv_endpoint_is_valid(kv))
        snprintf(out->kv_events.endpoint, sizeof(out->kv_events.endpoint), "%s", kv);
    else if (kv != NULL)
        out->bad_kv_events = true;
    if (kv_replay != NULL && strlen(kv_replay) < CFG_URL_MAX &&
        cfg_kv_endpoint_is_valid(kv_replay) && out->kv_events.endpoint[0] != '\0')
        snprintf(out->kv_events.replay_endpoint, sizeof(out->kv_events.replay_endpoint), "%s",
                 kv_replay);
    else if (kv_replay != NULL)
        out->bad_kv_events = true;

    long port = k->port;
    if (k->port_name[0] != '\0') {
        port = kube_named_port(spec, k->port_name);
        out->no_port = port <= 0 || port > 65535;
    }
    const char *ip = kube_str(status, "podIP");
    if (ip != NULL && ip[0] != '\0' && !out->no_port && port > 0 && port <= 65535) {
        char raw[CFG_URL_MAX];
        bool v6 = strchr(ip, ':') != NULL;
        snprintf(raw, sizeof(raw), "%s://%s%s%s:%ld", k->scheme, v6 ? "[" : "", ip, v6 ? "]" : "",
                 port);
        char id[CFG_ID_MAX], err[128];
        if (cfg_canon_worker_url(raw, out->url, sizeof(out->url), id, sizeof(id), err,
                                 sizeof(err)) != 0)
            out->url[0] = '\0';
    }
    return 0;
}

bool kube_pod_is_worker(const struct kube_pod *p)
{
    return p->url[0] != '\0' && p->running && p->ready && !p->terminating;
}
