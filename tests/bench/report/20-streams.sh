#!/usr/bin/env bash
# Report fragment of section "streams": dataplane memory and CPU while
# thousands of streams sit between tokens.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

echo "## Streams and memory"
echo
measured_alone streams
echo "\`switchyard-bench hold\`: $(v hold_streams) streaming chat completions opened through"
echo "switchyard ($(v streams_dp_threads) event loops, \`round_robin\`) to 4 mock workers (\`--tpot-ms 30000\`:"
echo "first token at once, the next 30 s later), at most 2,000 new streams/s. Once every"
echo "stream has its first token, the dataplane's VmRSS (\`/proc/PID/status\`) and CPU"
echo "(utime + stime from \`/proc/PID/stat\`) are read over a $(v streams_hold_s) s window in which no"
echo "token is due. fd limit of the run: $(v streams_fd_limit) (the dataplane needs two fds per"
echo "stream; when the hard limit cannot be raised, the run holds as many streams as fit:"
echo "$(v streams_target) of the $(v streams_wanted) wanted)."
echo
echo "| measure | result | goal |"
echo "|---|---|---|"
echo "| streams established / requested | $(v hold_established) / $(v hold_streams) ($(v hold_failed) failed) | all |"
echo "| time to open them all | $(v hold_ramp_s) s | (reported) |"
echo "| dataplane RSS before the streams | $(mb "$(v hold_rss_before_kb)") MB | (reported) |"
echo "| dataplane RSS holding them | $(mb "$(v hold_rss_kb)") MB (peak $(mb "$(v hold_hwm_kb)") MB) | ≤ 200 MB at 10k |"
echo "| RSS per stream | $(awk -v a="$(v hold_rss_kb)" -v b="$(v hold_rss_before_kb)" -v n="$(v hold_established)" 'BEGIN { if (n + 0 > 0) printf "%.1f", (a - b) / n; else print "n/a" }') kB | (reported) |"
echo "| RSS extrapolated to 10,000 streams (before + 10,000 × per stream) | $(awk -v a="$(v hold_rss_kb)" -v b="$(v hold_rss_before_kb)" -v n="$(v hold_established)" 'BEGIN { if (n + 0 > 0) printf "%.1f", (b + (a - b) / n * 10000) / 1024; else print "n/a" }') MB | ≤ 200 MB |"
echo "| dataplane CPU between tokens | $(awk -v c="$(v hold_cpu_window_s)" -v w="$(v hold_window_s)" 'BEGIN { if (w + 0 > 0) printf "%.2f", 100 * c / w; else print "n/a" }') % of one core ($(v hold_cpu_window_s) s over $(v hold_window_s) s) | near 0 |"
echo "| RSS per stream, $(v hold_large_established) / $(v hold_large_streams) streams with $(v streams_large_prompt_bytes)-byte prompts (fresh dataplane) | $(awk -v a="$(v hold_large_rss_kb)" -v b="$(v hold_large_rss_before_kb)" -v n="$(v hold_large_established)" 'BEGIN { if (n + 0 > 0) printf "%.1f", (a - b) / n; else print "n/a" }') kB | (reported) |"
echo
