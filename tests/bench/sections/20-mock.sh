#!/usr/bin/env bash
# Section "mock": the mock worker's throughput on small non-streaming chat
# completions (wrk -t2 -c64). The mock worker must never be the bottleneck
# of the routing benchmark. Data file: mock.csv (mock_rps).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section mock

secs=8
[ "$mode" = quick ] && secs=3
echo "== mock worker throughput" >&2
read -r mock_port <<<"$(free_ports 1)"
bench_spawn "$bench_tmp/mock-tput.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$mock_port" --model mock
mock_pid=$last_pid
wait_http "http://127.0.0.1:$mock_port/health" 10
run_fg "$raw/wrk.out" wrk -t2 -c64 -d"${secs}s" -s "$here/wrk_post.lua" \
    "http://127.0.0.1:$mock_port/v1/chat/completions"
line=$(grep '^WRK' "$raw/wrk.out")
put mock_rps "$(wrk_field rps "$line")"
bench_stop "$mock_pid"
