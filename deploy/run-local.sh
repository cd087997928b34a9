#!/usr/bin/env bash
# make run: the router on deploy/examples/local.yaml (a file in the
# checkout, read at start; edit it and reload): the control plane, the data
# plane and three mock workers on 127.0.0.1:9001-9003. Ctrl-C stops them
# all, also a data plane started by hand with --hot-restart since.
# Usage: deploy/run-local.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
config=deploy/examples/local.yaml
pids=()
# The data plane's listen address, and the directory of the admin socket,
# beside which every running data plane of this config binds its hot-restart
# socket dataplane-PORT.hot.sock (docs/operations.md, "Hot restart").
listen=$(awk '/^dataplane:/ {d=1} d && /listen:/ {gsub(/"/, "", $2); print $2; exit}' "$config")
sock=$(awk '/^controlplane:/ {c=1} c && /admin_socket:/ {print $2; exit}' "$config")
admin=$(awk '/^controlplane:/ {c=1} c && /admin_listen:/ {gsub(/"/, "", $2); print $2; exit}' "$config")
admin=${admin:-127.0.0.1:8081}
# The segment's name (shm.name); the objects named after it are removed at
# the end: every make run starts from --fresh, so nothing in them is kept.
shm_name=$(awk '/^shm:/ {s=1} s && /name:/ {gsub(/"/, "", $2); print $2; exit}' "$config")
shm_name=${shm_name:-/switchyard}

# Pids of the processes holding this config's hot-restart socket: the data
# plane serving it, also one started with --hot-restart from another
# terminal (not our child, and Ctrl-C does not reach its process group).
serving_dataplanes() {
    local hot inodes
    hot="$(dirname "$sock")/dataplane-${listen##*:}.hot.sock"
    # Bound under a temporary name (the path plus ".PID") and renamed into place.
    inodes=$(awk -v a="$hot" -v b="$PWD/$hot" 'index($8, a) == 1 || index($8, b) == 1 {print $7}' \
        /proc/net/unix)
    [ -n "$inodes" ] || return 0
    for inode in $inodes; do
        find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\[$inode\\]" 2>/dev/null | cut -d/ -f3
    done | sort -u
}

stop() {
    trap - INT TERM EXIT
    echo
    echo "stopping..."
    local others=()
    for pid in $(serving_dataplanes); do
        # Only a switchyard data plane (comm is cut at 15 characters).
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = switchyard-data ] && others+=("$pid")
    done
    [ ${#others[@]} -eq 0 ] || echo "stopping the serving data plane too: pid ${others[*]}"
    for pid in "${others[@]}" "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    # Not our children: wait for them by polling (no request is in flight
    # after Ctrl-C, so they exit at once; 10 s at most).
    for _ in $(seq 100); do
        local alive=0
        for pid in "${others[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    # The segment and the objects named after it (docs/security.md lists
    # them): the next make run makes them anew.
    local base="/dev/shm/${shm_name#/}" removed=0
    for f in "$base" "$base.prefix" "$base.kvholders" "$base.responses" "$base-ratelimit"; do
        [ -e "$f" ] && rm -f "$f" && removed=1
    done
    [ $removed -eq 0 ] || echo "removed the segment $shm_name and the objects named after it"
}
trap stop INT TERM EXIT

# The admin channel's socket lives in a directory only this user can enter
# (the config names it relative to the checkout; docs/security.md).
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
# The data plane attaches to the segment the control plane makes: start it
# once the control plane answers (an older run's segment, of another layout
# version, is gone by then).
for _ in $(seq 100); do
    curl -fs "http://$admin/status" >/dev/null 2>&1 && break
    sleep 0.1
done
"$build/switchyard-dataplane" --config "$config" &
pids+=($!)

up=0
for _ in $(seq 100); do
    curl -fs "http://$listen/health" >/dev/null 2>&1 && up=1 && break
    sleep 0.1
done
if [ $up -eq 0 ]; then
    echo "switchyard did not come up on $listen: see the log above" >&2
    exit 1
fi
cat <<MSG

switchyard is running (config $config). Try:

  curl -s http://$listen/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model":"mock","messages":[{"role":"user","content":"hello"}]}'

Ctrl-C stops everything.
MSG
wait
