#!/usr/bin/python3
"""Static checks of deploy/kubernetes/*.yaml, for a machine without a cluster.

Usage: check_kubernetes.py [--one-workload] OUT_DIR FILE...

Parses every YAML document (Debian's python3-yaml, the one library the
deploy checks add: kubeconform/kubeval are not packaged in Debian 12) and
checks what a typo would break at apply or run time:
  * every document has apiVersion, kind and metadata.name, unique per kind;
  * workloads: the selector matches the template labels; every container
    has an image, resources (requests and limits), liveness and readiness
    probes; named probe ports exist; dataplane.tls files in a Secret of
    the dataplane, its probes and scrape annotation speaking HTTPS; every volumeMount names a volume; every
    ConfigMap volume names a ConfigMap of the set and its items' keys exist;
  * the switchyard pod: two containers, "controlplane" and "dataplane", both
    mounting a memory-backed emptyDir at /dev/shm and the directory of the
    config's admin_socket from one shared volume; no shared PID namespace;
    the same uid; the config's ports match the container ports, the
    Prometheus annotations and the Service; the token file lies in a
    mounted Secret; the control plane's probe passes the token file;
    terminationGracePeriodSeconds exceeds drain_timeout;
  * the Deployment's and the DaemonSet's pod specs are identical;
  * every Service selects a workload's pods and targets a port they have;
  * Kubernetes discovery (a config with discovery.kubernetes): a
    ServiceAccount, a Role granting get, list and watch on pods and nothing
    more, a RoleBinding of the two; the workload runs as that
    ServiceAccount with its token mounted.
--one-workload: a set with one workload (an example beside the main one)
instead of the Deployment + DaemonSet pair.
Writes each embedded switchyard config to OUT_DIR/<configmap>.<key> so the
real config loader can check it (deploy/check/cfgcheck.c).
Exits 1 with one line per problem.
"""
import os
import posixpath
import re
import sys

import yaml

problems = []


def bad(where, msg):
    problems.append(f"{where}: {msg}")


def get(d, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", str(text))
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2)
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1])


def mount_of(container, path):
    """The volumeMount of container whose mountPath contains path."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m.get("mountPath", "").rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


def main():
    args = sys.argv[1:]
    one_workload = bool(args) and args[0] == "--one-workload"
    if one_workload:
        args = args[1:]
    out_dir, files = args[0], args[1:]
    docs = []
    for f in files:
        try:
            with open(f) as fh:
                for i, d in enumerate(yaml.safe_load_all(fh)):
                    if d is not None:
                        docs.append((f"{f}#{i}", d))
        except yaml.YAMLError as e:
            bad(f, f"YAML: {e}")
    seen = {}
    for where, d in docs:
        if not isinstance(d, dict):
            bad(where, "not a mapping")
            continue
        for k in ("apiVersion", "kind"):
            if not d.get(k):
                bad(where, f"missing {k}")
        name = get(d, "metadata", "name")
        if not name:
            bad(where, "missing metadata.name")
        key = (d.get("kind"), name)
        if key in seen:
            bad(where, f"duplicate {key[0]} {name} (also {seen[key]})")
        seen[key] = where

    by_kind = {}
    for where, d in docs:
        if isinstance(d, dict):
            by_kind.setdefault(d.get("kind"), []).append((where, d))

    configmaps = {get(d, "metadata", "name"): d for _, d in by_kind.get("ConfigMap", [])}
    configs = {}
    for cm_name, cm in configmaps.items():
        for key, text in (cm.get("data") or {}).items():
            if not key.endswith(".yaml"):
                continue
            try:
                configs[(cm_name, key)] = yaml.safe_load(text) or {}
            except yaml.YAMLError as e:
                bad(f"ConfigMap {cm_name}", f"{key}: YAML: {e}")
                continue
            with open(os.path.join(out_dir, f"{cm_name}.{key}"), "w") as fh:
                fh.write(text)

    workloads = by_kind.get("Deployment", []) + by_kind.get("DaemonSet", [])
    if one_workload:
        if len(workloads) != 1:
            bad("deploy/kubernetes", f"expected one workload, got {len(workloads)}")
    elif not by_kind.get("Deployment") or not by_kind.get("DaemonSet"):
        bad("deploy/kubernetes", "expected a Deployment and a DaemonSet")
    pod_specs = []
    for where, w in workloads:
        check_workload(where, w, configmaps, configs)
        pod_specs.append((where, get(w, "spec", "template", "spec")))
    for where, spec in pod_specs[1:]:
        if spec != pod_specs[0][1]:
            bad(where, f"pod spec differs from {pod_specs[0][0]}'s (keep the variants identical)")

    for where, svc in by_kind.get("Service", []):
        check_service(where, svc, workloads)

    if any(get(c, "discovery", "kubernetes") is not None for c in configs.values()):
        check_discovery_rbac(by_kind, workloads)

    for p in problems:
        print(f"check_kubernetes: {p}", file=sys.stderr)
    if not problems:
        print(f"check_kubernetes: {len(docs)} documents in {len(files)} files ok")
    return 1 if problems else 0


def check_workload(where, w, configmaps, configs):
    kind = w.get("kind")
    where = f"{where} ({kind} {get(w, 'metadata', 'name')})"
    sel = get(w, "spec", "selector", "matchLabels") or {}
    labels = get(w, "spec", "template", "metadata", "labels") or {}
    if not sel:
        bad(where, "spec.selector.matchLabels is empty")
    for k, v in sel.items():
        if labels.get(k) != v:
            bad(where, f"selector {k}={v} does not match the template labels")
    spec = get(w, "spec", "template", "spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    containers = {c.get("name"): c for c in spec.get("containers", [])}
    for vname, v in volumes.items():
        cm = get(v, "configMap", "name")
        if cm is not None:
            if cm not in configmaps:
                bad(where, f"volume {vname}: ConfigMap {cm} is not in deploy/kubernetes")
            else:
                for item in get(v, "configMap", "items", default=[]):
                    if item.get("key") not in (configmaps[cm].get("data") or {}):
                        bad(where, f"volume {vname}: ConfigMap {cm} has no key {item.get('key')}")
    for cname, c in containers.items():
        cw = f"{where} container {cname}"
        if not c.get("image"):
            bad(cw, "no image")
        for r in ("requests", "limits"):
            res = get(c, "resources", r) or {}
            for k in ("cpu", "memory"):
                if k not in res:
                    bad(cw, f"resources.{r}.{k} missing")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in c:
                bad(cw, f"no {probe}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            port = get(c, probe, "httpGet", "port")
            if isinstance(port, str) and port not in ports:
                bad(cw, f"{probe} uses port {port}, which the container does not declare")
        for m in c.get("volumeMounts", []):
            if m.get("name") not in volumes:
                bad(cw, f"volumeMount {m.get('name')} names no volume")
        if get(c, "securityContext", "allowPrivilegeEscalation") is not False:
            bad(cw, "securityContext.allowPrivilegeEscalation must be false")

    # ---- the switchyard pod ----------------------------------------------------
    if set(containers) != {"controlplane", "dataplane"}:
        bad(where, f"containers {sorted(containers)}, expected controlplane and dataplane")
        return
    if spec.get("shareProcessNamespace"):
        bad(where, "shareProcessNamespace must stay off: the design does not need it")
    uid = get(spec, "securityContext", "runAsUser")
    for cname, c in containers.items():
        if get(c, "securityContext", "runAsUser", default=uid) != uid or uid in (None, 0):
            bad(where, f"{cname}: both containers must run as the same non-root uid")
    shm = volumes.get(mount_name(containers["controlplane"], "/dev/shm"))
    if shm is None or get(shm, "emptyDir", "medium") != "Memory":
        bad(where, "/dev/shm must be a memory-backed emptyDir (emptyDir.medium: Memory)")
    if mount_name(containers["controlplane"], "/dev/shm") != mount_name(
        containers["dataplane"], "/dev/shm"
    ):
        bad(where, "/dev/shm must be the same volume in both containers")

    cfg_mount = None
    for cname, c in containers.items():
        args = c.get("args") or []
        if not args or args[0] != cname:
            bad(where, f"{cname}: args must start with '{cname}' (the entrypoint's choice)")
        if "--config" not in args:
            bad(where, f"{cname}: no --config in args")
            continue
        path = args[args.index("--config") + 1]
        m = mount_of(c, path)
        if m is None or "configMap" not in volumes.get(m["name"], {}):
            bad(where, f"{cname}: --config {path} is not in a ConfigMap volume")
            continue
        rel = posixpath.relpath(path, m["mountPath"])
        cm = get(volumes[m["name"]], "configMap", "name")
        cfg_mount = (cm, rel)
    cfg = configs.get(cfg_mount) if cfg_mount else None
    if cfg is None:
        bad(where, f"the config file {cfg_mount} is not a YAML key of a ConfigMap")
        return

    sock = get(cfg, "controlplane", "admin_socket", default="/run/switchyard/admin.sock")
    sock_dir = posixpath.dirname(sock)
    names = {mount_name(c, sock_dir) for c in containers.values()}
    if len(names) != 1 or None in names:
        bad(where, f"admin_socket {sock}: {sock_dir} must be one volume mounted in both containers")
    elif "emptyDir" not in volumes.get(names.pop(), {}):
        bad(where, f"admin_socket {sock}: {sock_dir} should be an emptyDir")

    token = get(cfg, "controlplane", "admin_token_file", default="")
    cp = containers["controlplane"]
    env = {e.get("name"): e.get("value") for e in cp.get("env", [])}
    if token:
        m = mount_of(cp, token)
        if m is None or "secret" not in volumes.get(m["name"], {}):
            bad(where, f"admin_token_file {token} is not in a Secret volume of the controlplane")
        if env.get("SWITCHYARD_ADMIN_TOKEN_FILE") != token:
            bad(where, "controlplane env SWITCHYARD_ADMIN_TOKEN_FILE must be admin_token_file "
                "(the exec probe reads it)")
        for probe in ("livenessProbe", "readinessProbe"):
            if get(cp, probe, "httpGet") is not None:
                bad(where, f"controlplane {probe}: an httpGet probe gets 401 with a token set")

    # dataplane.tls: its files in a Secret of the dataplane; probes and the
    # scrape speak HTTPS (an HTTP probe of a TLS port never succeeds).
    dp = containers["dataplane"]
    tls = get(cfg, "dataplane", "tls") or {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        path = tls.get(key) or ""
        if path:
            m = mount_of(dp, path)
            if m is None or "secret" not in volumes.get(m["name"], {}):
                bad(where, f"dataplane.tls.{key} {path} is not in a Secret volume of the dataplane")
    want_scheme = "HTTPS" if tls.get("cert_file") else "HTTP"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if get(dp, probe, "httpGet") is not None:
            scheme = get(dp, probe, "httpGet", "scheme", default="HTTP")
            if scheme != want_scheme:
                bad(where, f"dataplane {probe}: scheme {scheme}, dataplane.listen speaks {want_scheme}")
    ann_scheme = (get(w, "spec", "template", "metadata", "annotations") or {}).get(
        "prometheus.io/scheme", "http")
    if ann_scheme != want_scheme.lower():
        bad(where, f"prometheus.io/scheme must be \"{want_scheme.lower()}\"")

    admin_port = port_of(get(cfg, "controlplane", "admin_listen", default="127.0.0.1:8081"))
    dp_port = port_of(get(cfg, "dataplane", "listen", default="127.0.0.1:8080"))
    cp_ports = {p.get("name"): p.get("containerPort") for p in cp.get("ports", [])}
    dp_ports = {p.get("name"): p.get("containerPort") for p in containers["dataplane"].get("ports", [])}
    if cp_ports.get("admin") != admin_port:
        bad(where, f"controlplane port 'admin' must be admin_listen's {admin_port}")
    if dp_ports.get("http") != dp_port:
        bad(where, f"dataplane port 'http' must be dataplane.listen's {dp_port}")
    if env.get("SWITCHYARD_ADMIN_URL", "").rsplit(":", 1)[-1] != str(admin_port):
        bad(where, f"SWITCHYARD_ADMIN_URL must use port {admin_port}")
    ann = get(w, "spec", "template", "metadata", "annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(dp_port):
        bad(where, f"prometheus.io/scrape must be \"true\" and prometheus.io/port \"{dp_port}\"")
    drain = duration_s(get(cfg, "dataplane", "drain_timeout", default="600s"))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if drain is not None and grace <= drain:
        bad(where, f"terminationGracePeriodSeconds {grace} must exceed drain_timeout ({drain:g}s)")


def check_discovery_rbac(by_kind, workloads):
    """Discovery lists and watches pods: the pod's ServiceAccount may, and no more."""
    where = "discovery RBAC"
    accounts = {get(d, "metadata", "name") for _, d in by_kind.get("ServiceAccount", [])}
    if not accounts:
        bad(where, "no ServiceAccount")
    readers = set()
    for w, role in by_kind.get("Role", []):
        name = get(role, "metadata", "name")
        verbs = set()
        for rule in role.get("rules") or []:
            if "" not in (rule.get("apiGroups") or []) or "pods" not in (rule.get("resources") or []):
                bad(f"{w} (Role {name})", f"rule {rule} is not about core pods")
                continue
            verbs |= set(rule.get("verbs") or [])
        if not {"get", "list", "watch"} <= verbs:
            bad(f"{w} (Role {name})", f"verbs {sorted(verbs)} lack get, list or watch on pods")
        if verbs - {"get", "list", "watch"}:
            bad(f"{w} (Role {name})", f"verbs {sorted(verbs - {'get', 'list', 'watch'})} "
                "grant more than discovery needs")
        readers.add(name)
    if not readers:
        bad(where, "no Role granting get, list and watch on pods")
    bound = set()
    for w, rb in by_kind.get("RoleBinding", []):
        ref = rb.get("roleRef") or {}
        if ref.get("kind") != "Role" or ref.get("name") not in readers:
            bad(f"{w} (RoleBinding)", f"roleRef {ref} names no Role of the set")
            continue
        for sub in rb.get("subjects") or []:
            if sub.get("kind") == "ServiceAccount" and sub.get("name") in accounts:
                bound.add(sub.get("name"))
    for w, wl in workloads:
        spec = get(wl, "spec", "template", "spec") or {}
        sa = spec.get("serviceAccountName")
        if sa not in bound:
            bad(w, f"serviceAccountName {sa} is not a ServiceAccount bound to the pod reader Role")
        if spec.get("automountServiceAccountToken") is False:
            bad(w, "automountServiceAccountToken is false: discovery reads the mounted token")


def mount_name(container, path):
    m = mount_of(container, path)
    return m["name"] if m else None


def check_service(where, svc, workloads):
    where = f"{where} (Service {get(svc, 'metadata', 'name')})"
    sel = get(svc, "spec", "selector") or {}
    if not sel:
        bad(where, "no selector")
        return
    hits = []
    for _, w in workloads:
        labels = get(w, "spec", "template", "metadata", "labels") or {}
        if all(labels.get(k) == v for k, v in sel.items()):
            hits.append(w)
    if not hits:
        bad(where, f"selector {sel} matches no workload's pods")
    for p in get(svc, "spec", "ports", default=[]):
        tp = p.get("targetPort", p.get("port"))
        for w in hits:
            names = {
                q.get("name"): q.get("containerPort")
                for c in get(w, "spec", "template", "spec", "containers", default=[])
                for q in c.get("ports", [])
            }
            if isinstance(tp, str) and tp not in names:
                bad(where, f"targetPort {tp} is no container port of {get(w, 'metadata', 'name')}")
            if isinstance(tp, int) and tp not in names.values():
                bad(where, f"targetPort {tp} is no container port of {get(w, 'metadata', 'name')}")


if __name__ == "__main__":
    sys.exit(main())
