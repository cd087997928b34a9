#!/usr/bin/env python3
"""Mutation check: every curated mutant must be killed by the tests it names.

A mutant (tests/mutants/NAME.mutant, format in tests/mutants/README.md) is a
small careless edit of the product — a bound off by one, a release deleted, a
condition dropped — together with the invariant or fix it attacks and the
focused test binaries that must catch it. This script applies the mutants
one at a time to a scratch copy of the tree, builds, runs those binaries and
fails naming every mutant that survives. It is how the suite proves that it
can see the failures it claims to see, and keeps proving it as code moves.

    tests/check-mutants.py                 every mutant (minutes; make check-mutants)
    tests/check-mutants.py --only A,B      only these mutants
    tests/check-mutants.py --lint          parse every mutant, check each edit still
                                           applies to the tree and the list covers
                                           every invariant and security fix (seconds;
                                           part of make test)
    --scratch DIR                          the scratch copy (default build/mutants/tree);
                                           kept between runs so builds are incremental
    --no-baseline                          skip running the tests unmutated first

A mutant that no longer applies (its text is gone), or that does not build,
is a failure too: it proves nothing, so it must be updated, not ignored.
The tests run unmutated first (the baseline): a test that already fails
would "kill" every mutant. Python's standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MUTANT_DIR = os.path.join(ROOT, "tests", "mutants")
KEYS = ("attacks", "tests", "file", "find", "find+", "replace", "replace+")
INVARIANTS = 12  # DESIGN.md's numbered invariants
REVIEW_EDITS = 20  # the suite review's careless edits (tests/mutants/README.md)
TEST_TIMEOUT_S = "180"  # per binary; a mutant that hangs a test is killed by it


class Mutant:
    def __init__(self, name):
        self.name = name
        self.comment = []
        self.attacks = []
        self.tests = []
        self.edits = []  # [file, find, replace]


def parse(path):
    m = Mutant(os.path.basename(path)[: -len(".mutant")])
    problems = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            where = f"{os.path.relpath(path, ROOT)}:{lineno}"
            if line.startswith("#"):
                m.comment.append(line[1:].strip())
                continue
            if not line.strip():
                continue
            key, sep, value = line.partition(": ")
            if not sep and line.endswith(":"):
                key, value = line[:-1], ""
            elif not sep:
                problems.append(f"{where}: expected 'key: value'")
                continue
            if key == "attacks":
                m.attacks.append(value)
            elif key == "tests":
                m.tests.extend(value.split())
            elif key == "file":
                m.edits.append([value, None, None])
            elif key in ("find", "replace", "find+", "replace+"):
                if not m.edits:
                    problems.append(f"{where}: '{key}' before any 'file'")
                    continue
                i = 1 if key.startswith("find") else 2
                if key.endswith("+"):  # the next line of a multi-line text
                    if m.edits[-1][i] is None:
                        problems.append(f"{where}: '{key}' with no '{key[:-1]}' before it")
                    else:
                        m.edits[-1][i] += "\n" + value
                    continue
                if m.edits[-1][i] is not None:
                    problems.append(f"{where}: a second '{key}' for one 'file'")
                m.edits[-1][i] = value
            else:
                problems.append(f"{where}: unknown key '{key}' (one of {', '.join(KEYS)})")
    rel = os.path.relpath(path, ROOT)
    if not m.attacks:
        problems.append(f"{rel}: no 'attacks'")
    if not m.tests:
        problems.append(f"{rel}: no 'tests'")
    if not m.edits:
        problems.append(f"{rel}: no 'file'")
    for e in m.edits:
        if e[1] is None or e[2] is None:
            problems.append(f"{rel}: file {e[0]} needs one 'find' and one 'replace'")
        elif e[1] == e[2]:
            problems.append(f"{rel}: file {e[0]}: 'replace' equals 'find'")
    return m, problems


def load_mutants():
    mutants, problems = [], []
    for name in sorted(os.listdir(MUTANT_DIR)):
        if name.endswith(".mutant"):
            m, p = parse(os.path.join(MUTANT_DIR, name))
            mutants.append(m)
            problems += p
    return mutants, problems


def apply_edits(tree, m):
    """Returns ({path: original text}, problems); applies nothing on a problem."""
    originals, texts, problems = {}, {}, []
    for path, find, replace in m.edits:
        full = os.path.join(tree, path)
        if full not in texts:
            try:
                with open(full, encoding="utf-8") as f:
                    texts[full] = originals[full] = f.read()
            except OSError as e:
                problems.append(f"{m.name}: {path}: {e.strerror}")
                continue
        n = texts[full].count(find)
        if n != 1:
            problems.append(f"{m.name}: {path}: the text to find occurs {n} times, not once: "
                            f"{find!r}")
            continue
        texts[full] = texts[full].replace(find, replace)
    if problems:
        return {}, problems
    for full, text in texts.items():
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return originals, []


def restore(originals):
    for full, text in originals.items():
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)  # a new mtime: make rebuilds what the mutant built


def security_fixes():
    """The numbers of docs/security.md's fixed findings (its '| N | severity |' rows)."""
    nums = set()
    with open(os.path.join(ROOT, "docs", "security.md"), encoding="utf-8") as f:
        for line in f:
            mm = re.match(r"^\|\s*(\d+)\s*\|\s*(high|medium|low|—|-)\s*\|", line)
            if mm:
                nums.add(int(mm.group(1)))
    return nums


def lint(mutants):
    problems = []
    for m in mutants:
        problems += check_applies(ROOT, m)
        for t in m.tests:
            if not os.path.exists(os.path.join(ROOT, t + ".c")):
                problems.append(f"{m.name}: no test source {t}.c")
    attacked = " | ".join(a for m in mutants for a in m.attacks)
    for i in range(1, INVARIANTS + 1):
        if not re.search(rf"\binvariant {i}\b", attacked):
            problems.append(f"no mutant attacks invariant {i} (DESIGN.md)")
    for i in range(1, REVIEW_EDITS + 1):
        if not re.search(rf"\breview {i}\b", attacked):
            problems.append(f"no mutant is review edit {i} (tests/mutants/README.md)")
    for i in sorted(security_fixes()):
        if not re.search(rf"\bsecurity {i}\b", attacked):
            problems.append(f"no mutant attacks security fix {i} (docs/security.md)")
    names = [m.name for m in mutants]
    if len(set(names)) != len(names):
        problems.append("two mutants share a name")
    return problems


def check_applies(tree, m):
    problems = []
    for path, find, _ in m.edits:
        try:
            with open(os.path.join(tree, path), encoding="utf-8") as f:
                n = f.read().count(find)
        except OSError as e:
            problems.append(f"{m.name}: {path}: {e.strerror}")
            continue
        if find is not None and n != 1:
            problems.append(f"{m.name}: {path}: the text to find occurs {n} times, not once: "
                            f"{find!r}")
    return problems


def sync_tree(scratch):
    """Copies the tracked and untracked-not-ignored files into the scratch tree."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    os.makedirs(scratch, exist_ok=True)
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src, dst = os.path.join(ROOT, rel), os.path.join(scratch, rel)
        if not os.path.isfile(src):
            continue  # deleted in the work tree, not yet in git
        try:
            same = open(src, "rb").read() == open(dst, "rb").read()
        except OSError:
            same = False
        if not same:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
            os.utime(dst)  # newer than any object built from an older copy


def make(scratch, targets, log):
    with open(log, "w") as out:
        return subprocess.run(["make", "-j2", "--no-print-directory", "BUILD=build"] + targets,
                              cwd=scratch, stdout=out, stderr=subprocess.STDOUT).returncode


def run_tests(scratch, tests, log):
    env = dict(os.environ, SWITCHYARD_TEST_TIMEOUT=TEST_TIMEOUT_S)
    with open(log, "w") as out:
        rc = subprocess.run(["tests/run-tests.sh", "build"] + ["build/" + t for t in tests],
                            cwd=scratch, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    failing = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            mm = re.match(r"^FAIL (\S+)", line)
            if mm:
                failing.append(mm.group(1))
    return rc, failing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--lint", action="store_true")
    ap.add_argument("--scratch", default=os.path.join(ROOT, "build", "mutants", "tree"))
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()

    mutants, problems = load_mutants()
    if args.lint:
        problems += lint(mutants)
        for p in problems:
            print(f"mutants: {p}", file=sys.stderr)
        if problems:
            print(f"mutants: {len(problems)} problem(s) in tests/mutants/", file=sys.stderr)
            return 1
        print(f"mutants: ok ({len(mutants)} mutants apply; every invariant, security fix and "
              "review edit is attacked)")
        return 0
    if problems:
        for p in problems:
            print(f"mutants: {p}", file=sys.stderr)
        return 1
    if args.only:
        wanted = set(args.only.replace(",", " ").split())
        unknown = wanted - {m.name for m in mutants}
        if unknown:
            print(f"mutants: no such mutant: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.name in wanted]

    scratch = os.path.abspath(args.scratch)
    logs = os.path.join(os.path.dirname(scratch), "logs")
    os.makedirs(logs, exist_ok=True)
    sync_tree(scratch)
    tests = sorted({t for m in mutants for t in m.tests})
    targets = ["all"] + ["build/" + t for t in tests]
    print(f"mutants: building the scratch tree {os.path.relpath(scratch, ROOT)}", flush=True)
    if make(scratch, targets, os.path.join(logs, "baseline-build.log")) != 0:
        print(f"mutants: the unmutated tree does not build: {logs}/baseline-build.log")
        return 1
    if not args.no_baseline:
        print(f"mutants: baseline, {len(tests)} test binaries unmutated", flush=True)
        rc, failing = run_tests(scratch, tests, os.path.join(logs, "baseline-tests.log"))
        if rc != 0:
            print(f"mutants: tests fail without any mutant ({' '.join(failing)}): "
                  f"{logs}/baseline-tests.log")
            return 1

    results = []
    for i, m in enumerate(mutants, 1):
        start = time.monotonic()
        originals, p = apply_edits(scratch, m)
        if p:
            verdict, detail = "STALE", "; ".join(p)
        else:
            try:
                build_log = os.path.join(logs, f"{m.name}.build.log")
                if make(scratch, targets, build_log) != 0:
                    verdict, detail = "BROKEN", f"does not build: {build_log}"
                else:
                    rc, failing = run_tests(scratch, m.tests,
                                            os.path.join(logs, f"{m.name}.tests.log"))
                    if rc != 0:
                        verdict, detail = "killed", "by " + " ".join(failing or ["the runner"])
                    else:
                        verdict, detail = "SURVIVED", "every listed test passed"
            finally:
                restore(originals)
        secs = time.monotonic() - start
        results.append((m, verdict, detail, secs))
        print(f"[{i}/{len(mutants)}] {verdict:8} {m.name} ({secs:.0f}s): {detail}", flush=True)

    # Leave the scratch build unmutated for the next run.
    make(scratch, targets, os.path.join(logs, "final-build.log"))
    report = os.path.join(os.path.dirname(scratch), "report.md")
    with open(report, "w", encoding="utf-8") as f:
        f.write("| mutant | attacks | result | detail | seconds |\n|---|---|---|---|---:|\n")
        for m, verdict, detail, secs in results:
            f.write(f"| {m.name} | {'; '.join(m.attacks)} | {verdict} | {detail} | "
                    f"{secs:.0f} |\n")
    bad = [r for r in results if r[1] != "killed"]
    killed = len(results) - len(bad)
    print(f"mutants: {killed} killed, {len(bad)} not killed of {len(results)} "
          f"(report: {os.path.relpath(report, ROOT)})")
    for m, verdict, detail, _ in bad:
        print(f"mutants: {verdict} {m.name}: {detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
