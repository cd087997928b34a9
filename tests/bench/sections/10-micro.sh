#!/usr/bin/env bash
# Section "micro": the micro benchmarks of the load counters (micro_shm.c)
# and of one cache_aware decision (micro_policy.c). Writes their figures
# (data file: micro.csv) and the number of decisions timed.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section micro

decisions=20000
[ "$mode" = quick ] && decisions=5000
put micro_decisions "$decisions"
# Each prints "NAME VALUE UNIT" lines.
echo "== micro: load counters" >&2
"$build/tests/bench/micro_shm" >"$raw/shm.txt"
while read -r k val _; do put "$k" "$val"; done <"$raw/shm.txt"
echo "== micro: cache_aware decision" >&2
"$build/tests/bench/micro_policy" "$decisions" >"$raw/policy.txt"
while read -r k val _; do put "$k" "$val"; done <"$raw/policy.txt"
