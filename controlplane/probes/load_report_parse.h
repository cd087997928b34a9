/*
 * Reading a worker's load out of its Prometheus text page (vLLM's /metrics):
 * the three gauges a router can act on, `vllm:num_requests_running`,
 * `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc`, and the LoRA
 * adapters it is running.
 *
 * vLLM writes one series per engine (data-parallel rank) with the labels
 * `model_name` and `engine`; one endpoint serving N ranks shows
 * `engine="0".."N-1"`. Running and waiting are request counts and are
 * summed over the engines; KV-cache usage is a fraction of each engine's
 * own cache, so the page's value is their mean (a sum of fractions would
 * read 1.6 for two engines at 80%, which means nothing).
 *
 * LoRA: `vllm:lora_requests_info` is an info-style gauge whose value is the
 * Unix time vLLM last set it and whose labels carry the state:
 * `running_lora_adapters` and `waiting_lora_adapters` (comma-joined adapter
 * names, "" for none) and `max_lora`. The client library keeps every label
 * set ever written in the output, so a page shows the history of states;
 * the current one is the sample with the newest timestamp. When the series
 * carry an `engine` label (one per data-parallel rank), the newest sample
 * of each engine counts and the running sets are united; up to
 * LRP_LORA_ENGINES engines are told apart (more share entries: the newest
 * of those wins). The running names land in a Bloom set
 * (shm/adapter_set.h), the form the report is published in.
 *
 * Cache config: `vllm:cache_config_info` is an info gauge (value 1) whose
 * labels are the engine's cache config; its `block_size` (tokens per KV
 * block) is read, so that the control plane can check it against the
 * block size precise_cache_aware hashes with.
 *
 * Sleep: `vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|
 * "discard_all"}` (one series of each per engine) reads awake 1 while the
 * engine is awake and 0 after POST /sleep, with weights_offloaded 1 at
 * level 1 and discard_all 1 at level 2. A sleeping vLLM still answers
 * /health 200 and queues every request until POST /wake_up: the worker
 * counts as sleeping when any engine's awake sample is 0.
 *
 * The page comes from a worker, not from us: the parser accepts any bytes
 * (garbage, NUL, lines of any length, other metrics, comments, escaped
 * label values, timestamps) and never reads past len; it looks at no more
 * than LRP_INPUT_MAX bytes. Samples whose value is not a finite number
 * >= 0 are skipped. It allocates nothing and keeps no state: a pure
 * function, callable from any thread.
 */
#ifndef SY_CONTROLPLANE_LOAD_REPORT_PARSE_H
#define SY_CONTROLPLANE_LOAD_REPORT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/adapter_set.h"

/* Bytes of a page the parser looks at; the rest is ignored. */
#define LRP_INPUT_MAX (4u * 1024u * 1024u)
/* Engines whose lora_requests_info samples are told apart. */
#define LRP_LORA_ENGINES 8u
/* Bytes of a running_lora_adapters value read; names past it are left out. */
#define LRP_LORA_LIST_MAX 4096u

/* What one page says. Caller storage. */
struct lrp_report {
    uint64_t running; /* summed over engines, saturating */
    uint64_t waiting;
    double kv_cache_usage; /* mean over engines, 0..1 (clamped) */
    bool has_running;
    bool has_waiting;
    bool has_kv;
    bool has_lora;                       /* a vllm:lora_requests_info sample was read */
    struct shm_adapter_set lora_running; /* its running_lora_adapters (see above) */
    uint32_t block_size;  /* vllm:cache_config_info's block_size label; 0 when absent */
    bool has_sleep_state; /* a vllm:engine_sleep_state{sleep_state="awake"} sample was read */
    bool sleeping;        /* one of those read 0 */
    uint32_t sleep_level; /* 1 weights offloaded, 2 everything discarded; 0 awake or unsaid */
    uint32_t engines;     /* distinct series of num_requests_running seen */
    uint32_t bad_lines;   /* sample lines that did not parse (for logs) */
};

/*
 * Parses text[0..len). model: when non-NULL and non-empty, only series
 * whose model_name label equals it count (a series without model_name
 * counts too). Returns 0 when the page held at least running or waiting,
 * -ENODATA otherwise (garbage, an empty page, another server's metrics);
 * *out is filled either way.
 */
int lrp_parse(const char *text, size_t len, const char *model, struct lrp_report *out);

#endif
