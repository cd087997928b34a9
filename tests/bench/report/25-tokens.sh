#!/usr/bin/env bash
# Report fragment of section "tokens": CPU per relayed token and the gap
# between tokens a proxy adds, for nginx, the library floor and switchyard
# against the same streaming load; plot bench-tokens.png.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

contenders="direct nginx floor switchyard switchyard_ca"
label() { if [ "$1" = switchyard_ca ]; then echo "switchyard (cache_aware)"; else echo "$1"; fi; }
us() { sed 's/^-\{0,1\}[0-9.]*$/& µs/'; }
for c in nginx floor switchyard switchyard_ca; do
    echo "$c $(v "tokens_${c}_cpu_us_per_token") $(diff_us "$(v "tokens_${c}_gap_p99_us")" "$(v tokens_direct_gap_p99_us)")"
done >"$tmp/tokens.dat"
plot_or_warn bench-tokens.png <<GP
set terminal pngcairo size 1200,420 font ",10" noenhanced
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set output "$plots/bench-tokens.png"
set multiplot layout 1,2 title "Streamed tokens ($(v target | tr '"' "'"), commit $(v commit)): $(v tokens_streams) streams, $(v tokens_tpot_ms) ms per token"
set key off
set title "proxy CPU per relayed token"
set ylabel "µs"
set yrange [0:*]
plot "$tmp/tokens.dat" using 2:xtic(1) lc rgb "#4477aa"
set title "inter-token gap p99 added to direct"
set ylabel "µs"
set yrange [*:*]
plot "$tmp/tokens.dat" using 3:xtic(1) lc rgb "#cc6677"
unset multiplot
GP

echo "## Streamed tokens"
echo
measured_alone tokens
echo "What LLM traffic costs a router: one SSE event per generated token. Two mock workers"
echo "stream every chat completion as vLLM does (role event, then one event per token"
echo "$(v tokens_tpot_ms) ms apart, then \`data: [DONE]\`). The client"
echo "(\`switchyard-bench tokens\`, one thread, libcurl) keeps $(v tokens_streams) streams of"
echo "$(v tokens_n) tokens running against each contender — a stream that ends is replaced at"
echo "once, the first ones start spread over one stream's length so tokens do not fall due"
echo "together — so every contender is offered the same tokens per second. Contenders,"
echo "interleaved, median of $(v tokens_rounds) round(s) of $(v tokens_window_s) s after a warm-up: **direct** (the"
echo "client round robin over both workers); **nginx** (\`proxy_buffering off\`, HTTP/1.1"
echo "upstream keep-alive, $(v tokens_dp_threads) worker processes); **floor** (\`switchyard-floor-proxy\`,"
echo "which relays a stream as the dataplane does: the response queued when the worker's"
echo "headers arrive, each piece curl delivers appended to a 64 KiB-bounded buffer, the"
echo "transfer paused while it is full); **switchyard** (\`round_robin\`) and **switchyard"
echo "(cache_aware)**, $(v tokens_dp_threads) event loops."
echo
echo "CPU per token = utime + stime of the proxy's processes over the window / token events"
echo "the client received in it. Gap = time between two consecutive token events of one"
echo "stream as the client sees them (the first token's wait is the time to first token, not"
echo "counted); a proxy adds what its gap exceeds direct's. Everything shares the $(v cores)"
echo "cores, so the gap's tail includes waiting for a core. Where a relayed token's CPU goes"
echo "(syscalls, libraries, profiles) and what was tried: [operations.md](operations.md#streamed-tokens)."
echo
echo "| contender | tokens/s | gap p50 | gap p99 | gap p99.9 | p50 added | p99 added | proxy CPU per token | failed streams |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in $contenders; do
    echo "| $(label "$c") | $(fmt_int "$(v "tokens_${c}_tokens_per_s")") | $(v "tokens_${c}_gap_p50_us" | us) | $(v "tokens_${c}_gap_p99_us" | us) | $(v "tokens_${c}_gap_p999_us" | us) | $(diff_us "$(v "tokens_${c}_gap_p50_us")" "$(v tokens_direct_gap_p50_us)" | us) | $(diff_us "$(v "tokens_${c}_gap_p99_us")" "$(v tokens_direct_gap_p99_us)" | us) | $(v "tokens_${c}_cpu_us_per_token" | us) | $(v "tokens_${c}_failed") |"
done
echo
echo "CPU per token in each round (the spread is the noise of the shared machine):"
for c in nginx floor switchyard switchyard_ca; do
    echo "$(label "$c") $(v "tokens_${c}_cpu_runs") µs;"
done | sed '$ s/;$/./'
echo
echo "| ratio | result | goal |"
echo "|---|---|---|"
echo "| switchyard / nginx CPU per token | $(ratio "$(v tokens_switchyard_cpu_us_per_token)" "$(v tokens_nginx_cpu_us_per_token)")× | ≤ 0.9× |"
echo "| switchyard (cache_aware) / nginx CPU per token | $(ratio "$(v tokens_switchyard_ca_cpu_us_per_token)" "$(v tokens_nginx_cpu_us_per_token)")× | (reported) |"
echo "| switchyard / floor CPU per token | $(ratio "$(v tokens_switchyard_cpu_us_per_token)" "$(v tokens_floor_cpu_us_per_token)")× | (reported) |"
echo "| floor / nginx CPU per token | $(ratio "$(v tokens_floor_cpu_us_per_token)" "$(v tokens_nginx_cpu_us_per_token)")× | (reported) |"
echo "| switchyard gap p99 − direct (added) | $(diff_us "$(v tokens_switchyard_gap_p99_us)" "$(v tokens_direct_gap_p99_us)") µs | ≤ 200 µs |"
echo "| switchyard (cache_aware) gap p99 − direct | $(diff_us "$(v tokens_switchyard_ca_gap_p99_us)" "$(v tokens_direct_gap_p99_us)") µs | (reported) |"
echo "| nginx gap p99 − direct | $(diff_us "$(v tokens_nginx_gap_p99_us)" "$(v tokens_direct_gap_p99_us)") µs | (reported) |"
echo "| switchyard / direct tokens/s | $(ratio "$(v tokens_switchyard_tokens_per_s)" "$(v tokens_direct_tokens_per_s)")× | (reported) |"
echo
echo "![streamed tokens](bench-tokens.png)"
echo
