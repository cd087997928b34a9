#!/usr/bin/env bash
# Report fragment of section "routing": hit rate, TTFT, tokens/s and load
# of each policy on each workload, against round_robin and the hit-rate
# ceiling; plots bench-routing-hit.png, bench-routing-ttft.png and
# bench-ttft-cdf.png (from the runs' per-request CSVs).
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

policies=$(v route_policies) workloads=$(v route_workloads) n_mocks=$(v route_n_mocks)
target=$(v target | tr '"' "'")

for k in hit_rate ttft_p50_ms ttft_p99_ms output_tok_s; do
    {
        echo "workload $policies ceiling"
        for w in $workloads; do
            echo -n "$w"
            for pol in $policies; do echo -n " $(v "route_${w}_${pol}_$k")"; done
            echo " $(v "route_${w}_round_robin_hit_ceiling")"
        done
    } >"$tmp/route-$k.dat"
done
ncol=$(wc -w <<<"$policies")
plot_or_warn "bench-routing-hit.png and bench-routing-ttft.png" <<GP
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key outside right top

set terminal pngcairo size 900,420 font ",10" noenhanced
set output "$plots/bench-routing-hit.png"
set title "Prefix cache hit rate by policy ($n_mocks mock workers, $target)"
set ylabel "prompt tokens served from cache"
set yrange [0:1]
plot for [i=2:$((ncol + 2))] "$tmp/route-hit_rate.dat" using i:xtic(1) title columnheader(i)

set terminal pngcairo size 1200,450 font ",10" noenhanced
set output "$plots/bench-routing-ttft.png"
set title "TTFT p50 / p99 by policy ($n_mocks mock workers, $target)"
set ylabel "ms (log)"
set logscale y
set yrange [*:*]
set multiplot layout 1,2
set title "TTFT p50"
set key off
plot for [i=2:$((ncol + 1))] "$tmp/route-ttft_p50_ms.dat" using i:xtic(1) title columnheader(i)
set title "TTFT p99"
set key outside right top
plot for [i=2:$((ncol + 1))] "$tmp/route-ttft_p99_ms.dat" using i:xtic(1) title columnheader(i)
unset multiplot
GP
# TTFT CDF of the shared-prefix workload, one curve per policy.
cdf_plot="set terminal pngcairo size 900,420 font \",10\" noenhanced
set output \"$plots/bench-ttft-cdf.png\"
set title \"shared_prefix: TTFT distribution by policy ($target)\"
set xlabel \"TTFT (ms, log)\"; set ylabel \"fraction of requests\"; set logscale x; set grid
set key bottom right
plot"
sep=""
for pol in $policies; do
    f=${BENCH_DATA:?}/routing/route-shared_prefix-$pol.csv
    [ -f "$f" ] || continue
    awk -F, 'NR > 1 && $10 == 1 {print $5}' "$f" | sort -g |
        awk '{v[NR] = $1} END {for (i = 1; i <= NR; i++) print v[i], i / NR}' >"$tmp/cdf-$pol.dat"
    cdf_plot+="$sep \"$tmp/cdf-$pol.dat\" using 1:2 with lines lw 2 title \"$pol\""
    sep=","
done
plot_or_warn bench-ttft-cdf.png <<<"$cdf_plot"

echo "## Routing quality (issue: Routing policies)"
echo
measured_alone routing
echo "\`build/switchyard-bench run\` replays each workload of"
echo "[\`tests/bench/workloads/\`](../tests/bench/workloads/) open-loop (Poisson arrivals, fixed"
echo "seed, every request streamed) through switchyard ($(v route_dp_threads) event loops) to $n_mocks mock"
echo "workers: \`$(v route_mock_flags)\` — small KV caches, so where a prompt"
echo "goes decides whether its prefix is cached, and a cached prefix makes prefill cheap."
echo "The router is restarted and the mocks reset before each run. Hit rate = the mocks'"
echo "\`prefix_hit_tokens / prefix_query_tokens\` (\`/mock/stats\`); ceiling = the share of"
echo "prompt tokens one LRU cache of the whole fleet's capacity ($n_mocks × $(v route_kv_blocks) blocks) would"
echo "serve from cache fed the same requests in order (an ideal router pooling the KV"
echo "caches); load max/mean = the busiest worker's time-averaged in-flight count"
echo "(\`/mock/stats\` sampled every 100 ms) over the mean; tokens/s = output tokens over"
echo "the time to the last completion. consistent_hash keys on \`X-Session-Id\`, sent per"
echo "group / conversation. cache_aware_fleet = \`cache_aware\` with \`balance_gate: fleet\`."
echo "Both cache_aware variants run with \`balance_abs_threshold: 6\` (3 × the mocks'"
echo "\`--max-num-seqs 2\`; the default 32 suits vLLM workers running up to 256 sequences):"
echo "an overload threshold only means something relative to what a worker runs at once."
echo "precise_cache_aware (same threshold) routes on the workers' own KV-cache events: the"
echo "mocks always publish them (\`--kv-events-endpoint\`, \`--kv-events-replay-endpoint\`), its"
echo "config gives each worker its \`kv_events\`, it tokenizes through the workers'"
echo "\`/tokenize\` (policy defaults: \`tokenize_timeout\` 50 ms, \`speculative_ttl\` 2 s), and"
echo "its runs start once every worker's first event batch has reached the control plane."
echo "shared_prefix_evict is shared_prefix with three times the groups: a working set"
echo "larger than the fleet's caches, so the workers evict. shared_prefix_bypass sends a"
echo "third of its requests (\`bypass_share: 0.33\`) straight to the workers, one worker per"
echo "group as a client with its own routing would: the workers hold prefixes the router"
echo "never routed. Its hit rate and ceiling are those of the **routed requests only** (each"
echo "response's \`usage.prompt_tokens_details.cached_tokens\` over its \`prompt_tokens\`; the"
echo "ceiling's cache is fed every request and counts the routed ones); the whole fleet's"
echo "hit rate is given below its table."
echo
for w in $workloads; do
    echo "### $w"
    echo
    echo "Workload ([\`$w.yaml\`](../tests/bench/workloads/$w.yaml)$(is_quick && echo ", its \`quick:\` values")): \`$(v "route_${w}_spec")\`; $(v "route_${w}_round_robin_requests") requests; hit-rate ceiling $(v "route_${w}_round_robin_hit_ceiling")."
    echo
    echo "| policy | hit rate | of ceiling | TTFT p50 | TTFT p90 | TTFT p99 | e2e p50 | e2e p99 | output tok/s | load max/mean | failed |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for pol in $policies; do
        p="route_${w}_${pol}"
        echo "| $pol | $(v "${p}_hit_rate") | $(ratio "$(v "${p}_hit_rate")" "$(v "${p}_hit_ceiling")") | $(v "${p}_ttft_p50_ms") ms | $(v "${p}_ttft_p90_ms") ms | $(v "${p}_ttft_p99_ms") ms | $(v "${p}_e2e_p50_ms") ms | $(v "${p}_e2e_p99_ms") ms | $(v "${p}_output_tok_s") | $(v "${p}_load_max_mean") | $(v "${p}_failed") |"
    done
    echo
    echo "Ratios against round_robin (hit rate and tokens/s: higher is better; TTFT and e2e: lower is better):"
    echo
    echo "| policy | hit rate | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 | output tok/s |"
    echo "|---|---|---|---|---|---|---|"
    for pol in $policies; do
        [ "$pol" = round_robin ] && continue
        p="route_${w}_${pol}" r="route_${w}_round_robin"
        echo -n "| $pol"
        for k in hit_rate ttft_p50_ms ttft_p99_ms e2e_p50_ms e2e_p99_ms output_tok_s; do
            echo -n " | $(ratio "$(v "${p}_$k")" "$(v "${r}_$k")")×"
        done
        echo " |"
    done
    echo
    b=""
    for pol in $policies; do [ "$(v "route_${w}_${pol}_bypassed")" = n/a ] || b=$pol; done
    if [ -n "$b" ]; then
        echo "Bypassing the router: $(v "route_${w}_${b}_bypassed") of $(v "route_${w}_${b}_requests") requests. Hit rate of every request,"
        echo "routed or not (the mocks' \`/mock/stats\`):"
        for pol in $policies; do echo -n " $pol $(v "route_${w}_${pol}_fleet_hit_rate");"; done
        echo
        echo
    fi
    p="route_${w}_precise_cache_aware"
    if [ "$(v "${p}_tokenize_ok")" != n/a ]; then
        echo "precise_cache_aware's counters at the end of the run: tokenize round trips ok /"
        echo "timeout / error $(v "${p}_tokenize_ok") / $(v "${p}_tokenize_timeout") / $(v "${p}_tokenize_error"), tokenize cache hits $(v "${p}_tokenize_cache_hits");"
        echo "fallbacks to the approximate match $(v "${p}_fallbacks") (timeout $(v "${p}_fallbacks_timeout"), error $(v "${p}_fallbacks_error"),"
        echo "unsupported $(v "${p}_fallbacks_unsupported"), no_index $(v "${p}_fallbacks_no_index")); KV index facts $(v "${p}_kv_index_facts") (of"
        echo "$(v "${p}_kv_index_capacity"); the fleet's caches hold at most $n_mocks × $(v route_kv_blocks) blocks); events stored /"
        echo "removed / cleared $(v "${p}_kv_events_stored") / $(v "${p}_kv_events_removed") / $(v "${p}_kv_events_cleared"), skipped $(v "${p}_kv_events_skipped"), gaps $(v "${p}_kv_events_gaps"),"
        echo "resyncs $(v "${p}_kv_events_resyncs"). Tokenize round trip p99 $(v "${p}_tokenize_p99_ms") ms"
        echo "(\`switchyard_tokenize_duration_seconds\`), event lag p99 $(v "${p}_kv_lag_p99_ms") ms (batch \`ts\` to"
        echo "index updated, \`switchyard_kv_events_lag_seconds\`); control-plane CPU $(v "${p}_cp_cpu_s") s over"
        echo "the run for $(v "${p}_kv_events_run") events: $(v "${p}_cp_cpu_ms_per_10k_events") ms per 10k events (everything the"
        echo "control plane did meanwhile, its health probes included: an upper bound)."
        echo
    fi
    if [ "$(v "route_${w}_cache_aware_decisions_no_match")" != n/a ]; then
        echo "Routing decisions (\`switchyard_routing_decisions_total\`; the readiness request"
        echo "included) affinity / affinity_despite_imbalance / overloaded_fallback / no_match:"
        for pol in cache_aware precise_cache_aware; do
            p="route_${w}_${pol}"
            [ "$(v "${p}_decisions_no_match")" != n/a ] || continue
            echo "$pol $(v "${p}_decisions_affinity") / $(v "${p}_decisions_affinity_despite_imbalance") / $(v "${p}_decisions_overloaded_fallback") / $(v "${p}_decisions_no_match");"
        done
        echo
    fi
done
# points A B CEIL: (A - B) / CEIL in percentage points of the ceiling.
points() {
    awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN {
        if (a == "n/a" || b == "n/a" || c == "n/a" || c + 0 == 0) print "n/a"
        else printf "%+.1f\n", 100 * (a - b) / c }'
}
if [[ " $policies " == *" precise_cache_aware "* ]]; then
    echo "Goal (issue: precise prefix routing): precise_cache_aware's hit rate of the ceiling"
    echo "≥ cache_aware's on every workload, and ≥ +5 points where the caches evict"
    echo "(shared_prefix_evict) or traffic bypasses the router (shared_prefix_bypass, routed"
    echo "requests only). Points = the difference of the two hit rates over the ceiling."
    echo
    echo "| workload | cache_aware of ceiling | precise_cache_aware of ceiling | points |"
    echo "|---|---|---|---|"
    for w in $workloads; do
        c=$(v "route_${w}_precise_cache_aware_hit_ceiling")
        a=$(v "route_${w}_cache_aware_hit_rate") b=$(v "route_${w}_precise_cache_aware_hit_rate")
        echo "| $w | $(ratio "$a" "$(v "route_${w}_cache_aware_hit_ceiling")") | $(ratio "$b" "$c") | $(points "$b" "$a" "$c") |"
    done
    echo
    echo "precise_cache_aware's costs, per workload: tokenize round trip p99, event lag p99"
    echo "(a batch's \`ts\` to its events applied to the index), control-plane CPU per 10k"
    echo "events applied (utime + stime of the control plane over the run, everything"
    echo "included)."
    echo
    echo "| workload | tokenize p99 | event lag p99 | events applied | CP CPU per 10k events |"
    echo "|---|---|---|---|---|"
    for w in $workloads; do
        p="route_${w}_precise_cache_aware"
        echo "| $w | $(v "${p}_tokenize_p99_ms") ms | $(v "${p}_kv_lag_p99_ms") ms | $(v "${p}_kv_events_run") | $(v "${p}_cp_cpu_ms_per_10k_events") ms |"
    done
    echo
fi
echo "Goals (issue: Benchmarks): shared-prefix hit rate ≥ 95% of the ceiling and ≥ 2×"
echo "round_robin throughput; on hot_prefix no worker above 2× mean load while the hit"
echo "rate stays ≥ 80%. Measured above for cache_aware: shared_prefix"
echo "$(ratio "$(v route_shared_prefix_cache_aware_hit_rate)" "$(v route_shared_prefix_cache_aware_hit_ceiling)") of the ceiling,"
echo "$(ratio "$(v route_shared_prefix_cache_aware_output_tok_s)" "$(v route_shared_prefix_round_robin_output_tok_s)")× round_robin tokens/s"
echo "(open loop: a router that keeps up serves the offered rate, so the throughput ratio"
echo "only exceeds 1 once round_robin's workers saturate); hot_prefix load max/mean"
echo "$(v route_hot_prefix_cache_aware_load_max_mean) at hit rate $(v route_hot_prefix_cache_aware_hit_rate)."
echo
echo "![hit rate](bench-routing-hit.png)"
echo
echo "![TTFT](bench-routing-ttft.png)"
echo
echo "![TTFT CDF](bench-ttft-cdf.png)"
echo
