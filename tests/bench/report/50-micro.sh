#!/usr/bin/env bash
# Report fragment of section "micro": the load counters and one cache_aware
# decision.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

echo "## Load counters (shm/load.c)"
echo
measured_alone micro
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
echo "of 64 prefixes (\`tests/bench/micro_policy.c\`, $(v micro_decisions) decisions)."
echo
echo "| measure | p50 | p99 | goal |"
echo "|---|---|---|---|"
echo "| 8K-token prompt | $(v cache_aware_8k_p50) µs | $(v cache_aware_8k_p99) µs | p99 ≤ 5 µs |"
echo "| 32K-token prompt | $(v cache_aware_32k_p50) µs | $(v cache_aware_32k_p99) µs | (reported) |"
echo "| 8K-token prompt, a new question every decision | $(v cache_aware_8k_new_p50) µs | $(v cache_aware_8k_new_p99) µs | p99 ≤ 5 µs |"
echo
echo "The first two rows cycle through 256 prompts: after the first visit of each"
echo "(the first 256 decisions, which the p99 falls among) a decision finds its whole"
echo "prompt recorded. In the last row every decision is a new question after one of"
echo "the 64 prefixes, as in a shared-prefix workload, so its own tail of about 34"
echo "blocks is hashed and recorded (2,000 decisions untimed first). Each question"
echo "comes from a generator seeded for its prompt, so no two are alike (before"
echo "2026-12-02 they repeated after 26 seeds, and this row mostly timed repeats)."
echo
echo "| threads sharing the index | decisions/s (8K tokens) |"
echo "|---|---|"
for t in 1 2 4; do
    echo "| $t | $(v "cache_aware_8k_threads_$t") |"
done
echo
