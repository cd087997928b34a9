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
# where it is off by default). REPLICAS_FACTORS="1.5 2"
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
# Data file: replicas.csv (rep_WORKLOAD_CONFIG_FIGURE, rep_restart_*);
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
configs=${REPLICAS_CONFIGS:-"one one_norank three three_ablation one_unbounded three_unbounded"}
for f in ${REPLICAS_FACTORS:-}; do configs+=" three_f$f"; done
put rep_n_mocks "$n_mocks"
put rep_configs "$configs"
put rep_workloads "$workloads"
put rep_window_s "$window"
put rep_mock_flags "${mock_flags[*]}"
put rep_dp_threads "$dp_threads"

# config_nodes CONFIG / config_policy CONFIG: its node count and policy lines.
config_nodes() { case $1 in one*) echo 1 ;; *) echo 3 ;; esac; }
config_policy() {
    case $1 in
    one_norank) echo "rendezvous: false" ;;
    three_ablation) echo "$ablation" ;;
    *_f*) echo "bounded_load_factor: ${1#*_f}" ;;
    *_unbounded) echo "bounded_affinity: false" ;;
    *_bounded) echo "bounded_affinity: true" ;;
    *) echo "" ;;
    esac
}

# nodes_start N CONFIG: N router nodes over the mocks (each started with
# --fresh: empty index, empty registry state). Sets node_urls (comma
# separated), node_cfgs, node_dp_pids and node_cp_pids.
nodes_start() {
    local n=$1 config=$2 i dp adm cfg ports
    node_urls="" node_cfgs=() node_dp_pids=() node_cp_pids=()
    read -r -a ports <<<"$(free_ports $((2 * n)))"
    for ((i = 0; i < n; i++)); do
        dp=${ports[$((2 * i))]} adm=${ports[$((2 * i + 1))]} cfg=$bench_tmp/rep$i.yaml
        policy_extra=$(config_policy "$config") balance_abs=6 switchyard_config "$cfg" "rep$i" \
            "$dp_threads" cache_aware per_request "$dp" "$adm" "${mports[@]}"
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
read -r -a mports <<<"$(free_ports "$n_mocks")"
mock_args=() mock_urls=()
for ((i = 0; i < n_mocks; i++)); do
    bench_spawn "$bench_tmp/repmock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${mports[$i]}" "${mock_flags[@]}"
    mock_args+=(--mock "http://127.0.0.1:${mports[$i]}")
    mock_urls+=("http://127.0.0.1:${mports[$i]}")
done
for u in "${mock_urls[@]}"; do wait_http "$u/health" 10; done

for w in $workloads; do
    for c in $configs; do
        echo "-- $w / $c" >&2
        nodes_start "$(config_nodes "$c")" "$c"
        f=$raw/rep-$w-$c
        # A failed run leaves its figures n/a in the report; the others go on.
        run_fg "$f.txt" "$build/switchyard-bench" run \
            --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" \
            --url "$node_urls" "${mock_args[@]}" --kv-blocks "$kv_blocks" \
            --block-tokens 16 --label "$c" --json "$f.json" --csv "$f.csv" ||
            echo "bench: $w / $c: the load generator failed" >&2
        while read -r k val; do put "rep_${w}_${c}_$k" "$val"; done <"$f.txt"
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
