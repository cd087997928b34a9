#!/usr/bin/env bash
# Runs test binaries in parallel, each with a time limit, and prints every
# failing binary's full output plus one closing line "N passed, N failed"
# counting cmocka test cases. Usage: tests/run-tests.sh BUILD_DIR TEST...
# SWITCHYARD_TEST_JOBS (default 4) sets parallelism; e2e tests mostly wait.
#
# A binary's log is named by its path under BUILD_DIR (build/tests/unit/
# test_pd -> test-logs/tests/unit/dataplane/forward/test_pd.log), never by its basename alone:
# the unit and end-to-end suites hold binaries of the same name, and a shared
# log let one overwrite the other, so a failing binary could be counted as
# its passing namesake. Before anything runs, two binaries that would map to
# one log stop the run (exit 2). tests/check-runner.sh proves both.
set -u
build=${1:?usage: tests/run-tests.sh BUILD_DIR TEST...}
shift
export SWITCHYARD_BUILD_DIR=$build
jobs=${SWITCHYARD_TEST_JOBS:-4}
limit=${SWITCHYARD_TEST_TIMEOUT:-300}
logdir=$build/test-logs

# The name a binary is reported and logged under: its normalised path below
# BUILD_DIR (a binary elsewhere keeps its absolute path under outside/), so
# two spellings of one path share a name and are caught below.
test_name() {
    local rel
    rel=$(realpath -m --relative-to="$build" "$1")
    case $rel in
    ../* | ..) printf 'outside%s\n' "$(realpath -m "$1")" ;;
    *) printf '%s\n' "$rel" ;;
    esac
}

declare -A owner=()
for t in "$@"; do
    name=$(test_name "$t")
    if [ -n "${owner[$name]+x}" ]; then
        echo "run-tests: '$t' and '${owner[$name]}' would share the log $logdir/$name.log" >&2
        exit 2
    fi
    owner[$name]=$t
done

rm -rf "$logdir"
mkdir -p "$logdir"

run_one() {
    local t=$1 name=$2 log=$RUN_TESTS_LOGDIR/$2.log limit=$RUN_TESTS_LIMIT
    local start=$SECONDS
    mkdir -p "$(dirname "$log")"
    timeout --kill-after=10 "$limit" "$t" >"$log" 2>&1
    local rc=$?
    echo "rc=$rc seconds=$((SECONDS - start))" >>"$log"
    if [ $rc -eq 0 ]; then
        echo "ok   $name ($((SECONDS - start))s)"
    else
        echo "FAIL $name rc=$rc ($((SECONDS - start))s)"
    fi
}
export -f run_one
export RUN_TESTS_LOGDIR=$logdir RUN_TESTS_LIMIT=$limit
for t in "$@"; do
    printf '%s\0%s\0' "$t" "$(test_name "$t")"
done | xargs -0 -n 2 -P "$jobs" bash -c 'run_one "$1" "$2"' _

passed=0
failed=0
bad_bins=0
for t in "$@"; do
    name=$(test_name "$t")
    log=$logdir/$name.log
    if [ ! -f "$log" ]; then
        bad_bins=$((bad_bins + 1))
        failed=$((failed + 1))
        echo "===== $name: no log (never ran) ====="
        continue
    fi
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p))
    failed=$((failed + f))
    if ! grep -q '^rc=0 ' "$log" || [ "$f" -ne 0 ]; then
        bad_bins=$((bad_bins + 1))
        # A crash or timeout may print no cmocka summary: still count a failure.
        [ "$f" -eq 0 ] && failed=$((failed + 1))
        echo "===== $name ====="
        tail -n 80 "$log"
    fi
done
echo "$passed passed, $failed failed"
[ $bad_bins -eq 0 ] && [ $failed -eq 0 ]
