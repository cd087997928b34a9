#!/usr/bin/env bash
# Report fragment of section "replicas": hit rate of ceiling and load
# max/mean of 1 and 3 independent router nodes behind a round-robin front,
# the ablations, and the hit rate around a hot restart of every node.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

configs=$(v rep_configs) workloads=$(v rep_workloads) n_mocks=$(v rep_n_mocks)
window=$(v rep_window_s)

echo "## Router replicas (issue: Several router nodes, one truth)"
echo
measured_alone replicas
echo "The routing section's $n_mocks mock workers (\`$(v rep_mock_flags)\`) and workloads,"
echo "routed by \`cache_aware\` (\`balance_abs_threshold: 6\`) through independent router"
echo "nodes — each a control plane and a data plane ($(v rep_dp_threads) event loops) on segments of"
echo "its own, as on separate hosts, sharing nothing but the workers — with the load"
echo "generator sending each request to the next node round robin (\`switchyard-bench run"
echo "--url A,B,C\`), as a round-robin front would; every node starts with \`--fresh\`. One"
echo "node: \`one\`; three: \`three\`. Ablations: \`one_norank\` and \`three_ablation\` run"
echo "with \`policy.rendezvous: false\` (cold prefixes and overloaded fallbacks go to the"
echo "least-loaded worker, as before the ranking)$([ "$(v rep_load_signal)" = yes ] && echo ", and \`three_ablation\` with \`policy.load_signal: own\` (each node sees only its own in-flight requests)")."
echo "\`one_unbounded\` and \`three_unbounded\` run with \`policy.bounded_affinity: false\` (a matched"
echo "worker gives way only over the balance thresholds, not over its load bound: the"
echo "default spreads a hot prefix down its ranking)."
case " $configs " in *_precise" "*)
    echo "\`one_precise\` and \`three_precise\` route by \`precise_cache_aware\`: every node's control"
    echo "plane subscribes to every mock's KV-cache events, so all nodes route on the same"
    echo "exact holders (each run starts once every node has every mock's first event batch)."
    ;;
esac
echo "Of ceiling = hit rate / the workload's hit-rate ceiling (as in the routing section);"
echo "load max/mean as there."
echo
for w in $workloads; do
    echo "### $w"
    echo
    echo "| config | nodes | hit rate | of ceiling | vs one (of ceiling) | load max/mean | vs one (load) | TTFT p50 | TTFT p99 | output tok/s | failed |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    o="rep_${w}_one"
    o_ceil=$(ratio "$(v "${o}_hit_rate")" "$(v "${o}_hit_ceiling")" 4)
    for c in $configs; do
        p="rep_${w}_${c}"
        nodes=3
        case $c in one*) nodes=1 ;; esac
        of=$(ratio "$(v "${p}_hit_rate")" "$(v "${p}_hit_ceiling")" 4)
        echo "| $c | $nodes | $(v "${p}_hit_rate") | $(ratio "$of" 1) | $(ratio "$of" "$o_ceil")× | $(v "${p}_load_max_mean") | $(ratio "$(v "${p}_load_max_mean")" "$(v "${o}_load_max_mean")")× | $(v "${p}_ttft_p50_ms") ms | $(v "${p}_ttft_p99_ms") ms | $(v "${p}_output_tok_s") | $(v "${p}_failed") |"
    done
    echo
done
# The precise comparison, when the run had both precise configs.
has_config() { case " $configs " in *" $1 "*) return 0 ;; esac; return 1; }
if has_config one_precise && has_config three_precise; then
    echo "### Exact holdings: three_precise against one node"
    echo
    echo "Of ceiling and load max/mean of \`three_precise\` over \`one_precise\` (the same"
    echo "policy on one node) and over \`one\` (cache_aware on one node); the precise runs'"
    echo "routing decisions and tokenize fallbacks, summed over their nodes."
    echo
    echo "| workload | three_precise / one_precise (of ceiling) | three_precise / one (of ceiling) | load max/mean vs one_precise | load max/mean vs one | three_precise: affinity / no_match / overloaded_fallback | fallbacks (timeout, error) |"
    echo "|---|---|---|---|---|---|---|"
    for w in $workloads; do
        t="rep_${w}_three_precise" op="rep_${w}_one_precise" o="rep_${w}_one"
        t_of=$(ratio "$(v "${t}_hit_rate")" "$(v "${t}_hit_ceiling")" 4)
        op_of=$(ratio "$(v "${op}_hit_rate")" "$(v "${op}_hit_ceiling")" 4)
        o_of=$(ratio "$(v "${o}_hit_rate")" "$(v "${o}_hit_ceiling")" 4)
        echo "| $w | $(ratio "$t_of" "$op_of")× | $(ratio "$t_of" "$o_of")× | $(ratio "$(v "${t}_load_max_mean")" "$(v "${op}_load_max_mean")")× | $(ratio "$(v "${t}_load_max_mean")" "$(v "${o}_load_max_mean")")× | $(v "${t}_decisions_affinity") / $(v "${t}_decisions_no_match") / $(v "${t}_decisions_overloaded_fallback") | $(v "${t}_fallbacks") ($(v "${t}_fallbacks_timeout"), $(v "${t}_fallbacks_error")) |"
    done
    echo
fi
echo "Goals (issue): three nodes reach ≥ 0.95× one node's hit rate of ceiling with load"
echo "max/mean within +10% of it; the ablation shows what the ranking (and the combined"
echo "load) bring."
echo
echo "### Hot restart"
echo
echo "multi_turn$(is_quick && echo " (its \`quick:\` values)") through three nodes at $(v rep_restart_rate) requests/s"
echo "($(v rep_restart_requests) requests, stretched to outlast two ${window}-s windows); at the second"
echo "window's start every node's data plane is hot-restarted ($(v rep_restart_handed_over) of 3 handed"
echo "over); hit rate = the mocks' prefix hit tokens over prompt tokens in each window. The"
echo "control run does the same without a restart: multi_turn's hit rate grows as its"
echo "conversations get longer, so the restart's own effect is the ratio of the two ratios."
echo
echo "| run | hit rate, ${window} s before | hit rate, ${window} s after | after / before | failed |"
echo "|---|---|---|---|---|"
for run in control restart; do
    p="rep_restart_${run}"
    echo "| $run | $(v "${p}_hit_before") | $(v "${p}_hit_after") | $(v "${p}_after_before")× | $(v "${p}_failed") |"
done
echo
echo "Restart effect (restart's after/before over the control's): $(v rep_restart_effect)×"
echo "(goal ≥ 0.95×: the index lives in the node's shared segment, so the new data planes"
echo "route the next turns to the workers that hold them)."
echo
