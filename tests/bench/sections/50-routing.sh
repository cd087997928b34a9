#!/usr/bin/env bash
# Section "routing": routing quality of each policy. Each workload against
# n_mocks mock workers with small KV caches (512 blocks of 16 tokens) and a
# prefill cost per uncached token, under each policy; the router is
# restarted for each run (empty prefix index) and the generator resets the
# mocks (empty KV caches, zeroed counters) before it starts. Data file:
# routing.csv (route_WORKLOAD_POLICY_FIGURE, the run's settings); raw:
# routing/route-WORKLOAD-POLICY.csv, every request (the report plots TTFT
# distributions from them).
#
# The mocks publish their KV-cache events (stores and evictions, over
# ZeroMQ) in every run; only precise_cache_aware's config gives each worker
# its kv_events, so only its control plane subscribes. Before its runs the
# section waits until every worker's first batch has been delivered (a
# subscriber misses what is published before it joins), and after each of
# its runs reads the tokenize and fallback counters (data plane /metrics)
# and the KV index's facts and event counters (control plane /metrics),
# the p99 of the tokenize round trip and of the event lag (their
# histograms, over the router's life: the readiness probes included), and
# the control plane's CPU (utime + stime) over the run per 10k events.
# shared_prefix_evict is shared_prefix with three times the groups: a
# working set larger than the fleet's caches, so the mocks evict.
# shared_prefix_bypass sends a third of its requests straight to the mocks
# (bypass_share): its hit_rate and hit_ceiling are the routed requests'
# (the generator's bypassed and fleet_hit_rate give the rest).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section routing

if [ "$mode" = quick ]; then
    n_mocks=4 policies="round_robin least_load cache_aware precise_cache_aware"
else
    n_mocks=8 policies="round_robin least_load consistent_hash cache_aware_fleet cache_aware precise_cache_aware"
fi
workloads="shared_prefix multi_turn hot_prefix shared_prefix_evict shared_prefix_bypass"
# Knobs for a partial run (e.g. ROUTE_MOCKS=8 ROUTE_POLICIES="cache_aware
# precise_cache_aware" in quick mode): the fleet size, the policies and the
# workloads. The report's ratios against round_robin and its ceiling
# column need round_robin among the policies; without it they read n/a.
n_mocks=${ROUTE_MOCKS:-$n_mocks} policies=${ROUTE_POLICIES:-$policies}
workloads=${ROUTE_WORKLOADS:-$workloads}
mock_flags=(--model mock --threads 1 --kv-blocks "$kv_blocks" --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 2)
put route_n_mocks "$n_mocks"
put route_policies "$policies"
put route_workloads "$workloads"
put route_mock_flags "${mock_flags[*]}"
put route_kv_blocks "$kv_blocks"
put route_dp_threads "$dp_threads"
for w in $workloads; do
    put "route_${w}_spec" "$("$build/switchyard-bench" plan --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" |
        sed -n 's/^spec //p')"
done

echo "== routing quality ($n_mocks mock workers: $policies)" >&2
read -r -a rports <<<"$(free_ports $((3 * n_mocks + 2)))"
rdp=${rports[$n_mocks]} radm=${rports[$((n_mocks + 1))]}
mock_args=() kv_ports=()
for ((i = 0; i < n_mocks; i++)); do
    pub=${rports[$((n_mocks + 2 + 2 * i))]} rep=${rports[$((n_mocks + 3 + 2 * i))]}
    kv_ports+=("$pub:$rep")
    bench_spawn "$bench_tmp/rmock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${rports[$i]}" "${mock_flags[@]}" \
        --kv-events-endpoint "tcp://127.0.0.1:$pub" --kv-events-replay-endpoint "tcp://127.0.0.1:$rep"
    mock_args+=(--mock "http://127.0.0.1:${rports[$i]}")
done

# kv_events_joined: every mock's first KV event batch has reached the
# control plane (each is sent one small request directly until it has).
kv_events_joined() {
    local i deadline=$(($(date +%s) + 15))
    for ((i = 0; i < n_mocks; i++)); do
        kv_batch_wait "$radm" "w$((i + 1))" "http://127.0.0.1:${rports[$i]}" "$deadline" || return 1
    done
}

# decision_figures PREFIX: the run's routing decisions by reason (data
# plane), read before its router stops (cache_aware and precise runs).
decision_figures() {
    local d
    for d in affinity affinity_despite_imbalance overloaded_fallback no_match; do
        put "${1}_decisions_$d" "$(metric "http://127.0.0.1:$rdp/metrics" \
            switchyard_routing_decisions_total "decision=\"$d\"")"
    done
}

# precise_figures PREFIX: the precise_cache_aware run's counters, read
# before its router stops: tokenize round trips and fallbacks (data plane),
# the KV holder index and the events that built it (control plane).
precise_figures() {
    local p=$1 dpm="http://127.0.0.1:$rdp/metrics" cpm="http://127.0.0.1:$radm/metrics" r
    put "${p}_fallbacks" "$(metric "$dpm" switchyard_precise_fallbacks_total)"
    for r in timeout error unsupported no_index; do
        put "${p}_fallbacks_$r" "$(metric "$dpm" switchyard_precise_fallbacks_total "reason=\"$r\"")"
    done
    for r in ok timeout error; do
        put "${p}_tokenize_$r" "$(metric "$dpm" switchyard_tokenize_requests_total "result=\"$r\"")"
    done
    put "${p}_tokenize_cache_hits" "$(metric "$dpm" switchyard_tokenize_cache_hits_total)"
    put "${p}_kv_index_facts" "$(metric "$cpm" switchyard_kv_index_facts)"
    put "${p}_kv_index_capacity" "$(metric "$cpm" switchyard_kv_index_capacity)"
    for r in stored removed cleared; do
        put "${p}_kv_events_$r" "$(metric "$cpm" switchyard_kv_events_total "kind=\"$r\"")"
    done
    put "${p}_kv_events_skipped" "$(metric "$cpm" switchyard_kv_events_skipped_total)"
    put "${p}_kv_events_gaps" "$(metric "$cpm" switchyard_kv_events_gaps_total)"
    put "${p}_kv_events_resyncs" "$(metric "$cpm" switchyard_kv_events_resyncs_total)"
}
# hist_p99_ms URL FAMILY: the 99th percentile of histogram FAMILY on URL's
# page in ms, interpolated within its bucket as Prometheus's
# histogram_quantile does; ">B" when it lies above the last bound B; n/a
# without samples or without the page.
hist_p99_ms() {
    local page
    page=$(curl -fs --max-time 5 "$1") || { echo n/a; return 0; }
    awk -v n="$2_bucket" '
        index($1, n "{") == 1 {
            le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
            k++; b[k] = le; c[k] = $NF }
        END {
            if (k == 0 || c[k] == 0) { print "n/a"; exit }
            r = 0.99 * c[k]
            for (i = 1; i <= k; i++) if (c[i] >= r) break
            if (b[i] == "+Inf") { printf ">%g\n", b[i - 1] * 1000; exit }
            lo = i > 1 ? b[i - 1] : 0; clo = i > 1 ? c[i - 1] : 0
            v = c[i] > clo ? lo + (b[i] - lo) * (r - clo) / (c[i] - clo) : b[i]
            printf "%.3f\n", v * 1000 }' <<<"$page"
}

for ((i = 0; i < n_mocks; i++)); do wait_http "http://127.0.0.1:${rports[$i]}/health" 10; done
for w in $workloads; do
    for pol in $policies; do
        name=$pol gate=per_request kvp=""
        [ "$pol" = cache_aware_fleet ] && name=cache_aware gate=fleet
        [ "$pol" = precise_cache_aware ] && kvp="${kv_ports[*]}"
        # The mocks run 2 sequences at once (vLLM: up to 256): the overload
        # threshold is scaled to that capacity, 3 x max-num-seqs instead of 32.
        balance_abs=6 kv_events_ports=$kvp switchyard_config "$bench_tmp/route.yaml" route \
            "$dp_threads" "$name" "$gate" "$rdp" "$radm" "${rports[@]:0:$n_mocks}"
        switchyard_start "$build" "$bench_tmp/route.yaml" "$rdp"
        if [ -n "$kvp" ]; then
            kv_events_joined || tail -5 "$bench_tmp/route-cp.log" >&2
        fi
        echo "-- $w / $pol" >&2
        # A failed run leaves its figures n/a in the report; the others go on.
        f=$raw/route-$w-$pol
        if [ -n "$kvp" ]; then
            cpu0=$(proc_cpu_s "$cp_pid")
            ev0=$(metric "http://127.0.0.1:$radm/metrics" switchyard_kv_events_total)
        fi
        run_fg "$f.txt" "$build/switchyard-bench" run \
            --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" \
            --url "http://127.0.0.1:$rdp" "${mock_args[@]}" --kv-blocks "$kv_blocks" \
            --block-tokens 16 --label "$pol" --json "$f.json" --csv "$f.csv" ||
            echo "bench: $w / $pol: the load generator failed" >&2
        while read -r k val; do put "route_${w}_${pol}_$k" "$val"; done <"$f.txt"
        case $pol in cache_aware | precise_cache_aware) decision_figures "route_${w}_${pol}" ;; esac
        if [ -n "$kvp" ]; then
            precise_figures "route_${w}_${pol}"
            # The control plane's CPU over the run (everything it did: its
            # health probes and load reports too) per 10k events applied.
            cpu1=$(proc_cpu_s "$cp_pid")
            ev1=$(metric "http://127.0.0.1:$radm/metrics" switchyard_kv_events_total)
            put "route_${w}_${pol}_cp_cpu_s" "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {printf "%.2f", b - a}')"
            put "route_${w}_${pol}_kv_events_run" "$(awk -v a="$ev0" -v b="$ev1" 'BEGIN {
                if (a == "n/a" || b == "n/a") print "n/a"; else printf "%.0f", b - a }')"
            put "route_${w}_${pol}_cp_cpu_ms_per_10k_events" "$(awk -v a="$cpu0" -v b="$cpu1" -v x="$ev0" -v y="$ev1" 'BEGIN {
                if (x == "n/a" || y == "n/a" || y - x <= 0) print "n/a"
                else printf "%.1f", (b - a) * 1000 * 10000 / (y - x) }')"
            put "route_${w}_${pol}_tokenize_p99_ms" \
                "$(hist_p99_ms "http://127.0.0.1:$rdp/metrics" switchyard_tokenize_duration_seconds)"
            put "route_${w}_${pol}_kv_lag_p99_ms" \
                "$(hist_p99_ms "http://127.0.0.1:$radm/metrics" switchyard_kv_events_lag_seconds)"
        fi
        switchyard_stop
    done
done
