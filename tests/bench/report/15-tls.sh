#!/usr/bin/env bash
# Report fragment of section "tls": nginx and switchyard, each plain and
# with TLS on the client port: throughput, CPU per request with and without
# keep-alive (the handshake's cost), CPU per streamed token.
# shellcheck source=tests/bench/report/lib.sh
. "$(dirname "$0")/lib.sh"

secs=$(v tls_secs) tokens=$(v tls_stream_tokens) dp_threads=$(v tls_dp_threads)
us() { sed 's/^[0-9.]*$/& µs/'; }

echo "## TLS on the client side (issue: TLS on both sides)"
echo
measured_alone tls
echo "Contenders: **nginx** as a reverse proxy and **switchyard** (\`round_robin\`,"
echo "$dp_threads worker processes / event loops), each plain and with TLS on its client"
echo "port: the same EC P-256 certificate, TLS 1.3 only, session tickets on both"
echo "(negotiated: nginx $(v tls_nginx_tls_cipher), switchyard $(v tls_switchyard_tls_cipher))."
echo "Upstream: two mock workers over plain HTTP. wrk, ${secs} s per run, median of"
echo "$(v tls_rounds) round(s), contenders interleaved. **keep-alive**: \`-c64\`, small POST;"
echo "**handshake per request**: \`-c16\` with \`Connection: close\`; **stream**: \`-c16\`,"
echo "$tokens-token SSE streams. CPU = utime + stime of the proxy's processes."
echo
echo "| contender | keep-alive req/s | p50 | CPU / request | handshake per request: req/s | CPU / request | handshake CPU (difference) | stream CPU / token | errors |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in nginx nginx_tls switchyard switchyard_tls; do
    label=${c/_tls/ (TLS)}
    hs=$(diff_us "$(v "tls_${c}_close_cpu_us")" "$(v "tls_${c}_keepalive_cpu_us")")
    errors=$(awk -v a="$(v "tls_${c}_keepalive_errors")" -v b="$(v "tls_${c}_close_errors")" \
        -v c="$(v "tls_${c}_stream_errors")" 'BEGIN {print a + b + c}')
    echo "| $label | $(fmt_int "$(v "tls_${c}_keepalive_rps")") | $(v "tls_${c}_keepalive_p50_us" | us) | $(v "tls_${c}_keepalive_cpu_us" | us) | $(fmt_int "$(v "tls_${c}_close_rps")") | $(v "tls_${c}_close_cpu_us" | us) | $(echo "$hs" | us) | $(v "tls_${c}_stream_cpu_us_per_token" | us) | $errors |"
done
echo
echo "| ratio | result |"
echo "|---|---|"
echo "| switchyard TLS / plain, keep-alive throughput | $(ratio "$(v tls_switchyard_tls_keepalive_rps)" "$(v tls_switchyard_keepalive_rps)")× |"
echo "| nginx TLS / plain, keep-alive throughput | $(ratio "$(v tls_nginx_tls_keepalive_rps)" "$(v tls_nginx_keepalive_rps)")× |"
echo "| switchyard TLS / nginx TLS, keep-alive throughput | $(ratio "$(v tls_switchyard_tls_keepalive_rps)" "$(v tls_nginx_tls_keepalive_rps)")× |"
echo "| switchyard TLS / nginx TLS, CPU per request with a handshake | $(ratio "$(v tls_switchyard_tls_close_cpu_us)" "$(v tls_nginx_tls_close_cpu_us)")× |"
echo "| switchyard TLS / nginx TLS, CPU per streamed token | $(ratio "$(v tls_switchyard_tls_stream_cpu_us_per_token)" "$(v tls_nginx_tls_stream_cpu_us_per_token)")× |"
echo
echo "The handshake's CPU is the difference between a request on a new connection and"
echo "one on a kept-alive connection of the same contender (for the plain contenders"
echo "that is the TCP connection's cost alone). switchyard's TLS is GnuTLS (through"
echo "libmicrohttpd), nginx's OpenSSL; everything shares the $(v cores) cores with wrk and"
echo "the mocks."
echo
