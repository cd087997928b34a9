#!/usr/bin/env bash
# Report fragment of section "overload": admission control under 3x and
# 10x the fleet's capacity, against switchyard without it.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

echo "## Overload"
echo
measured_alone overload
echo "Two mock workers (\`$(v over_mock_flags)\`), serving about $(v over_capacity_rps)"
echo "requests/s together; two tenants, one sending 80 % of the requests. *admission*:"
echo "\`max_inflight_per_worker\` = the mocks' \`--max-num-seqs\`, queue \`max_wait\` 3/4 of the"
echo "TTFT objective ($(v over_slo_ms) ms) and \`max_depth\` $(v over_queue_max_depth) per event loop (what"
echo "the fleet drains within \`max_wait\`); *none*: the same keys, no limits. Goodput: answers"
echo "with a TTFT within the objective, per second from the first arrival to the last answer,"
echo "as a share of the capacity. A tenant's figure is its goodput over what it asked for."
echo "Rejections include \`queue_timeout\`s, which by design come after \`max_wait\`."
echo
echo "| run | offered req/s | goodput / capacity | TTFT p99 of served (ms) | rejected | rejection p99 (ms) | big tenant | small tenant |"
echo "|---|---|---|---|---|---|---|---|"
for run in base x3_none x3_admission x10_none x10_admission; do
    echo "| $run | $(v "over_${run}_rate") | $(v "over_${run}_goodput_ratio") | $(v "over_${run}_ttft_p99_ms") | $(v "over_${run}_rejected") | $(v "over_${run}_reject_p99_ms") | $(v "over_${run}_big_good_share") | $(v "over_${run}_small_good_share") |"
done
echo
echo "Goals (from the issue): goodput ≥ 0.9 × capacity, TTFT p99 of admitted requests"
echo "within 2 × the uncongested run's (\`base\`), rejections answered in p99 ≤ 5 ms, and the"
echo "small tenant's share of goodput ≥ 45 % of what it asked for."
echo
