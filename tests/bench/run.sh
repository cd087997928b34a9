#!/usr/bin/env bash
# make bench / make bench-quick: runs every benchmark and writes the figures
# to docs/benchmarks.md (with command, machine, date and commit) and the
# plots to docs/bench-*.png. Usage: tests/bench/run.sh BUILD_DIR full|quick [all|pd]
#
# With `pd` only the prefill/decode section runs (make bench-pd /
# bench-pd-quick); its text replaces that section of the existing
# docs/benchmarks.md (with its own command, date and commit) and its plot
# docs/bench-pd.png; the other sections are left as they were. PD_RATES
# (pd_agentic), PD_SHARED_RATES (pd_agentic_shared), PD_MIXED_RATES
# (pd_agentic_mixed), PD_REPS and PD_WORKLOADS, when set, replace the P/D section's rates, repetitions and
# workloads (for calibration; the report says which were used).
#
# Every comparison runs its contenders in this same run, on this machine,
# and is reported as a ratio. Every server listens on 127.0.0.1 on a free
# port; every process started here is stopped on exit, failure included.
set -euo pipefail
build=$1
mode=${2:-quick}
sections=${3:-all}
case $mode in full | quick) ;; *) echo "usage: $0 BUILD_DIR full|quick [all|pd]" >&2; exit 2 ;; esac
case $sections in all | pd) ;; *) echo "usage: $0 BUILD_DIR full|quick [all|pd]" >&2; exit 2 ;; esac
target=bench
[ "$mode" = quick ] && target=bench-quick
[ "$sections" = pd ] && target=$target-pd
[ "$target" = bench-quick-pd ] && target=bench-pd-quick
out=docs/benchmarks.md
here=$(cd "$(dirname "$0")" && pwd)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The outputs of a previous run do not make the tree dirty.
dirty=$(git status --porcelain --untracked-files=no -- . ':!docs/benchmarks.md' ':!docs/bench-*.png' \
    2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

deploy/install-deps.sh bench

# shellcheck source=tests/bench/lib.sh
. "$here/lib.sh"
results=$bench_tmp/results
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
: >"$results"
put() { echo "$1 $2" | tee -a "$results" >&2; }
value() { awk -v k="$1" '$1 == k {v = $2} END {print (v == "" ? "n/a" : v)}' "$results"; }
# ratio A B [digits]: A/B, or n/a.
ratio() {
    awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
        if (a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"; else printf "%.*f\n", d, a / b }'
}
diff_us() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else printf "%.0f\n", a - b }'
}
median() { sort -g | awk '$1 != "n/a" {v[++n] = $1} END {print (n ? v[int((n + 1) / 2)] : "n/a")}'; }
# proc_cpu_s PID...: their summed utime + stime in seconds.
proc_cpu_s() {
    local s=0 p
    for p in "$@"; do s=$(awk -v s="$s" -v t="$(proc_cpu_ticks "$p")" -v h="$clk_tck" 'BEGIN {print s + t / h}'); done
    echo "$s"
}
# nginx_procs MASTER: the master and its worker processes.
nginx_procs() { echo "$1" $(pgrep -P "$1" || true); }

if [ "$mode" = quick ]; then
    decisions=5000 proxy_secs=3 proxy_rounds=1 streams=1000 hold_s=3 large_secs=3
    n_mocks=4 policies="round_robin least_load cache_aware"
else
    decisions=20000 proxy_secs=8 proxy_rounds=3 streams=10000 hold_s=5 large_secs=6
    n_mocks=8 policies="round_robin least_load consistent_hash cache_aware_fleet cache_aware"
fi
dp_threads=$(nproc)
kv_blocks=512
quick_flag=()
[ "$mode" = quick ] && quick_flag=(--quick)

# Every section but P/D runs only with `all` (the block is not indented, to
# keep each section's history readable).
if [ "$sections" = all ]; then

# ---- micro benchmarks ---------------------------------------------------------
echo "== micro: load counters" >&2
"$build/tests/bench/micro_shm" | tee -a "$results" >&2
echo "== micro: cache_aware decision" >&2
"$build/tests/bench/micro_policy" "$decisions" | tee -a "$results" >&2

# ---- mock worker throughput ---------------------------------------------------
# The mock worker must never be the bottleneck of the routing benchmark.
echo "== mock worker throughput" >&2
read -r mock_port <<<"$(free_ports 1)"
bench_spawn "$bench_tmp/mock-tput.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$mock_port" --model mock
mock_pid=$last_pid
wait_http "http://127.0.0.1:$mock_port/health" 10
run_fg "$bench_tmp/wrk.out" wrk -t2 -c64 -d"${proxy_secs}s" -s "$here/wrk_post.lua" \
    "http://127.0.0.1:$mock_port/v1/chat/completions"
line=$(grep '^WRK' "$bench_tmp/wrk.out")
put mock_rps "$(sed 's/.* rps=\([^ ]*\).*/\1/' <<<"$line")"
bench_stop "$mock_pid"

# ---- proxy overhead: direct vs nginx vs floor vs switchyard ------------------
# Upstreams: one static nginx answering a fixed chat completion on two ports
# (faster than either proxy). Contenders: wrk straight at an upstream port,
# through an nginx reverse proxy (round robin, keep-alive, as many worker
# processes as switchyard has event loops), through the library floor
# (switchyard-floor-proxy: MHD + libcurl built as the dataplane is, with no
# logic: what the mandated libraries allow), through switchyard (round_robin
# as nginx, and the default cache_aware).
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
        n=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
        cpu_us=n/a
        [ -n "$pids" ] && cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.1f", n ? (b - a) * 1e6 / n : 0}')
        echo "round $round $c: $line cpu_us=$cpu_us" >&2
        echo "$line cpu_us=$cpu_us" >>"$bench_tmp/proxy-$c.txt"
    done
done
# Unloaded: one connection, one request at a time — the latency a hop adds
# when nothing queues.
for c in direct nginx floor switchyard; do
    run_fg "$bench_tmp/wrk.out" wrk -t1 -c1 -d"${proxy_secs}s" -s "$here/wrk_post.lua" \
        "${target_url[$c]}/v1/chat/completions"
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    echo "c1 $c: $line" >&2
    put "c1_${c}_p50_us" "$(sed 's/.* p50_us=\([^ ]*\).*/\1/' <<<"$line")"
    put "c1_${c}_p99_us" "$(sed 's/.* p99_us=\([^ ]*\).*/\1/' <<<"$line")"
done
for c in $contenders; do
    for k in rps p50_us p99_us cpu_us; do
        put "proxy_${c}_$k" "$(sed "s/.* $k=\([^ ]*\).*/\1/" "$bench_tmp/proxy-$c.txt" | median)"
    done
    put "proxy_${c}_errors" "$(sed 's/.* errors=\([0-9]*\) non2xx=\([0-9]*\).*/\1 \2/' \
        "$bench_tmp/proxy-$c.txt" | awk '{s += $1 + $2} END {print s + 0}')"
done
bench_stop "$floor_pid"

# ---- large prompts: CPU per request for 400 KB bodies --------------------------
# wrk, 4 connections, through switchyard (cache_aware hashes the whole prompt)
# and through nginx; CPU = utime + stime of the proxy's processes.
echo "== large prompts" >&2
for c in switchyard_ca nginx; do
    if [ "$c" = nginx ]; then pids=$(nginx_procs "$nginx_pid"); else pids=$ca_dp; fi
    # shellcheck disable=SC2086
    cpu0=$(proc_cpu_s $pids)
    run_fg "$bench_tmp/wrk.out" env BENCH_PROMPT_BYTES=400000 wrk -t1 -c4 -d"${large_secs}s" \
        -s "$here/wrk_post.lua" "${target_url[$c]}/v1/chat/completions"
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    # shellcheck disable=SC2086
    cpu1=$(proc_cpu_s $pids)
    n=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
    echo "large $c: $line" >&2
    put "large_${c}_requests" "$n"
    put "large_${c}_rps" "$(sed 's/.* rps=\([^ ]*\).*/\1/' <<<"$line")"
    put "large_${c}_errors" "$(sed 's/.* errors=\([0-9]*\) non2xx=\([0-9]*\).*/\1 \2/' <<<"$line" | awk '{print $1 + $2}')"
    put "large_${c}_cpu_ms_per_req" "$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.3f\n", n ? (b - a) * 1000 / n : 0}')"
done
put proxy_rss_kb "$(proc_rss_kb "$ca_dp")"
bench_stop "$rr_dp"
bench_stop "$rr_cp"
bench_stop "$ca_dp"
bench_stop "$ca_cp"
bench_stop "$nginx_pid"
bench_stop "$static_pid"

# ---- streams and memory ------------------------------------------------------
# N SSE streams held open through switchyard against 4 mock workers whose
# first token comes at once and the next one 30 s later: RSS and CPU of the
# dataplane while every stream sits between tokens. Each stream costs the
# dataplane two fds (client + worker).
echo "== streams and memory ($streams streams)" >&2
streams_wanted=$streams
need=$((2 * streams + 512))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
    # Raise the hard limit of this run's processes only (needs CAP_SYS_RESOURCE).
    ulimit -Hn "$need" 2>/dev/null && ulimit -n "$need" 2>/dev/null || true
fi
fd_limit=$(ulimit -n)
if [ "$fd_limit" != unlimited ] && [ "$fd_limit" -lt "$need" ]; then
    streams=$(((fd_limit - 512) / 2))
    echo "bench: fd limit $fd_limit: holding only $streams streams" >&2
fi
put streams_target "$streams"
put streams_wanted "$streams_wanted"
put streams_fd_limit "$fd_limit"
read -r s1 s2 s3 s4 sdp sadm <<<"$(free_ports 6)"
for p in $s1 $s2 $s3 $s4; do
    bench_spawn "$bench_tmp/smock-$p.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$p" \
        --model mock --threads 2 --tpot-ms 30000 --max-num-seqs 100000
done
for p in $s1 $s2 $s3 $s4; do wait_http "http://127.0.0.1:$p/health" 10; done
switchyard_config "$bench_tmp/streams.yaml" streams "$dp_threads" round_robin per_request \
    "$sdp" "$sadm" "$s1" "$s2" "$s3" "$s4"
switchyard_start "$build" "$bench_tmp/streams.yaml" "$sdp"
run_fg "$bench_tmp/hold.txt" "$build/switchyard-bench" hold --url "http://127.0.0.1:$sdp" \
    --streams "$streams" --pid "$dp_pid" --hold-s "$hold_s" --ramp 2000 --deadline-s 60 || true
cat "$bench_tmp/hold.txt" >&2
while read -r k v; do put "hold_$k" "$v"; done <"$bench_tmp/hold.txt"
switchyard_stop
for p in "${bench_pids[@]}"; do bench_stop "$p"; done

# ---- routing quality ------------------------------------------------------------
# Each workload against n_mocks mock workers with small KV caches (512 blocks
# of 16 tokens) and a prefill cost per uncached token, under each policy; the
# router is restarted for each run (empty prefix index) and the generator
# resets the mocks (empty KV caches, zeroed counters) before it starts.
echo "== routing quality ($n_mocks mock workers: $policies)" >&2
mock_flags=(--model mock --threads 1 --kv-blocks "$kv_blocks" --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 2)
read -r -a rports <<<"$(free_ports $((n_mocks + 2)))"
rdp=${rports[$n_mocks]} radm=${rports[$((n_mocks + 1))]}
mock_args=()
for ((i = 0; i < n_mocks; i++)); do
    bench_spawn "$bench_tmp/rmock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${rports[$i]}" "${mock_flags[@]}"
    mock_args+=(--mock "http://127.0.0.1:${rports[$i]}")
done
for ((i = 0; i < n_mocks; i++)); do wait_http "http://127.0.0.1:${rports[$i]}/health" 10; done
workloads="shared_prefix multi_turn hot_prefix"
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
        run_fg "$bench_tmp/route-$w-$pol.txt" "$build/switchyard-bench" run \
            --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" \
            --url "http://127.0.0.1:$rdp" "${mock_args[@]}" --kv-blocks "$kv_blocks" \
            --block-tokens 16 --label "$pol" --json "$bench_tmp/route-$w-$pol.json" \
            --csv "$bench_tmp/route-$w-$pol.csv" ||
            echo "bench: $w / $pol: the load generator failed" >&2
        tr '\n' ' ' <"$bench_tmp/route-$w-$pol.txt" >&2
        echo >&2
        while read -r k v; do put "route_${w}_${pol}_$k" "$v"; done <"$bench_tmp/route-$w-$pol.txt"
        switchyard_stop
    done
done
for p in "${bench_pids[@]}"; do bench_stop "$p"; done

fi # sections = all

# ---- prefill/decode: the agentic workloads ----------------------------------------
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
# compared with a bootstrap 95% interval over runs, paired by repetition. Keys:
# pd_WORKLOAD_POLICY_RATE_FIGURE.
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
# PD_RATES (pd_agentic) / PD_SHARED_RATES (both pd_agentic_shared scenarios) /
# PD_MIXED_RATES / PD_REPS (every scenario) / PD_WORKLOADS override (calibration).
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
pd_spec_val() { pd_spec "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }
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
pd_cell_duration() { pd_is_long "$1" "$2" && echo "--duration-s $pd_long_s" || true; }
# pd_runs POLICY WORKLOAD RATE REP: whether that run happens.
pd_runs() { [ "$1" != round_robin ] || ! pd_is_long "$2" "$3" || [ "$4" -le "$pd_long_rr_reps" ]; }
echo "== P/D ($pd_n_prefill prefill + $pd_n_decode decode mocks: $pd_policies; $(for w in $pd_workloads; do echo -n "$w at $(pd_rates "$w") req/s, $(pd_reps "$w") run(s) each; "; done)long cells: $pd_long_reps runs of ${pd_long_s} s)" >&2
pd_started=$(date +%s)
pd_prefill_flags=(--model mock --role prefill --threads 1 --kv-blocks "$kv_blocks" --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 2)
pd_decode_flags=(--model mock --role decode --threads 1 --kv-blocks 4096 --block-tokens 16
    --prefill-base-us 1000 --prefill-us-per-token 200 --tpot-ms 2 --max-num-seqs 16)
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
# runs_max / runs_range: the largest of the numbers on stdin, their range "lo–hi" (n/a skipped).
runs_max() { awk '$1 != "n/a" {if (n++ == 0 || $1 + 0 > m) m = $1 + 0} END {print (n ? m : "n/a")}'; }
runs_range() {
    awk '$1 != "n/a" {v = $1 + 0; if (n++ == 0 || v < lo) lo = v; if (v > hi) hi = v}
        END {if (n) printf "%.0f–%.0f\n", lo, hi; else print "n/a"}'
}
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
            f=$bench_tmp/pd-$wl-$pol-$rate-$rep
            # Repetition r draws its arrivals and prompts with the workload's
            # seed + r - 1 (the same draw for every policy of the repetition).
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
            tr '\n' ' ' <"$f.txt" >&2
            echo >&2
            while read -r k v; do put "pd_${wl}_${pol}_${rate}_r${rep}_$k" "$v"; done <"$f.txt"
            switchyard_stop
        done
    done
    # The cell's figures: each the median of its runs; tokens/s also its range,
    # abandoned decisions also their largest count.
    for pol in $pd_policies; do
        c="pd_${wl}_${pol}_${rate}"
        keys=$(awk -v p="${c}_r1_" 'index($1, p) == 1 {print substr($1, length(p) + 1)}' "$results" | sort -u)
        for k in $keys; do put "${c}_$k" "$(pd_cell_runs "$c" "$wl" "$rate" "$k" | median)"; done
        put "${c}_abandoned_max" "$(pd_cell_runs "$c" "$wl" "$rate" abandoned | runs_max)"
        put "${c}_kept_max" "$(pd_cell_runs "$c" "$wl" "$rate" kept | runs_max)"
        put "${c}_tok_s_range" "$(pd_cell_runs "$c" "$wl" "$rate" output_tok_s | runs_range)"
        put "${c}_p99_range" "$(pd_cell_runs "$c" "$wl" "$rate" ttft_p99_ms | runs_range)"
        # TTFT percentiles over every run's requests in the window (the
        # window is the workload's, the same in every run of the cell).
        pooled_runs=$(for rep in $(seq "$(pd_cell_reps "$wl" "$rate")"); do
            f="$bench_tmp/pd-$wl-$pol-$rate-$rep.csv"
            if [ -s "$f" ]; then echo "$f"; fi
        done)
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
        ca="$bench_tmp/pd-$wl-cache_aware-$rate-$rep.csv" fl="$bench_tmp/pd-$wl-cache_aware_fleet-$rate-$rep.csv"
        [ -s "$ca" ] && [ -s "$fl" ] && ca_runs="$ca_runs $ca" fl_runs="$fl_runs $fl"
    done
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
pd_elapsed=$(($(date +%s) - pd_started))
elapsed=$(($(date +%s) - started))

# ---- plots ------------------------------------------------------------------------
echo "== plots" >&2
if [ "$sections" = all ]; then
{
    for c in direct nginx floor switchyard switchyard_ca; do
        echo "$c $(value "proxy_${c}_rps") $(value "proxy_${c}_p50_us") $(value "proxy_${c}_p99_us")"
    done
} >"$bench_tmp/proxy.dat"
for k in hit_rate ttft_p50_ms ttft_p99_ms output_tok_s; do
    {
        echo "workload $policies ceiling"
        for w in $workloads; do
            echo -n "$w"
            for pol in $policies; do echo -n " $(value "route_${w}_${pol}_$k")"; done
            echo " $(value "route_${w}_round_robin_hit_ceiling")"
        done
    } >"$bench_tmp/route-$k.dat"
done
ncol=$(wc -w <<<"$policies")
gnuplot <<GP
set terminal pngcairo size 900,420 font ",10" noenhanced
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key outside right top

set terminal pngcairo size 1200,420 font ",10" noenhanced
set output "docs/bench-proxy.png"
set multiplot layout 1,2 title "Proxy overhead ($target, commit $commit): wrk -c64, small POST"
set key off
set title "throughput"
set ylabel "requests/s"
set yrange [0:*]
plot "$bench_tmp/proxy.dat" using 2:xtic(1) lc rgb "#4477aa"
set title "latency p50"
set ylabel "µs"
plot "$bench_tmp/proxy.dat" using 3:xtic(1) lc rgb "#cc6677"
unset multiplot
set key outside right top

set terminal pngcairo size 900,420 font ",10" noenhanced
set output "docs/bench-routing-hit.png"
set title "Prefix cache hit rate by policy ($n_mocks mock workers, $target)"
set ylabel "prompt tokens served from cache"
set yrange [0:1]
plot for [i=2:$((ncol + 2))] "$bench_tmp/route-hit_rate.dat" using i:xtic(1) title columnheader(i)

set terminal pngcairo size 1200,450 font ",10" noenhanced
set output "docs/bench-routing-ttft.png"
set title "TTFT p50 / p99 by policy ($n_mocks mock workers, $target)"
set ylabel "ms (log)"
set logscale y
set yrange [*:*]
set multiplot layout 1,2
set title "TTFT p50"
set key off
plot for [i=2:$((ncol + 1))] "$bench_tmp/route-ttft_p50_ms.dat" using i:xtic(1) title columnheader(i)
set title "TTFT p99"
set key outside right top
plot for [i=2:$((ncol + 1))] "$bench_tmp/route-ttft_p99_ms.dat" using i:xtic(1) title columnheader(i)
unset multiplot
GP
# TTFT CDF of the shared-prefix workload, one curve per policy.
cdf_plot="set terminal pngcairo size 900,420 font \",10\" noenhanced
set output \"docs/bench-ttft-cdf.png\"
set title \"shared_prefix: TTFT distribution by policy ($target)\"
set xlabel \"TTFT (ms, log)\"; set ylabel \"fraction of requests\"; set logscale x; set grid
set key bottom right
plot"
sep=""
for pol in $policies; do
    f=$bench_tmp/route-shared_prefix-$pol.csv
    [ -f "$f" ] || continue
    awk -F, 'NR > 1 && $10 == 1 {print $5}' "$f" | sort -g |
        awk '{v[NR] = $1} END {for (i = 1; i <= NR; i++) print v[i], i / NR}' >"$f.cdf"
    cdf_plot+="$sep \"$f.cdf\" using 1:2 with lines lw 2 title \"$pol\""
    sep=","
done
gnuplot <<<"$cdf_plot"
fi # sections = all
# P/D: tokens/s, TTFT p99 and prefill hit rate against the arrival rate, one
# row per workload.
pd_plot="set terminal pngcairo size 1500,$((400 * $(wc -w <<<"$pd_workloads") + 40)) font \",10\" noenhanced
set output \"docs/bench-pd.png\"
set multiplot layout $(wc -w <<<"$pd_workloads"),3 title \"P/D agentic workloads, $pd_n_prefill prefill + $pd_n_decode decode mocks ($target, commit $commit)\"
set grid
set xlabel \"arrival rate (requests/s)\"
set datafile missing \"n/a\"
"
pd_ncol=$(wc -w <<<"$pd_policies")
for wl in $pd_workloads; do
    for k in output_tok_s ttft_p99_ms hit_rate; do
        {
            echo "rate $pd_policies"
            for rate in $(pd_rates "$wl"); do
                echo -n "$rate"
                for pol in $pd_policies; do echo -n " $(value "pd_${wl}_${pol}_${rate}_$k")"; done
                echo
            done
        } >"$bench_tmp/pd-$wl-$k.dat"
    done
    pd_plot+="set key top left
set title \"$wl: output tokens/s\"
set yrange [0:*]
plot for [i=2:$((pd_ncol + 1))] \"$bench_tmp/pd-$wl-output_tok_s.dat\" using 1:i with linespoints lw 2 title columnheader(i)
set title \"$wl: TTFT p99 (ms, log)\"
set logscale y
set yrange [*:*]
plot for [i=2:$((pd_ncol + 1))] \"$bench_tmp/pd-$wl-ttft_p99_ms.dat\" using 1:i with linespoints lw 2 title columnheader(i)
unset logscale y
set key bottom left
set title \"$wl: prefill prefix hit rate\"
set yrange [0:1]
plot for [i=2:$((pd_ncol + 1))] \"$bench_tmp/pd-$wl-hit_rate.dat\" using 1:i with linespoints lw 2 title columnheader(i)
"
done
gnuplot <<<"$pd_plot
unset multiplot"

# ---- report ------------------------------------------------------------------------
v() { value "$1"; }
fmt_int() { awk -v x="$1" 'BEGIN { if (x == "n/a") print x; else printf "%.0f\n", x }'; }
mb() { awk -v x="$1" 'BEGIN { if (x == "n/a" || x == "") print "n/a"; else printf "%.1f\n", x / 1024 }'; }
# thousands N: N with thousands separators (1536 -> 1,536).
thousands() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }
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
    local wl=$1 rates top low cap dur planned k p r title verdicts=$bench_tmp/pd-$wl-verdicts
    rates=$(pd_rates "$wl") top=${rates##* } low=${rates%% *} cap=$(pd_spec_val "$wl" max_concurrency)
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
    echo "Workload [\`$yaml\`](../tests/bench/workloads/$yaml)$([ "$mode" = quick ] && echo " (its \`quick:\` values)"):"
    echo "\`$(pd_spec "$wl")\`. Rates: $rates req/s."
    pd_is_long "$wl" "$top" &&
        echo "At $top/s (a long cell): $pd_long_reps runs with \`duration_s: $pd_long_s\`, round_robin in the first $pd_long_rr_reps of them."
    if pd_is_slow "$wl"; then
        echo "The workload of ${wl%_slow} on another fleet: prefill worker 1 of $pd_n_prefill runs with"
        echo "\`${pd_slow_flags[*]}\` (3× the others' cost per request: an older or degraded GPU),"
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
    planned=$("$build/switchyard-bench" plan --workload "$(pd_yaml "$wl")" "${quick_flag[@]}" \
        $(pd_cell_duration "$wl" "$top") --rate "$top" | awk '$1 == "conversations" {print $2}')
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
    local wl think turns
    echo "## Prefill/decode: agentic workloads (issue: P/D, section Numbers)"
    echo
    if [ "$sections" = pd ]; then
        echo "Measured alone by \`make $target\` (\`tests/bench/run.sh $build $mode pd\`, ${pd_elapsed} s) on"
        echo "$(date -u +%Y-%m-%dT%H:%MZ), commit $commit$dirty, load average at start $load_at_start; the"
        echo "other sections of this page come from the run named at its top."
    else
        echo "This section alone: \`make bench-pd\` (\`tests/bench/run.sh BUILD full pd\`; quick:"
        echo "\`make bench-pd-quick\`); it took ${pd_elapsed} s of this run."
    fi
    echo
    echo "Prefill-heavy agentic workloads, run under identical conditions: **pd_agentic**"
    echo "(every agent has a long context of its own) and **pd_agentic_shared** (agents of one"
    echo "framework share a long head, then a short context of their own — where cache affinity"
    echo "makes load uneven), on a uniform prefill fleet, and **pd_agentic_shared_slow**: the"
    echo "latter on a fleet where one prefill worker is 3× slower, which keeps load uneven."
    echo
    wl=${pd_workloads%% *}
    think=$(pd_spec_val "$wl" think_ms) turns=$(pd_spec_val "$wl" turns)
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
    echo "(\`${pd_prefill_flags[*]}\`, the routing runs' cost settings) chosen by \`policy.prefill\`, then"
    echo "a decode leg on one of $pd_n_decode \`--role decode\` mocks (\`${pd_decode_flags[*]}\`: the"
    echo "\`kv_transfer_params\` spare them the prefill, and 16 sequences keep decode out of the way)"
    echo "chosen by \`policy.decode: { name: least_load }\`. Contenders for \`policy.prefill\`:"
    echo "**cache_aware** (per-request gate), **cache_aware_fleet** (\`balance_gate: fleet\`) and"
    echo "**round_robin**; both cache_aware variants with \`balance_abs_threshold: 6\` (3 × the"
    echo "prefill mocks' \`--max-num-seqs 2\`, as in the routing runs above) and the default"
    echo "\`balance_rel_threshold: 1.5\`, \`cache_threshold: 0.5\`. Router restarted and all mocks"
    echo "reset before each run. Each (workload, rate, policy) cell ran several times"
    echo "($(for w in $pd_workloads; do echo -n "$w $(pd_reps "$w"), "; done | sed "s/, $//")), the policies interleaved within each"
    echo "repetition; repetition *r* draws its arrivals and prompts with the workload's seed + *r* − 1"
    echo "(\`switchyard-bench run --seed\`), the same draw for every policy, so the runs sample the"
    echo "arrival process instead of replaying one draw of it. TTFT percentiles are taken over all the cell's runs' requests together"
    echo "(\`switchyard-bench pooled\`): one run measures a few hundred requests, so its own p99"
    echo "is its 4th slowest request and moved 3× from run to run of the same code. Every other"
    echo "figure is the median of the runs (tokens/s also with its range)."
    [ "$pd_long_reps" -gt 0 ] && {
        echo "The saturation rate of the two pd_agentic_shared scenarios, where the gates differ, is a"
        echo "*long cell*: $pd_long_reps repetitions with \`duration_s\` $pd_long_s s instead of the workload's"
        echo "$(pd_spec_val pd_agentic_shared duration_s) s (\`switchyard-bench run --duration-s\`; the table's *measured* column), round_robin"
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
if [ "$sections" = pd ]; then
    # Only the P/D section ran: it replaces its namesake in the existing page.
    [ -f "$out" ] || { echo "bench: $out missing: run make bench first" >&2; exit 1; }
    pd_report >"$bench_tmp/pd.md"
    awk -v sec="$bench_tmp/pd.md" '
        /^## / { if (skip) skip = 0 }
        /^## Prefill\/decode/ { while ((getline l < sec) > 0) print l; skip = 1; done = 1; next }
        !skip { print }
        END { if (!done) exit 1 }' "$out" >"$bench_tmp/benchmarks.md" ||
        { echo "bench: no P/D section in $out" >&2; exit 1; }
    cp "$bench_tmp/benchmarks.md" "$out"
    echo "wrote the P/D section of $out and docs/bench-pd.png in $elapsed s" >&2
    exit 0
fi
{
    echo "# Benchmarks"
    echo
    echo "Generated by \`make $target\` (\`tests/bench/run.sh $build $mode\`, $elapsed s) — do not edit by hand."
    echo
    echo "* date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "* commit: $commit$dirty"
    echo "* machine: $(nproc) cores ($cpu), $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr);"
    echo "  load average at start $load_at_start (the machine is shared: absolute figures are"
    echo "  noisy, which is why every comparison is a ratio of contenders measured in this run)"
    echo "* tools: $(nginx -v 2>&1 | sed 's/.*: //'), wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), $(gnuplot --version)"
    echo
    echo "## Proxy overhead (issue: Data plane)"
    echo
    echo "wrk \`-t2 -c64 -d${proxy_secs}s\`, a small non-streaming chat completion POST"
    echo "([\`tests/bench/wrk_post.lua\`](../tests/bench/wrk_post.lua)), median of $proxy_rounds"
    echo "round(s), contenders interleaved. Upstream: one static nginx answering a fixed chat"
    echo "completion on two loopback ports (2 worker processes). **direct** = wrk at one"
    echo "upstream port; **nginx** = nginx reverse proxy (\`proxy_pass\` to an upstream block"
    echo "of both ports, round robin, \`keepalive 128\`, HTTP/1.1, $dp_threads worker processes);"
    echo "**switchyard** = control plane + dataplane ($dp_threads event loops, \`round_robin\`,"
    echo "both ports as workers with \`model: mock\`, probed on \`/health\` every 100 ms);"
    echo "**switchyard (cache_aware)** = the same with the default policy."
    echo "**floor** = MHD + libcurl forwarder, no logic: \`switchyard-floor-proxy\`"
    echo "([\`tests/bench/floor_proxy.c\`](../tests/bench/floor_proxy.c)), built as the dataplane"
    echo "is ($dp_threads event loops, each an MHD daemon in external epoll mode on a shared port"
    echo "and a curl multi handle driven by \`curl_multi_socket_action\`; 8 KiB MHD pool, \`MHD_USE_TURBO\`; pooled"
    echo "easy handles, URLs parsed once, kept-alive upstream connections), round robin over both"
    echo "ports, with everything beyond forwarding removed (no JSON, policy, shared memory,"
    echo "metrics or logging). It measures what the mandated libraries allow on this machine:"
    echo "switchyard / floor is the share of the library floor switchyard's own code keeps."
    echo
    echo "| contender | req/s | p50 | p99 | proxy CPU per request | errors + non-2xx |"
    echo "|---|---|---|---|---|---|"
    for c in direct nginx floor switchyard switchyard_ca; do
        label=$c
        [ "$c" = switchyard_ca ] && label="switchyard (cache_aware)"
        echo "| $label | $(fmt_int "$(v "proxy_${c}_rps")") | $(v "proxy_${c}_p50_us") µs | $(v "proxy_${c}_p99_us") µs | $(v "proxy_${c}_cpu_us" | sed 's/^[0-9.]*$/& µs/') | $(v "proxy_${c}_errors") |"
    done
    echo
    echo "Proxy CPU per request = utime + stime of the proxy's processes (nginx: master +"
    echo "workers; floor: its process; switchyard: the dataplane) over the run / requests completed."
    echo
    echo "| ratio | result | goal |"
    echo "|---|---|---|"
    echo "| switchyard / nginx throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_nginx_rps)")× | ≥ 1.0× |"
    echo "| switchyard / direct throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_direct_rps)")× | (reported) |"
    echo "| nginx / direct throughput | $(ratio "$(v proxy_nginx_rps)" "$(v proxy_direct_rps)")× | (reported) |"
    echo "| switchyard (cache_aware) / nginx throughput | $(ratio "$(v proxy_switchyard_ca_rps)" "$(v proxy_nginx_rps)")× | (reported) |"
    echo "| switchyard p50 − direct p50 (added latency) | $(diff_us "$(v proxy_switchyard_p50_us)" "$(v proxy_direct_p50_us)") µs | ≤ 50 µs |"
    echo "| nginx p50 − direct p50 | $(diff_us "$(v proxy_nginx_p50_us)" "$(v proxy_direct_p50_us)") µs | (reported) |"
    echo "| switchyard p50 / nginx p50 | $(ratio "$(v proxy_switchyard_p50_us)" "$(v proxy_nginx_p50_us)")× | (reported) |"
    echo "| switchyard / nginx CPU per request | $(ratio "$(v proxy_switchyard_cpu_us)" "$(v proxy_nginx_cpu_us)")× | (reported) |"
    echo "| floor / nginx throughput | $(ratio "$(v proxy_floor_rps)" "$(v proxy_nginx_rps)")× | (reported) |"
    echo "| switchyard / floor throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_floor_rps)")× | (reported) |"
    echo "| floor / nginx CPU per request | $(ratio "$(v proxy_floor_cpu_us)" "$(v proxy_nginx_cpu_us)")× | (reported) |"
    echo "| switchyard / floor CPU per request | $(ratio "$(v proxy_switchyard_cpu_us)" "$(v proxy_floor_cpu_us)")× | (reported) |"
    echo
    echo "Everything (wrk, the proxy, the upstream) shares the $(nproc) cores, so the p50 under"
    echo "64 connections is mostly queueing: it measures throughput as much as latency. Without"
    echo "queueing — wrk \`-t1 -c1 -d${proxy_secs}s\`, one request at a time:"
    echo
    echo "| contender | p50 | p99 | p50 added to direct |"
    echo "|---|---|---|---|"
    for c in direct nginx floor switchyard; do
        echo "| $c | $(v "c1_${c}_p50_us") µs | $(v "c1_${c}_p99_us") µs | $(diff_us "$(v "c1_${c}_p50_us")" "$(v c1_direct_p50_us)") µs |"
    done
    echo
    echo "![proxy throughput](bench-proxy.png)"
    echo
    echo "## Large prompts"
    echo
    echo "400 KB chat prompts (\`BENCH_PROMPT_BYTES=400000\`), wrk \`-t1 -c4 -d${large_secs}s\`"
    echo "against the same static upstream; CPU = utime + stime of the proxy's processes"
    echo "(switchyard: the dataplane with \`cache_aware\`, which hashes the whole prompt; nginx:"
    echo "master + workers) over the run, divided by the requests completed."
    echo
    echo "| proxy | requests | req/s | CPU per request | errors | goal |"
    echo "|---|---|---|---|---|---|"
    echo "| switchyard | $(v large_switchyard_ca_requests) | $(v large_switchyard_ca_rps) | $(v large_switchyard_ca_cpu_ms_per_req) ms | $(v large_switchyard_ca_errors) | ≤ 1 ms |"
    echo "| nginx | $(v large_nginx_requests) | $(v large_nginx_rps) | $(v large_nginx_cpu_ms_per_req) ms | $(v large_nginx_errors) | (reported) |"
    echo
    echo "switchyard / nginx CPU per request: $(ratio "$(v large_switchyard_ca_cpu_ms_per_req)" "$(v large_nginx_cpu_ms_per_req)")×."
    echo
    echo "## Streams and memory"
    echo
    echo "\`switchyard-bench hold\`: $(v hold_streams) streaming chat completions opened through"
    echo "switchyard ($dp_threads event loops, \`round_robin\`) to 4 mock workers (\`--tpot-ms 30000\`:"
    echo "first token at once, the next 30 s later), at most 2,000 new streams/s. Once every"
    echo "stream has its first token, the dataplane's VmRSS (\`/proc/PID/status\`) and CPU"
    echo "(utime + stime from \`/proc/PID/stat\`) are read over a ${hold_s} s window in which no"
    echo "token is due. fd limit of the run: $(v streams_fd_limit) (the dataplane needs two fds per"
    echo "stream; when the hard limit cannot be raised, the run holds as many streams as fit:"
    echo "$(v streams_target) of the $streams_wanted wanted)."
    echo
    echo "| measure | result | goal |"
    echo "|---|---|---|"
    echo "| streams established / requested | $(v hold_established) / $(v hold_streams) ($(v hold_failed) failed) | all |"
    echo "| time to open them all | $(v hold_ramp_s) s | (reported) |"
    echo "| dataplane RSS before the streams | $(mb "$(v hold_rss_before_kb)") MB | (reported) |"
    echo "| dataplane RSS holding them | $(mb "$(v hold_rss_kb)") MB (peak $(mb "$(v hold_hwm_kb)") MB) | ≤ 256 MB at 10k |"
    echo "| RSS per stream | $(awk -v a="$(v hold_rss_kb)" -v b="$(v hold_rss_before_kb)" -v n="$(v hold_established)" 'BEGIN { if (n + 0 > 0) printf "%.1f", (a - b) / n; else print "n/a" }') kB | (reported) |"
    echo "| RSS extrapolated to 10,000 streams (before + 10,000 × per stream) | $(awk -v a="$(v hold_rss_kb)" -v b="$(v hold_rss_before_kb)" -v n="$(v hold_established)" 'BEGIN { if (n + 0 > 0) printf "%.1f", (b + (a - b) / n * 10000) / 1024; else print "n/a" }') MB | ≤ 256 MB |"
    echo "| dataplane CPU between tokens | $(awk -v c="$(v hold_cpu_window_s)" -v w="$(v hold_window_s)" 'BEGIN { if (w + 0 > 0) printf "%.2f", 100 * c / w; else print "n/a" }') % of one core ($(v hold_cpu_window_s) s over $(v hold_window_s) s) | near 0 |"
    echo
    echo "## Routing quality (issue: Routing policies)"
    echo
    echo "\`build/switchyard-bench run\` replays each workload of"
    echo "[\`tests/bench/workloads/\`](../tests/bench/workloads/) open-loop (Poisson arrivals, fixed"
    echo "seed, every request streamed) through switchyard ($dp_threads event loops) to $n_mocks mock"
    echo "workers: \`${mock_flags[*]}\` — small KV caches, so where a prompt"
    echo "goes decides whether its prefix is cached, and a cached prefix makes prefill cheap."
    echo "The router is restarted and the mocks reset before each run. Hit rate = the mocks'"
    echo "\`prefix_hit_tokens / prefix_query_tokens\` (\`/mock/stats\`); ceiling = the share of"
    echo "prompt tokens one LRU cache of the whole fleet's capacity ($n_mocks × $kv_blocks blocks) would"
    echo "serve from cache fed the same requests in order (an ideal router pooling the KV"
    echo "caches); load max/mean = the busiest worker's time-averaged in-flight count"
    echo "(\`/mock/stats\` sampled every 100 ms) over the mean; tokens/s = output tokens over"
    echo "the time to the last completion. consistent_hash keys on \`X-Session-Id\`, sent per"
    echo "group / conversation. cache_aware_fleet = \`cache_aware\` with \`balance_gate: fleet\`."
    echo "Both cache_aware variants run with \`balance_abs_threshold: 6\` (3 × the mocks'"
    echo "\`--max-num-seqs 2\`; the default 32 suits vLLM workers running up to 256 sequences):"
    echo "an overload threshold only means something relative to what a worker runs at once."
    echo
    for w in $workloads; do
        spec=$("$build/switchyard-bench" plan --workload "$here/workloads/$w.yaml" "${quick_flag[@]}" |
            sed -n 's/^spec //p')
        echo "### $w"
        echo
        echo "Workload ([\`$w.yaml\`](../tests/bench/workloads/$w.yaml)$([ "$mode" = quick ] && echo ", its \`quick:\` values")): \`$spec\`; $(v "route_${w}_round_robin_requests") requests; hit-rate ceiling $(v "route_${w}_round_robin_hit_ceiling")."
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
    done
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
    pd_report
    echo "## Load counters (shm/load.c)"
    echo
    echo "| measure | result | goal |"
    echo "|---|---|---|"
    echo "| uncontended increment + decrement (one guard's life) | $(v shm_inc_dec_pair) ns | ≤ 50 ns |"
    echo "| read the loads of 256 workers (one routing decision) | $(v shm_read_256_loads) µs | ≤ 2 µs |"
    echo
    echo "Single thread, one dataplane lease, 20 M pairs and 200 k reads"
    echo "(\`tests/bench/micro_shm.c\`)."
    echo
    echo "## cache_aware decision (dataplane/policy/cache_aware.c)"
    echo
    echo "Hashing, index lookups and recording included; 256 workers; index pre-filled"
    echo "with 1 M blocks ($(v pix_memory) MiB); prompts of 4 bytes per token sharing one"
    echo "of 64 prefixes (\`tests/bench/micro_policy.c\`, $decisions decisions)."
    echo
    echo "| measure | p50 | p99 | goal |"
    echo "|---|---|---|---|"
    echo "| 8K-token prompt | $(v cache_aware_8k_p50) µs | $(v cache_aware_8k_p99) µs | p99 ≤ 10 µs |"
    echo "| 32K-token prompt | $(v cache_aware_32k_p50) µs | $(v cache_aware_32k_p99) µs | (reported) |"
    echo
    echo "| threads sharing the index | decisions/s (8K tokens) |"
    echo "|---|---|"
    for t in 1 2 4; do
        echo "| $t | $(v "cache_aware_8k_threads_$t") |"
    done
    echo
    echo "## Mock worker"
    echo
    echo "| measure | result | goal |"
    echo "|---|---|---|"
    echo "| small non-streaming chat completions, wrk -t2 -c64, zero latencies | $(fmt_int "$(v mock_rps)") req/s | ≥ 20,000 |"
    echo
    echo "## Reproducing"
    echo
    echo "\`make deps\` then \`make bench-quick\` (≤ 2 min: 4 mock workers, 3 policies, 1,000"
    echo "streams, P/D: three scenarios at 1-2 rates once) or \`make bench\` (about 28 min: 8 mock workers, 5"
    echo "policies, 10,000 streams, 3 interleaved proxy rounds, P/D: pd_agentic at 3 rates × 3 runs,"
    echo "pd_agentic_shared at 48 and 96/s × 5 runs, pd_agentic_shared_slow at 96/s × 5 runs, both"
    echo "at 192/s as long cells of 8 runs of 20.5 s). The P/D section alone (about 22 min):"
    echo "\`make bench-pd\` / \`make bench-pd-quick\` (\`tests/bench/run.sh BUILD"
    echo "full|quick pd\`), which rewrites only that section of this page and its plot; \`PD_RATES\`,"
    echo "\`PD_SHARED_RATES\`, \`PD_MIXED_RATES\`, \`PD_REPS\`, \`PD_WORKLOADS\`, \`PD_LONG_REPS\` and"
    echo "\`PD_LONG_S\` override its rates, repetitions, scenarios and long cells"
    echo "(\`pd_agentic_mixed\` runs only when named there). The load"
    echo "generator alone:"
    echo
    echo '```'
    echo "build/switchyard-bench run --workload tests/bench/workloads/shared_prefix.yaml --quick \\"
    echo "    --url http://127.0.0.1:8080 --mock http://127.0.0.1:9001 --mock http://127.0.0.1:9002 \\"
    echo "    --kv-blocks 512 --json summary.json --csv requests.csv"
    echo "build/switchyard-bench plan --workload tests/bench/workloads/hot_prefix.yaml --kv-blocks 512 --mocks 4"
    echo "build/switchyard-bench plan --workload tests/bench/workloads/pd_agentic.yaml --rate 48 --kv-blocks 512 --mocks 4"
    echo "build/switchyard-bench hold --url http://127.0.0.1:8080 --streams 1000 --pid \$(pidof switchyard-dataplane)"
    echo '```'
} >"$out"
echo "wrote $out and docs/bench-*.png in $elapsed s" >&2
