#!/usr/bin/env bash
# Report fragment of section "kube": Kubernetes discovery at scale.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

echo "## Kubernetes discovery"
echo
echo "The control plane lists and watches $(v kube_pods) pods on switchyard-fakekube"
echo "([kubernetes.md](kubernetes.md)); the figures are read from the registry in the shared"
echo "segment, which is what the dataplanes route on. Health probing is slowed down"
echo "and every pod carries its model label, so the CPU time is discovery's own."
echo
echo "| measure | result |"
echo "|---|---|"
echo "| $(v kube_pods) pods created, until all are workers (fake's PUTs included) | $(v kube_initial_ms) ms |"
echo "| pod event → routable (ADDED to worker in the registry), $(v kube_routable_samples) pods one at a time | p50 $(v kube_routable_p50_ms) ms, p99 $(v kube_routable_p99_ms) ms, max $(v kube_routable_max_ms) ms |"
echo "| control-plane CPU per 1,000 watch events ($(v kube_events) readiness toggles in $(v kube_events_ms) ms) | $(v kube_cpu_ms_per_1000_events) ms |"
echo "| control-plane RSS with $(v kube_pods) discovered workers | $(v kube_cp_rss_mib) MiB |"
echo
