/*
 * Command-line flags of switchyard-mockworker: one struct holding every knob
 * of the simulated vLLM server (listen address, model, P/D role, cost model,
 * scheduler limits) and a strict parser for it. Knobs are flags only; faults
 * change at run time through POST /mock/faults instead (faults.h).
 *
 * The parser is strict on purpose: a test that mistypes a flag must fail at
 * start (exit status 2 with a message naming the flag) instead of silently
 * running with a default and measuring the wrong thing.
 *
 * Threading: parsed once in main() before any thread starts; read-only after.
 */
#ifndef SY_TESTS_MOCKWORKER_OPTIONS_H
#define SY_TESTS_MOCKWORKER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MW_HOST_MAX         64
#define MW_MODEL_MAX        128
#define MW_ENGINE_ID_MAX    64
#define MW_NAMES_MAX        8 /* served model names, and LoRA adapters */
#define MW_LORA_PATH_MAX    256
#define MW_THREADS_MAX      64
#define MW_BLOCK_TOKENS_MAX 4096
#define MW_TLS_PATH_MAX     256
#define MW_ENDPOINT_MAX     256

enum mw_role {
    MW_ROLE_UNSET = 0,
    MW_ROLE_REGULAR,
    MW_ROLE_PREFILL,
    MW_ROLE_DECODE,
};

/* Caller storage, filled by mw_options_defaults then mw_options_parse. */
struct mw_options {
    char host[MW_HOST_MAX]; /* numeric address or name, no brackets */
    uint16_t port;          /* 0 = let the kernel pick (the log line tells) */
    char model[MW_MODEL_MAX];
    enum mw_role role;
    char engine_id[MW_ENGINE_ID_MAX]; /* empty = random at start */
    uint32_t threads;                 /* event loops, 1..MW_THREADS_MAX */
    uint64_t seed;                    /* output text and embeddings */
    uint32_t block_tokens;            /* tokens per KV block */
    uint32_t kv_blocks;               /* KV cache capacity in blocks */
    double prefill_base_us;           /* fixed prefill cost per request */
    double prefill_us_per_token;      /* prefill cost per uncached token */
    double tpot_ms;                   /* time per output token after the first */
    uint32_t output_tokens;           /* completion length when max_tokens is absent */
    uint32_t max_num_seqs;            /* requests running at once; the rest wait */
    uint32_t max_model_len;           /* prompt + completion limit, as vLLM checks it */
    uint32_t embedding_dim;
    uint64_t max_body_bytes; /* request bodies above this answer 413 */
    bool kv_ids_flat;        /* P/D: remote_block_ids flat (old vLLM), not grouped */
    bool kv_push;            /* P/D: answer as vLLM's push mode (no remote_block_ids) */
    uint64_t kv_lease_ms;    /* P/D: a prefill pins its answer's blocks this long at most */
    /* Every name the model answers to, names[0] == model (--served-model-name). */
    char names[MW_NAMES_MAX][MW_MODEL_MAX];
    uint32_t n_names;
    /* LoRA adapters (--lora-modules name=path ...): served under their own names. */
    char lora_names[MW_NAMES_MAX][MW_MODEL_MAX];
    char lora_paths[MW_NAMES_MAX][MW_LORA_PATH_MAX];
    uint32_t n_lora;
    bool legacy_errors;          /* error bodies in vLLM's old top-level shape */
    uint32_t data_parallel_size; /* engines shown in /metrics (engine="0".."N-1") */
    /* HTTPS (tls.h): PEM files; "" = plain HTTP / no client certificates. */
    char tls_cert[MW_TLS_PATH_MAX];
    char tls_key[MW_TLS_PATH_MAX];
    char tls_client_ca[MW_TLS_PATH_MAX];
    /* KV-cache events (kv_events.h): "" = not published. */
    char kv_events_endpoint[MW_ENDPOINT_MAX];        /* PUB, e.g. tcp://127.0.0.1:5557 */
    char kv_events_replay_endpoint[MW_ENDPOINT_MAX]; /* ROUTER; "" = no replay */
    bool kv_events_array;                            /* --kv-events-format array */
    bool kv_events_hash_bytes;                       /* --kv-events-hash bytes */
    bool kv_groups_hybrid;                           /* --kv-groups hybrid */
    uint32_t kv_events_buffer_steps;                 /* batches kept for replay */
    /* Fleet mode (fleet.h): workers served by this process, 0 = one, as before. */
    uint32_t workers;
    bool metrics_vllm; /* --metrics-page vllm: every family of vLLM's page (vllm_metrics.h) */
};

enum mw_options_result {
    MW_OPTIONS_UNSET = 0,
    MW_OPTIONS_RUN,     /* parsed; start the server */
    MW_OPTIONS_HELP,    /* --help was given */
    MW_OPTIONS_VERSION, /* --version was given */
    MW_OPTIONS_ERROR,   /* err holds a one-line message */
};

void mw_options_defaults(struct mw_options *opts);

/*
 * Parses argv (argv[0] is the program). Returns what main should do; on
 * MW_OPTIONS_ERROR err holds "--flag: expected ..., got '...'" or similar.
 * Does not print anything.
 */
enum mw_options_result mw_options_parse(struct mw_options *opts, int argc, char *const argv[],
                                        char *err, size_t err_len);

/* Writes the --help text. */
void mw_options_usage(FILE *out, const char *prog);

const char *mw_role_name(enum mw_role role);

#endif
