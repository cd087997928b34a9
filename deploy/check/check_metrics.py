#!/usr/bin/python3
"""Every metric a dashboard or rule uses must be documented.

Usage: check_metrics.py RULES_OUT DOC... -- SOURCE...

DOCs: docs/metrics.md and docs/admin-api.md (switchyard_* in backticks, with
their types) and docs/mockworker.md (`# TYPE vllm:NAME gauge|counter`
lines; counters are exposed with _total). SOURCEs: Grafana dashboard JSON
(every "expr") and Prometheus rule files (every "expr"). Histograms may be
used as NAME_bucket, NAME_sum, NAME_count.
Also writes every dashboard expression as a recording rule to RULES_OUT
($__rate_interval etc. replaced by 5m) so `promtool check rules` parses
them: a PromQL typo in the dashboard fails the check.
"""
import json
import re
import sys

import yaml


def documented(docs):
    names = set()
    for path in docs:
        text = open(path).read()
        # Table rows: | `name` | type | ...
        for m in re.finditer(r"^\|\s*`(switchyard_[a-z0-9_]+)`\s*\|\s*([a-z]+)", text, re.M):
            name, kind = m.groups()
            names.add(name)
            if kind == "histogram":
                names.update({name + "_bucket", name + "_sum", name + "_count"})
        for m in re.finditer(r"^# TYPE (vllm:[a-z0-9_:]+) (gauge|counter|histogram)", text, re.M):
            name, kind = m.groups()
            names.add(name + "_total" if kind == "counter" else name)
    return names


def exprs_of(path):
    if path.endswith(".json"):
        out = []

        def walk(x):
            if isinstance(x, dict):
                for k, v in x.items():
                    if k == "expr" and isinstance(v, str):
                        out.append(v)
                    else:
                        walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(json.load(open(path)))
        return out
    doc = yaml.safe_load(open(path))
    return [r["expr"] for g in doc.get("groups", []) for r in g.get("rules", []) if "expr" in r]


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    rules_out, docs, sources = argv[0], argv[1:sep], argv[sep + 1 :]
    known = documented(docs)
    problems = []
    dash_rules = []
    for src in sources:
        exprs = exprs_of(src)
        if not exprs:
            problems.append(f"{src}: no expressions found")
        for e in exprs:
            for name in re.findall(r"(?<![A-Za-z0-9_:])(switchyard_[a-z0-9_]+|vllm:[a-z0-9_:]+)", e):
                if name not in known:
                    problems.append(f"{src}: metric {name} is not in {', '.join(docs)}")
            if src.endswith(".json"):
                e = re.sub(r"\$__(rate_interval|interval|range)", "5m", e)
                dash_rules.append({"record": f"dashboard:expr:{len(dash_rules)}", "expr": e})
    with open(rules_out, "w") as fh:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": dash_rules}]}, fh)
    for p in problems:
        print(f"check_metrics: {p}", file=sys.stderr)
    if not problems:
        print(f"check_metrics: every metric of {len(sources)} files is documented ({len(known)} known)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
