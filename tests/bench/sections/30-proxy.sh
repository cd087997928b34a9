#!/usr/bin/env bash
# Section "proxy": what a proxy hop costs, and 400 KB prompts. Data file:
# proxy.csv (proxy_CONTENDER_*, c1_CONTENDER_*, large_PROXY_*: switchyard_ca, floor, nginx).
#
# Upstreams: one static nginx answering a fixed chat completion on two ports
# (faster than either proxy). Contenders: wrk straight at an upstream port,
# through an nginx reverse proxy (round robin, keep-alive, as many worker
# processes as switchyard has event loops), through the library floor
# (switchyard-floor-proxy: MHD + libcurl built as the dataplane is, with no
# logic: what the mandated libraries allow), through switchyard (round_robin
# as nginx, and the default cache_aware). Then the large prompts run through
# the same switchyard (cache_aware), the floor and nginx.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section proxy

if [ "$mode" = quick ]; then proxy_secs=3 proxy_rounds=1 large_secs=3; else proxy_secs=8 proxy_rounds=3 large_secs=6; fi
put proxy_secs "$proxy_secs"
put proxy_rounds "$proxy_rounds"
put large_secs "$large_secs"
put proxy_dp_threads "$dp_threads"

echo "== proxy overhead" >&2
read -r up1 up2 nginx_port floor_port sy_rr_port sy_rr_admin sy_ca_port sy_ca_admin <<<"$(free_ports 8)"
static_nginx_start 2 "$up1" "$up2"
static_pid=$last_pid
wait_http "http://127.0.0.1:$up1/health" 10
wait_http "http://127.0.0.1:$up2/health" 10
proxy_nginx_start "$dp_threads" "$nginx_port" "$up1" "$up2"
nginx_pid=$last_pid
wait_http "http://127.0.0.1:$nginx_port/health" 10
bench_spawn "$bench_tmp/floor.log" "$build/switchyard-floor-proxy" --listen "127.0.0.1:$floor_port" \
    --threads "$dp_threads" --turbo --upstream "http://127.0.0.1:$up1" --upstream "http://127.0.0.1:$up2"
floor_pid=$last_pid
wait_http "http://127.0.0.1:$floor_port/v1/chat/completions" 10 -X POST \
    -H 'Content-Type: application/json' -d '{"model":"mock"}'
switchyard_config "$bench_tmp/proxy-rr.yaml" proxy-rr "$dp_threads" round_robin per_request \
    "$sy_rr_port" "$sy_rr_admin" "$up1" "$up2"
switchyard_start "$build" "$bench_tmp/proxy-rr.yaml" "$sy_rr_port"
rr_cp=$cp_pid rr_dp=$dp_pid
switchyard_config "$bench_tmp/proxy-ca.yaml" proxy-ca "$dp_threads" cache_aware per_request \
    "$sy_ca_port" "$sy_ca_admin" "$up1" "$up2"
switchyard_start "$build" "$bench_tmp/proxy-ca.yaml" "$sy_ca_port"
ca_cp=$cp_pid ca_dp=$dp_pid

declare -A target_url=(
    [direct]="http://127.0.0.1:$up1"
    [nginx]="http://127.0.0.1:$nginx_port"
    [floor]="http://127.0.0.1:$floor_port"
    [switchyard]="http://127.0.0.1:$sy_rr_port"
    [switchyard_ca]="http://127.0.0.1:$sy_ca_port"
)
# CPU of a contender's proxy processes (direct: none).
proxy_pids() {
    case $1 in
    nginx) nginx_procs "$nginx_pid" ;;
    floor) echo "$floor_pid" ;;
    switchyard) echo "$rr_dp" ;;
    switchyard_ca) echo "$ca_dp" ;;
    esac
}
# Rounds interleave the contenders; each contender's figures are the
# medians of its rounds.
contenders="direct nginx floor switchyard switchyard_ca"
for round in $(seq "$proxy_rounds"); do
    for c in $contenders; do
        pids=$(proxy_pids "$c")
        # shellcheck disable=SC2086
        cpu0=$(proc_cpu_s $pids)
        run_fg "$bench_tmp/wrk.out" wrk -t2 -c64 -d"${proxy_secs}s" -s "$here/wrk_post.lua" \
            "${target_url[$c]}/v1/chat/completions"
        # shellcheck disable=SC2086
        cpu1=$(proc_cpu_s $pids)
        line=$(grep '^WRK' "$bench_tmp/wrk.out")
        n=$(wrk_field requests "$line")
        cpu_us=n/a
        [ -n "$pids" ] && cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.1f", n ? (b - a) * 1e6 / n : 0}')
        echo "round $round $c: $line cpu_us=$cpu_us" >&2
        echo "$line cpu_us=$cpu_us" >>"$raw/proxy-$c.txt"
    done
done
# Unloaded: one connection, one request at a time — the latency a hop adds
# when nothing queues.
for c in direct nginx floor switchyard; do
    run_fg "$bench_tmp/wrk.out" wrk -t1 -c1 -d"${proxy_secs}s" -s "$here/wrk_post.lua" \
        "${target_url[$c]}/v1/chat/completions"
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    echo "c1 $c: $line" >&2
    put "c1_${c}_p50_us" "$(wrk_field p50_us "$line")"
    put "c1_${c}_p99_us" "$(wrk_field p99_us "$line")"
done
for c in $contenders; do
    for k in rps p50_us p99_us cpu_us; do
        put "proxy_${c}_$k" "$(while read -r line; do wrk_field "$k" "$line"; done <"$raw/proxy-$c.txt" | median)"
    done
    put "proxy_${c}_errors" "$(while read -r line; do
        echo "$(wrk_field errors "$line") $(wrk_field non2xx "$line")"
    done <"$raw/proxy-$c.txt" | awk '{s += $1 + $2} END {print s + 0}')"
done

# ---- large prompts: CPU per request for 400 KB bodies --------------------------
# wrk, 4 connections, through switchyard (cache_aware hashes the whole prompt),
# the library floor (the same libraries reading and sending the same body)
# and nginx; CPU = utime + stime of the proxy's processes.
echo "== large prompts" >&2
for c in switchyard_ca floor nginx; do
    pids=$(proxy_pids "$c")
    # shellcheck disable=SC2086
    cpu0=$(proc_cpu_s $pids)
    run_fg "$bench_tmp/wrk.out" env BENCH_PROMPT_BYTES=400000 wrk -t1 -c4 -d"${large_secs}s" \
        -s "$here/wrk_post.lua" "${target_url[$c]}/v1/chat/completions"
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    # shellcheck disable=SC2086
    cpu1=$(proc_cpu_s $pids)
    n=$(wrk_field requests "$line")
    echo "large $c: $line" >&2
    put "large_${c}_requests" "$n"
    put "large_${c}_rps" "$(wrk_field rps "$line")"
    put "large_${c}_errors" "$(($(wrk_field errors "$line") + $(wrk_field non2xx "$line")))"
    put "large_${c}_cpu_ms_per_req" "$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.3f\n", n ? (b - a) * 1000 / n : 0}')"
done
put proxy_rss_kb "$(proc_rss_kb "$ca_dp")"
bench_stop "$floor_pid"
bench_stop "$rr_dp"
bench_stop "$rr_cp"
bench_stop "$ca_dp"
bench_stop "$ca_cp"
bench_stop "$nginx_pid"
bench_stop "$static_pid"
