#!/usr/bin/env bash
# Runs every fuzz target of BUILD_DIR for SECONDS each (make fuzz), from a
# working copy of its seed corpus (tests/fuzz/corpus/NAME/) plus its past
# crashes (tests/fuzz/regress/NAME/), so what a run finds never lands in
# the repository by itself. Writes BUILD_DIR/report.md (executions,
# coverage, corpus size per target) and exits non-zero when a target
# crashed; the crashing input is in BUILD_DIR/crashes/NAME/.
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS [NAME...]
# With FUZZ_RUNS=N in the environment a target stops after N executions,
# or at SECONDS if that comes first (a campaign: FUZZ_RUNS=10000000).
set -u
build=$1
secs=$2
shift 2
runs=()
[ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        names+=("${n#fuzz_}")
    done
fi
report=$build/report.md
{
    echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | crashes |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$report"
failed=0
for n in "${names[@]}"; do
    bin=$build/tests/fuzz/fuzz_$n
    work=$build/corpus/$n
    crashes=$build/crashes/$n
    log=$build/logs/$n.log
    mkdir -p "$work" "$crashes" "$(dirname "$log")"
    dict=()
    [ -f "tests/fuzz/dict/$n.dict" ] && dict=(-dict="tests/fuzz/dict/$n.dict")
    seeds=(tests/fuzz/corpus/"$n")
    [ -d "tests/fuzz/regress/$n" ] && seeds+=(tests/fuzz/regress/"$n")
    start=$(date +%s)
    "$bin" -max_total_time="$secs" "${runs[@]}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$crashes/" "${dict[@]}" "$work" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(find "$work" -type f | wc -l)
    ncrash=$(find "$crashes" -type f | wc -l)
    echo "| $n | $took | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | $corp | $ncrash |" >>"$report"
    if [ $rc -ne 0 ] || [ "$ncrash" -ne 0 ]; then
        failed=$((failed + 1))
        echo "FAIL fuzz_$n (rc=$rc): see $log and $crashes/"
        tail -n 40 "$log"
    else
        echo "ok   fuzz_$n: ${execs:-?} executions, cov ${cov:-?}"
    fi
done
cat "$report"
[ $failed -eq 0 ]
