/*
 * The load generator's HTTP engine: one libcurl multi handle driven by
 * curl_multi_socket_action and epoll (so ten thousand open streams cost
 * nothing between events), on the calling thread only.
 *
 * lg_replay sends a plan open-loop (each request at its arrival time,
 * whatever happened to earlier ones) and records per request the time to
 * first token (first body byte of the SSE stream), end-to-end latency,
 * status and output tokens (from the stream's usage event). A sequential
 * plan (workload.h) is open-loop per conversation only: a conversation
 * starts at its arrival time (or, with max_concurrency running, when one
 * ends) and sends turn t+1 once turn t completed and its think time
 * passed; after the plan's stop_s nothing more is sent and what is in
 * flight completes.
 * lg_hold opens n streams, waits until every one has its first token,
 * then measures a process (the dataplane) while they sit idle.
 */
#ifndef SY_TESTS_BENCH_LOADGEN_H
#define SY_TESTS_BENCH_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "tests/bench/workload.h"

struct lg_result {
    double start_s; /* when it was sent, seconds after the run's start */
    double ttft_s;  /* first body byte after start; < 0 if none */
    double e2e_s;   /* completion after start */
    long status;    /* HTTP status, 0 if none */
    int curl_rc;
    unsigned output_tokens; /* from the usage event; 0 if absent */
    unsigned prompt_tokens; /* from the usage event; 0 if absent */
    unsigned cached_tokens; /* usage.prompt_tokens_details.cached_tokens; 0 if absent */
    bool sent;              /* a sequential plan leaves what is due after stop_s unsent */
    bool ok;                /* 200, no transport error, stream ended with [DONE] */
    /* Where e2e_s went, seen from the client (< 0: unknown). sent_s: after
     * start, curl was about to write the request (the client's loop and the
     * connect are before it; ttft_s - sent_s is the server's answer plus
     * both kernels; e2e_s - ttft_s, for a one-packet answer, the client
     * noticing it was done). connect_s and curl_total_s: curl's own clock
     * (CURLINFO_CONNECT_TIME_T, CURLINFO_TOTAL_TIME_T), from when curl began
     * the transfer; new_conns: connections curl opened for it (0: reused). */
    double sent_s, connect_s, curl_total_s;
    long new_conns;
};

/* Sends plan to base_url (http://HOST:PORT) open-loop; results[i] is the
 * outcome of plan->req[i]. base_url may list up to 8 comma-separated URLs
 * (independent router nodes): requests go to them round robin in the order
 * they are sent. direct_urls (NULL or "": none; else up to 8, the workers)
 * takes the plan's bypassing requests: request r goes to the
 * (r.bypass_key % n)-th. Returns 0 or -errno (setup failure, -EINVAL: a
 * bad list). */
int lg_replay(const struct wl_plan *plan, const char *base_url, const char *direct_urls,
              struct lg_result *results, double *wall_s);

struct lg_hold_stats {
    size_t opened, established, failed;
    long rss_before_kb, rss_kb, hwm_kb;
    double cpu_window_s, window_s;
    double ramp_s;
    unsigned long long bytes_in_window;
};

/* Opens n streaming chat completions to base_url (at most ramp_per_s new
 * ones a second), each with a prompt of prompt_bytes more bytes than a
 * few words, waits (up to deadline_s) until each has its first byte,
 * then reads pid's VmRSS and CPU, keeps the streams open for hold_s and
 * reads them again; then aborts every stream. */
int lg_hold(const char *base_url, size_t n, double ramp_per_s, double hold_s, double deadline_s,
            size_t prompt_bytes, pid_t pid, struct lg_hold_stats *st);

/* lg_tokens: keeps `streams` streaming chat completions of `tokens` tokens
 * running (a stream that ends is replaced at once: a fixed offered load),
 * round robin over base_url's comma-separated URLs; the first ones start
 * spread over spread_s. Over [warmup_s, warmup_s + window_s) it counts the
 * token events delivered, the gap between consecutive token events of a
 * stream as the client sees it, and the CPU (utime + stime) of pids. */
#define LG_TOKENS_MAX_PIDS 64

struct lg_tokens_opts {
    const char *base_url;
    size_t streams;
    unsigned tokens;
    double warmup_s, window_s, spread_s;
    pid_t pids[LG_TOKENS_MAX_PIDS];
    size_t n_pids;
};

struct lg_tokens_stats {
    double window_s, cpu_s;
    unsigned long long tokens, streams_done, failed;
    size_t gaps, streams_at_window;
    double gap_p50_us, gap_p99_us, gap_p999_us; /* < 0: no gap measured */
};

int lg_tokens(const struct lg_tokens_opts *o, struct lg_tokens_stats *st);

/* /proc readings of a process: VmRSS/VmHWM in kB and utime+stime in s. */
long lg_proc_kb(pid_t pid, const char *field);
double lg_proc_cpu_s(pid_t pid);

#endif
