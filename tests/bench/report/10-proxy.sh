#!/usr/bin/env bash
# Report fragment of section "proxy": proxy overhead (wrk -c64 and -c1
# tables, ratios against nginx, direct and the library floor) and large
# prompts; plot bench-proxy.png.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

proxy_secs=$(v proxy_secs) dp_threads=$(v proxy_dp_threads) large_secs=$(v large_secs)

for c in direct nginx floor switchyard switchyard_ca; do
    echo "$c $(v "proxy_${c}_rps") $(v "proxy_${c}_p50_us") $(v "proxy_${c}_p99_us")"
done >"$tmp/proxy.dat"
plot_or_warn bench-proxy.png <<GP
set terminal pngcairo size 1200,420 font ",10" noenhanced
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set output "$plots/bench-proxy.png"
set multiplot layout 1,2 title "Proxy overhead ($(v target | tr '"' "'"), commit $(v commit)): wrk -c64, small POST"
set key off
set title "throughput"
set ylabel "requests/s"
set yrange [0:*]
plot "$tmp/proxy.dat" using 2:xtic(1) lc rgb "#4477aa"
set title "latency p50"
set ylabel "µs"
plot "$tmp/proxy.dat" using 3:xtic(1) lc rgb "#cc6677"
unset multiplot
GP

echo "## Proxy overhead (issue: Data plane)"
echo
measured_alone proxy
echo "wrk \`-t2 -c64 -d${proxy_secs}s\`, a small non-streaming chat completion POST"
echo "([\`tests/bench/wrk_post.lua\`](../tests/bench/wrk_post.lua)), median of $(v proxy_rounds)"
echo "round(s), contenders interleaved. Upstream: one static nginx answering a fixed chat"
echo "completion on two loopback ports (2 worker processes). **direct** = wrk at one"
echo "upstream port; **nginx** = nginx reverse proxy (\`proxy_pass\` to an upstream block"
echo "of both ports, round robin, \`keepalive 128\`, HTTP/1.1, $dp_threads worker processes);"
echo "**switchyard** = control plane + dataplane ($dp_threads event loops, \`round_robin\`,"
echo "both ports as workers with \`model: mock\`, probed on \`/health\` every 100 ms);"
echo "**switchyard (cache_aware)** = the same with the default policy."
echo "**floor** = MHD + libcurl forwarder, no logic: \`switchyard-floor-proxy\`"
echo "([\`tests/bench/floor_proxy.c\`](../tests/bench/floor_proxy.c)), built as the dataplane"
echo "is ($dp_threads event loops, each an MHD daemon in external epoll mode on a shared port"
echo "and a curl multi handle driven by \`curl_multi_socket_action\`; 8 KiB MHD pool, \`MHD_USE_TURBO\`; pooled"
echo "easy handles, URLs parsed once, kept-alive upstream connections), round robin over both"
echo "ports, with everything beyond forwarding removed (no JSON, policy, shared memory,"
echo "metrics or logging). It measures what the mandated libraries allow on this machine:"
echo "switchyard / floor is the share of the library floor switchyard's own code keeps."
echo
echo "| contender | req/s | p50 | p99 | proxy CPU per request | errors + non-2xx |"
echo "|---|---|---|---|---|---|"
for c in direct nginx floor switchyard switchyard_ca; do
    label=$c
    [ "$c" = switchyard_ca ] && label="switchyard (cache_aware)"
    echo "| $label | $(fmt_int "$(v "proxy_${c}_rps")") | $(v "proxy_${c}_p50_us") µs | $(v "proxy_${c}_p99_us") µs | $(v "proxy_${c}_cpu_us" | sed 's/^[0-9.]*$/& µs/') | $(v "proxy_${c}_errors") |"
done
echo
echo "Proxy CPU per request = utime + stime of the proxy's processes (nginx: master +"
echo "workers; floor: its process; switchyard: the dataplane) over the run / requests completed."
echo
echo "| ratio | result | goal |"
echo "|---|---|---|"
echo "| switchyard / nginx throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_nginx_rps)")× | ≥ 1.0× |"
echo "| switchyard / direct throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_direct_rps)")× | (reported) |"
echo "| nginx / direct throughput | $(ratio "$(v proxy_nginx_rps)" "$(v proxy_direct_rps)")× | (reported) |"
echo "| switchyard (cache_aware) / nginx throughput | $(ratio "$(v proxy_switchyard_ca_rps)" "$(v proxy_nginx_rps)")× | (reported) |"
echo "| switchyard p50 − direct p50 (added latency) | $(diff_us "$(v proxy_switchyard_p50_us)" "$(v proxy_direct_p50_us)") µs | ≤ 50 µs |"
echo "| nginx p50 − direct p50 | $(diff_us "$(v proxy_nginx_p50_us)" "$(v proxy_direct_p50_us)") µs | (reported) |"
echo "| switchyard p50 / nginx p50 | $(ratio "$(v proxy_switchyard_p50_us)" "$(v proxy_nginx_p50_us)")× | (reported) |"
echo "| switchyard / nginx CPU per request | $(ratio "$(v proxy_switchyard_cpu_us)" "$(v proxy_nginx_cpu_us)")× | (reported) |"
echo "| floor / nginx throughput | $(ratio "$(v proxy_floor_rps)" "$(v proxy_nginx_rps)")× | (reported) |"
echo "| switchyard / floor throughput | $(ratio "$(v proxy_switchyard_rps)" "$(v proxy_floor_rps)")× | (reported) |"
echo "| floor / nginx CPU per request | $(ratio "$(v proxy_floor_cpu_us)" "$(v proxy_nginx_cpu_us)")× | (reported) |"
echo "| switchyard / floor CPU per request | $(ratio "$(v proxy_switchyard_cpu_us)" "$(v proxy_floor_cpu_us)")× | (reported) |"
echo
echo "Everything (wrk, the proxy, the upstream) shares the $(v cores) cores, so the p50 under"
echo "64 connections is mostly queueing: it measures throughput as much as latency. Without"
echo "queueing — wrk \`-t1 -c1 -d${proxy_secs}s\`, one request at a time:"
echo
echo "| contender | p50 | p99 | p50 added to direct |"
echo "|---|---|---|---|"
for c in direct nginx floor switchyard; do
    echo "| $c | $(v "c1_${c}_p50_us") µs | $(v "c1_${c}_p99_us") µs | $(diff_us "$(v "c1_${c}_p50_us")" "$(v c1_direct_p50_us)") µs |"
done
echo
echo "![proxy throughput](bench-proxy.png)"
echo
echo "## Large prompts"
echo
echo "400 KB chat prompts (\`BENCH_PROMPT_BYTES=400000\`), wrk \`-t1 -c4 -d${large_secs}s\`"
echo "against the same static upstream; CPU = utime + stime of the proxy's processes"
echo "(switchyard: the dataplane with \`cache_aware\`, which hashes the whole prompt; the"
echo "floor: the same libraries reading the body and sending it on, nothing else; nginx:"
echo "master + workers) over the run, divided by the requests completed."
echo
echo "| proxy | requests | req/s | CPU per request | errors | goal |"
echo "|---|---|---|---|---|---|"
echo "| switchyard | $(v large_switchyard_ca_requests) | $(v large_switchyard_ca_rps) | $(v large_switchyard_ca_cpu_ms_per_req) ms | $(v large_switchyard_ca_errors) | ≤ 0.5 ms |"
echo "| floor | $(v large_floor_requests) | $(v large_floor_rps) | $(v large_floor_cpu_ms_per_req) ms | $(v large_floor_errors) | (reported) |"
echo "| nginx | $(v large_nginx_requests) | $(v large_nginx_rps) | $(v large_nginx_cpu_ms_per_req) ms | $(v large_nginx_errors) | (reported) |"
echo
echo "CPU per request, switchyard / floor: $(ratio "$(v large_switchyard_ca_cpu_ms_per_req)" "$(v large_floor_cpu_ms_per_req)")×;"
echo "switchyard / nginx: $(ratio "$(v large_switchyard_ca_cpu_ms_per_req)" "$(v large_nginx_cpu_ms_per_req)")×."
echo
