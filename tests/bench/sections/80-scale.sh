#!/usr/bin/env bash
# Section "scale": what the router costs as the fleet grows (issue #40).
# For each fleet size N (SCALE_SIZES, default 64 512 4096; quick: 16 64):
#   1. decisions: micro_scale N (cache_aware and precise_cache_aware among
#      N candidates; tests/bench/micro_scale.c);
#   2. N simulated workers: switchyard-mockworker --workers (fleet mode,
#      SCALE_PER_PROC workers a process, vLLM's whole /metrics page each),
#      a control plane and a dataplane on a static config of the N workers
#      with the defaults of health probing (5 s) and load reports (250 ms),
#      each worker with a KV-event endpoint; then
#      - at rest (SCALE_REST_S): CPU per second of the control plane, the
#        dataplane and the mocks, probes and scrapes done, RSS;
#      - KV events: micro_kvload's N publishers (tests/bench/micro_kvload.c)
#        idle, then at SCALE_EVENTS_RATE events/s: the control plane's CPU;
#      - requests: wrk's rate through the dataplane (cache_aware);
#   3. Kubernetes: a control plane discovering N pods on switchyard-fakekube
#      (micro_kube.c): list, watch-event CPU, pod event -> routable.
# Then the ingestion ramp: micro_kvload's SCALE_KV_PUBS publishers at rates
# rising to saturation (SCALE_KV_RATES), the control plane doing nothing
# else: events applied per CPU-second and the lag p99.
# Data file: scale.csv (scale_N_* figures, kvload_RATE_* of the ramp).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section scale

if [ "$mode" = quick ]; then
    sizes=${SCALE_SIZES:-16 64} rest_s=${SCALE_REST_S:-3} wrk_s=2 decisions=3000
    kv_pubs=${SCALE_KV_PUBS:-16} kv_rates=${SCALE_KV_RATES:-20000,100000} kv_s=2
    events_rate=${SCALE_EVENTS_RATE:-20000} kube_events=100 kube_samples=20
else
    sizes=${SCALE_SIZES:-64 512 4096} rest_s=${SCALE_REST_S:-10} wrk_s=10 decisions=20000
    kv_pubs=${SCALE_KV_PUBS:-256} kv_s=5
    kv_rates=${SCALE_KV_RATES:-50000,100000,200000,500000,1000000,2000000}
    events_rate=${SCALE_EVENTS_RATE:-100000} kube_events=1000 kube_samples=100
fi
per_proc=${SCALE_PER_PROC:-512}
put scale_sizes "$sizes"
put scale_rest_s "$rest_s"
put scale_events_rate "$events_rate"
put scale_per_proc "$per_proc"
put scale_kv_seconds "$kv_s"
put scale_kv_rates "$(tr ',' ' ' <<<"$kv_rates")"
# The limits a fleet must fit in (every process of the run inherits them).
put scale_nofile "$(ulimit -n)"
put scale_nofile_hard "$(ulimit -Hn)"
put scale_nproc "$(ulimit -u)"
put scale_pid_max "$(cat /proc/sys/kernel/pid_max)"

# port_chunks N C: bases of ceil(N / C) runs of C consecutive free loopback
# ports (the last run N mod C long when C does not divide N), below the
# kernel's ephemeral range (so no outgoing connection takes one meanwhile),
# each on its own line. Other tests on this machine listen here and there:
# runs of 512 fit between them where 8,192 ports in a row may not.
port_chunks() {
    python3 - "$1" "$2" <<'PY'
import socket, sys
n, c = int(sys.argv[1]), int(sys.argv[2])
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
base, left, out = 10000, n, []
while left > 0:
    want = min(c, left)
    if base + want > lo:
        sys.exit("no %d free loopback ports in runs of %d below %d" % (n, c, lo))
    ok = True
    for p in range(base, base + want):
        s = socket.socket()
        # As the mock and ZeroMQ bind: a port whose old connections sit in
        # TIME_WAIT is free to them.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            ok = False
            base = p + 1
            break
        finally:
            s.close()
    if ok:
        out.append(base)
        base += want
        left -= want
print("\n".join(map(str, out)))
PY
}

# cpu_ns PID...: their CPU time in ns, every thread's (schedstat).
cpu_ns() {
    local p
    for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{s += $1} END {printf "%.0f\n", s}'
}
cores_between() { awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN {printf "%.3f\n", (b - a) / 1e9 / s}'; }
rss_mib() {
    local p t=0
    for p in "$@"; do t=$((t + $(proc_rss_kb "$p"))); done
    awk -v k="$t" 'BEGIN {printf "%.1f\n", k / 1024}'
}
now_ns() { date +%s%N; }

# profile NAME PID SECONDS: where PID's CPU goes, by function (perf's
# sampling, flat: the binaries keep no frame pointers), into $raw/NAME.txt;
# nothing when perf cannot sample here.
profile() {
    command -v perf >/dev/null || return 0
    perf record -F 499 -p "$2" -o "$raw/$1.data" -- sleep "$3" >/dev/null 2>&1 || return 0
    {
        perf report -i "$raw/$1.data" --stdio --no-children --sort dso --percent-limit 2 2>/dev/null |
            grep -v '^#' | grep -v '^$' | head -8
        echo
        perf report -i "$raw/$1.data" --stdio --no-children --sort dso,symbol --percent-limit 1 \
            2>/dev/null | grep -v '^#' | grep -v '^$' | head -20
    } | sed 's/[ -]*$//' >"$raw/$1.txt" || true
    rm -f "$raw/$1.data"
}

# fleet_start N BASES...: the mocks, one per run of ports (pids in
# $mock_pids), up when every worker answers.
fleet_start() {
    local n=$1 off=0 k b
    shift
    mock_pids=()
    for b in "$@"; do
        k=$((n - off < per_proc ? n - off : per_proc))
        bench_spawn "$bench_tmp/fleet-$off.log" "$build/switchyard-mockworker" \
            --listen "127.0.0.1:$b" --workers "$k" --threads 1 --kv-blocks 256 \
            --metrics-page vllm --output-tokens 2
        mock_pids+=("$last_pid")
        off=$((off + k))
    done
    off=0
    for b in "$@"; do
        k=$((n - off < per_proc ? n - off : per_proc))
        wait_http "http://127.0.0.1:$((b + k - 1))/health" 120 ||
            { tail -3 "$bench_tmp/fleet-$off.log" >&2; return 1; }
        off=$((off + k))
    done
}

# scale_config FILE N ADMIN DP: worker i at $mock_ports[i], its KV
# publisher at $kv_ports[i].
scale_config() {
    local file=$1 n=$2 admin=$3 dp=$4 i
    {
        echo "shm: { name: /sy-bench-scale$n-$$, max_workers: $((n + 16)) }"
        echo "controlplane:"
        echo "  admin_listen: 127.0.0.1:$admin"
        echo "  admin_socket: $bench_tmp/scale$n-admin.sock"
        echo "dataplane:"
        echo "  listen: 127.0.0.1:$dp"
        echo "  threads: $dp_threads"
        echo "policy: { name: cache_aware }"
        echo "workers:"
        for ((i = 0; i < n; i++)); do
            echo "  - { url: 'http://127.0.0.1:${mock_ports[i]}', id: w$i, model: mock, kv_events: { endpoint: 'tcp://127.0.0.1:${kv_ports[i]}' } }"
        done
    } >"$file"
}

# sum_metric ADMIN NAME [LABEL_MATCH]: as lib.sh's metric, with the patience
# a saturated control plane needs (its page at 4,096 workers is large).
sum_metric() {
    local page
    page=$(curl -fs --max-time 60 "http://127.0.0.1:$1/metrics") || { echo n/a; return 0; }
    awk -v n="$2" -v m="${3:-}" '
        $1 !~ /^#/ { k = $1; sub(/\{.*/, "", k)
            if (k == n && index($1, m) > 0) s += $NF }
        END { printf "%.0f\n", s }' <<<"$page"
}

# wait_healthy ADMIN N DEADLINE_S: until N workers are healthy or the
# deadline; $healthy holds the last count seen.
wait_healthy() {
    local deadline=$(($(date +%s) + $3))
    healthy=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        healthy=$(sum_metric "$1" switchyard_worker_healthy)
        [ "$healthy" = "$2" ] && return 0
        sleep 1
    done
    echo "bench: $healthy of $2 workers healthy after $3 s" >&2
    return 1
}

# scale_start CONFIG ADMIN DP: switchyard_start with the patience of a
# control plane that may not keep up with its fleet (pids in $cp_pid, $dp_pid).
scale_start() {
    local deadline
    bench_spawn "$bench_tmp/$(basename "$1" .yaml)-cp.log" "$build/switchyard-controlplane" \
        --config "$1" --fresh
    cp_pid=$last_pid
    deadline=$(($(date +%s) + 120))
    until curl -s -o /dev/null --max-time 30 "http://127.0.0.1:$2/status"; do
        kill -0 "$cp_pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ] ||
            { tail -5 "$bench_tmp/$(basename "$1" .yaml)-cp.log" >&2; return 1; }
        sleep 0.2
    done
    bench_spawn "$bench_tmp/$(basename "$1" .yaml)-dp.log" "$build/switchyard-dataplane" \
        --config "$1"
    dp_pid=$last_pid
    wait_http "http://127.0.0.1:$3/v1/chat/completions" 120 -X POST \
        -H 'Content-Type: application/json' \
        -d '{"model":"mock","messages":[{"role":"user","content":"ready?"}],"max_tokens":1}'
}

fleet_run() {
    local n=$1 base mb kb dp admin cfg t0 t1 c0 c1 d0 d1 m0 m1 s0 s1 p0 p1 line
    echo "== scale: $n workers" >&2
    "$build/tests/bench/micro_scale" "$n" "$decisions" >"$raw/decide-$n.txt"
    while read -r k val _; do put "$k" "$val"; done <"$raw/decide-$n.txt"

    local bases chunk=$((n < per_proc ? n : per_proc)) nb i
    mapfile -t bases < <(port_chunks $((2 * n)) "$chunk")
    nb=$(((n + chunk - 1) / chunk))
    mock_bases=("${bases[@]:0:nb}") kv_bases=("${bases[@]:nb}")
    mock_ports=() kv_ports=()
    for ((i = 0; i < n; i++)); do
        mock_ports+=($((mock_bases[i / chunk] + i % chunk)))
        kv_ports+=($((kv_bases[i / chunk] + i % chunk)))
    done
    printf '%s\n' "${kv_ports[@]}" >"$bench_tmp/kv-ports-$n"
    read -r dp admin <<<"$(free_ports 2)"
    # The KV publishers bind their ports now (other tests on this machine
    # may take free ports meanwhile) and start their steps on a signal.
    rm -f "$bench_tmp/kv-go"
    "$build/tests/bench/micro_kvload" --ports-file "$bench_tmp/kv-ports-$n" --publishers "$n" \
        --cp-metrics "http://127.0.0.1:$admin/metrics" --rates "0,$events_rate" \
        --seconds "$rest_s" --kv-blocks 256 --start-file "$bench_tmp/kv-go" \
        >"$raw/kv-$n.txt" 2>"$raw/kv-$n.err" &
    local kvl=$!
    bench_pids+=("$kvl")
    t0=$(date +%s%N)
    fleet_start "$n" "${mock_bases[@]}"
    put "scale_${n}_fleet_start_ms" $((($(date +%s%N) - t0) / 1000000))
    put "scale_${n}_mock_procs" "${#mock_pids[@]}"
    local fds=0 thr=0 p
    for p in "${mock_pids[@]}"; do
        fds=$((fds + $(ls /proc/"$p"/fd | wc -l))) thr=$((thr + $(ls /proc/"$p"/task | wc -l)))
    done
    put "scale_${n}_mock_fds" "$fds"
    put "scale_${n}_mock_threads" "$thr"
    put "scale_${n}_metrics_page_bytes" "$(curl -fs "http://127.0.0.1:${mock_ports[0]}/metrics" | wc -c)"

    cfg=$bench_tmp/scale$n.yaml
    scale_config "$cfg" "$n" "$admin" "$dp"
    t0=$(date +%s%N)
    scale_start "$cfg" "$admin" "$dp"
    # A control plane that cannot probe N workers in time marks some
    # unhealthy: the figures are then those of the fleet it manages.
    if wait_healthy "$admin" "$n" 60; then
        put "scale_${n}_all_healthy_ms" $((($(date +%s%N) - t0) / 1000000))
    else
        put "scale_${n}_all_healthy_ms" n/a
    fi
    put "scale_${n}_healthy" "$healthy"

    # At rest: probes and scrapes, KV endpoints configured but silent.
    sleep 1
    s0=$(sum_metric "$admin" switchyard_load_report_scrapes_total 'result="success"')
    p0=$(sum_metric "$admin" switchyard_health_checks_total 'result="success"')
    t0=$(now_ns) c0=$(cpu_ns "$cp_pid") d0=$(cpu_ns "$dp_pid") m0=$(cpu_ns "${mock_pids[@]}")
    sleep "$rest_s"
    t1=$(now_ns) c1=$(cpu_ns "$cp_pid") d1=$(cpu_ns "$dp_pid") m1=$(cpu_ns "${mock_pids[@]}")
    s1=$(sum_metric "$admin" switchyard_load_report_scrapes_total 'result="success"')
    p1=$(sum_metric "$admin" switchyard_health_checks_total 'result="success"')
    put "scale_${n}_healthy_after_rest" "$(sum_metric "$admin" switchyard_worker_healthy)"
    put "scale_${n}_scrape_failures" "$(sum_metric "$admin" switchyard_load_report_scrapes_total 'result="failure"')"
    put "scale_${n}_probe_failures" "$(sum_metric "$admin" switchyard_health_checks_total 'result="failure"')"
    put "scale_${n}_cp_metrics_s" "$(curl -s -o /dev/null --max-time 60 -w '%{time_total}' "http://127.0.0.1:$admin/metrics" || echo n/a)"
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print (b - a) / 1e9}')
    put "scale_${n}_cp_rest_cores" "$(cores_between "$c0" "$c1" "$secs")"
    put "scale_${n}_dp_rest_cores" "$(cores_between "$d0" "$d1" "$secs")"
    put "scale_${n}_mock_rest_cores" "$(cores_between "$m0" "$m1" "$secs")"
    put "scale_${n}_scrapes_per_s" "$(awk -v a="$s0" -v b="$s1" -v s="$secs" 'BEGIN {printf "%.0f\n", (b - a) / s}')"
    put "scale_${n}_probes_per_s" "$(awk -v a="$p0" -v b="$p1" -v s="$secs" 'BEGIN {printf "%.1f\n", (b - a) / s}')"
    put "scale_${n}_cp_rss_mib" "$(rss_mib "$cp_pid")"
    put "scale_${n}_dp_rss_mib" "$(rss_mib "$dp_pid")"
    put "scale_${n}_mock_rss_mib" "$(rss_mib "${mock_pids[@]}")"
    put "scale_${n}_cp_fds" "$(ls /proc/"$cp_pid"/fd | wc -l)"
    [ "$n" = "$last_size" ] && profile "perf-rest-$n" "$cp_pid" "$rest_s"
    put "scale_${n}_dp_fds" "$(ls /proc/"$dp_pid"/fd | wc -l)"

    # KV events: N publishers, idle then at events_rate.
    echo "$cp_pid" >"$bench_tmp/kv-go.tmp" && mv "$bench_tmp/kv-go.tmp" "$bench_tmp/kv-go"
    if wait "$kvl"; then
        while read -r k val; do
            case $k in kvload_0_cpu_cores) put "scale_${n}_cp_subscribed_cores" "$val" ;;
            kvload_"$events_rate"_*) put "scale_${n}_ev_${k#kvload_"$events_rate"_}" "$val" ;;
            esac
        done <"$raw/kv-$n.txt"
    else
        echo "bench: micro_kvload with $n publishers failed: $(tail -1 "$raw/kv-$n.err")" >&2
        put "scale_${n}_kv_error" "$(tail -1 "$raw/kv-$n.err" | tr ',' ';')"
    fi
    put "scale_${n}_kv_subscriptions" "$(sum_metric "$admin" switchyard_kv_events_subscriptions)"
    put "scale_${n}_cp_fds_kv" "$(ls /proc/"$cp_pid"/fd | wc -l)"

    # Requests through the node.
    run_fg "$bench_tmp/wrk.out" wrk -t2 -c64 -d"${wrk_s}s" -s "$here/wrk_post.lua" \
        "http://127.0.0.1:$dp/v1/chat/completions"
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    put "scale_${n}_rps" "$(wrk_field rps "$line")"
    put "scale_${n}_req_p99_us" "$(wrk_field p99_us "$line")"
    put "scale_${n}_req_errors" "$(($(wrk_field errors "$line") + $(wrk_field non2xx "$line")))"
    switchyard_stop
    for p in "${mock_pids[@]}"; do bench_stop "$p"; done
    rm -f /dev/shm/sy-bench-scale"$n"-$$*

    # Kubernetes discovery of N pods.
    local fk_port kadmin kcfg ev
    read -r fk_port kadmin <<<"$(free_ports 2)"
    bench_spawn "$bench_tmp/fakekube-$n.log" "$build/switchyard-fakekube" \
        --listen "127.0.0.1:$fk_port" --bookmark-interval 60000
    local fk_pid=$last_pid
    wait_http "http://127.0.0.1:$fk_port/api/v1/namespaces/default/pods" 10
    kcfg=$bench_tmp/kube$n.yaml
    {
        echo "shm: { name: /sy-bench-kube$n-$$, max_workers: $((n + kube_samples + 16)) }"
        echo "controlplane:"
        echo "  admin_listen: 127.0.0.1:$kadmin"
        echo "  admin_socket: $bench_tmp/kube$n-admin.sock"
        echo "  health: { interval: 1h }"
        echo "  load_reports: { interval: 0s }"
        echo "discovery:"
        echo "  kubernetes: { api_server: 'http://127.0.0.1:$fk_port', insecure_http: true, namespace: default, label_selector: app=vllm, port_name: http, token_file: /nonexistent, resync: 1h }"
        echo "workers: []"
    } >"$kcfg"
    bench_spawn "$bench_tmp/kube-cp-$n.log" "$build/switchyard-controlplane" --config "$kcfg" --fresh
    local kcp=$last_pid
    wait_http "http://127.0.0.1:$kadmin/status" 10
    ev=$((kube_events < n ? n : kube_events))
    run_fg "$raw/kube-$n.txt" "$build/tests/bench/micro_kube" --fake "http://127.0.0.1:$fk_port" \
        --shm "/sy-bench-kube$n-$$" --cp-pid "$kcp" --pods "$n" --events "$ev" \
        --samples "$kube_samples"
    while read -r k val; do put "scale_${n}_${k}" "$val"; done <"$raw/kube-$n.txt"
    if [ "$n" = "$last_size" ]; then
        # The watch events alone, profiled: readiness toggles of the N pods.
        "$build/tests/bench/micro_kube" --fake "http://127.0.0.1:$fk_port" \
            --shm "/sy-bench-kube$n-$$" --cp-pid "$kcp" --pods "$n" --events "$ev" \
            --samples 1 >"$raw/kube-prof-$n.txt" &
        local mk=$!
        bench_pids+=("$mk")
        sleep 1
        profile "perf-kube-$n" "$kcp" 5
        wait "$mk" || true
    fi
    bench_stop "$kcp"
    bench_stop "$fk_pid"
}

last_size=${sizes##* }
for n in $sizes; do fleet_run "$n"; done

# The ingestion ramp: the control plane does nothing but KV events.
echo "== scale: KV-event ingestion, $kv_pubs publishers, rates $kv_rates" >&2
# Ports base.. are the workers' URLs (free when found: nobody answers, the
# first probe fails and the next is in an hour), base + kv_pubs.. the publishers.
mapfile -t bases < <(port_chunks $((2 * kv_pubs)) $((2 * kv_pubs)))
base=${bases[0]}
admin=$(free_ports 1)
cfg=$bench_tmp/kvramp.yaml
{
    echo "shm: { name: /sy-bench-kvramp-$$, max_workers: $((kv_pubs + 16)) }"
    echo "controlplane:"
    echo "  admin_listen: 127.0.0.1:$admin"
    echo "  admin_socket: $bench_tmp/kvramp-admin.sock"
    echo "  health: { interval: 1h, initial: healthy }"
    echo "  load_reports: { interval: 0s }"
    echo "workers:"
    for ((i = 0; i < kv_pubs; i++)); do
        echo "  - { url: 'http://127.0.0.1:$((base + i))', id: k$i, model: mock, kv_events: { endpoint: 'tcp://127.0.0.1:$((base + kv_pubs + i))' } }"
    done
} >"$cfg"
bench_spawn "$bench_tmp/kvramp-cp.log" "$build/switchyard-controlplane" --config "$cfg" --fresh
cp_pid=$last_pid
cp_wait_admin "$cfg" "$cp_pid" 20 || { tail -5 "$bench_tmp/kvramp-cp.log" >&2; exit 1; }
put scale_kv_pubs "$kv_pubs"
run_fg "$raw/kvramp.txt" "$build/tests/bench/micro_kvload" --port-base $((base + kv_pubs)) \
    --publishers "$kv_pubs" --cp-pid "$cp_pid" --cp-metrics "http://127.0.0.1:$admin/metrics" \
    --rates "$kv_rates" --seconds "$kv_s" --threads 2 --kv-blocks 2048
while read -r k val; do put "$k" "$val"; done <"$raw/kvramp.txt"
put scale_kv_facts "$(metric "http://127.0.0.1:$admin/metrics" switchyard_kv_index_facts)"
# Where the events' CPU goes, at the ramp's highest rate (a fresh run of
# the publishers: their sequences restart, which the control plane handles).
prof_rate=${kv_rates##*,}
"$build/tests/bench/micro_kvload" --port-base $((base + kv_pubs)) --publishers "$kv_pubs" \
    --cp-pid "$cp_pid" --cp-metrics "http://127.0.0.1:$admin/metrics" --rates "$prof_rate" \
    --seconds $((kv_s + 2)) --threads 2 --kv-blocks 2048 >/dev/null 2>&1 &
prof_pid=$!
bench_pids+=("$prof_pid")
sleep 2
profile perf-kv "$cp_pid" "$kv_s"
wait "$prof_pid" || true
put scale_kv_prof_rate "$prof_rate"
put scale_kv_cp_rss_mib "$(rss_mib "$cp_pid")"
