#!/usr/bin/env bash
# Report fragment of section "pd": the prefill/decode agentic scenarios —
# what each workload is, its tables, the per-request gate against the fleet
# gate with the verdict rules, the goals judged mechanically; plot
# bench-pd.png (tokens/s, TTFT p99 and hit rate against the rate).
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

pd_n_prefill=$(v pd_n_prefill) pd_n_decode=$(v pd_n_decode) kv_blocks=$(v pd_kv_blocks)
pd_policies=$(v pd_policies) pd_workloads=$(v pd_workloads)
pd_long_reps=$(v pd_long_reps) pd_long_s=$(v pd_long_s) pd_long_rr_reps=$(v pd_long_rr_reps)
# pd_spec_val SCENARIO KEY: KEY's value in the scenario's workload spec.
pd_spec_val() { spec_val "$(v "pd_${1}_spec")" "$2"; }
# pd_is_slow SCENARIO: whether its fleet has the slow worker; pd_is_long
# SCENARIO RATE: whether the cell was a long one.
pd_is_slow() { [ "${1%_slow}" != "$1" ]; }
pd_is_long() { [ "$(v "pd_${1}_long_rate")" = "$2" ]; }

# P/D: tokens/s, TTFT p99 and prefill hit rate against the arrival rate, one
# row per workload.
pd_plot="set terminal pngcairo size 1500,$((400 * $(wc -w <<<"$pd_workloads") + 40)) font \",10\" noenhanced
set output \"$plots/bench-pd.png\"
set multiplot layout $(wc -w <<<"$pd_workloads"),3 title \"P/D agentic workloads, $pd_n_prefill prefill + $pd_n_decode decode mocks ($(v target | tr '"' "'"), commit $(v commit))\"
set grid
set xlabel \"arrival rate (requests/s)\"
set datafile missing \"n/a\"
"
pd_ncol=$(wc -w <<<"$pd_policies")
for wl in $pd_workloads; do
    for k in output_tok_s ttft_p99_ms hit_rate; do
        {
            echo "rate $pd_policies"
            for rate in $(v "pd_${wl}_rates"); do
                echo -n "$rate"
                for pol in $pd_policies; do echo -n " $(value "pd_${wl}_${pol}_${rate}_$k")"; done
                echo
            done
        } >"$tmp/pd-$wl-$k.dat"
    done
    pd_plot+="set key top left
set title \"$wl: output tokens/s\"
set yrange [0:*]
plot for [i=2:$((pd_ncol + 1))] \"$tmp/pd-$wl-output_tok_s.dat\" using 1:i with linespoints lw 2 title columnheader(i)
set title \"$wl: TTFT p99 (ms, log)\"
set logscale y
set yrange [*:*]
plot for [i=2:$((pd_ncol + 1))] \"$tmp/pd-$wl-ttft_p99_ms.dat\" using 1:i with linespoints lw 2 title columnheader(i)
unset logscale y
set key bottom left
set title \"$wl: prefill prefix hit rate\"
set yrange [0:1]
plot for [i=2:$((pd_ncol + 1))] \"$tmp/pd-$wl-hit_rate.dat\" using 1:i with linespoints lw 2 title columnheader(i)
"
done
plot_or_warn bench-pd.png <<<"$pd_plot
unset multiplot"


# pd_workload_text WORKLOAD: what the workload is and why (the part of the
# report that differs between the two).
pd_workload_text() {
    local wl=$1 cap
    cap=$(pd_spec_val "$wl" max_concurrency)
    case $wl in
    pd_agentic)
        echo "Agents with a long context of their own (2,048 tokens of system prompt and tool"
        echo "definitions), each turn replaying the agent's history plus a short new tool result,"
        echo "short answers: almost all of a request's cost is prefill, and almost all of its prompt"
        echo "is the agent's previous prompt. $cap agents' contexts (128–210 blocks each) fit in the"
        echo "prefill fleet's pooled cache ($pd_n_prefill × $kv_blocks blocks) but not in one worker's. A first"
        echo "turn prefills 2,100 uncached tokens (about 420 ms), which sets every policy's p99"
        echo "unless queueing adds to it. (The earlier version of this benchmark replayed every turn"
        echo "at a Poisson arrival time of its own: at high rates an agent's next turn arrived before"
        echo "its previous turn's prefill was done, 154 of 171 times at 96 req/s, so no cache could"
        echo "hold its prefix yet and affinity could not help.)"
        ;;
    pd_agentic_shared)
        echo "Agents built on one framework, the case where cache affinity makes load uneven: every"
        echo "agent's prompt starts with the same $(thousands "$(pd_spec_val "$wl" shared_system_tokens)")-token head (the framework's system prompt and"
        echo "tool definitions), then $(pd_spec_val "$wl" system_tokens) tokens of its own (its task), then its history as in"
        echo "pd_agentic. A new agent's first turn matches the shared head (over 80% of its prompt), so"
        echo "cache_aware sends it to the least loaded of the (up to 3) prefill workers known to hold"
        echo "the head, and every later turn follows the agent's own history to the same worker: agents"
        echo "pile onto the holders of the head until a balance gate moves some. Up to $cap agents at"
        echo "once; their own parts (19–80 blocks each) plus one copy of the 96-block head per worker"
        echo "fit in the pooled cache ($pd_n_prefill × $kv_blocks blocks) but not in the holders' caches alone. A"
        echo "first turn prefills about 300 uncached tokens (about 60 ms) on a holder of the head,"
        echo "1,840 (about 370 ms) elsewhere."
        ;;
    pd_agentic_mixed)
        echo "One popular framework among agents of their own, the case the per-request gate exists"
        echo "for (invariant 9): about half of the agents (a fixed draw per conversation) share a"
        echo "$(thousands "$(pd_spec_val "$wl" shared_system_tokens)")-token head, the others have a head of the same length of their own; then"
        echo "each has $(pd_spec_val "$wl" system_tokens) tokens of its own and its history, as in pd_agentic. The sharing agents"
        echo "pile onto the holders of the common head until one is overloaded, while the private"
        echo "agents stay wherever their own context is. The fleet gate then sends every request to"
        echo "the least-loaded worker, and a moved private agent recomputes its whole context (1,300"
        echo "to 2,300 tokens, 260–460 ms); the per-request gate moves only requests whose own worker"
        echo "is overloaded. Up to $cap agents at once: private agents of 80–144 blocks, sharing agents"
        echo "of 16–80 blocks plus one 64-block copy of the head per worker, about the pooled cache"
        echo "($pd_n_prefill × $kv_blocks blocks) at most."
        ;;
    esac
}
# pd_workload_report WORKLOAD: its subsection (tables, goals judged).
pd_workload_report() {
    local wl=$1 rates top low cap dur planned k p r title verdicts
    verdicts=$tmp/pd-$wl-verdicts
    rates=$(v "pd_${wl}_rates") top=${rates##* } low=${rates%% *} cap=$(pd_spec_val "$wl" max_concurrency)
    dur=$(pd_spec_val "$wl" duration_s)
    pd_is_long "$wl" "$top" && dur=$pd_long_s
    case ${wl%_slow} in
    pd_agentic) title="agents with contexts of their own" ;;
    pd_agentic_shared) title="agents sharing one framework's prompt" ;;
    *) title="one popular framework among agents of their own" ;;
    esac
    pd_is_slow "$wl" && title="$title, one prefill worker 3× slower"
    local yaml=${wl%_slow}.yaml
    echo "### $wl: $title"
    echo
    echo "Workload [\`$yaml\`](../tests/bench/workloads/$yaml)$([ "$(v mode)" = quick ] && echo " (its \`quick:\` values)"):"
    echo "\`$(v "pd_${wl}_spec")\`. Rates: $rates req/s."
    pd_is_long "$wl" "$top" &&
        echo "At $top/s (a long cell): $pd_long_reps runs with \`duration_s: $pd_long_s\`, round_robin in the first $pd_long_rr_reps of them."
    if pd_is_slow "$wl"; then
        echo "The workload of ${wl%_slow} on another fleet: prefill worker 1 of $pd_n_prefill runs with"
        echo "\`$(v pd_slow_flags)\` (3× the others' cost per request: an older or degraded GPU),"
        echo "everything else as above. Its queue grows wherever affinity keeps feeding it, so load"
        echo "is uneven for as long as the run lasts: the hot worker of invariant 9. The fleet gate"
        echo "then switches affinity off for every request while that worker is overloaded; the"
        echo "per-request gate moves only the requests whose own worker it is."
    else
        pd_workload_text "$wl"
    fi
    echo
    echo "Hit-rate ceiling of these runs (each fed the requests it sent, in the order it sent them):"
    for rate in $rates; do for pol in $pd_policies; do v "pd_${wl}_${pol}_${rate}_hit_ceiling"; done; done |
        awk '$1 != "n/a" {v = $1 + 0; if (n++ == 0 || v < lo) lo = v; if (v > hi) hi = v} END {if (n) printf "%.2f–%.2f.\n", lo, hi; else print "n/a."}'
    echo
    echo "| rate | policy | hit rate | of ceiling | TTFT p50 | TTFT p99 (each run's own) | output tok/s (range) | abandoned affinity | prefill load max/mean | conversations | measured | failed |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for rate in $rates; do
        for pol in $pd_policies; do
            p="pd_${wl}_${pol}_${rate}"
            echo "| $rate/s | $pol | $(v "${p}_hit_rate") | $(ratio "$(v "${p}_hit_rate")" "$(v "${p}_hit_ceiling")") | $(v "${p}_ttft_p50_ms") ms | $(v "${p}_ttft_p99_ms") ms ($(v "${p}_p99_range") ms) | $(v "${p}_output_tok_s") ($(v "${p}_tok_s_range")) | $(v "${p}_abandoned_share") ($(v "${p}_abandoned") of $(v "${p}_decisions")) | $(v "${p}_load_max_mean") | $(v "${p}_conversations") | $(v "${p}_measured") | $(v "${p}_failed") |"
        done
    done
    echo
    echo "Ratios against round_robin at the same rate (hit rate and tokens/s: higher is better; TTFT: lower is better):"
    echo
    echo "| rate | policy | hit rate | TTFT p50 | TTFT p99 | output tok/s |"
    echo "|---|---|---|---|---|---|"
    for rate in $rates; do
        for pol in $pd_policies; do
            [ "$pol" = round_robin ] && continue
            p="pd_${wl}_${pol}_${rate}" r="pd_${wl}_round_robin_${rate}"
            echo -n "| $rate/s | $pol"
            for k in hit_rate ttft_p50_ms ttft_p99_ms output_tok_s; do
                echo -n " | $(ratio "$(v "${p}_$k")" "$(v "${r}_$k")")×"
            done
            echo " |"
        done
    done
    echo
    echo "Per-request gate against the fleet gate. TTFT p99 ratio = the per-request gate's pooled"
    echo "p99 over the fleet gate's, with its bootstrap 95% interval (runs resampled). Evidence"
    echo "of uneven load, per gate: the share of its decisions that abandoned affinity (median"
    echo "of runs; the most in one run), for the per-request gate also the share that kept"
    echo "affinity although another worker was overloaded (\`affinity_despite_imbalance\`: the"
    echo "requests the fleet gate would have moved), and the busiest prefill mock's load over the"
    echo "mean. *Gates differ* when either gate abandoned affinity, or the per-request gate kept"
    echo "it despite imbalance, in at least 1% of its decisions (median of runs); below that the"
    echo "two took the same decision for over 99% of the requests, and a load max/mean well over"
    echo "1 means the load was skewed but no worker overloaded by the thresholds' measure (at"
    echo "most 6 requests in flight above the least-loaded worker)."
    echo
    echo "| rate | per-request − fleet hit rate (of ceiling) | per-request / fleet TTFT p99 (95% interval paired; unpaired) | per-request / fleet tok/s | abandoned: per-request / fleet (most in a run) | kept despite imbalance: per-request (most in a run) | load max/mean: per-request / fleet | gates differ (load uneven) | verdict |"
    echo "|---|---|---|---|---|---|---|---|---|"
    : >"$verdicts"
    for rate in $rates; do
        a="pd_${wl}_cache_aware_${rate}" b="pd_${wl}_cache_aware_fleet_${rate}" x="pd_${wl}_cmp_${rate}"
        awk -v rate="$rate" -v out="$verdicts" -v ha="$(v "${a}_hit_rate")" -v hb="$(v "${b}_hit_rate")" \
            -v ca="$(v "${a}_hit_ceiling")" -v cb="$(v "${b}_hit_ceiling")" \
            -v pr="$(v "${x}_p99_ratio")" -v plo="$(v "${x}_p99_paired_lo")" -v phi="$(v "${x}_p99_paired_hi")" \
            -v ulo="$(v "${x}_p99_ratio_lo")" -v uhi="$(v "${x}_p99_ratio_hi")" \
            -v ta="$(v "${a}_output_tok_s")" -v tb="$(v "${b}_output_tok_s")" \
            -v sa="$(v "${a}_abandoned_share")" -v sb="$(v "${b}_abandoned_share")" \
            -v ka="$(v "${a}_kept_share")" -v km="$(v "${a}_kept_max")" \
            -v la="$(v "${a}_load_max_mean")" -v lb="$(v "${b}_load_max_mean")" \
            -v aa="$(v "${a}_abandoned_max")" -v ab="$(v "${b}_abandoned_max")" 'BEGIN {
            if (ha == "n/a" || hb == "n/a" || ca + 0 == 0 || cb + 0 == 0 || pr == "n/a" || plo == "n/a" || tb + 0 == 0) {
                printf "| %s/s | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |\n", rate; print "na" >> out; exit }
            ra = ha / ca; rb = hb / cb
            uneven = ((sa != "n/a" && sa + 0 >= 0.01) || (sb != "n/a" && sb + 0 >= 0.01) || (ka != "n/a" && ka + 0 >= 0.01))
            worse = (ra < rb - 0.01 || plo + 0 > 1.05)
            beats = (!worse && ra >= rb && phi + 0 < 1)
            code = worse ? "worse" : (beats ? "beats" : "matches")
            if (uneven) verdict = beats ? "beats (goal met)" : (worse ? "worse (goal not met)" : "matches within noise, does not beat (goal not met)")
            else verdict = worse ? "worse (goal not met)" : (beats ? "beats (goal met)" : "matches within noise (goal met)")
            print code, (uneven ? "uneven" : "even") >> out
            printf "| %s/s | %+.4f (%+.4f) | %.2f× (%.2f–%.2f; %.2f–%.2f) | %.2f× | %s (%s) / %s (%s) | %s (%s) | %s / %s | %s | %s |\n", rate, ha - hb, ra - rb, pr, plo, phi, ulo, uhi, ta / tb, sa, aa, sb, ab, ka, km, la, lb, uneven ? "yes" : "no", verdict }'
    done
    local sat
    sat=$(ratio "$(v "pd_${wl}_cache_aware_${top}_output_tok_s")" "$(v "pd_${wl}_round_robin_${top}_output_tok_s")")
    echo
    planned=$(v "pd_${wl}_planned")
    echo "Saturation (the highest rate, $top/s): cache_aware (per-request) serves ${sat}× round_robin's"
    echo "output tokens/s (goal ≥ 2.5×); the fleet gate"
    echo "$(ratio "$(v "pd_${wl}_cache_aware_fleet_${top}_output_tok_s")" "$(v "pd_${wl}_round_robin_${top}_output_tok_s")")×. The rate's plan starts $planned conversations in"
    echo "${dur} s; cache_aware started $(v "pd_${wl}_cache_aware_${top}_conversations"), the fleet gate $(v "pd_${wl}_cache_aware_fleet_${top}_conversations"), round_robin"
    echo "$(v "pd_${wl}_round_robin_${top}_conversations") (medians): a policy that starts fewer than planned did not keep up (all $cap agent"
    echo "slots busy), one that starts them all served what was offered, and then the ratio is"
    echo "bounded by the offered load rather than by what that policy could serve."
    [ "$low" != "$top" ] && [ "$low" -le 16 ] &&
        echo "At $low/s (light load) the window holds only a few conversations: its tokens/s says when their turns happened to complete, not what a policy can serve; what that rate shows is latency and hit rate."
    echo
    awk -v wl="$wl" -v sat="$sat" '
        { n++; if ($1 == "na") na++; if ($1 == "worse") worse++
          if ($2 == "uneven") { un++; if ($1 == "beats") beat++ } }
        END {
            m = (na == 0 && worse == 0)
            printf "**Goals on %s:** per-request gate at least matches the fleet gate at every rate: **%s**", wl, na ? "n/a" : (m ? "met" : "not met")
            printf "; beats it wherever load is uneven: **%s**", un == 0 ? "not exercised (the gates took the same decision for over 99% of requests at every rate)" : (beat == un ? sprintf("met (at the %d rate(s) where the gates differ)", un) : sprintf("not met (beats at %d of the %d rates where the gates differ)", beat, un))
            printf "; ≥ 2.5× round_robin at saturation: **%s** (%s×).\n", sat == "n/a" ? "n/a" : (sat + 0 >= 2.5 ? "met" : "not met"), sat
        }' "$verdicts"
    echo
}
# pd_report: the P/D section of docs/benchmarks.md (also spliced alone into
# the existing page by `run.sh BUILD MODE pd`).
pd_report() {
    local wl think
    echo "## Prefill/decode: agentic workloads (issue: P/D, section Numbers)"
    echo
    if [ "$(v partial)" = yes ]; then
        measured_alone pd
    else
        echo "This section alone: \`make bench-pd\` (\`tests/bench/run.sh BUILD full pd\`; quick:"
        echo "\`make bench-pd-quick\`); it took $(v section_pd_elapsed_s) s of this run."
        echo
    fi
    echo "Prefill-heavy agentic workloads, run under identical conditions: **pd_agentic**"
    echo "(every agent has a long context of its own) and **pd_agentic_shared** (agents of one"
    echo "framework share a long head, then a short context of their own — where cache affinity"
    echo "makes load uneven), on a uniform prefill fleet, and **pd_agentic_shared_slow**: the"
    echo "latter on a fleet where one prefill worker is 3× slower, which keeps load uneven."
    echo
    wl=${pd_workloads%% *}
    think=$(pd_spec_val "$wl" think_ms)
    echo "**Arrival model.** Agents behave as agents: a conversation sends turn t+1 only once turn"
    echo "t is answered (the answer is part of the next prompt), after a think time (exponential,"
    echo "mean $think ms: the tool call). The open-loop Poisson process starts conversations of"
    echo "*turns* turns at *rate* / *turns* per second, so each *rate* below is the offered load"
    echo "in requests/s (\`switchyard-bench run --rate R\`). At most *max_concurrency*"
    echo "conversations run at once (the agent platform's slots; one due while all are busy starts"
    echo "when one ends), so past saturation a run is a steady state of that many busy agents"
    echo "instead of a queue that grows for as long as the run lasts. Conversations start during"
    echo "the first *duration_s*; after that nothing is sent and what is in flight completes."
    echo "Figures are taken over the window [*warmup_s*, *duration_s*], once the agents are busy:"
    echo "TTFT percentiles over the requests sent in it, tokens/s = output tokens of the requests"
    echo "that completed in it over its length."
    echo
    echo "Every request runs as P/D ([pd.md](pd.md)): a prefill leg on one of $pd_n_prefill \`--role prefill\` mocks"
    echo "(\`$(v pd_prefill_flags)\`, the routing runs' cost settings) chosen by \`policy.prefill\`, then"
    echo "a decode leg on one of $pd_n_decode \`--role decode\` mocks (\`$(v pd_decode_flags)\`: the"
    echo "\`kv_transfer_params\` spare them the prefill, and 16 sequences keep decode out of the way)"
    echo "chosen by \`policy.decode: { name: least_load }\`. Contenders for \`policy.prefill\`:"
    echo "**cache_aware** (per-request gate), **cache_aware_fleet** (\`balance_gate: fleet\`) and"
    echo "**round_robin**; both cache_aware variants with \`balance_abs_threshold: 6\` (3 × the"
    echo "prefill mocks' \`--max-num-seqs 2\`, as in the routing runs above) and the default"
    echo "\`balance_rel_threshold: 1.5\`, \`cache_threshold: 0.5\`. Router restarted and all mocks"
    echo "reset before each run. Each (workload, rate, policy) cell ran several times"
    echo "($(for w in $pd_workloads; do echo -n "$w $(v "pd_${w}_reps"), "; done | sed "s/, $//")), the policies interleaved within each"
    echo "repetition; repetition *r* draws its arrivals and prompts with the workload's seed + *r* − 1"
    echo "(\`switchyard-bench run --seed\`), the same draw for every policy, so the runs sample the"
    echo "arrival process instead of replaying one draw of it. TTFT percentiles are taken over all the cell's runs' requests together"
    echo "(\`switchyard-bench pooled\`): one run measures a few hundred requests, so its own p99"
    echo "is its 4th slowest request and moved 3× from run to run of the same code. Every other"
    echo "figure is the median of the runs (tokens/s also with its range)."
    [ "$pd_long_reps" -gt 0 ] && {
        echo "The saturation rate of the two pd_agentic_shared scenarios, where the gates differ, is a"
        echo "*long cell*: $pd_long_reps repetitions with \`duration_s\` $pd_long_s s instead of the workload's"
        echo "$(v pd_shared_duration_s) s (\`switchyard-bench run --duration-s\`; the table's *measured* column), round_robin"
        echo "only in the first $pd_long_rr_reps. The two gates' TTFT p99s differ by about a tenth there: 5 runs of"
        echo "the workload's own 4-s window (about 800 requests each) gave 95% intervals about 1.0 wide,"
        echo "5 runs of a 19-s window (about 3,700) about 0.3."
    }
    echo
    echo "Hit rate = the prefill mocks' \`prefix_hit_tokens / prefix_query_tokens\` over the whole"
    echo "run; ceiling = one LRU cache of the prefill fleet's capacity ($pd_n_prefill × $kv_blocks blocks) fed the"
    echo "requests the run sent, in the order it sent them (an ideal router pooling the caches;"
    echo "every conversation's first turn misses at least its own part). TTFT = the client's time"
    echo "to first token (prefill leg + decode's first token). Abandoned = the share of prefill"
    echo "decisions (dataplane \`/metrics\`, \`switchyard_pd_routing_decisions_total{phase=\"prefill\"}\`,"
    echo "scraped before and after the run) that were \`overloaded_fallback\` (per-request gate) or"
    echo "\`fleet_imbalanced\` (fleet gate): affinity given up because load was uneven. Load max/mean"
    echo "= the busiest prefill mock's time-averaged in-flight count over the mean. Conversations ="
    echo "started in the run; measured = requests in the window."
    echo
    echo "Goals (issue: P/D): the per-request gate at least matches the fleet gate in hit rate"
    echo "and TTFT p99 at every rate and beats it wherever load is uneven; at saturation it"
    echo "serves ≥ 2.5× round_robin's throughput. Judged mechanically, per workload. Hit rates"
    echo "are compared as shares of each run's own ceiling (medians): a policy that serves its"
    echo "agents faster starts more conversations in the same time, and every first turn is a"
    echo "miss, so raw hit rates of different request mixes do not compare. TTFT p99 is compared"
    echo "by the pooled ratio's 95% interval, paired by repetition: both gates' runs of a"
    echo "repetition ran the same arrival plan, so each bootstrap draw takes the same repetitions"
    echo "for both and compares them under the same traffic (a burst of arrivals lengthens both"
    echo "tails and cancels in the ratio). The unpaired interval, which sets any run of one gate"
    echo "against any run of the other, is shown beside it. *worse* = hit rate of ceiling more than 0.01 below"
    echo "the fleet gate's, or the whole interval above 1.05; *beats* = hit rate of ceiling at"
    echo "least the fleet gate's and the whole interval below 1; otherwise the two *match within"
    echo "noise*. *Load uneven* = the gates differ (table below): where they take the same"
    echo "decision for over 99% of requests, neither can beat the other, and matching is the goal."
    echo
    for wl in $pd_workloads; do pd_workload_report "$wl"; done
    echo "![P/D](bench-pd.png)"
    echo
}
pd_report
