#!/usr/bin/env bash
# Section "tls": what HTTPS for clients costs a proxy. Data file: tls.csv
# (tls_CONTENDER_MEASURE_*, tls_CONTENDER_cipher).
#
# Contenders: nginx as a reverse proxy and switchyard, each plain and with
# TLS on its client port, same certificate (EC P-256, made here with
# openssl), TLS 1.3 only on both, whatever cipher each negotiates with wrk
# recorded (openssl s_client) so a report can say they match. Upstream: two
# mock workers over plain HTTP (streams need a real SSE upstream). Measures,
# each with wrk against every contender in turn:
#   keepalive  -c64, small POST on kept-alive connections: req/s, p50, CPU
#              per request (the steady cost of TLS record processing)
#   close      -c16 with "Connection: close": a TLS handshake per request,
#              so CPU per request minus keepalive's is the handshake's cost
#   stream     -c16, 64-token SSE streams on kept-alive connections: CPU
#              per streamed token
# CPU = utime + stime of the proxy's processes (nginx: master + workers;
# switchyard: the dataplane).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section tls

if [ "$mode" = quick ]; then secs=2 rounds=1; else secs=8 rounds=3; fi
stream_tokens=64
put tls_secs "$secs"
put tls_rounds "$rounds"
put tls_stream_tokens "$stream_tokens"
put tls_dp_threads "$dp_threads"

echo "== tls: certificates" >&2
certs=$bench_tmp/tls
mkdir -p "$certs"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=switchyard-bench-ca -keyout "$certs/ca.key" -out "$certs/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$certs/server.key" -out "$certs/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$certs/ext"
openssl x509 -req -days 2 -in "$certs/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" \
    -CAcreateserial -extfile "$certs/ext" -out "$certs/server.pem" 2>/dev/null

read -r m1 m2 ng_port ngs_port sy_port sy_admin sys_port sys_admin <<<"$(free_ports 8)"
for p in $m1 $m2; do
    bench_spawn "$bench_tmp/tls-mock-$p.log" "$build/switchyard-mockworker" --listen "127.0.0.1:$p" \
        --model mock --threads 2 --max-num-seqs 100000
done
for p in $m1 $m2; do wait_http "http://127.0.0.1:$p/health" 10; done

# tls_nginx_start WORKER_PROCESSES PORT TLS(yes|no) UPSTREAM_PORT... (pid in $last_pid):
# the proxy section's nginx, optionally with ssl on its listen port.
tls_nginx_start() {
    local procs=$1 listen=$2 tls=$3 dir=$bench_tmp/nginx-$2 p
    shift 3
    mkdir -p "$dir"
    {
        echo "worker_processes $procs;"
        echo "daemon off; pid $dir/nginx.pid; error_log $dir/error.log warn;"
        [ "$(id -u)" -eq 0 ] && echo "user root root;"
        echo "events { worker_connections 16384; }"
        echo "http {"
        echo "  access_log off; keepalive_requests 10000000; keepalive_timeout 300s;"
        echo "  client_max_body_size 64m; client_body_temp_path $dir/body;"
        echo "  proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi;"
        echo "  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;"
        echo "  upstream workers {"
        for p in "$@"; do echo "    server 127.0.0.1:$p;"; done
        echo "    keepalive 128; keepalive_requests 10000000; keepalive_timeout 300s;"
        echo "  }"
        echo "  server {"
        if [ "$tls" = yes ]; then
            echo "    listen 127.0.0.1:$listen ssl;"
            echo "    ssl_certificate $certs/server.pem; ssl_certificate_key $certs/server.key;"
            # As the dataplane with min_version 1.3: session tickets on (the
            # default of both), no server-side session cache.
            echo "    ssl_protocols TLSv1.3; ssl_session_cache off; ssl_session_tickets on;"
        else
            echo "    listen 127.0.0.1:$listen;"
        fi
        echo "    location / {"
        echo "      proxy_pass http://workers;"
        echo "      proxy_http_version 1.1;"
        echo "      proxy_set_header Connection \"\";"
        echo "      proxy_buffering off;"
        echo "    }"
        echo "  }"
        echo "}"
    } >"$dir/nginx.conf"
    bench_spawn "$dir/stderr.log" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
}

echo "== tls: contenders" >&2
tls_nginx_start "$dp_threads" "$ng_port" no "$m1" "$m2"
ng_pid=$last_pid
tls_nginx_start "$dp_threads" "$ngs_port" yes "$m1" "$m2"
ngs_pid=$last_pid
wait_http "http://127.0.0.1:$ng_port/health" 10
wait_http "https://127.0.0.1:$ngs_port/health" 10 --cacert "$certs/ca.pem"
switchyard_config "$bench_tmp/tls-plain.yaml" tls-plain "$dp_threads" round_robin per_request \
    "$sy_port" "$sy_admin" "$m1" "$m2"
switchyard_start "$build" "$bench_tmp/tls-plain.yaml" "$sy_port"
sy_cp=$cp_pid sy_dp=$dp_pid
switchyard_config "$bench_tmp/tls-tls.yaml" tls-tls "$dp_threads" round_robin per_request \
    "$sys_port" "$sys_admin" "$m1" "$m2"
# The dataplane mapping is the last but policy and workers: insert tls there.
awk -v c="$certs" '{print} /^  idle_timeout:/ {print "  tls: { cert_file: " c "/server.pem, key_file: " c "/server.key, min_version: \"1.3\" }"}' \
    "$bench_tmp/tls-tls.yaml" >"$bench_tmp/tls-tls.yaml.new"
mv "$bench_tmp/tls-tls.yaml.new" "$bench_tmp/tls-tls.yaml"
bench_spawn "$bench_tmp/tls-tls-cp.log" "$build/switchyard-controlplane" --config "$bench_tmp/tls-tls.yaml"
sys_cp=$last_pid
bench_spawn "$bench_tmp/tls-tls-dp.log" "$build/switchyard-dataplane" --config "$bench_tmp/tls-tls.yaml"
sys_dp=$last_pid
wait_http "https://127.0.0.1:$sys_port/v1/chat/completions" 20 --cacert "$certs/ca.pem" -X POST \
    -H 'Content-Type: application/json' \
    -d '{"model":"mock","messages":[{"role":"user","content":"ready?"}],"max_tokens":1}'

declare -A url=(
    [nginx]="http://127.0.0.1:$ng_port"
    [nginx_tls]="https://127.0.0.1:$ngs_port"
    [switchyard]="http://127.0.0.1:$sy_port"
    [switchyard_tls]="https://127.0.0.1:$sys_port"
)
pids_of() {
    case $1 in
    nginx) nginx_procs "$ng_pid" ;;
    nginx_tls) nginx_procs "$ngs_pid" ;;
    switchyard) echo "$sy_dp" ;;
    switchyard_tls) echo "$sys_dp" ;;
    esac
}
contenders="nginx nginx_tls switchyard switchyard_tls"
for c in nginx_tls switchyard_tls; do
    port=${url[$c]##*:}
    neg=$(openssl s_client -connect "127.0.0.1:$port" -CAfile "$certs/ca.pem" </dev/null 2>/dev/null |
        awk '/^New, / {gsub(",", ""); print $2 "/" $NF; exit}')
    put "tls_${c}_cipher" "${neg:-n/a}"
done

# measure CONTENDER NAME WRK_ARGS...: one wrk run; appends "line cpu_us=X".
measure() {
    local c=$1 name=$2 pids cpu0 cpu1 line n cpu_us
    shift 2
    pids=$(pids_of "$c")
    # shellcheck disable=SC2086
    cpu0=$(proc_cpu_s $pids)
    run_fg "$bench_tmp/wrk.out" "$@" "${url[$c]}/v1/chat/completions"
    # shellcheck disable=SC2086
    cpu1=$(proc_cpu_s $pids)
    line=$(grep '^WRK' "$bench_tmp/wrk.out")
    n=$(wrk_field requests "$line")
    cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.1f", n ? (b - a) * 1e6 / n : 0}')
    echo "tls $name $c: $line cpu_us=$cpu_us" >&2
    echo "$line cpu_us=$cpu_us" >>"$raw/$name-$c.txt"
}

echo "== tls: measures" >&2
for _ in $(seq "$rounds"); do
    for c in $contenders; do
        measure "$c" keepalive wrk -t2 -c64 -d"${secs}s" -s "$here/wrk_post.lua"
        measure "$c" close wrk -t2 -c16 -d"${secs}s" -H "Connection: close" -s "$here/wrk_post.lua"
        measure "$c" stream env BENCH_STREAM_TOKENS="$stream_tokens" \
            wrk -t2 -c16 -d"${secs}s" -s "$here/wrk_post.lua"
    done
done
for name in keepalive close stream; do
    for c in $contenders; do
        for k in rps p50_us p99_us cpu_us; do
            put "tls_${c}_${name}_$k" "$(while read -r line; do wrk_field "$k" "$line"; done <"$raw/$name-$c.txt" | median)"
        done
        put "tls_${c}_${name}_errors" "$(while read -r line; do
            echo "$(wrk_field errors "$line") $(wrk_field non2xx "$line")"
        done <"$raw/$name-$c.txt" | awk '{s += $1 + $2} END {print s + 0}')"
    done
done
for c in $contenders; do
    put "tls_${c}_stream_cpu_us_per_token" "$(awk -v x="$(value "tls_${c}_stream_cpu_us")" \
        -v t="$stream_tokens" 'BEGIN {if (x == "n/a") print x; else printf "%.2f\n", x / t}')"
done
for p in "$sys_dp" "$sys_cp" "$sy_dp" "$sy_cp" "$ngs_pid" "$ng_pid"; do bench_stop "$p"; done
