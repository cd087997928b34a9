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
echo "\`max_inflight_per_worker\` = the mocks' \`--max-num-seqs\`, queue \`max_wait\`"
echo "$(v over_queue_max_wait_ms) ms (the uncongested run's TTFT p99, rounded up: the latency the"
echo "queue may add to an admitted request) and \`max_depth\` $(v over_queue_max_depth) per event loop (3/4 of"
echo "what the fleet drains within \`max_wait\`, at least one place per tenant); *none*: the same keys, no limits. Goodput:"
echo "answers with a TTFT within the objective ($(v over_slo_ms) ms), per second from the first"
echo "arrival to the last answer, as a share of the capacity. *Rejections at once*: those"
echo "answered before 0.9 × \`max_wait\` (refused on arrival, or a queued request pushed out by"
echo "a tenant under its share); *after max_wait*: \`queue_timeout\`s. A tenant's *of ask* is its"
echo "goodput over what it asked for; the small tenant's *part* is its share of all goodput (with"
echo "both tenants backlogged, a fair queue gives it about half)."
echo
echo "| run | offered req/s | goodput / capacity | TTFT p99 of served (ms) | rejected | of which after max_wait | rejection p99, at once (ms) | rejection p99, all (ms) | big tenant, of ask | small tenant, of ask | small tenant, part of goodput |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for run in base x3_none x3_admission x10_none x10_admission; do
    echo "| $run | $(v "over_${run}_rate") | $(v "over_${run}_goodput_ratio") | $(v "over_${run}_ttft_p99_ms") | $(v "over_${run}_rejected") | $(v "over_${run}_rejected_late") | $(v "over_${run}_reject_early_p99_ms") | $(v "over_${run}_reject_p99_ms") | $(v "over_${run}_big_good_share") | $(v "over_${run}_small_good_share") | $(v "over_${run}_small_goodput_part") |"
done
echo
echo "Goals (from the issue): goodput ≥ 0.9 × capacity, TTFT p99 of admitted requests"
echo "within 2 × the uncongested run's (\`base\`), rejections answered in p99 ≤ 5 ms, and the"
echo "small tenant's share of goodput ≥ 45 % of what it asked for. Read as its part of all goodput,"
echo "since at 10× the small tenant alone asks twice the fleet's capacity: no fair"
echo "scheduler serves 45 % of that without starving the other tenant."
echo
