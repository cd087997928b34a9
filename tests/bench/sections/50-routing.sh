#!/usr/bin/env bash
# Section "routing": routing quality of each policy. Each workload against
# n_mocks mock workers with small KV caches (512 blocks of 16 tokens) and a
# prefill cost per uncached token, under each policy; the router is
# restarted for each run (empty prefix index) and the generator resets the
# mocks (empty KV caches, zeroed counters) before it starts. Data file:
# routing.csv (route_WORKLOAD_POLICY_FIGURE, the run's settings); raw:
# routing/route-WORKLOAD-POLICY.csv, every request (the report plots TTFT
# distributions from them).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section routing

if [ "$mode" = quick ]; then
    n_mocks=4 policies="round_robin least_load cache_aware"
else
    n_mocks=8 policies="round_robin least_load consistent_hash cache_aware_fleet cache_aware"
fi
workloads="shared_prefix multi_turn hot_prefix"
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
read -r -a rports <<<"$(free_ports $((n_mocks + 2)))"
rdp=${rports[$n_mocks]} radm=${rports[$((n_mocks + 1))]}
mock_args=()
for ((i = 0; i < n_mocks; i++)); do
    bench_spawn "$bench_tmp/rmock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${rports[$i]}" "${mock_flags[@]}"
    mock_args+=(--mock "http://127.0.0.1:${rports[$i]}")
done
for ((i = 0; i < n_mocks; i++)); do wait_http "http://127.0.0.1:${rports[$i]}/health" 10; done
for w in $workloads; do
    for pol in $policies; do
        name=$pol gate=per_request
        [ "$pol" = cache_aware_fleet ] && name=cache_aware gate=fleet
        # The mocks run 2 sequences at once (vLLM: up to 256): the overload
        # threshold is scaled to that capacity, 3 x max-num-seqs instead of 32.
        balance_abs=6 switchyard_config "$bench_tmp/route.yaml" route "$dp_threads" "$name" "$gate" \
            "$rdp" "$radm" "${rports[@]:0:$n_mocks}"
        switchyard_start "$build" "$bench_tmp/route.yaml" "$rdp"
        echo "-- $w / $pol" >&2
        # A failed run leaves its figures n/a in the report; the others go on.
        f=$raw/route-$w-$pol
        run_fg "$f.txt" "$build/switchyard-bench" run \
            --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" \
            --url "http://127.0.0.1:$rdp" "${mock_args[@]}" --kv-blocks "$kv_blocks" \
            --block-tokens 16 --label "$pol" --json "$f.json" --csv "$f.csv" ||
            echo "bench: $w / $pol: the load generator failed" >&2
        while read -r k val; do put "route_${w}_${pol}_$k" "$val"; done <"$f.txt"
        switchyard_stop
    done
done
