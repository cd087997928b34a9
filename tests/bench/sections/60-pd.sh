#!/usr/bin/env bash
# Section "pd": prefill/decode, the agentic workloads. Data file: pd.csv
# (pd_SCENARIO_POLICY_RATE_FIGURE per cell, ..._rREP_FIGURE per run,
# pd_SCENARIO_cmp_RATE_* the gates' comparison, and the run's settings);
# raw: pd/pd-SCENARIO-POLICY-RATE-REP.{txt,json,csv}, every run.
#
# 4 prefill + 6 decode mock workers; switchyard routes each request in two
# legs (docs/pd.md), policy.decode least_load, policy.prefill under test:
# cache_aware with the per-request gate, cache_aware with balance_gate: fleet,
# round_robin — each at several arrival rates (--rate, the offered requests/s:
# agents' conversations start open-loop at rate / turns per second and each
# sends its next turn once the last one is answered, see pd_agentic.yaml), up
# to and past what round_robin's prefill workers serve. Two workloads, under
# identical conditions: pd_agentic (every agent a context of its own) and
# pd_agentic_shared (agents of one framework: a long common head, then a
# short context of their own — where affinity makes load uneven). Prefill
# mocks: the routing runs' flags (512-block caches, 200 µs per uncached
# prompt token, 2 sequences at once); decode mocks: tpot 2 ms, 16 sequences,
# so decode is never the bottleneck. The generator resets and reads the
# prefill mocks (hit rate, load); the decode mocks are reset here. Decisions
# that abandoned affinity come from the dataplane's /metrics, scraped before
# and after each run. Each (workload, rate, policy) cell runs `pd_reps WORKLOAD` times
# (the policies interleaved within each repetition) and reports the median
# of each figure, except TTFT percentiles: those are taken over all runs'
# requests together (switchyard-bench pooled), and the two gates' p99s are
# compared with a bootstrap 95% interval over runs, paired by repetition.
#
# PD_RATES (pd_agentic), PD_SHARED_RATES (both pd_agentic_shared
# scenarios), PD_MIXED_RATES (pd_agentic_mixed), PD_REPS (every scenario),
# PD_WORKLOADS, PD_LONG_REPS and PD_LONG_S, when set, replace the section's
# rates, repetitions, scenarios and long cells (for calibration; the data
# file records which were used).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section pd

pd_n_prefill=4 pd_n_decode=6
pd_policies="cache_aware cache_aware_fleet round_robin"
# Scenarios: a workload (tests/bench/workloads/NAME.yaml) on the uniform
# fleet, or NAME_slow: the same workload on a fleet whose first prefill
# worker is 3x slower (pd_slow_flags: an older GPU, a degraded one), the
# hot worker of invariant 9 that load-blind affinity keeps feeding.
# pd_agentic_mixed (half of the agents share a framework's head) is not run
# by default: the gates barely differ on it (see the issue's notes); name
# it in PD_WORKLOADS to run it.
pd_workloads="pd_agentic pd_agentic_shared pd_agentic_shared_slow"
# Runs per cell: a run's own TTFT p99 is its 4th slowest request and moves
# a lot between runs where a gate fires (75-516 ms at 192/s on
# pd_agentic_shared); the report pools a cell's runs, whose repetitions draw
# different arrivals (seed + rep - 1), and bounds the gates' p99 ratio.
if [ "$mode" = quick ]; then
    pd_rates_pd_agentic="16 192" pd_rates_pd_agentic_shared="48 192" pd_rates_pd_agentic_shared_slow="192"
    pd_rates_pd_agentic_mixed="96"
    pd_reps_pd_agentic=1 pd_reps_pd_agentic_shared=1 pd_reps_pd_agentic_shared_slow=1 pd_reps_pd_agentic_mixed=1
else
    pd_rates_pd_agentic="16 48 192" pd_rates_pd_agentic_shared="48 96 192" pd_rates_pd_agentic_shared_slow="96 192"
    pd_rates_pd_agentic_mixed="96 192"
    pd_reps_pd_agentic=3 pd_reps_pd_agentic_shared=5 pd_reps_pd_agentic_shared_slow=5 pd_reps_pd_agentic_mixed=5
fi
pd_rates_pd_agentic=${PD_RATES:-$pd_rates_pd_agentic}
pd_rates_pd_agentic_shared=${PD_SHARED_RATES:-$pd_rates_pd_agentic_shared}
pd_rates_pd_agentic_shared_slow=${PD_SHARED_RATES:-$pd_rates_pd_agentic_shared_slow}
pd_rates_pd_agentic_mixed=${PD_MIXED_RATES:-$pd_rates_pd_agentic_mixed}
pd_reps_pd_agentic=${PD_REPS:-$pd_reps_pd_agentic}
pd_reps_pd_agentic_shared=${PD_REPS:-$pd_reps_pd_agentic_shared}
pd_reps_pd_agentic_shared_slow=${PD_REPS:-$pd_reps_pd_agentic_shared_slow}
pd_reps_pd_agentic_mixed=${PD_REPS:-$pd_reps_pd_agentic_mixed}
pd_workloads=${PD_WORKLOADS:-$pd_workloads}
# Long cells: the saturation rate of the two pd_agentic_shared scenarios,
# where the gates differ, runs pd_long_reps times with a pd_long_s window
# instead: the two gates' TTFT p99s differ by about a tenth there, and 5
# runs of 4 s (about 800 requests each, p99 = the 8th slowest) gave
# intervals 1.0 wide that could rank nothing; 5 runs of 19 s gave 0.3.
# round_robin, which only sets the throughput baseline, runs in the first
# pd_long_rr_reps of them. PD_LONG_REPS=0 turns long cells off.
pd_long_s=${PD_LONG_S:-20.5} pd_long_rr_reps=3
if [ "$mode" = quick ]; then pd_long_reps=${PD_LONG_REPS:-0}; else pd_long_reps=${PD_LONG_REPS:-8}; fi
pd_slow_flags=(--prefill-base-us 3000 --prefill-us-per-token 600)
# pd_yaml SCENARIO: its workload file; pd_is_slow SCENARIO: whether its fleet has the slow worker.
pd_yaml() { echo "$here/workloads/${1%_slow}.yaml"; }
pd_is_slow() { [ "${1%_slow}" != "$1" ]; }
# pd_spec WORKLOAD: its effective keys ("key=value ...", without the rate).
pd_spec() {
    "$build/switchyard-bench" plan --workload "$(pd_yaml "$1")" "${quick_flag[@]}" |
        sed -n 's/^spec //; s/ rate=[^ ]*//p'
}
# pd_spec_val WORKLOAD KEY: KEY's value in the workload's spec.
pd_spec_val() { spec_val "$(pd_spec "$1")" "$2"; }
# pd_rates WORKLOAD / pd_reps WORKLOAD: its rates, its runs per cell.
pd_rates() { local r=pd_rates_$1; echo "${!r}"; }
pd_reps() { local r=pd_reps_$1; echo "${!r}"; }
# pd_is_long WORKLOAD RATE: whether the cell is a long one (above).
pd_is_long() {
    local rates
    rates=$(pd_rates "$1")
    [ "$pd_long_reps" -gt 0 ] && [ "${1%_slow}" = pd_agentic_shared ] && [ "$2" = "${rates##* }" ]
}
# pd_cell_reps WORKLOAD RATE: the cell's repetitions; pd_cell_duration
# WORKLOAD RATE: its --duration-s arguments (none: the workload's own).
pd_cell_reps() { if pd_is_long "$1" "$2"; then echo "$pd_long_reps"; else pd_reps "$1"; fi; }
pd_cell_duration() { if pd_is_long "$1" "$2"; then echo "--duration-s $pd_long_s"; fi; }
# pd_runs POLICY WORKLOAD RATE REP: whether that run happens.
pd_runs() { [ "$1" != round_robin ] || ! pd_is_long "$2" "$3" || [ "$4" -le "$pd_long_rr_reps" ]; }
pd_prefill_flags=(--model mock --role prefill --threads 1 --kv-blocks "$kv_blocks" --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 2)
pd_decode_flags=(--model mock --role decode --threads 1 --kv-blocks 4096 --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 16)

# The run's settings, for the report.
put pd_workloads "$pd_workloads"
put pd_policies "$pd_policies"
put pd_n_prefill "$pd_n_prefill"
put pd_n_decode "$pd_n_decode"
put pd_kv_blocks "$kv_blocks"
put pd_prefill_flags "${pd_prefill_flags[*]}"
put pd_decode_flags "${pd_decode_flags[*]}"
put pd_slow_flags "${pd_slow_flags[*]}"
put pd_long_reps "$pd_long_reps"
put pd_long_s "$pd_long_s"
put pd_long_rr_reps "$pd_long_rr_reps"
put pd_shared_duration_s "$(pd_spec_val pd_agentic_shared duration_s)"
for wl in $pd_workloads; do
    rates=$(pd_rates "$wl") top=$(pd_rates "$wl")
    top=${top##* }
    put "pd_${wl}_rates" "$rates"
    put "pd_${wl}_reps" "$(pd_reps "$wl")"
    put "pd_${wl}_spec" "$(pd_spec "$wl")"
    if pd_is_long "$wl" "$top"; then put "pd_${wl}_long_rate" "$top"; else put "pd_${wl}_long_rate" none; fi
    # shellcheck disable=SC2046 # pd_cell_duration: no argument or two words
    put "pd_${wl}_planned" "$("$build/switchyard-bench" plan --workload "$(pd_yaml "$wl")" "${quick_flag[@]}" \
        $(pd_cell_duration "$wl" "$top") --rate "$top" | awk '$1 == "conversations" {print $2}')"
done

echo "== P/D ($pd_n_prefill prefill + $pd_n_decode decode mocks: $pd_policies; $(for w in $pd_workloads; do echo -n "$w at $(pd_rates "$w") req/s, $(pd_reps "$w") run(s) each; "; done)long cells: $pd_long_reps runs of ${pd_long_s} s)" >&2
pd_n=$((pd_n_prefill + pd_n_decode))
read -r -a pports <<<"$(free_ports $((pd_n + 2)))"
pdp=${pports[$pd_n]} padm=${pports[$((pd_n + 1))]}
pd_mock_args=()
# pd_start_first_prefill normal|slow: (re)starts prefill mock 0, uniform or slow.
pd_first_kind=""
pd_start_first_prefill() {
    [ "$pd_first_kind" = "$1" ] && return 0
    [ -n "${pd_first_pid:-}" ] && bench_stop "$pd_first_pid"
    local extra=()
    [ "$1" = slow ] && extra=("${pd_slow_flags[@]}")
    bench_spawn "$bench_tmp/pmock-0-$1.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${pports[0]}" "${pd_prefill_flags[@]}" "${extra[@]}"
    pd_first_pid=$last_pid pd_first_kind=$1
    wait_http "http://127.0.0.1:${pports[0]}/health" 10
}
for ((i = 0; i < pd_n; i++)); do
    if [ "$i" -eq 0 ]; then
        pd_start_first_prefill normal
        pd_mock_args+=(--mock "http://127.0.0.1:${pports[$i]}")
    elif [ "$i" -lt "$pd_n_prefill" ]; then
        bench_spawn "$bench_tmp/pmock-$i.log" "$build/switchyard-mockworker" \
            --listen "127.0.0.1:${pports[$i]}" "${pd_prefill_flags[@]}"
        pd_mock_args+=(--mock "http://127.0.0.1:${pports[$i]}")
    else
        bench_spawn "$bench_tmp/dmock-$i.log" "$build/switchyard-mockworker" \
            --listen "127.0.0.1:${pports[$i]}" "${pd_decode_flags[@]}"
    fi
done
for ((i = 0; i < pd_n; i++)); do wait_http "http://127.0.0.1:${pports[$i]}/health" 10; done
# pd_cell_runs CELL WORKLOAD RATE FIGURE: the figure of each of the cell's runs, one per line.
pd_cell_runs() { local rep; for rep in $(seq "$(pd_cell_reps "$2" "$3")"); do value "${1}_r${rep}_$4"; done; }
# pd_decisions: "ALL ABANDONED KEPT" prefill decisions counted by the dataplane
# so far: all of them, those that abandoned affinity because load was uneven,
# and those that kept it although another worker was overloaded (per-request
# gate only: requests the fleet gate would have moved).
pd_decisions() {
    curl -fs --max-time 5 "http://127.0.0.1:$pdp/metrics" | awk '
        /^switchyard_pd_routing_decisions_total\{/ && /phase="prefill"/ {
            all += $NF
            if (/decision="overloaded_fallback"/ || /decision="fleet_imbalanced"/) ab += $NF
            if (/decision="affinity_despite_imbalance"/) kept += $NF
        }
        END { printf "%d %d %d\n", all, ab, kept }'
}
for wl in $pd_workloads; do
    if pd_is_slow "$wl"; then pd_start_first_prefill slow; else pd_start_first_prefill normal; fi
    for rate in $(pd_rates "$wl"); do
        for rep in $(seq "$(pd_cell_reps "$wl" "$rate")"); do
            for pol in $pd_policies; do
                pd_runs "$pol" "$wl" "$rate" "$rep" || continue
                name=$pol gate=per_request
                [ "$pol" = cache_aware_fleet ] && name=cache_aware gate=fleet
                balance_abs=6 switchyard_pd_config "$bench_tmp/pd.yaml" pd "$dp_threads" "$name" "$gate" \
                    "$pdp" "$padm" "$pd_n_prefill" "${pports[@]:0:$pd_n}"
                switchyard_start "$build" "$bench_tmp/pd.yaml" "$pdp"
                echo "-- $wl / $pol / $rate req/s / run $rep" >&2
                for ((i = pd_n_prefill; i < pd_n; i++)); do
                    curl -fs -o /dev/null --max-time 5 -X POST "http://127.0.0.1:${pports[$i]}/mock/reset" || true
                done
                read -r all0 ab0 kept0 <<<"$(pd_decisions || echo "n/a n/a n/a")"
                f=$raw/pd-$wl-$pol-$rate-$rep
                # Repetition r draws its arrivals and prompts with the workload's
                # seed + r - 1 (the same draw for every policy of the repetition).
                # shellcheck disable=SC2046 # pd_cell_duration: no argument or two words
                run_fg "$f.txt" "$build/switchyard-bench" run --workload "$(pd_yaml "$wl")" \
                    "${quick_flag[@]}" $(pd_cell_duration "$wl" "$rate") --rate "$rate" \
                    --seed "$(($(pd_spec_val "$wl" seed) + rep - 1))" \
                    --url "http://127.0.0.1:$pdp" "${pd_mock_args[@]}" \
                    --kv-blocks "$kv_blocks" --block-tokens 16 --label "$pol" --json "$f.json" --csv "$f.csv" ||
                    echo "bench: $wl / $pol / $rate / run $rep: the load generator failed" >&2
                read -r all1 ab1 kept1 <<<"$(pd_decisions || echo "n/a n/a n/a")"
                awk -v a0="$all0" -v a1="$all1" -v b0="$ab0" -v b1="$ab1" -v k0="$kept0" -v k1="$kept1" 'BEGIN {
                    if (a0 == "n/a" || a1 == "n/a" || a1 - a0 <= 0) { print "decisions n/a"; print "abandoned n/a"; print "abandoned_share n/a"; print "kept n/a"; print "kept_share n/a" }
                    else { print "decisions", a1 - a0; print "abandoned", b1 - b0; printf "abandoned_share %.4f\n", (b1 - b0) / (a1 - a0)
                           print "kept", k1 - k0; printf "kept_share %.4f\n", (k1 - k0) / (a1 - a0) } }' >>"$f.txt"
                while read -r k val; do put "pd_${wl}_${pol}_${rate}_r${rep}_$k" "$val"; done <"$f.txt"
                switchyard_stop
            done
        done
        # The cell's figures: each the median of its runs; tokens/s also its range,
        # abandoned decisions also their largest count.
        for pol in $pd_policies; do
            c="pd_${wl}_${pol}_${rate}"
            keys=$(awk -F, -v p="${c}_r1_" 'index($1, p) == 1 {print substr($1, length(p) + 1)}' "$data_file" | sort -u)
            for k in $keys; do put "${c}_$k" "$(pd_cell_runs "$c" "$wl" "$rate" "$k" | median)"; done
            put "${c}_abandoned_max" "$(pd_cell_runs "$c" "$wl" "$rate" abandoned | runs_max)"
            put "${c}_kept_max" "$(pd_cell_runs "$c" "$wl" "$rate" kept | runs_max)"
            put "${c}_tok_s_range" "$(pd_cell_runs "$c" "$wl" "$rate" output_tok_s | runs_range)"
            put "${c}_p99_range" "$(pd_cell_runs "$c" "$wl" "$rate" ttft_p99_ms | runs_range)"
            # TTFT percentiles over every run's requests in the window (the
            # window is the workload's, the same in every run of the cell).
            pooled_runs=$(for rep in $(seq "$(pd_cell_reps "$wl" "$rate")"); do
                f="$raw/pd-$wl-$pol-$rate-$rep.csv"
                if [ -s "$f" ]; then echo "$f"; fi
            done)
            # shellcheck disable=SC2086 # one file a word
            if [ -n "$pooled_runs" ] && "$build/switchyard-bench" pooled --window "$(value "${c}_r1_window_from_s")" \
                "$(value "${c}_r1_window_to_s")" $pooled_runs >"$bench_tmp/pooled.txt"; then
                put "${c}_ttft_p50_ms" "$(awk '$1 == "a_p50_ms" {print $2}' "$bench_tmp/pooled.txt")"
                put "${c}_ttft_p99_ms" "$(awk '$1 == "a_p99_ms" {print $2}' "$bench_tmp/pooled.txt")"
            else
                put "${c}_ttft_p50_ms" n/a
                put "${c}_ttft_p99_ms" n/a
            fi
        done
        # The per-request gate's pooled TTFT p99 over the fleet gate's, with
        # bootstrap 95% intervals that resample runs: unpaired, and paired by
        # repetition (both gates' runs of repetition r ran the same arrival plan),
        # so the lists go in repetition order and only repetitions both have.
        c="pd_${wl}_cmp_${rate}"
        ca_runs="" fl_runs=""
        for rep in $(seq "$(pd_cell_reps "$wl" "$rate")"); do
            ca="$raw/pd-$wl-cache_aware-$rate-$rep.csv" fl="$raw/pd-$wl-cache_aware_fleet-$rate-$rep.csv"
            [ -s "$ca" ] && [ -s "$fl" ] && ca_runs="$ca_runs $ca" fl_runs="$fl_runs $fl"
        done
        # shellcheck disable=SC2086 # one file a word
        if [ -n "$ca_runs" ] && "$build/switchyard-bench" pooled \
            --window "$(value "pd_${wl}_cache_aware_${rate}_r1_window_from_s")" \
            "$(value "pd_${wl}_cache_aware_${rate}_r1_window_to_s")" --paired $ca_runs -- $fl_runs >"$bench_tmp/pooled.txt"; then
            for k in ratio ratio_lo ratio_hi paired_lo paired_hi; do
                put "${c}_p99_$k" "$(awk -v k="$k" '$1 == k {print $2}' "$bench_tmp/pooled.txt")"
            done
        else
            for k in ratio ratio_lo ratio_hi paired_lo paired_hi; do put "${c}_p99_$k" n/a; done
        fi
    done
done
