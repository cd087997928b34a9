#!/usr/bin/env bash
# Section "overload": offered load 3x and 10x what the mock fleet serves,
# two tenants (one with 80% of the requests, one with 20%), against
# switchyard with admission control (max_inflight_per_worker = the mocks'
# --max-num-seqs, a queue whose max_wait is below the TTFT objective) and
# without it (the same keys, no limits), in the same run; plus an
# uncongested run (half the capacity, no admission) for the reference
# TTFT p99. Figures per run from the per-request CSV: goodput (200s whose
# TTFT is within the 2 s objective, per second from the first arrival to
# the last answer, as a share of the fleet's capacity), TTFT p99 of the requests served, p99 of
# the time to a rejection (429/503) and, for those answered at once,
# where the client's time went (its own loop and connect, the answer,
# noticing it), and each tenant's goodput against what it asked for; the
# router's own clock (access log) and the data plane's run-queue wait
# beside them. Data file: overload.csv (over_RUN_FIGURE); raw:
# overload/over-RUN.csv.
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/../lib.sh"
bench_section overload

n_mocks=2 seqs=2 prefill_us=5000 tpot_ms=10 out_tokens=16 slo_ms=2000
mock_flags=(--model mock --threads 1 --prefill-base-us "$prefill_us" --tpot-ms "$tpot_ms"
    --max-num-seqs "$seqs")
# What the fleet serves: n_mocks x max-num-seqs requests at once, each
# taking its prefill plus out_tokens decode steps.
capacity=$(awk -v n=$n_mocks -v s=$seqs -v p=$prefill_us -v t=$tpot_ms -v o=$out_tokens \
    'BEGIN { printf "%.2f", n * s / (p / 1e6 + o * t / 1e3) }')
# The queue's max_wait is the latency the router may add to an admitted
# request: sized from the uncongested run's TTFT p99 (measured first, below),
# so that an admitted request's TTFT stays within about twice it; max_depth is
# 3/4 of what the fleet drains within max_wait (the data plane's, over all its
# event loops). Until base has run, a placeholder; OVERLOAD_MAX_WAIT_MS fixes
# it instead, and OVERLOAD_MAX_DEPTH fixes max_depth.
max_wait_ms=${OVERLOAD_MAX_WAIT_MS:-$((slo_ms * 3 / 4))}
size_queue() {
    # At least two places per tenant (k for the two): with fewer than one,
    # whoever arrives first holds the only place and no queue can be fair;
    # with one, a tenant whose request was just dispatched has nothing
    # waiting until its next arrival, and the other takes the slots that
    # free meanwhile (the queue never leaves a worker idle for it).
    depth=${OVERLOAD_MAX_DEPTH:-$(awk -v c="$capacity" -v w="$max_wait_ms" -v k=4 \
        'BEGIN { d = int(0.75 * c * w / 1000); print (d > k ? d : k) }')}
}
size_queue
put over_capacity_rps "$capacity"
put over_slo_ms "$slo_ms"
put over_mock_flags "${mock_flags[*]}"

echo "== overload ($n_mocks mock workers, capacity about $capacity requests/s)" >&2
read -r -a oports <<<"$(free_ports $((n_mocks + 2)))"
odp=${oports[$n_mocks]} oadm=${oports[$((n_mocks + 1))]}
mock_args=()
for ((i = 0; i < n_mocks; i++)); do
    bench_spawn "$bench_tmp/omock-$i.log" "$build/switchyard-mockworker" \
        --listen "127.0.0.1:${oports[$i]}" "${mock_flags[@]}"
    mock_args+=(--mock "http://127.0.0.1:${oports[$i]}")
done
for ((i = 0; i < n_mocks; i++)); do wait_http "http://127.0.0.1:${oports[$i]}/health" 10; done

key_big=bench-key-big key_small=bench-key-small
{
    echo "tenants:"
    echo "  - { name: big, key_sha256: $(printf %s $key_big | sha256sum | cut -d' ' -f1) }"
    echo "  - { name: small, key_sha256: $(printf %s $key_small | sha256sum | cut -d' ' -f1) }"
} >"$bench_tmp/over-keys.yaml"

# overload_config FILE ADMISSION(yes|no)
overload_config() {
    local file=$1 adm=$2 p i=0
    {
        echo "shm:"
        echo "  name: /sy-bench-over-$$"
        echo "controlplane:"
        echo "  admin_listen: 127.0.0.1:$oadm"
        echo "  admin_socket: $bench_tmp/over-admin.sock"
        echo "  health: { path: /health, interval: 100ms, timeout: 1s, failure_threshold: 3, success_threshold: 1 }"
        echo "dataplane:"
        echo "  listen: 127.0.0.1:$odp"
        echo "  threads: $dp_threads"
        echo "  idle_timeout: 600s"
        echo "  api_keys_file: $bench_tmp/over-keys.yaml"
        # The router's own clock for each answer (duration_ms from the
        # request's headers to its response sent), beside the client's.
        echo "  access_log: $bench_tmp/over-access.log"
        echo "policy:"
        echo "  name: least_load"
        if [ "$adm" = yes ]; then
            echo "admission:"
            echo "  max_inflight_per_worker: $seqs"
            # A queue the fleet drains within max_wait (max_depth counts
            # over the data plane's event loops): past it a request is
            # refused at once, not after waiting max_wait for nothing.
            echo "  queue: { max_depth: $depth, max_wait: ${max_wait_ms}ms }"
        fi
        echo "workers:"
        for p in "${oports[@]:0:$n_mocks}"; do
            i=$((i + 1))
            echo "  - { url: 'http://127.0.0.1:$p', id: w$i, model: mock }"
        done
    } >"$file"
}

# overload_start: switchyard_start with a key (the probe needs one).
overload_start() {
    bench_spawn "$bench_tmp/over-cp.log" "$build/switchyard-controlplane" --config "$bench_tmp/over.yaml"
    cp_pid=$last_pid
    bench_spawn "$bench_tmp/over-dp.log" "$build/switchyard-dataplane" --config "$bench_tmp/over.yaml"
    dp_pid=$last_pid
    if ! wait_http "http://127.0.0.1:$odp/v1/chat/completions" 20 -X POST \
        -H 'Content-Type: application/json' -H "Authorization: Bearer $key_big" \
        -d '{"model":"mock","messages":[{"role":"user","content":"ready?"}],"max_tokens":1}'; then
        tail -n 5 "$bench_tmp/over-cp.log" "$bench_tmp/over-dp.log" >&2
        return 1
    fi
}

# Figures of one run's CSV (index,group,turn,start_s,ttft_ms,e2e_ms,status,...).
overload_figures() {
    local run=$1 csv=$2
    awk -F, -v slo="$slo_ms" -v cap="$capacity" -v run="$run" -v maxwait="$max_wait_ms" '
        function p99(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
            return n ? a[int(0.99 * (n - 1)) + 1] : -1
        }
        NR > 1 && $11 == 1 {
            small = ($1 % 5 == 4); asked[small]++; if ($4 + $6 / 1e3 > win) win = $4 + $6 / 1e3
            if ($7 == 200 && $10 == 1) { nt++; tt[nt] = $5; if ($5 <= slo) { good++; g[small]++ } }
            else if ($7 == 429 || $7 == 503) {
                nr++; rj[nr] = $6
                if ($6 >= 0.9 * maxwait) nlate++
                else {
                    ne++; re[ne] = $6
                    # The breakdown the client saw (switchyard-bench run --csv): its
                    # loop and connect before the request is written; then
                    # the answer (router, both kernels, both schedulers);
                    # then the client noticing it was done.
                    first = $5 >= 0 ? $5 : $6
                    cs[ne] = $13; wire[ne] = first - $13; seen[ne] = $6 - first
                    if ($16 > 0) nconn++
                }
            }
        }
        END {
            if (win <= 0) win = 1
            printf "over_%s_goodput_ratio %.3f\n", run, good / win / cap
            printf "over_%s_ttft_p99_ms %.1f\n", run, p99(tt, nt)
            printf "over_%s_rejected %d\n", run, nr
            printf "over_%s_reject_p99_ms %.2f\n", run, nr ? p99(rj, nr) : -1
            printf "over_%s_reject_early_p99_ms %.2f\n", run, ne ? p99(re, ne) : -1
            printf "over_%s_reject_early_client_p99_ms %.2f\n", run, ne ? p99(cs, ne) : -1
            printf "over_%s_reject_early_answer_p99_ms %.2f\n", run, ne ? p99(wire, ne) : -1
            printf "over_%s_reject_early_notice_p99_ms %.2f\n", run, ne ? p99(seen, ne) : -1
            printf "over_%s_reject_early_new_conns %d\n", run, nconn
            printf "over_%s_rejected_late %d\n", run, nlate
            printf "over_%s_small_goodput_part %.3f\n", run, good ? g[1] / good : 0
            printf "over_%s_small_good_share %.3f\n", run, asked[1] ? g[1] / asked[1] : 0
            printf "over_%s_big_good_share %.3f\n", run, asked[0] ? g[0] / asked[0] : 0
        }' "$csv"
}

# runq_wait PID: nanoseconds PID's threads waited on a run queue, and their
# time slices, so far (/proc/PID/task/*/schedstat; "0 0" if unreadable).
runq_wait() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ w += $2; n += $3 } END { printf "%d %d\n", w, n }'
}

runs="${OVERLOAD_RUNS:-base:0.5:no x3_none:3:no x3_admission:3:yes x10_none:10:no x10_admission:10:yes}"
for spec in $runs; do
    IFS=: read -r run mult adm <<<"$spec"
    rate=$(awk -v c="$capacity" -v m="$mult" 'BEGIN { printf "%.2f", c * m }')
    overload_config "$bench_tmp/over.yaml" "$adm"
    overload_start
    echo "-- $run: $rate requests/s, admission $adm" >&2
    f=$raw/over-$run
    runq0=$(runq_wait "$dp_pid")
    if run_fg "$f.txt" "$build/switchyard-bench" run --workload "$here/workloads/overload.yaml" \
        "${quick_flag[@]}" --url "http://127.0.0.1:$odp" "${mock_args[@]}" --rate "$rate" \
        --auth "$key_big,$key_small" --auth-every 5 --label "$run" --csv "$f.csv"; then
        while read -r k val; do put "$k" "$val"; done < <(overload_figures "$run" "$f.csv")
    else
        echo "bench: overload / $run: the load generator failed" >&2
    fi
    # The data plane's threads waiting for a core (run queue) per time
    # slice, over the run: what the host's scheduler adds to each answer.
    read -r w0 n0 <<<"$runq0"
    read -r w1 n1 <<<"$(runq_wait "$dp_pid")"
    put "over_${run}_dp_runq_wait_us" "$(awk -v w="$((w1 - w0))" -v n="$((n1 - n0))" \
        'BEGIN { printf "%.0f", (n > 0 ? w / n / 1e3 : -1) }')"
    # The router's own account of the run (admission by tenant and reason,
    # the queue's exits), to explain the figures.
    curl -s --max-time 5 "http://127.0.0.1:$odp/metrics" | grep '^switchyard_admission' >"$f.metrics" || true
    # Each tenant's refusals by reason, from them.
    for t in big small; do
        for why in queue_full queue_timeout; do
            n=$(awk -v s="switchyard_admission_rejected_total{reason=\"$why\",tenant=\"$t\"}" \
                '$1 == s { print $2 }' "$f.metrics")
            put "over_${run}_${t}_${why}" "${n:-0}"
        done
    done
    put "over_${run}_rate" "$rate"
    if [ "$run" = base ] && [ -z "${OVERLOAD_MAX_WAIT_MS:-}" ]; then
        p99=$(awk -F, '$1 == "over_base_ttft_p99_ms" { print $2 }' "$data_file")
        if [ -n "$p99" ] && awk -v p="$p99" 'BEGIN { exit !(p > 0) }'; then
            max_wait_ms=$(awk -v p="$p99" 'BEGIN { printf "%d", p + 0.999 }')
            size_queue
        fi
    fi
    switchyard_stop
    # Rejections answered before 0.9 x max_wait, by the router's clock: the
    # part of the client's figure the router spends (the rest is the
    # client's connection, the kernel and the scheduler of a shared host).
    if [ -s "$bench_tmp/over-access.log" ]; then
        mv "$bench_tmp/over-access.log" "$f.access.log"
        jq -r --argjson late "$max_wait_ms" \
            'select((.status == 429 or .status == 503) and .duration_ms < 0.9 * $late) | .duration_ms' \
            "$f.access.log" | sort -n | awk -v run="$run" '{ v[NR] = $1 }
                END { if (NR) printf "over_%s_reject_early_router_p99_ms %d\n", run, v[int(0.99 * (NR - 1)) + 1] }' |
            while read -r k val; do put "$k" "$val"; done
    fi
    # Each run starts with full buckets and empty queues.
    rm -f "/dev/shm/sy-bench-over-$$" "/dev/shm/sy-bench-over-$$".* "/dev/shm/sy-bench-over-$$-ratelimit"
done
put over_queue_max_wait_ms "$max_wait_ms"
put over_queue_max_depth "$depth"
