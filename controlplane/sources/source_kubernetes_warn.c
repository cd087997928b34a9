/*
 * The Kubernetes source's warning tally (see source_kubernetes_internal.h).
 * A warning about one pod is worth a line; the same warning about each of
 * ten thousand pods a hostile or broken API server lists is a flood (a list
 * of 20 M tiny items once wrote 11 M lines). So pods are counted by reason
 * and written as one line per reason, with the count and the first pod's
 * name, when a list ends and at most once a second during a watch.
 *
 * Threading: the control plane's loop thread only.
 */
#include "controlplane/sources/source_kubernetes_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* What the line says after its count. */
static const char *kube_skip_text(const struct cp_kube *k, enum kube_skip why, char *buf,
                                  size_t len)
{
    switch (why) {
    case KUBE_SKIP_NO_NAME:
        return "items without a pod's metadata.name or uid, ignored";
    case KUBE_SKIP_BAD_KV:
        return "pods whose " KUBE_KV_EVENTS_ANNOTATION " or " KUBE_KV_EVENTS_REPLAY_ANNOTATION
               " annotation is no tcp://HOST:PORT endpoint (ignored)";
    case KUBE_SKIP_NO_PORT:
        return "pods without a container port named by discovery.kubernetes.port_name";
    case KUBE_SKIP_BAD_MODEL:
        return "pods whose model label is no usable model name (asking /v1/models)";
    case KUBE_SKIP_BAD_ROLE:
        return "pods whose role label is not regular|prefill|decode (using regular)";
    case KUBE_SKIP_MAX_PODS:
        snprintf(buf, len,
                 "new pods dropped: the source already tracks discovery.kubernetes.max_pods "
                 "(%u)",
                 k->kc->max_pods);
        return buf;
    case KUBE_SKIP_CONFLICT:
        return "pods not added: a worker of another source uses their id or url";
    case KUBE_SKIP_WAITING:
        return "pods not added yet: another pod's worker uses their id or url";
    default:
        return "pods skipped";
    }
}

void kube_tally_add(struct cp_kube *k, enum kube_skip why, const char *name)
{
    if (k->tally.n[why]++ == 0)
        snprintf(k->tally.first[why], sizeof(k->tally.first[why]), "%s", name);
    k->tally.pending = true;
}

void kube_tally_flush(struct cp_kube *k, const char *where)
{
    if (!k->tally.pending)
        return;
    for (int i = 0; i < KUBE_SKIP_COUNT; i++) {
        if (k->tally.n[i] == 0)
            continue;
        char buf[160];
        log_warn("discovery: Kubernetes %s: %llu %s (first: %s/%s)", where,
                 (unsigned long long)k->tally.n[i],
                 kube_skip_text(k, (enum kube_skip)i, buf, sizeof(buf)), k->ns, k->tally.first[i]);
    }
    memset(&k->tally, 0, sizeof(k->tally));
}
