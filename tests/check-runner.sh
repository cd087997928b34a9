#!/usr/bin/env bash
# Self-test of tests/run-tests.sh: the runner must not be able to hide a
# failing binary. It builds a scratch "build" folder holding two fake cmocka
# binaries of the same basename (unit/test_same fails one case, e2e/test_same
# passes), as the real suite has (test_pd, test_tls, ...), and checks that
#   - the run fails and its closing line counts the failure,
#   - each binary has a log of its own,
#   - a run naming one log twice is refused before anything runs.
# Part of `make test` (before the suite, so the suite's line stays last).
set -u
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/unit" "$scratch/tests/e2e"

cat >"$scratch/tests/unit/test_same" <<'EOF'
#!/bin/sh
echo "[ RUN      ] unit_case_a"
echo "[       OK ] unit_case_a"
echo "[ RUN      ] unit_case_b"
echo "[  FAILED  ] unit_case_b"
echo "[==========] 2 test(s) run."
echo "[  PASSED  ] 1 test(s)."
echo "[  FAILED  ] 1 test(s), listed below:"
exit 1
EOF
cat >"$scratch/tests/e2e/test_same" <<'EOF'
#!/bin/sh
echo "[ RUN      ] e2e_case"
echo "[       OK ] e2e_case"
echo "[==========] 1 test(s) run."
echo "[  PASSED  ] 1 test(s)."
exit 0
EOF
chmod +x "$scratch/tests/unit/test_same" "$scratch/tests/e2e/test_same"

failures=0
check() { # check WHAT CONDITION-RESULT
    if [ "$2" = 0 ]; then
        echo "ok   runner self-test: $1"
    else
        echo "FAIL runner self-test: $1"
        failures=$((failures + 1))
    fi
}

out=$("$here/run-tests.sh" "$scratch" "$scratch/tests/unit/test_same" \
    "$scratch/tests/e2e/test_same" 2>&1)
rc=$?
[ $rc -ne 0 ]
check "a failing binary beside a passing namesake fails the run (rc=$rc)" $?
[ "$(printf '%s\n' "$out" | tail -n 1)" = "2 passed, 1 failed" ]
check "the closing line counts both binaries' cases" $?
[ -f "$scratch/test-logs/tests/unit/test_same.log" ] &&
    [ -f "$scratch/test-logs/tests/e2e/test_same.log" ] &&
    grep -q unit_case_b "$scratch/test-logs/tests/unit/test_same.log" &&
    ! grep -q unit_case "$scratch/test-logs/tests/e2e/test_same.log"
check "each binary has a log of its own" $?

out=$("$here/run-tests.sh" "$scratch" "$scratch/tests/e2e/test_same" \
    "$scratch/tests/unit/../e2e/test_same" 2>&1)
rc=$?
[ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q "would share the log"
check "two binaries mapping to one log are refused (rc=$rc)" $?

[ $failures -eq 0 ]
