#!/usr/bin/env bash
# Section "streams": N SSE streams held open through switchyard against 4
# mock workers whose first token comes at once and the next one 30 s later:
# RSS and CPU of the dataplane while every stream sits between tokens. Each
# stream costs the dataplane two fds (client + worker). Then, with a fresh
# dataplane, a fifth as many streams whose prompts are 100 KB (what an
# agent's long context costs while its answer streams). Data file:
# streams.csv (hold_* and hold_large_* from switchyard-bench hold, streams_*).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section streams

if [ "$mode" = quick ]; then streams=1000 hold_s=3; else streams=10000 hold_s=5; fi
put streams_hold_s "$hold_s"
put streams_dp_threads "$dp_threads"
echo "== streams and memory ($streams streams)" >&2
streams_wanted=$streams
need=$((2 * streams + 512))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
    # Raise the hard limit of this run's processes only (needs CAP_SYS_RESOURCE).
    { ulimit -Hn "$need" && ulimit -n "$need"; } 2>/dev/null || true
fi
fd_limit=$(ulimit -n)
if [ "$fd_limit" != unlimited ] && [ "$fd_limit" -lt "$need" ]; then
    streams=$(((fd_limit - 512) / 2))
    echo "bench: fd limit $fd_limit: holding only $streams streams" >&2
fi
put streams_target "$streams"
put streams_wanted "$streams_wanted"
put streams_fd_limit "$fd_limit"
read -r s1 s2 s3 s4 sdp sadm <<<"$(free_ports 6)"
for p in $s1 $s2 $s3 $s4; do
    bench_spawn "$bench_tmp/smock-$p.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$p" \
        --model mock --threads 2 --tpot-ms 30000 --max-num-seqs 100000
done
for p in $s1 $s2 $s3 $s4; do wait_http "http://127.0.0.1:$p/health" 10; done
switchyard_config "$bench_tmp/streams.yaml" streams "$dp_threads" round_robin per_request \
    "$sdp" "$sadm" "$s1" "$s2" "$s3" "$s4"
switchyard_start "$build" "$bench_tmp/streams.yaml" "$sdp"
# shellcheck disable=SC2154 # dp_pid: set by switchyard_start
run_fg "$raw/hold.txt" "$build/switchyard-bench" hold --url "http://127.0.0.1:$sdp" \
    --streams "$streams" --pid "$dp_pid" --hold-s "$hold_s" --ramp 2000 --deadline-s 60 || true
while read -r k val; do put "hold_$k" "$val"; done <"$raw/hold.txt"
switchyard_stop
large_streams=$((streams / 5)) large_prompt=100000
put streams_large_prompt_bytes "$large_prompt"
echo "== streams and memory ($large_streams streams, $large_prompt-byte prompts)" >&2
switchyard_start "$build" "$bench_tmp/streams.yaml" "$sdp"
run_fg "$raw/hold-large.txt" "$build/switchyard-bench" hold --url "http://127.0.0.1:$sdp" \
    --streams "$large_streams" --pid "$dp_pid" --hold-s "$hold_s" --ramp 1000 --deadline-s 60 \
    --prompt-bytes "$large_prompt" || true
while read -r k val; do put "hold_large_$k" "$val"; done <"$raw/hold-large.txt"
switchyard_stop
