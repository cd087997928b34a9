#!/usr/bin/env bash
# Report fragment of section "mock": the mock worker's throughput.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

echo "## Mock worker"
echo
measured_alone mock
echo "| measure | result | goal |"
echo "|---|---|---|"
echo "| small non-streaming chat completions, wrk -t2 -c64, zero latencies | $(fmt_int "$(v mock_rps)") req/s | ≥ 20,000 |"
echo
