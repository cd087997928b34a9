#!/usr/bin/env bash
# Section "replicas" (Router replicas): several independent router nodes
# (each a control plane + data plane on its own segments, as on separate
# hosts) in front of the same mock fleet, with clients spread over them
# round robin (switchyard-bench run --url A,B,C: each request to the next
# node, as behind a round-robin front). The routing section's mock fleet
# and workloads, cache_aware with its balance_abs_threshold of 6.
#
# Contenders, per workload: `one` (1 node), `three` (3 nodes), and the
# ablations `one_norank` (1 node, policy.rendezvous: false) and
# `three_ablation` (3 nodes, rendezvous: false and, where this tree has
# worker-reported load, policy.load_signal: own), and `one_unbounded` and
# `three_unbounded` (policy.bounded_affinity: false: a matched worker gives
# way only over the balance thresholds; `*_bounded` names it on, for trees
# where it is off by default), and `one_precise` and `three_precise`
# (precise_cache_aware: every node's control plane subscribes to every
# mock's KV-cache events, so all nodes route on the same exact holders;
# before each such run the section waits until every node has every mock's
# first event batch, and after it sums the nodes' tokenize fallbacks and
# decisions; REPLICAS_PRECISE_POLICY adds policy lines to them, e.g.
# "precise_cache_aware: { speculative_ttl: 5s }"). REPLICAS_FACTORS="1.5 2"
# adds `three` runs with other policy.bounded_load_factor values
# (three_f1.5, ...); REPLICAS_CONFIGS replaces the list (one_F and three_F
# name a factor F too), REPLICAS_WORKLOADS the workloads, and
# REPLICAS_ACCESS_LOG=1 keeps every node's access log (each request's
# worker and decision) beside the raw files. Then the hot restart: multi_turn through 3 nodes,
# stretched to outlast two windows (5 s, quick: 2 s); every node's data
# plane is hot-restarted at the second window's start, and the mocks'
# prefix hit rate in the window after is compared with the window before;
# a control run without the restart measures how much the rate drifts
# between the same windows anyway.
#
# Data file: replicas.csv (rep_WORKLOAD_CONFIG_FIGURE, precise runs also
# _decisions_*, _fallbacks*, _tokenize_*, _kv_events_*; rep_restart_*);
# raw: replicas/rep-WORKLOAD-CONFIG.{txt,csv,json}.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section replicas

if [ "$mode" = quick ]; then
    n_mocks=4 window=2
else
    n_mocks=8 window=5
fi
workloads=${REPLICAS_WORKLOADS:-"shared_prefix multi_turn hot_prefix"}
# The routing section's mocks (tests/bench/sections/50-routing.sh).
mock_flags=(--model mock --threads 1 --kv-blocks "$kv_blocks" --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 2)
# policy.load_signal arrives with worker-reported load; a tree without it
# would refuse the key, so the ablation names it only when it exists.
ablation="rendezvous: false"
if grep -q '"load_signal"' "$here/../../common/config_schema.c" 2>/dev/null; then
    ablation+=$'\nload_signal: own'
    put rep_load_signal yes
else
    put rep_load_signal no
fi
configs=${REPLICAS_CONFIGS:-"one one_norank three three_ablation one_unbounded three_unbounded one_precise three_precise"}
for f in ${REPLICAS_FACTORS:-}; do configs+=" three_f$f"; done
put rep_n_mocks "$n_mocks"
put rep_configs "$configs"
put rep_workloads "$workloads"
put rep_window_s "$window"
put rep_mock_flags "${mock_flags[*]}"
put rep_dp_threads "$dp_threads"

# config_nodes CONFIG / config_name CONFIG / config_policy CONFIG: its node
# count, its policy and that policy's extra lines.
config_nodes() { case $1 in one*) echo 1 ;; *) echo 3 ;; esac; }
config_name() { case $1 in *_precise) echo precise_cache_aware ;; *) echo cache_aware ;; esac; }
config_policy() {
    case $1 in
    *_precise) echo "${REPLICAS_PRECISE_POLICY:-}" ;;
    one_norank) echo "rendezvous: false" ;;
    three_ablation) echo "$ablation" ;;
    *_f*) echo "bounded_load_factor: ${1#*_f}" ;;
    *_unbounded) echo "bounded_affinity: false" ;;
    *_bounded) echo "bounded_affinity: true" ;;
    *) echo "" ;;
    esac
}

# nodes_start N CONFIG: N router nodes over the mocks (each started with
# --fresh: empty index, empty registry state; with a precise policy each
# subscribed to every mock's KV events). Sets node_urls (comma separated),
# node_cfgs, node_dp_ports, node_adm_ports, node_dp_pids and node_cp_pids.
nodes_start() {
    local n=$1 config=$2 i dp adm cfg ports kvp=""
    node_urls="" node_cfgs=() node_dp_ports=() node_adm_ports=() node_dp_pids=() node_cp_pids=()
    read -r -a ports <<<"$(free_ports $((2 * n)))"
    [ "$(config_name "$config")" = precise_cache_aware ] && kvp="${kv_ports[*]}"
    for ((i = 0; i < n; i++)); do
        dp=${ports[$((2 * i))]} adm=${ports[$((2 * i + 1))]} cfg=$bench_tmp/rep$i.yaml
        policy_extra=$(config_policy "$config") balance_abs=6 kv_events_ports=$kvp \
            switchyard_config "$cfg" "rep$i" "$dp_threads" "$(config_name "$config")" \
            per_request "$dp" "$adm" "${mports[@]}"
        node_dp_ports+=("$dp") node_adm_ports+=("$adm")
        # REPLICAS_ACCESS_LOG=1: every node writes an access log (the
        # worker and decision of each request), kept beside the raw files.
        if [ -n "${REPLICAS_ACCESS_LOG:-}" ]; then
            sed -i "s|^dataplane:\$|dataplane:\n  access_log: $bench_tmp/rep$i-access.log|" "$cfg"
            : >"$bench_tmp/rep$i-access.log"
        fi
        switchyard_start "$build" "$cfg" "$dp" || return 1
        node_cfgs+=("$cfg") node_dp_pids+=("$dp_pid") node_cp_pids+=("$cp_pid")
        node_urls+="${node_urls:+,}http://127.0.0.1:$dp"
    done
}

# nodes_metric PORTS_ARRAY NAME [LABEL_MATCH]: metric summed over the
# running nodes' pages (data planes: node_dp_ports; control planes:
# node_adm_ports), n/a when one cannot be read.
nodes_metric() {
    local -n ports_ref=$1
    local p s=0 x
    for p in "${ports_ref[@]}"; do
        x=$(metric "http://127.0.0.1:$p/metrics" "$2" "${3:-}")
        [ "$x" = n/a ] && { echo n/a; return 0; }
        s=$((s + x))
    done
    echo "$s"
}

# kv_events_joined: every node's control plane has every mock's first KV
# event batch (a subscriber misses what is published before it joins; each
# mock is sent one small request directly until every node has one).
kv_events_joined() {
    local i p deadline=$(($(date +%s) + 15))
    for ((i = 0; i < n_mocks; i++)); do
        for p in "${node_adm_ports[@]}"; do
            kv_batch_wait "$p" "w$((i + 1))" "${mock_urls[$i]}" "$deadline" || return 1
        done
    done
}

# precise_figures PREFIX: a precise run's counters summed over its nodes,
# read before they stop: routing decisions by reason and tokenize
# fallbacks by reason (data planes), KV events applied and skipped
# (control planes).
precise_figures() {
    local p=$1 r
    for r in affinity affinity_despite_imbalance overloaded_fallback no_match; do
        put "${p}_decisions_$r" "$(nodes_metric node_dp_ports switchyard_routing_decisions_total "decision=\"$r\"")"
    done
    put "${p}_fallbacks" "$(nodes_metric node_dp_ports switchyard_precise_fallbacks_total)"
    for r in timeout error unsupported no_index; do
        put "${p}_fallbacks_$r" "$(nodes_metric node_dp_ports switchyard_precise_fallbacks_total "reason=\"$r\"")"
    done
    for r in ok timeout error; do
        put "${p}_tokenize_$r" "$(nodes_metric node_dp_ports switchyard_tokenize_requests_total "result=\"$r\"")"
    done
    put "${p}_tokenize_cache_hits" "$(nodes_metric node_dp_ports switchyard_tokenize_cache_hits_total)"
    put "${p}_kv_events_stored" "$(nodes_metric node_adm_ports switchyard_kv_events_total 'kind="stored"')"
    put "${p}_kv_events_skipped" "$(nodes_metric node_adm_ports switchyard_kv_events_skipped_total)"
    put "${p}_kv_events_gaps" "$(nodes_metric node_adm_ports switchyard_kv_events_gaps_total)"
}

nodes_stop() {
    local p
    for p in "${node_dp_pids[@]}" "${node_cp_pids[@]}"; do bench_stop "$p"; done
}

# The mocks' summed "prefix_hit_tokens prefix_query_tokens" now.
mock_hits() {
    local u h=0 q=0 s
    for u in "${mock_urls[@]}"; do
        s=$(curl -fs --max-time 2 "$u/mock/stats" || echo '{}')
        h=$((h + $(grep -o '"prefix_hit_tokens": *[0-9]*' <<<"$s" | grep -o '[0-9]*$' || echo 0)))
        q=$((q + $(grep -o '"prefix_query_tokens": *[0-9]*' <<<"$s" | grep -o '[0-9]*$' || echo 0)))
    done
    echo "$h $q"
}

# sleep_until T: sleeps until epoch time T (fractional seconds).
sleep_until() {
    sleep "$(awk -v t="$1" -v n="$(date +%s.%N)" 'BEGIN { d = t - n; print (d > 0 ? d : 0) }')"
}

# hit share of the tokens between two mock_hits readings, or n/a.
hit_between() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
        q = y[2] - x[2]; if (q <= 0) print "n/a"; else printf "%.4f\n", (y[1] - x[1]) / q }'
}

echo "== router replicas ($n_mocks mock workers: $configs)" >&2
# Each mock's HTTP port, then its KV events' PUB and replay ports: the
# mocks always publish; only the precise configs subscribe.
read -r -a ports <<<"$(free_ports $((3 * n_mocks)))"
mports=("${ports[@]:0:$n_mocks}")
mock_args=() mock_urls=() kv_ports=()
for ((i = 0; i < n_mocks; i++)); do
    pub=${ports[$((n_mocks + 2 * i))]} rep=${ports[$((n_mocks + 2 * i + 1))]}
    kv_ports+=("$pub:$rep")
    bench_spawn "$bench_tmp/repmock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${mports[$i]}" "${mock_flags[@]}" \
        --kv-events-endpoint "tcp://127.0.0.1:$pub" --kv-events-replay-endpoint "tcp://127.0.0.1:$rep"
    mock_args+=(--mock "http://127.0.0.1:${mports[$i]}")
    mock_urls+=("http://127.0.0.1:${mports[$i]}")
done
for u in "${mock_urls[@]}"; do wait_http "$u/health" 10; done

for w in $workloads; do
    for c in $configs; do
        echo "-- $w / $c" >&2
        nodes_start "$(config_nodes "$c")" "$c"
        precise=""
        [ "$(config_name "$c")" = precise_cache_aware ] && precise=yes
        if [ -n "$precise" ]; then
            kv_events_joined || tail -5 "$bench_tmp/rep0-cp.log" >&2
        fi
        f=$raw/rep-$w-$c
        # A failed run leaves its figures n/a in the report; the others go on.
        run_fg "$f.txt" "$build/switchyard-bench" run \
            --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" \
            --url "$node_urls" "${mock_args[@]}" --kv-blocks "$kv_blocks" \
            --block-tokens 16 --label "$c" --json "$f.json" --csv "$f.csv" ||
            echo "bench: $w / $c: the load generator failed" >&2
        while read -r k val; do put "rep_${w}_${c}_$k" "$val"; done <"$f.txt"
        [ -n "$precise" ] && precise_figures "rep_${w}_${c}"
        nodes_stop
        if [ -n "${REPLICAS_ACCESS_LOG:-}" ]; then
            for ((i = 0; i < $(config_nodes "$c"); i++)); do
                cp "$bench_tmp/rep$i-access.log" "$f.access$i.log"
            done
        fi
    done
done

# Hot restart: multi_turn through 3 nodes at a rate that makes it last
# 2 windows and a margin; readings at the two windows' edges.
# REPLICAS_RESTART=0 skips it (when only the routing figures are wanted).
[ "${REPLICAS_RESTART:-1}" = 0 ] && exit 0
reqs=$("$build/switchyard-bench" plan --workload "$here/workloads/multi_turn.yaml" \
    "${quick_flag[@]}" | sed -n 's/^requests //p')
rate=$(awk -v r="$reqs" -v w="$window" 'BEGIN { printf "%.2f\n", r / (2 * w + 3) }')
put rep_restart_requests "$reqs"
put rep_restart_rate "$rate"
for run in control restart; do
    echo "-- hot restart ($run)" >&2
    nodes_start 3 three
    f=$raw/rep-restart-$run
    t0=$(date +%s.%N)
    bench_spawn "$f.txt.log" "$build/switchyard-bench" run \
        --workload "$here/workloads/multi_turn.yaml" "${quick_flag[@]}" --rate "$rate" \
        --url "$node_urls" "${mock_args[@]}" --kv-blocks "$kv_blocks" --block-tokens 16 \
        --label "restart-$run" --csv "$f.csv"
    gen=$last_pid
    # 1 s for the generator to reset the mocks and start.
    tr=$(awk -v t="$t0" -v w="$window" 'BEGIN { printf "%.3f\n", t + 1 + w }')
    sleep_until "$(awk -v t="$tr" -v w="$window" 'BEGIN { printf "%.3f\n", t - w }')"
    s0=$(mock_hits)
    sleep_until "$tr"
    s1=$(mock_hits)
    if [ "$run" = restart ]; then
        for ((i = 0; i < 3; i++)); do
            bench_spawn "$bench_tmp/rep$i-hot.log" "$build/switchyard-dataplane" \
                --config "${node_cfgs[$i]}" --hot-restart
            node_dp_pids+=("$last_pid")
        done
    fi
    sleep_until "$(awk -v t="$tr" -v w="$window" 'BEGIN { printf "%.3f\n", t + w }')"
    s2=$(mock_hits)
    wait "$gen" || echo "bench: hot restart ($run): the load generator failed" >&2
    # Its figures only (the log holds its stderr too).
    grep -E '^[a-z0-9_]+ [^ ]+$' "$f.txt.log" >"$f.txt" || true
    while read -r k val; do put "rep_restart_${run}_$k" "$val"; done <"$f.txt"
    before=$(hit_between "$s0" "$s1") after=$(hit_between "$s1" "$s2")
    put "rep_restart_${run}_hit_before" "$before"
    put "rep_restart_${run}_hit_after" "$after"
    put "rep_restart_${run}_after_before" "$(ratio "$after" "$before" 3)"
    if [ "$run" = restart ]; then
        # Every node's old data plane handed over and exited by itself.
        handed=0
        for ((i = 0; i < 3; i++)); do
            grep -q "hot restart: received" "$bench_tmp/rep$i-hot.log" && handed=$((handed + 1))
            cp "$bench_tmp/rep$i-hot.log" "$raw/rep$i-hot.log"
        done
        put rep_restart_handed_over "$handed"
    fi
    nodes_stop
done
put rep_restart_effect "$(ratio "$(v rep_restart_restart_after_before)" \
    "$(v rep_restart_control_after_before)" 3)"
