#!/usr/bin/env bash
# make run: the router on the embedded default config
# (deploy/examples/local.yaml): the control plane, the data plane and three
# mock workers on 127.0.0.1:9001-9003. Ctrl-C stops them all.
# Usage: deploy/run-local.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
config=deploy/examples/local.yaml
pids=()
stop() {
    trap - INT TERM EXIT
    echo
    echo "stopping..."
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop INT TERM EXIT

# The admin channel's socket lives in a directory only this user can enter
# (the config names it relative to the checkout; docs/security.md).
sock=$(awk '/^controlplane:/ {c=1} c && /admin_socket:/ {print $2; exit}' "$config")
mkdir -p "$(dirname "$sock")"
chmod 0700 "$(dirname "$sock")"

for port in 9001 9002 9003; do
    "$build/switchyard-mockworker" --listen "127.0.0.1:$port" --model mock \
        --tpot-ms 20 --prefill-us-per-token 50 &
    pids+=($!)
done
# --fresh: every make run starts from the config alone, not from what an
# earlier run left in the segment (API-added workers, drains).
"$build/switchyard-controlplane" --config "$config" --fresh &
pids+=($!)
"$build/switchyard-dataplane" --config "$config" &
pids+=($!)

listen=$(awk '/^dataplane:/ {d=1} d && /listen:/ {gsub(/"/, "", $2); print $2; exit}' "$config")
for _ in $(seq 100); do
    curl -fs "http://$listen/health" >/dev/null 2>&1 && break
    sleep 0.1
done
cat <<MSG

switchyard is running (config $config). Try:

  curl -s http://$listen/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model":"mock","messages":[{"role":"user","content":"hello"}]}'

Ctrl-C stops everything.
MSG
wait
