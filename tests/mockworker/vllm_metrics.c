/*
 * The rest of vLLM's /metrics page (see vllm_metrics.h). Histograms put
 * every observation in one bucket: their size on the page, which is what
 * this module is for, does not depend on where.
 */
#include "tests/mockworker/vllm_metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUCKETS_MAX 32

/* vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... <= max. */
static size_t buckets_1_2_5(uint32_t max, double *out)
{
    size_t n = 0;
    static const double m[] = {1, 2, 5};
    for (double e = 1; n < BUCKETS_MAX; e *= 10) {
        for (size_t i = 0; i < 3 && n < BUCKETS_MAX; i++) {
            if (m[i] * e > (double)max)
                return n;
            out[n++] = m[i] * e;
        }
    }
    return n;
}

/* One histogram family with one series per engine: all of `count`
 * observations in bucket `at` (clamped), summing to `sum`. */
static void hist(struct prom_writer *w, const char *name, const char *help, const char *model,
                 uint32_t engines, const double *bounds, size_t n_bounds, uint64_t count, size_t at,
                 double sum)
{
    uint64_t counts[BUCKETS_MAX + 1];
    prom_family(w, name, PROM_HISTOGRAM, help);
    for (uint32_t e = 0; e < engines; e++) {
        char engine[16];
        snprintf(engine, sizeof(engine), "%" PRIu32, e);
        memset(counts, 0, sizeof(counts));
        uint64_t mine = count / engines + (e < count % engines);
        counts[at < n_bounds ? at : n_bounds] = mine;
        const struct prom_label l[] = {{"model_name", model}, {"engine", engine}};
        prom_histogram(w, l, 2, bounds, counts, n_bounds, sum / engines);
    }
}

static void per_engine(struct prom_writer *w, const char *name, enum prom_type type,
                       const char *help, const char *model, uint32_t engines, double value)
{
    prom_family(w, name, type, help);
    for (uint32_t e = 0; e < engines; e++) {
        char engine[16], v[48];
        snprintf(engine, sizeof(engine), "%" PRIu32, e);
        snprintf(v, sizeof(v), "%.1f", value / engines);
        const struct prom_label l[] = {{"model_name", model}, {"engine", engine}};
        prom_sample_text(w, type == PROM_COUNTER ? "_total" : "", l, 2, v);
    }
}

static uint64_t requests_total(struct mw_server *s)
{
    pthread_mutex_lock(&s->stats.lock);
    uint64_t n = s->stats.requests_total;
    pthread_mutex_unlock(&s->stats.lock);
    return n;
}

/* The HTTP instrumentator's families, for the handlers a vLLM server is
 * asked most. */
static void http_families(struct prom_writer *w, uint64_t requests)
{
    static const char *const handlers[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                           "/health", "/metrics"};
    const size_t nh = sizeof(handlers) / sizeof(handlers[0]);
    prom_family(w, "http_requests_total", PROM_COUNTER,
                "Total number of requests by method, status and handler.");
    for (size_t i = 0; i < nh; i++) {
        const struct prom_label l[] = {
            {"handler", handlers[i]}, {"method", i < 2 ? "POST" : "GET"}, {"status", "2xx"}};
        prom_sample_u64(w, NULL, l, 3, i == 0 ? requests : 0);
    }
    static const double highr[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0,
                                   2.5,  3.0,   3.5,  4.0,   4.5, 5.0,  7.5, 10,   30,  60};
    uint64_t c[BUCKETS_MAX + 1] = {0};
    c[0] = requests;
    prom_family(w, "http_request_duration_highr_seconds", PROM_HISTOGRAM,
                "Latency with many buckets but no API specific labels. Made for more accurate "
                "percentile calculations.");
    prom_histogram(w, NULL, 0, highr, c, sizeof(highr) / sizeof(highr[0]), 0.001 * requests);
    static const double low[] = {0.1, 0.5, 1.0};
    prom_family(w, "http_request_duration_seconds", PROM_HISTOGRAM,
                "Latency with only few buckets by handler. Made to be only used if aggregation by "
                "handler is important.");
    for (size_t i = 0; i < nh; i++) {
        const struct prom_label l[] = {{"handler", handlers[i]},
                                       {"method", i < 2 ? "POST" : "GET"}};
        uint64_t cl[4] = {i == 0 ? requests : 0, 0, 0, 0};
        prom_histogram(w, l, 2, low, cl, 3, i == 0 ? 0.001 * requests : 0);
    }
}

void mw_vllm_metrics_head(struct prom_writer *w, struct mw_server *s)
{
    static const char *const gens[] = {"0", "1", "2"};
    prom_family(w, "python_gc_objects_collected", PROM_COUNTER, "Objects collected during gc");
    for (size_t i = 0; i < 3; i++) {
        const struct prom_label l[] = {{"generation", gens[i]}};
        prom_sample_text(w, "_total", l, 1, i == 0 ? "18234.0" : i == 1 ? "4112.0" : "913.0");
    }
    prom_family(w, "python_gc_objects_uncollectable", PROM_COUNTER,
                "Uncollectable objects found during GC");
    for (size_t i = 0; i < 3; i++) {
        const struct prom_label l[] = {{"generation", gens[i]}};
        prom_sample_text(w, "_total", l, 1, "0.0");
    }
    prom_family(w, "python_gc_collections", PROM_COUNTER,
                "Number of times this generation was collected");
    for (size_t i = 0; i < 3; i++) {
        const struct prom_label l[] = {{"generation", gens[i]}};
        prom_sample_text(w, "_total", l, 1, i == 0 ? "1521.0" : i == 1 ? "138.0" : "9.0");
    }
    prom_family(w, "python_info", PROM_GAUGE, "Python platform information");
    const struct prom_label pl[] = {{"implementation", "CPython"},
                                    {"major", "3"},
                                    {"minor", "12"},
                                    {"patchlevel", "11"},
                                    {"version", "3.12.11"}};
    prom_sample_text(w, "", pl, 5, "1.0");
    prom_family(w, "process_virtual_memory_bytes", PROM_GAUGE, "Virtual memory size in bytes.");
    prom_sample_text(w, "", NULL, 0, "2.0384612352e+010");
    prom_family(w, "process_resident_memory_bytes", PROM_GAUGE, "Resident memory size in bytes.");
    prom_sample_text(w, "", NULL, 0, "1.812070400e+09");
    prom_family(w, "process_start_time_seconds", PROM_GAUGE,
                "Start time of the process since unix epoch in seconds.");
    char started[32];
    snprintf(started, sizeof(started), "%.2f", (double)s->started);
    prom_sample_text(w, "", NULL, 0, started);
    prom_family(w, "process_cpu_seconds_total", PROM_COUNTER,
                "Total user and system CPU time spent in seconds.");
    char cpu[32];
    snprintf(cpu, sizeof(cpu), "%.2f", (double)clock() / CLOCKS_PER_SEC);
    prom_sample_text(w, "", NULL, 0, cpu);
    prom_family(w, "process_open_fds", PROM_GAUGE, "Number of open file descriptors.");
    prom_sample_text(w, "", NULL, 0, "61.0");
    prom_family(w, "process_max_fds", PROM_GAUGE, "Maximum number of open file descriptors.");
    prom_sample_text(w, "", NULL, 0, "1.048576e+06");
    http_families(w, requests_total(s));
}

void mw_vllm_metrics_tail(struct prom_writer *w, struct mw_server *s,
                          const struct mw_engine_snapshot *snap)
{
    const char *m = s->opts.model;
    uint32_t n = s->opts.data_parallel_size;
    uint64_t reqs = requests_total(s);
    per_engine(w, "vllm:gpu_cache_usage_perc", PROM_GAUGE,
               "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use "
               "vllm:kv_cache_usage_perc instead.",
               m, 1, snap->kv_usage * n);
    per_engine(w, "vllm:gpu_prefix_cache_queries", PROM_COUNTER,
               "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use "
               "vllm:prefix_cache_queries instead.",
               m, n, (double)snap->prefix_query_tokens);
    per_engine(w, "vllm:gpu_prefix_cache_hits", PROM_COUNTER,
               "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use "
               "vllm:prefix_cache_hits instead.",
               m, n, (double)snap->prefix_hit_tokens);
    per_engine(w, "vllm:num_preemptions", PROM_COUNTER,
               "Cumulative number of preemption from the engine.", m, n, 0);
    static const char *const reasons[] = {"stop", "length", "abort"};
    prom_family(w, "vllm:request_success", PROM_COUNTER,
                "Count of successfully processed requests.");
    for (uint32_t e = 0; e < n; e++) {
        char engine[16];
        snprintf(engine, sizeof(engine), "%" PRIu32, e);
        for (size_t r = 0; r < 3; r++) {
            char v[32];
            snprintf(v, sizeof(v), "%.1f", r == 1 ? (double)(reqs / n) : 0.0);
            const struct prom_label l[] = {
                {"model_name", m}, {"engine", engine}, {"finished_reason", reasons[r]}};
            prom_sample_text(w, "_total", l, 3, v);
        }
    }
    double b125[BUCKETS_MAX];
    size_t n125 = buckets_1_2_5(s->opts.max_model_len, b125);
    double per_req = reqs > 0 ? (double)snap->prompt_tokens / (double)reqs : 0;
    hist(w, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", m, n, b125, n125,
         reqs, n125 / 2, (double)snap->prompt_tokens);
    hist(w, "vllm:request_generation_tokens", "Number of generation tokens processed.", m, n, b125,
         n125, reqs, 2, (double)snap->generation_tokens);
    static const double iter[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    hist(w, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", m, n,
         iter, 13, reqs, 6, per_req * (double)reqs);
    hist(w, "vllm:request_max_num_generation_tokens",
         "Histogram of maximum number of requested generation tokens.", m, n, b125, n125, reqs, 3,
         (double)snap->generation_tokens);
    static const double nb[] = {1, 2, 5, 10, 20};
    hist(w, "vllm:request_params_n", "Histogram of the n request parameter.", m, n, nb, 5, reqs, 0,
         (double)reqs);
    hist(w, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", m,
         n, b125, n125, reqs, 3, (double)snap->generation_tokens);
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                  0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                  20.0,  40.0,  80.0, 160., 640., 2560.};
    hist(w, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m,
         n, ttft, 22, reqs, 2, 0.01 * reqs);
    static const double tpot[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
    hist(w, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
         m, n, tpot, 19, reqs, 1, 0.02 * reqs);
    hist(w, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m,
         n, tpot, 19, reqs, 1, 0.02 * reqs);
    static const double prefill_tok[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0};
    hist(w, "vllm:time_per_prefill_token_request_seconds",
         "Time spent per token during prefill  phase in seconds", m, n, prefill_tok, 10, reqs, 0,
         0.0005 * reqs);
    static const double lat[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,   2.5,
                                 5.0,  10.0,  15.0,  20.0,  30.0,  40.0,  50.0,
                                 60.0, 120.0, 240.0, 480.0, 960.0, 1920., 7680.};
    static const struct {
        const char *name, *help;
    } lat_families[] = {
        {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."},
        {"vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request."},
        {"vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request."},
        {"vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request."},
        {"vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request."},
    };
    for (size_t i = 0; i < sizeof(lat_families) / sizeof(lat_families[0]); i++)
        hist(w, lat_families[i].name, lat_families[i].help, m, n, lat, 21, reqs, 0, 0.05 * reqs);
}
