#!/usr/bin/env python3
"""Layering check: fails on an include that crosses a forbidden line.

switchyard's folders are layers (docs/architecture.md, "Source layout"):

    common/        includes only common/
    shm/           includes only common/ and shm/
    proto/         includes no daemon folder (dataplane/, controlplane/)
    dataplane/     never includes controlplane/, and the other way round
    inside each daemon, its subfolders (one per concern) never include the
                   process's root files, and FORBIDDEN_INSIDE lists which
                   subfolder may not include which
    shm/'s private layout header (the segment's structs) is included only
    from shm/ itself and from tests (which forge the segment's bytes).
    a types header (foo_types.h: types only, as HAProxy's foo-t.h) includes
    only other types headers and system headers, so including one never
    drags in functions, and a struct that embeds another names its types
    header.

It also fails on an include cycle between modules (a module is foo.c +
foo.h + foo_internal.h or foo_private.h; module A depends on module B when
one of A's files includes one of B's headers), except the cycles listed
in ALLOWED_CYCLES. The list is empty: the last designed cycle (listener,
forwarder, upstream) was broken by registered callbacks, so any cycle that
comes back is a regression.

Only quoted includes of project files are read ("dir/file.h"); system and
library headers (<...>) and generated protobuf headers under build/ are not
layers. Runs from the repository root:

    tests/check-layering.py            check the tree, exit 1 on a violation
    tests/check-layering.py --self-test  prove each rule fires on a bad tree

Python's standard library only, so it runs wherever `make test` runs.
"""

import os
import re
import sys
import tempfile

SOURCE_DIRS = ["common", "shm", "proto", "dataplane", "controlplane", "ctl"]
PRIVATE_SHM_HEADERS = ["shm/layout_private.h"]
# Who may read the segment's structs directly: shm/ itself, and tests,
# which forge a header's or a lease's bytes to reproduce what a crashed,
# older or hostile process leaves behind.
PRIVATE_SHM_READERS = re.compile(r"^(shm/|tests/)")

# (folder of the including file, folders it may include); None = any.
ALLOWED = {
    "common": {"common"},
    "shm": {"common", "shm"},
    "proto": {"common", "proto"},
    "dataplane": {"common", "shm", "proto", "dataplane"},
    "controlplane": {"common", "shm", "proto", "controlplane"},
    # switchyard-ctl is a client of the admin API: it shares only the config.
    "ctl": {"common", "ctl"},
}

# Inside the daemons, one folder per concern (docs/architecture.md). A
# subfolder never includes the process's own root files (dataplane.h,
# loop_run.h, controlplane.h, lease_reaper.h): the root assembles the
# process from the folders. And (subfolder, subfolders it may not include):
FORBIDDEN_INSIDE = {
    # The shared vocabulary (request and module types, the loop, guards,
    # workers) sits below the HTTP side and admission.
    "dataplane/core": {"dataplane/http"},
    # Observers read requests and legs, never the forwarding machinery.
    "dataplane/obs": {"dataplane/forward"},
    # Admission decides on keys, buckets and loads, not on how a request
    # is parsed into transfers or recorded.
    "dataplane/admission": {"dataplane/forward", "dataplane/obs"},
    # The libmicrohttpd side hands requests on; it decides no admission and
    # picks no worker.
    "dataplane/http": {"dataplane/admission", "dataplane/policy"},
    "dataplane/policy": {"dataplane/admission"},
    # The process's ties to its peers (the control plane's admin channel,
    # a hot-restart successor): plumbing, which knows nothing of requests.
    "dataplane/lifecycle": {"dataplane/http", "dataplane/forward", "dataplane/admission",
                            "dataplane/policy", "dataplane/obs"},
    # The control plane's workers: sources, KV events and probes are
    # independent of each other and of the admin API, which drives them.
    "controlplane/sources": {"controlplane/kv", "controlplane/probes", "controlplane/admin"},
    "controlplane/kv": {"controlplane/sources", "controlplane/probes", "controlplane/admin"},
    "controlplane/probes": {"controlplane/sources", "controlplane/kv", "controlplane/admin"},
}
DAEMON_ROOTS = ("dataplane", "controlplane")

# Cycles that are part of the design. Each is a set of modules (path
# without extension); a strongly connected component is allowed when it is
# a subset of one of them.
ALLOWED_CYCLES = []

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def source_files(root):
    for top in SOURCE_DIRS + ["tests"]:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root)


def includes_of(root, path):
    out = []
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                out.append((lineno, m.group(1)))
    return out


def folder_of(path):
    return path.split("/", 1)[0]


def module_of(path):
    """foo.c, foo.h and foo's own foo_internal.h / foo_private.h are one module."""
    stem = os.path.splitext(path)[0]
    return re.sub(r"_(internal|private)$", "", stem)


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; returns the components of size > 1."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.add(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    return comps


def subfolder_of(path):
    """dataplane/http/listener.c -> dataplane/http; a root file -> None."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[0] in DAEMON_ROOTS else None


def inside_problems(where, path, inc):
    mine, theirs = subfolder_of(path), subfolder_of(inc)
    top = inc.split("/")[0]
    if mine is not None and theirs is None and top == path.split("/")[0] and inc.count("/") == 1:
        return [f"{where}: {mine}/ includes {inc}, a file of the process's root, which only "
                "assembles the folders"]
    if mine is not None and theirs in FORBIDDEN_INSIDE.get(mine, ()):
        return [f"{where}: {mine}/ may not include {theirs}/ ({inc})"]
    return []


def check(root):
    problems = []
    graph = {}
    files = list(source_files(root))
    known = set(files)
    for path in files:
        folder = folder_of(path)
        for lineno, inc in includes_of(root, path):
            where = f"{path}:{lineno}"
            if inc in PRIVATE_SHM_HEADERS and not PRIVATE_SHM_READERS.match(path):
                problems.append(f"{where}: includes {inc}, the segment's private layout;"
                                " use shm/'s accessors")
            target = folder_of(inc)
            allowed = ALLOWED.get(folder)
            if allowed is not None and target in ALLOWED and target not in allowed:
                problems.append(f"{where}: {folder}/ may not include {target}/ ({inc})")
            problems += inside_problems(where, path, inc)
            if path.endswith("_types.h") and not inc.endswith("_types.h"):
                problems.append(f"{where}: {path}, a types header, includes {inc}: a types "
                                "header includes only other types headers (foo_types.h)")
            if folder in ALLOWED and inc in known and inc.endswith(".h"):
                mine, theirs = module_of(path), module_of(inc)
                if mine != theirs:
                    graph.setdefault(mine, set()).add(theirs)
                    graph.setdefault(theirs, set())
    for comp in strongly_connected(graph):
        if not any(comp <= allowed for allowed in ALLOWED_CYCLES):
            edges = sorted(f"{a} -> {b}" for a in comp for b in graph[a] if b in comp)
            problems.append("include cycle between modules " + ", ".join(sorted(comp)) +
                            " (" + "; ".join(edges) + ")")
    return problems


def self_test():
    """Each rule must fire on a tree built to break it, and a clean tree passes."""
    cases = {
        "clean": ({"common/a.h": "", "shm/b.h": '#include "common/a.h"\n'}, 0),
        "common includes shm": ({"common/a.c": '#include "shm/b.h"\n', "shm/b.h": ""}, 1),
        "shm includes dataplane": ({"shm/a.c": '#include "dataplane/b.h"\n',
                                    "dataplane/b.h": ""}, 1),
        "proto includes controlplane": ({"proto/a.c": '#include "controlplane/b.h"\n',
                                         "controlplane/b.h": ""}, 1),
        "dataplane includes controlplane": ({"dataplane/a.c": '#include "controlplane/b.h"\n',
                                             "controlplane/b.h": ""}, 1),
        "private layout outside shm": ({"dataplane/a.c": '#include "shm/layout_private.h"\n',
                                        "shm/layout_private.h": ""}, 1),
        "private layout in a test": ({"tests/unit/shm/test_shm.c":
                                        '#include "shm/layout_private.h"\n',
                                        "shm/layout_private.h": ""}, 0),
        "obs includes forward": ({"dataplane/obs/a.c": '#include "dataplane/forward/b.h"\n',
                                  "dataplane/forward/b.h": ""}, 1),
        "forward includes obs": ({"dataplane/forward/a.c": '#include "dataplane/obs/b.h"\n',
                                  "dataplane/obs/b.h": ""}, 0),
        "subfolder includes the root": ({"dataplane/core/a.c":
                                             '#include "dataplane/dataplane.h"\n',
                                         "dataplane/dataplane.h": ""}, 1),
        "root includes a subfolder": ({"dataplane/dataplane.c":
                                           '#include "dataplane/core/a.h"\n',
                                       "dataplane/core/a.h": ""}, 0),
        "probes include admin": ({"controlplane/probes/a.c":
                                      '#include "controlplane/admin/b.h"\n',
                                  "controlplane/admin/b.h": ""}, 1),
        "types header includes a functions header": ({"common/a_types.h": '#include "common/b.h"\n',
                                                     "common/b.h": ""}, 1),
        "types header includes a types header": ({"common/a_types.h":
                                                      '#include "common/b_types.h"\n',
                                                  "common/b_types.h": ""}, 0),
        "lifecycle includes forward": ({"dataplane/lifecycle/a.c":
                                            '#include "dataplane/forward/b.h"\n',
                                        "dataplane/forward/b.h": ""}, 1),
        "cycle": ({"controlplane/a.c": '#include "controlplane/b.h"\n',
                   "controlplane/a.h": "", "controlplane/b.h": "",
                   "controlplane/b.c": '#include "controlplane/a.h"\n'}, 1),
        "internal header of one module": ({"common/c.h": "",
                                           "common/c_internal.h": '#include "common/c.h"\n',
                                           "common/c.c": '#include "common/c_internal.h"\n'},
                                          0),
        "listener-forwarder cycle": ({"dataplane/http/listener.c":
                                         '#include "dataplane/forward/forwarder.h"\n',
                                     "dataplane/http/listener.h": "", "dataplane/forward/forwarder.h": "",
                                     "dataplane/forward/forwarder.c":
                                         '#include "dataplane/http/listener.h"\n'}, 1),
    }
    failed = 0
    for name, (tree, want) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for path, text in tree.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            got = len(check(root))
            ok = (got > 0) == (want > 0)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} self-test {name}: {got} problem(s)")
    return failed


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if sys.argv[1:] == ["--self-test"]:
        return 1 if self_test() else 0
    problems = check(root)
    for p in problems:
        print(f"layering: {p}", file=sys.stderr)
    if problems:
        print(f"layering: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print("layering: ok (folders, subfolders of the daemons, private segment layout, module "
          "include cycles)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
