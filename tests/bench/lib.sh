# shellcheck shell=bash
# Helpers sourced by the benchmark sections (tests/bench/sections/*.sh): the
# section's set-up (bench_section), free loopback ports, background
# processes that are always stopped (bench_cleanup runs from the EXIT trap),
# readiness polls with deadlines, /proc readings, and the generated configs
# of the static nginx upstream, the nginx proxy and switchyard.
# Everything listens on 127.0.0.1 only.

# here: tests/bench (the load generator's scripts and workloads).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/bench/data.sh
. "$here/data.sh"

bench_pids=()
bench_tmp=$(mktemp -d /tmp/switchyard-bench.XXXXXX)
chmod 755 "$bench_tmp"

bench_cleanup() {
    local pid
    for pid in "${bench_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${bench_pids[@]}"; do
        # Give each process 3 s to exit, then kill it.
        for _ in $(seq 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    bench_pids=()
    rm -rf "$bench_tmp"
    # A segment and the objects named after it (.prefix, .responses,
    # .kvholders, -ratelimit).
    rm -f /dev/shm/sy-bench-*-$$ /dev/shm/sy-bench-*-$$.* /dev/shm/sy-bench-*-$$-ratelimit 2>/dev/null || true
}

# Runs a command in the background, remembers its pid in $last_pid.
bench_spawn() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 &
    last_pid=$!
    bench_pids+=("$last_pid")
}

# run_fg OUT CMD...: runs CMD with stdout to OUT and waits for it. In the
# background, so an INT or TERM reaches run.sh's trap at once instead of
# after CMD ends (bash defers traps while a foreground child runs).
run_fg() {
    local out=$1 p rc=0 keep=() q
    shift
    "$@" >"$out" &
    p=$!
    bench_pids+=("$p")
    wait "$p" || rc=$?
    for q in "${bench_pids[@]}"; do
        [ "$q" = "$p" ] || keep+=("$q")
    done
    bench_pids=("${keep[@]}")
    return $rc
}

# Stops one process started by bench_spawn (TERM, then KILL after 3 s).
bench_stop() {
    local pid=$1 keep=() p
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${bench_pids[@]}"; do
        [ "$p" = "$pid" ] || keep+=("$p")
    done
    bench_pids=("${keep[@]}")
}

# N distinct free loopback ports, space separated.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# wait_http URL DEADLINE_S [curl args...]: polls until the URL answers 2xx.
wait_http() {
    local url=$1 deadline=$(($(date +%s) + $2))
    shift 2
    while [ "$(date +%s)" -lt "$deadline" ]; do
        curl -fs -o /dev/null --max-time 1 "$@" "$url" && return 0
        sleep 0.05
    done
    echo "bench: $url not ready after deadline" >&2
    return 1
}

# metric URL NAME [LABEL_MATCH]: the sum of NAME's samples on URL's
# Prometheus page whose labels contain LABEL_MATCH (0 when none), n/a when
# the page cannot be had (three tries).
metric() {
    local page="" _
    for _ in 1 2 3; do
        page=$(curl -fs --max-time 5 "$1") && break
        page="" && sleep 0.2
    done
    [ -n "$page" ] || { echo n/a; return 0; }
    awk -v n="$2" -v m="${3:-}" '
        $1 !~ /^#/ { k = $1; sub(/\{.*/, "", k)
            if (k == n && index($1, m) > 0) s += $NF }
        END { printf "%.0f\n", s }' <<<"$page"
}

# kv_batch_wait ADMIN_PORT WORKER_ID MOCK_URL DEADLINE: waits until the
# control plane on ADMIN_PORT has a KV event batch of WORKER_ID (a
# subscriber misses what is published before it joins), sending the mock
# one small request directly until it has; 1 past DEADLINE (date +%s).
kv_batch_wait() {
    local b
    while :; do
        b=$(metric "http://127.0.0.1:$1/metrics" switchyard_kv_events_batches_total "worker=\"$2\"")
        [ "$b" != 0 ] && [ "$b" != n/a ] && return 0
        if [ "$(date +%s)" -ge "$4" ]; then
            echo "bench: no KV event batch of $2 reached the control plane on :$1" >&2
            return 1
        fi
        curl -fs -o /dev/null --max-time 2 "$3/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\":\"mock\",\"prompt\":\"kv events probe $RANDOM $(printf '%0128d' 0)\",\"max_tokens\":1}" || true
        sleep 0.1
    done
}

# CPU time (utime + stime) of a process in clock ticks.
proc_cpu_ticks() {
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

proc_rss_kb() {
    awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"
}

clk_tck=$(getconf CLK_TCK)

# proc_cpu_s PID...: their summed utime + stime in seconds.
proc_cpu_s() {
    local s=0 p
    for p in "$@"; do s=$(awk -v s="$s" -v t="$(proc_cpu_ticks "$p")" -v h="$clk_tck" 'BEGIN {print s + t / h}'); done
    echo "$s"
}
# nginx_procs MASTER: the master and its worker processes.
nginx_procs() {
    local kids
    kids=$(pgrep -P "$1" | tr '\n' ' ' || true)
    echo "$1 $kids"
}

# wrk_field KEY LINE: KEY's value in wrk_post.lua's summary line
# ("WRK requests=N rps=R p50_us=X p99_us=Y errors=E non2xx=M").
wrk_field() {
    awk -v k="$1" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' <<<"$2"
}

# bench_section NAME: what every section does first. Reads the driver's
# environment (BENCH_BUILD, BENCH_MODE full|quick, BENCH_DATA), sets $build,
# $mode and $quick_flag, starts the section's data file
# $BENCH_DATA/NAME.csv (data.sh) and empties its folder of raw files
# $BENCH_DATA/NAME/ ($raw: per-request CSVs and the like, which the report
# may read too), and stops every process it starts on exit, failure and
# INT/TERM included.
bench_section() {
    build=${BENCH_BUILD:?run by tests/bench/run.sh} mode=${BENCH_MODE:?} raw=${BENCH_DATA:?}/$1
    rm -rf "$raw"
    mkdir -p "$raw"
    data_init "$BENCH_DATA/$1.csv"
    # shellcheck disable=SC2034 # used by the sections
    if [ "$mode" = quick ]; then quick_flag=(--quick); else quick_flag=(); fi
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

# Shared by the sections: the dataplane's event loops (one per core) and the
# mocks' KV cache size in blocks of 16 tokens (routing and P/D).
# shellcheck disable=SC2034 # used by the sections
dp_threads=$(nproc) kv_blocks=512

# Static upstream: one nginx serving a fixed chat completion on several ports,
# plus /health and /v1/models so switchyard's control plane can probe it.
# static_nginx_start WORKER_PROCESSES PORT...  (pid in $last_pid)
static_nginx_start() {
    local procs=$1 dir=$bench_tmp/static p
    shift
    mkdir -p "$dir"
    {
        echo "worker_processes $procs;"
        echo "daemon off; pid $dir/nginx.pid; error_log $dir/error.log warn;"
        [ "$(id -u)" -eq 0 ] && echo "user root root;"
        echo "events { worker_connections 16384; }"
        echo "http {"
        echo "  access_log off; keepalive_requests 10000000; keepalive_timeout 300s;"
        echo "  client_max_body_size 64m; client_body_temp_path $dir/body;"
        echo "  proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi;"
        echo "  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;"
        echo "  server {"
        for p in "$@"; do echo "    listen 127.0.0.1:$p;"; done
        echo "    default_type application/json;"
        echo "    location = /health { return 200 ''; }"
        echo "    location = /v1/models { return 200 '{\"object\":\"list\",\"data\":[{\"id\":\"mock\",\"object\":\"model\",\"owned_by\":\"static\"}]}'; }"
        echo "    location / { return 200 '{\"id\":\"chatcmpl-static\",\"object\":\"chat.completion\",\"created\":1764400000,\"model\":\"mock\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"cache hit\"},\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}'; }"
        echo "  }"
        echo "}"
    } >"$dir/nginx.conf"
    bench_spawn "$dir/stderr.log" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
}

# Reverse proxy: round robin over the upstream ports with keep-alive.
# proxy_nginx_start WORKER_PROCESSES LISTEN_PORT UPSTREAM_PORT...
proxy_nginx_start() {
    local procs=$1 listen=$2 dir=$bench_tmp/proxy p
    shift 2
    mkdir -p "$dir"
    {
        echo "worker_processes $procs;"
        echo "daemon off; pid $dir/nginx.pid; error_log $dir/error.log warn;"
        [ "$(id -u)" -eq 0 ] && echo "user root root;"
        echo "events { worker_connections 16384; }"
        echo "http {"
        echo "  access_log off; keepalive_requests 10000000; keepalive_timeout 300s;"
        echo "  client_max_body_size 64m; client_body_temp_path $dir/body;"
        echo "  proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi;"
        echo "  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;"
        echo "  upstream workers {"
        for p in "$@"; do echo "    server 127.0.0.1:$p;"; done
        echo "    keepalive 128; keepalive_requests 10000000; keepalive_timeout 300s;"
        echo "  }"
        echo "  server {"
        echo "    listen 127.0.0.1:$listen;"
        echo "    location / {"
        echo "      proxy_pass http://workers;"
        echo "      proxy_http_version 1.1;"
        echo "      proxy_set_header Connection \"\";"
        echo "      proxy_buffering off;"
        echo "    }"
        echo "  }"
        echo "}"
    } >"$dir/nginx.conf"
    bench_spawn "$dir/stderr.log" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
}

# switchyard_config FILE NAME THREADS POLICY GATE DP_PORT ADMIN_PORT WORKER_PORT...
# Writes a config whose workers are 127.0.0.1:PORT (model "mock"), probed
# every 100 ms. $balance_abs, when set, is policy.balance_abs_threshold;
# $policy_extra, when set, holds more "key: value" lines for policy.
# $kv_events_ports, when set, holds "PUB:REPLAY" per worker (in order): that
# worker's kv_events endpoints on 127.0.0.1 (precise_cache_aware).
switchyard_config() {
    local file=$1 name=$2 threads=$3 policy=$4 gate=$5 dp=$6 admin=$7 p i=0 line kvp
    shift 7
    {
        echo "shm:"
        echo "  name: /sy-bench-$name-$$"
        echo "controlplane:"
        echo "  admin_listen: 127.0.0.1:$admin"
        echo "  admin_socket: $bench_tmp/$name-admin.sock"
        echo "  health: { path: /health, interval: 100ms, timeout: 1s, failure_threshold: 3, success_threshold: 1 }"
        echo "dataplane:"
        echo "  listen: 127.0.0.1:$dp"
        echo "  threads: $threads"
        echo "  idle_timeout: 600s"
        echo "policy:"
        echo "  name: $policy"
        echo "  balance_gate: $gate"
        if [ -n "${balance_abs:-}" ]; then echo "  balance_abs_threshold: $balance_abs"; fi
        if [ -n "${policy_extra:-}" ]; then
            while IFS= read -r line; do echo "  $line"; done <<<"$policy_extra"
        fi
        echo "workers:"
        read -r -a kvp <<<"${kv_events_ports:-}"
        for p in "$@"; do
            i=$((i + 1))
            if [ -n "${kvp[$((i - 1))]:-}" ]; then
                echo "  - { url: 'http://127.0.0.1:$p', id: w$i, model: mock, kv_events: { endpoint: 'tcp://127.0.0.1:${kvp[$((i - 1))]%%:*}', replay_endpoint: 'tcp://127.0.0.1:${kvp[$((i - 1))]##*:}' } }"
            else
                echo "  - { url: 'http://127.0.0.1:$p', id: w$i, model: mock }"
            fi
        done
    } >"$file"
}

# switchyard_pd_config FILE NAME THREADS PREFILL_POLICY GATE DP_PORT ADMIN_PORT N_PREFILL PORT...
# A prefill/decode config: the first N_PREFILL ports are `prefill` workers,
# the rest `decode` workers (model "mock"); policy.prefill is PREFILL_POLICY,
# policy.decode least_load. GATE and $balance_abs apply to cache_aware as in
# switchyard_config (the prefill policy takes the policy.* tuning keys).
switchyard_pd_config() {
    local file=$1 name=$2 threads=$3 policy=$4 gate=$5 dp=$6 admin=$7 n_prefill=$8 p i=0 role
    shift 8
    {
        echo "shm:"
        echo "  name: /sy-bench-$name-$$"
        echo "controlplane:"
        echo "  admin_listen: 127.0.0.1:$admin"
        echo "  admin_socket: $bench_tmp/$name-admin.sock"
        echo "  health: { path: /health, interval: 100ms, timeout: 1s, failure_threshold: 3, success_threshold: 1 }"
        echo "dataplane:"
        echo "  listen: 127.0.0.1:$dp"
        echo "  threads: $threads"
        echo "  idle_timeout: 600s"
        echo "policy:"
        echo "  balance_gate: $gate"
        if [ -n "${balance_abs:-}" ]; then echo "  balance_abs_threshold: $balance_abs"; fi
        echo "  prefill: { name: $policy }"
        echo "  decode: { name: least_load }"
        echo "workers:"
        for p in "$@"; do
            i=$((i + 1))
            role=decode
            [ "$i" -le "$n_prefill" ] && role=prefill
            echo "  - { url: 'http://127.0.0.1:$p', id: ${role:0:1}$i, model: mock, role: $role }"
        done
    } >"$file"
}

# cp_wait_admin CONFIG PID DEADLINE_S: waits until the control plane PID
# answers HTTP (any status) on CONFIG's controlplane.admin_listen; at once
# when CONFIG has none. Fails when PID exits or the deadline passes.
cp_wait_admin() {
    local admin deadline=$(($(date +%s) + $3))
    admin=$(awk '$1 == "admin_listen:" {print $2; exit}' "$1")
    [ -n "$admin" ] || return 0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        kill -0 "$2" 2>/dev/null || return 1
        curl -s -o /dev/null --max-time 1 "http://$admin/metrics" && return 0
        sleep 0.05
    done
    echo "bench: control plane not answering on $admin after deadline" >&2
    return 1
}

# switchyard_start BUILD CONFIG DP_PORT: starts the control plane and the
# dataplane, waits until a chat completion goes through. Pids in $cp_pid, $dp_pid.
switchyard_start() {
    local build=$1 config=$2 dp=$3 name
    name=$(basename "$config" .yaml)
    # --fresh: a run starts with an empty registry state and prefix index.
    bench_spawn "$bench_tmp/$name-cp.log" "$build/switchyard-controlplane" --config "$config" --fresh
    cp_pid=$last_pid
    # The data plane waits for the control plane's admin API: started at
    # once, it could attach the previous run's segment before --fresh
    # removes it, and --fresh then refuses a segment in use (the run would
    # go on with the old segment and no control plane).
    if ! cp_wait_admin "$config" "$cp_pid" 20; then
        tail -5 "$bench_tmp/$name-cp.log" >&2
        return 1
    fi
    bench_spawn "$bench_tmp/$name-dp.log" "$build/switchyard-dataplane" --config "$config"
    dp_pid=$last_pid
    if ! wait_http "http://127.0.0.1:$dp/v1/chat/completions" 20 -X POST \
        -H 'Content-Type: application/json' \
        -d '{"model":"mock","messages":[{"role":"user","content":"ready?"}],"max_tokens":1}'; then
        tail -5 "$bench_tmp/$name-cp.log" "$bench_tmp/$name-dp.log" >&2
        return 1
    fi
}

switchyard_stop() {
    bench_stop "$dp_pid"
    bench_stop "$cp_pid"
}
