#!/usr/bin/env bash
# Section "tokens": what relaying a streamed token costs. Data file:
# tokens.csv (tokens_CONTENDER_*); raw: one `switchyard-bench tokens`
# output per contender and round.
#
# Upstream: 2 mock workers streaming every completion as vLLM does, one SSE
# event per token, tokens $tpot_ms apart (--tpot-ms). The client
# (switchyard-bench tokens) keeps the same number of streams of the same
# length running against every contender (a stream that ends is replaced at
# once), so each is offered the same tokens per second. Contenders: the
# client straight at the workers (direct, round robin over both), through an
# nginx reverse proxy (proxy_buffering off, HTTP/1.1 keep-alive upstream, as
# many worker processes as switchyard has event loops), through the library
# floor (switchyard-floor-proxy, which relays a stream as the dataplane
# does), through switchyard with round_robin and with cache_aware. Rounds
# interleave the contenders; a contender's figures are the medians of its
# rounds. Default load: 64 streams of 100 tokens 5 ms apart (12,800
# tokens/s offered): on 2 cores shared by client, workers and proxy, 2 ms
# apart (32,000/s) saturates the machine even direct, and the gaps then
# measure the run queue instead of the relay. Environment: TOKENS_STREAMS,
# TOKENS_N, TOKENS_TPOT_MS, TOKENS_WINDOW_S, TOKENS_ROUNDS override it.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section tokens

if [ "$mode" = quick ]; then window=3 rounds=1; else window=8 rounds=3; fi
streams=${TOKENS_STREAMS:-64} n_tokens=${TOKENS_N:-100} tpot_ms=${TOKENS_TPOT_MS:-5}
window=${TOKENS_WINDOW_S:-$window} rounds=${TOKENS_ROUNDS:-$rounds}
# Warm-up: every stream started (spread over one stream's length) and past
# its first token before the window opens.
spread=$(awk -v n="$n_tokens" -v t="$tpot_ms" 'BEGIN {printf "%.3f", n * t / 1000}')
warmup=$(awk -v s="$spread" 'BEGIN {printf "%.3f", s + 0.5}')
put tokens_streams "$streams"
put tokens_n "$n_tokens"
put tokens_tpot_ms "$tpot_ms"
put tokens_window_s "$window"
put tokens_rounds "$rounds"
put tokens_dp_threads "$dp_threads"

echo "== streamed tokens ($streams streams of $n_tokens tokens, $tpot_ms ms apart)" >&2
read -r m1 m2 nginx_port floor_port sy_rr_port sy_rr_admin sy_ca_port sy_ca_admin <<<"$(free_ports 8)"
for p in $m1 $m2; do
    bench_spawn "$bench_tmp/tmock-$p.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$p" \
        --model mock --threads 2 --tpot-ms "$tpot_ms" --max-num-seqs 100000
done
for p in $m1 $m2; do wait_http "http://127.0.0.1:$p/health" 10; done
proxy_nginx_start "$dp_threads" "$nginx_port" "$m1" "$m2"
nginx_pid=$last_pid
wait_http "http://127.0.0.1:$nginx_port/health" 10
bench_spawn "$bench_tmp/floor.log" "$build/switchyard-floor-proxy" --listen "127.0.0.1:$floor_port" \
    --threads "$dp_threads" --turbo --upstream "http://127.0.0.1:$m1" --upstream "http://127.0.0.1:$m2"
floor_pid=$last_pid
wait_http "http://127.0.0.1:$floor_port/v1/chat/completions" 10 -X POST \
    -H 'Content-Type: application/json' \
    -d '{"model":"mock","messages":[{"role":"user","content":"ready?"}],"max_tokens":1}'
switchyard_config "$bench_tmp/tokens-rr.yaml" tokens-rr "$dp_threads" round_robin per_request \
    "$sy_rr_port" "$sy_rr_admin" "$m1" "$m2"
switchyard_start "$build" "$bench_tmp/tokens-rr.yaml" "$sy_rr_port"
rr_cp=$cp_pid rr_dp=$dp_pid
switchyard_config "$bench_tmp/tokens-ca.yaml" tokens-ca "$dp_threads" cache_aware per_request \
    "$sy_ca_port" "$sy_ca_admin" "$m1" "$m2"
switchyard_start "$build" "$bench_tmp/tokens-ca.yaml" "$sy_ca_port"
ca_cp=$cp_pid ca_dp=$dp_pid

declare -A target_url=(
    [direct]="http://127.0.0.1:$m1,http://127.0.0.1:$m2"
    [nginx]="http://127.0.0.1:$nginx_port"
    [floor]="http://127.0.0.1:$floor_port"
    [switchyard]="http://127.0.0.1:$sy_rr_port"
    [switchyard_ca]="http://127.0.0.1:$sy_ca_port"
)
# The proxy's processes, whose CPU is counted (direct: none).
proxy_pids() {
    case $1 in
    nginx) nginx_procs "$nginx_pid" ;;
    floor) echo "$floor_pid" ;;
    switchyard) echo "$rr_dp" ;;
    switchyard_ca) echo "$ca_dp" ;;
    esac
}
contenders="direct nginx floor switchyard switchyard_ca"
keys="tokens_per_s gap_p50_us gap_p99_us gap_p999_us cpu_us_per_token failed streams_at_window"
for round in $(seq "$rounds"); do
    for c in $contenders; do
        pid_args=()
        for p in $(proxy_pids "$c"); do pid_args+=(--pid "$p"); done
        out=$raw/$c-$round.txt
        run_fg "$out" "$build/switchyard-bench" tokens --url "${target_url[$c]}" \
            --streams "$streams" --tokens "$n_tokens" --spread-s "$spread" --warmup-s "$warmup" \
            --window-s "$window" "${pid_args[@]}" || echo "bench: tokens $c round $round: failures" >&2
        line=""
        for k in $keys; do line="$line $k=$(awk -v k="$k" '$1 == k {print $2}' "$out")"; done
        echo "round $round $c:$line" >&2
        echo "$line" >>"$raw/$c.txt"
    done
done
for c in $contenders; do
    for k in $keys; do
        put "tokens_${c}_$k" "$(while read -r line; do wrk_field "$k" "$line"; done <"$raw/$c.txt" | median)"
    done
    # Every round's CPU per token, for the spread between rounds.
    put "tokens_${c}_cpu_runs" "$(while read -r line; do wrk_field cpu_us_per_token "$line"; done <"$raw/$c.txt" | tr '\n' ' ' | sed 's/ $//')"
done
bench_stop "$floor_pid"
bench_stop "$rr_dp"
bench_stop "$rr_cp"
bench_stop "$ca_dp"
bench_stop "$ca_cp"
bench_stop "$nginx_pid"
