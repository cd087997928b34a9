#!/usr/bin/python3
"""Rewrites a Prometheus config so Debian 12's promtool can check it here.

Usage: prometheus_config_for_promtool.py IN OUT_DIR

Debian's prometheus 2.42 (+ds) is built without the Kubernetes service
discovery, so `promtool check config` refuses kubernetes_sd_configs as an
unknown field. This copies IN to OUT_DIR/<name> with each
kubernetes_sd_configs entry checked here (role must be one Kubernetes knows)
and then replaced by an equivalent static_configs, every credentials_file
pointed at an empty file in OUT_DIR (promtool stats it), and rule_files
copied beside it. Everything else (relabel rules, auth, jobs) is left for
promtool to check.
"""
import os
import shutil
import sys

import yaml

ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    cfg = yaml.safe_load(open(src))
    problems = []
    token = os.path.join(out_dir, "credentials")
    open(token, "w").close()
    for job in cfg.get("scrape_configs", []):
        sds = job.pop("kubernetes_sd_configs", None)
        if sds is not None:
            for sd in sds:
                if sd.get("role") not in ROLES:
                    problems.append(f"{job.get('job_name')}: kubernetes_sd_configs role {sd.get('role')!r}")
            job.setdefault("static_configs", []).append({"targets": ["placeholder:80"]})
        auth = job.get("authorization") or {}
        if "credentials_file" in auth:
            auth["credentials_file"] = token
    for rf in cfg.get("rule_files", []):
        shutil.copy(os.path.join(os.path.dirname(src), rf), os.path.join(out_dir, rf))
    yaml.safe_dump(cfg, open(os.path.join(out_dir, os.path.basename(src)), "w"))
    for p in problems:
        print(f"prometheus_config_for_promtool: {src}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
