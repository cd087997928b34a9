#!/usr/bin/env bash
# Section "kube": Kubernetes discovery at scale, against switchyard-fakekube.
# A control plane with discovery.kubernetes (no dataplane: the registry in
# the segment is what dataplanes route on) and the driver micro_kube.c:
# N Ready pods listed and watched, E readiness events, S pods timed from
# their event to their worker in the registry, the control plane's RSS.
# Health probing is slowed to once an hour and every pod carries its model
# label, so the control plane's CPU is discovery's own. Data file: kube.csv.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section kube

pods=1000 events=1000 samples=200
[ "$mode" = quick ] && pods=200 events=200 samples=50
echo "== kube: $pods pods, $events events, $samples timed pods" >&2
read -r fk_port admin_port <<<"$(free_ports 2)"
bench_spawn "$bench_tmp/fakekube.log" "$build/switchyard-fakekube" --listen "127.0.0.1:$fk_port" \
    --bookmark-interval 60000
wait_http "http://127.0.0.1:$fk_port/api/v1/namespaces/default/pods" 10
shm=/sy-bench-kube-$$
config=$bench_tmp/kube.yaml
{
    echo "shm: { name: $shm, max_workers: $((pods + samples + 16)) }"
    echo "controlplane:"
    echo "  admin_listen: 127.0.0.1:$admin_port"
    echo "  admin_socket: $bench_tmp/kube-admin.sock"
    echo "  health: { interval: 1h }"
    echo "discovery:"
    echo "  kubernetes:"
    echo "    api_server: http://127.0.0.1:$fk_port"
    echo "    insecure_http: true"
    echo "    namespace: default"
    echo "    label_selector: app=vllm"
    echo "    port_name: http"
    echo "    token_file: /nonexistent"
    echo "    resync: 1h"
    echo "workers: []"
} >"$config"
bench_spawn "$bench_tmp/kube-cp.log" "$build/switchyard-controlplane" --config "$config"
cp_pid=$last_pid
wait_http "http://127.0.0.1:$admin_port/status" 10
run_fg "$raw/driver.txt" "$build/tests/bench/micro_kube" --fake "http://127.0.0.1:$fk_port" \
    --shm "$shm" --cp-pid "$cp_pid" --pods "$pods" --events "$events" --samples "$samples"
while read -r k val; do put "$k" "$val"; done <"$raw/driver.txt"
