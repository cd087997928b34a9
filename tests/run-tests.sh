#!/usr/bin/env bash
# Runs test binaries in parallel, each with a time limit, and prints every
# failing binary's full output plus one closing line "N passed, N failed"
# counting cmocka test cases. Usage: tests/run-tests.sh BUILD_DIR TEST...
# SWITCHYARD_TEST_JOBS (default 4) sets parallelism; e2e tests mostly wait.
set -u
build=$1
shift
export SWITCHYARD_BUILD_DIR=$build
jobs=${SWITCHYARD_TEST_JOBS:-4}
limit=${SWITCHYARD_TEST_TIMEOUT:-300}
logdir=$build/test-logs
rm -rf "$logdir"
mkdir -p "$logdir"

run_one() {
    local t=$1 log=$2/$(basename "$1").log
    local start=$SECONDS
    timeout --kill-after=10 "$3" "$t" >"$log" 2>&1
    local rc=$?
    echo "rc=$rc seconds=$((SECONDS - start))" >>"$log"
    if [ $rc -eq 0 ]; then
        echo "ok   $(basename "$t") ($((SECONDS - start))s)"
    else
        echo "FAIL $(basename "$t") rc=$rc ($((SECONDS - start))s)"
    fi
}
export -f run_one
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2" "$3"' _ {} "$logdir" "$limit"

passed=0
failed=0
bad_bins=0
for t in "$@"; do
    log=$logdir/$(basename "$t").log
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p))
    failed=$((failed + f))
    if ! grep -q '^rc=0 ' "$log"; then
        bad_bins=$((bad_bins + 1))
        # A crash or timeout may print no cmocka summary: still count a failure.
        [ "$f" -eq 0 ] && failed=$((failed + 1))
        echo "===== $(basename "$t") ====="
        tail -n 80 "$log"
    fi
done
echo "$passed passed, $failed failed"
[ $bad_bins -eq 0 ] && [ $failed -eq 0 ]
