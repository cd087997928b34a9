/*
 * Flag parsing for the mock worker (see options.h). Hand-written instead of
 * getopt_long so that every error is one line naming the flag and the bad
 * value, returned to main() rather than printed from inside libc, and so
 * that "--flag value" and "--flag=value" both work for every flag.
 */
#include "tests/mockworker/options.h"

#include "common/version.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum opt_kind {
    OPT_KIND_UNSET = 0,
    OPT_KIND_LISTEN,
    OPT_KIND_STRING,
    OPT_KIND_ROLE,
    OPT_KIND_KV_SHAPE,
    OPT_KIND_KV_MODE,
    OPT_KIND_U32,
    OPT_KIND_U64,
    OPT_KIND_DOUBLE,
    OPT_KIND_NAMES,     /* one or more values, up to the next flag */
    OPT_KIND_LORA,      /* one or more name=path, up to the next flag */
    OPT_KIND_LORA_LIST, /* a,b: adapters by name, each at path /adapters/<name> */
    OPT_KIND_FLAG,      /* a bool set by the flag alone */
    OPT_KIND_CHOICE,    /* a bool: arg is "NO|YES", the second word sets it */
    OPT_KIND_HELP,
    OPT_KIND_VERSION,
};

/* One flag; the table below is static and read-only. */
struct opt_def {
    const char *name;
    enum opt_kind kind;
    size_t offset; /* into struct mw_options */
    size_t size;   /* OPT_KIND_STRING: buffer size */
    uint64_t min;  /* integer kinds */
    uint64_t max;
    const char *arg; /* for --help */
    const char *help;
};

#define OFF(field) offsetof(struct mw_options, field)

static const struct opt_def opt_defs[] = {
    {"--listen", OPT_KIND_LISTEN, 0, 0, 0, 0, "HOST:PORT",
     "address to serve on (required; port 0 = any, see the log line)"},
    {"--model", OPT_KIND_STRING, OFF(model), MW_MODEL_MAX, 0, 0, "NAME",
     "served model name (default mock)"},
    {"--role", OPT_KIND_ROLE, OFF(role), 0, 0, 0, "ROLE",
     "regular|prefill|decode (default regular)"},
    {"--engine-id", OPT_KIND_STRING, OFF(engine_id), MW_ENGINE_ID_MAX, 0, 0, "ID",
     "engine id reported in kv_transfer_params (default random)"},
    {"--kv-block-ids-shape", OPT_KIND_KV_SHAPE, OFF(kv_ids_flat), 0, 0, 0, "SHAPE",
     "remote_block_ids of P/D params: grouped ([[1,2]], vLLM since 2026-03) or flat "
     "(default grouped)"},
    {"--kv-transfer-mode", OPT_KIND_KV_MODE, OFF(kv_push), 0, 0, 0, "MODE",
     "P/D: pull (the decode reads the blocks) or push (answer as vLLM's push mode, without "
     "remote_block_ids; default pull)"},
    {"--kv-lease-ms", OPT_KIND_U64, OFF(kv_lease_ms), sizeof(uint64_t), 1, 86400000, "MS",
     "P/D: how long a prefill worker pins the blocks of an answer no decode read (default "
     "30000)"},
    {"--threads", OPT_KIND_U32, OFF(threads), sizeof(uint32_t), 1, MW_THREADS_MAX, "N",
     "event-loop threads (default 2)"},
    {"--seed", OPT_KIND_U64, OFF(seed), sizeof(uint64_t), 0, UINT64_MAX, "N",
     "seed of the generated text and embeddings (default 0)"},
    {"--block-tokens", OPT_KIND_U32, OFF(block_tokens), sizeof(uint32_t), 1, MW_BLOCK_TOKENS_MAX,
     "N", "tokens per KV block (default 16)"},
    {"--kv-blocks", OPT_KIND_U32, OFF(kv_blocks), sizeof(uint32_t), 1, 1u << 24, "N",
     "KV cache capacity in blocks, LRU eviction (default 4096)"},
    {"--prefill-base-us", OPT_KIND_DOUBLE, OFF(prefill_base_us), 0, 0, 0, "US",
     "fixed prefill time per request (default 0)"},
    {"--prefill-us-per-token", OPT_KIND_DOUBLE, OFF(prefill_us_per_token), 0, 0, 0, "US",
     "prefill time per uncached prompt token (default 0)"},
    {"--tpot-ms", OPT_KIND_DOUBLE, OFF(tpot_ms), 0, 0, 0, "MS",
     "time per output token after the first (default 0)"},
    {"--output-tokens", OPT_KIND_U32, OFF(output_tokens), sizeof(uint32_t), 1, 1u << 20, "N",
     "completion tokens when the request has no max_tokens (default 16)"},
    {"--max-num-seqs", OPT_KIND_U32, OFF(max_num_seqs), sizeof(uint32_t), 1, 1u << 20, "N",
     "requests running at once; later ones wait in FIFO order (default 256)"},
    {"--max-model-len", OPT_KIND_U32, OFF(max_model_len), sizeof(uint32_t), 1, UINT32_MAX, "N",
     "limit of prompt + completion tokens (default 32768)"},
    {"--embedding-dim", OPT_KIND_U32, OFF(embedding_dim), sizeof(uint32_t), 1, 65536, "N",
     "length of returned embeddings (default 16)"},
    {"--max-body-bytes", OPT_KIND_U64, OFF(max_body_bytes), sizeof(uint64_t), 1, 1ull << 32, "N",
     "largest accepted request body; larger answers 413 (default 33554432)"},
    {"--served-model-name", OPT_KIND_NAMES, 0, 0, 0, 0, "NAME...",
     "names the model answers to, the first one in responses (default: --model)"},
    {"--lora-modules", OPT_KIND_LORA, 0, 0, 0, 0, "NAME=PATH...",
     "LoRA adapters served under their own names (listed in /v1/models)"},
    {"--lora-adapters", OPT_KIND_LORA_LIST, 0, 0, 0, 0, "A,B",
     "LoRA adapters by name (path /adapters/NAME), as --lora-modules"},
    {"--legacy-errors", OPT_KIND_FLAG, OFF(legacy_errors), 0, 0, 0, NULL,
     "error bodies as old vLLM: {\"object\":\"error\",\"message\",...}"},
    {"--data-parallel-size", OPT_KIND_U32, OFF(data_parallel_size), sizeof(uint32_t), 1, 64, "N",
     "engines (data-parallel ranks) /metrics shows, one series each (default 1)"},
    {"--tls-cert", OPT_KIND_STRING, OFF(tls_cert), MW_TLS_PATH_MAX, 0, 0, "FILE",
     "serve HTTPS with this PEM certificate (chain); needs --tls-key"},
    {"--tls-key", OPT_KIND_STRING, OFF(tls_key), MW_TLS_PATH_MAX, 0, 0, "FILE",
     "the PEM private key of --tls-cert"},
    {"--tls-client-ca", OPT_KIND_STRING, OFF(tls_client_ca), MW_TLS_PATH_MAX, 0, 0, "FILE",
     "require client certificates signed by this PEM CA (mTLS)"},
    {"--kv-events-endpoint", OPT_KIND_STRING, OFF(kv_events_endpoint), MW_ENDPOINT_MAX, 0, 0,
     "ENDPOINT", "publish KV-cache events as vLLM's ZeroMQ PUB, bound here (default off)"},
    {"--kv-events-replay-endpoint", OPT_KIND_STRING, OFF(kv_events_replay_endpoint),
     MW_ENDPOINT_MAX, 0, 0, "ENDPOINT", "the KV events' replay ROUTER, bound here (default off)"},
    {"--kv-events-format", OPT_KIND_CHOICE, OFF(kv_events_array), 0, 0, 0, "map|array",
     "events as tagged maps (vLLM now) or positional arrays (before) (default map)"},
    {"--kv-events-hash", OPT_KIND_CHOICE, OFF(kv_events_hash_bytes), 0, 0, 0, "int|bytes",
     "block hashes as 64-bit ints (vLLM's default) or digest bytes (default int)"},
    {"--kv-groups", OPT_KIND_CHOICE, OFF(kv_groups_hybrid), 0, 0, 0, "single|hybrid",
     "KV-cache groups the events report: one full-attention group, or a hybrid model's "
     "full-attention and sliding-window groups (default single)"},
    {"--kv-events-buffer-steps", OPT_KIND_U32, OFF(kv_events_buffer_steps), sizeof(uint32_t), 1,
     1u << 20, "N", "KV event batches kept for replay (default 10000)"},
    {"--workers", OPT_KIND_U32, OFF(workers), sizeof(uint32_t), 1, 65535, "N",
     "fleet mode: N workers in this process, one listener each on --listen's port + i, each "
     "with its own cache, scheduler and (port + i) KV-event endpoints (default: one worker)"},
    {"--metrics-page", OPT_KIND_CHOICE, OFF(metrics_vllm), 0, 0, 0, "small|vllm",
     "/metrics: the families routers read, or every family of vLLM's page (tens of kB) "
     "(default small)"},
    {"--help", OPT_KIND_HELP, 0, 0, 0, 0, NULL, "print this help and exit"},
    {"--version", OPT_KIND_VERSION, 0, 0, 0, 0, NULL, "print the version and exit"},
};

void mw_options_defaults(struct mw_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    snprintf(opts->model, sizeof(opts->model), "mock");
    opts->role = MW_ROLE_REGULAR;
    opts->threads = 2;
    opts->block_tokens = 16;
    opts->kv_blocks = 4096;
    opts->output_tokens = 16;
    opts->max_num_seqs = 256;
    opts->max_model_len = 32768;
    opts->embedding_dim = 16;
    opts->max_body_bytes = 32u << 20;
    opts->kv_lease_ms = 30000;
    opts->data_parallel_size = 1;
    opts->kv_events_buffer_steps = 10000;
}

const char *mw_role_name(enum mw_role role)
{
    switch (role) {
    case MW_ROLE_REGULAR:
        return "regular";
    case MW_ROLE_PREFILL:
        return "prefill";
    case MW_ROLE_DECODE:
        return "decode";
    default:
        return "unset";
    }
}

static int parse_role(const char *text, enum mw_role *out)
{
    for (int r = MW_ROLE_REGULAR; r <= MW_ROLE_DECODE; r++) {
        if (strcmp(text, mw_role_name(r)) == 0) {
            *out = r;
            return 0;
        }
    }
    return -EINVAL;
}

/* Accepts plain decimal digits only: no sign, no spaces, no hex. */
static int parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (text[0] < '0' || text[0] > '9')
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_double(const char *text, double *out)
{
    if ((text[0] < '0' || text[0] > '9') && text[0] != '.')
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0 || v > 1e12)
        return -EINVAL;
    *out = v;
    return 0;
}

/*
 * Names end up verbatim in JSON strings and Prometheus labels: keeping them
 * to printable ASCII without quotes or backslashes means no escaping anywhere.
 */
static bool is_plain_name(const char *text, size_t size)
{
    size_t len = strlen(text);
    if (len == 0 || len >= size)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\')
            return false;
    }
    return true;
}

/* "127.0.0.1:8000", "localhost:0" or "[::1]:8000". */
static int parse_listen(const char *text, struct mw_options *opts)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon == text)
        return -EINVAL;
    const char *host = text;
    size_t host_len = (size_t)(colon - text);
    if (host[0] == '[') {
        if (host_len < 3 || host[host_len - 1] != ']')
            return -EINVAL;
        host++;
        host_len -= 2;
    } else if (memchr(host, ':', host_len) != NULL) {
        return -EINVAL; /* IPv6 needs brackets */
    }
    if (host_len >= sizeof(opts->host))
        return -EINVAL;
    uint64_t port = 0;
    if (parse_u64(colon + 1, 0, 65535, &port) != 0)
        return -EINVAL;
    memcpy(opts->host, host, host_len);
    opts->host[host_len] = '\0';
    opts->port = (uint16_t)port;
    return 0;
}

static int apply_value(const struct opt_def *def, const char *value, struct mw_options *opts,
                       char *err, size_t err_len)
{
    char *base = (char *)opts;
    uint64_t u = 0;
    switch (def->kind) {
    case OPT_KIND_LISTEN:
        if (parse_listen(value, opts) == 0)
            return 0;
        snprintf(err, err_len, "%s: expected HOST:PORT, got '%s'", def->name, value);
        return -EINVAL;
    case OPT_KIND_STRING:
        if (is_plain_name(value, def->size)) {
            snprintf(base + def->offset, def->size, "%s", value);
            return 0;
        }
        snprintf(err, err_len,
                 "%s: expected 1..%zu printable ASCII characters without spaces, quotes or "
                 "backslashes, got '%s'",
                 def->name, def->size - 1, value);
        return -EINVAL;
    case OPT_KIND_NAMES:
        if (opts->n_names >= MW_NAMES_MAX || !is_plain_name(value, MW_MODEL_MAX)) {
            snprintf(err, err_len, "%s: expected at most %d plain names, got '%s'", def->name,
                     MW_NAMES_MAX, value);
            return -EINVAL;
        }
        snprintf(opts->names[opts->n_names++], MW_MODEL_MAX, "%s", value);
        return 0;
    case OPT_KIND_LORA: {
        const char *eq = strchr(value, '=');
        char name[MW_MODEL_MAX];
        size_t nl = eq != NULL ? (size_t)(eq - value) : 0;
        if (eq != NULL && nl < sizeof(name)) {
            memcpy(name, value, nl);
            name[nl] = '\0';
        }
        if (opts->n_lora >= MW_NAMES_MAX || eq == NULL || nl >= sizeof(name) ||
            !is_plain_name(name, MW_MODEL_MAX) || !is_plain_name(eq + 1, MW_LORA_PATH_MAX)) {
            snprintf(err, err_len, "%s: expected at most %d NAME=PATH, got '%s'", def->name,
                     MW_NAMES_MAX, value);
            return -EINVAL;
        }
        snprintf(opts->lora_names[opts->n_lora], MW_MODEL_MAX, "%s", name);
        snprintf(opts->lora_paths[opts->n_lora++], MW_LORA_PATH_MAX, "%s", eq + 1);
        return 0;
    }
    case OPT_KIND_LORA_LIST: {
        for (const char *p = value; *p != '\0';) {
            size_t n = strcspn(p, ",");
            char name[MW_MODEL_MAX];
            bool ok = n > 0 && n < sizeof(name) && opts->n_lora < MW_NAMES_MAX;
            if (ok) {
                memcpy(name, p, n);
                name[n] = '\0';
                ok = is_plain_name(name, MW_MODEL_MAX);
            }
            if (!ok) {
                snprintf(err, err_len, "%s: expected at most %d comma-separated names, got '%s'",
                         def->name, MW_NAMES_MAX, value);
                return -EINVAL;
            }
            snprintf(opts->lora_names[opts->n_lora], MW_MODEL_MAX, "%s", name);
            snprintf(opts->lora_paths[opts->n_lora++], MW_LORA_PATH_MAX, "/adapters/%s", name);
            p += n;
            if (*p == ',')
                p++;
        }
        return 0;
    }
    case OPT_KIND_ROLE:
        if (parse_role(value, &opts->role) == 0)
            return 0;
        snprintf(err, err_len, "%s: expected one of regular|prefill|decode, got '%s'", def->name,
                 value);
        return -EINVAL;
    case OPT_KIND_KV_SHAPE:
        if (strcmp(value, "grouped") == 0 || strcmp(value, "flat") == 0) {
            opts->kv_ids_flat = strcmp(value, "flat") == 0;
            return 0;
        }
        snprintf(err, err_len, "%s: expected grouped|flat, got '%s'", def->name, value);
        return -EINVAL;
    case OPT_KIND_CHOICE: {
        const char *bar = strchr(def->arg, '|');
        size_t nl = (size_t)(bar - def->arg);
        bool no = strlen(value) == nl && strncmp(value, def->arg, nl) == 0;
        if (no || strcmp(value, bar + 1) == 0) {
            *(bool *)(void *)(base + def->offset) = !no;
            return 0;
        }
        snprintf(err, err_len, "%s: expected %s, got '%s'", def->name, def->arg, value);
        return -EINVAL;
    }
    case OPT_KIND_KV_MODE:
        if (strcmp(value, "pull") == 0 || strcmp(value, "push") == 0) {
            opts->kv_push = strcmp(value, "push") == 0;
            return 0;
        }
        snprintf(err, err_len, "%s: expected pull|push, got '%s'", def->name, value);
        return -EINVAL;
    case OPT_KIND_U32:
    case OPT_KIND_U64:
        if (parse_u64(value, def->min, def->max, &u) != 0) {
            snprintf(err, err_len, "%s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'",
                     def->name, def->min, def->max, value);
            return -EINVAL;
        }
        if (def->kind == OPT_KIND_U32) {
            uint32_t v32 = (uint32_t)u;
            memcpy(base + def->offset, &v32, sizeof(v32));
        } else {
            memcpy(base + def->offset, &u, sizeof(u));
        }
        return 0;
    case OPT_KIND_DOUBLE:
        if (parse_double(value, (double *)(void *)(base + def->offset)) == 0)
            return 0;
        snprintf(err, err_len, "%s: expected a non-negative number, got '%s'", def->name, value);
        return -EINVAL;
    default:
        snprintf(err, err_len, "%s: internal error", def->name);
        return -EINVAL;
    }
}

static const struct opt_def *find_def(const char *arg, size_t name_len)
{
    for (size_t i = 0; i < sizeof(opt_defs) / sizeof(opt_defs[0]); i++) {
        if (strlen(opt_defs[i].name) == name_len && strncmp(opt_defs[i].name, arg, name_len) == 0)
            return &opt_defs[i];
    }
    return NULL;
}

enum mw_options_result mw_options_parse(struct mw_options *opts, int argc, char *const argv[],
                                        char *err, size_t err_len)
{
    bool have_listen = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        const struct opt_def *def = find_def(arg, name_len);
        if (def == NULL) {
            snprintf(err, err_len, "unknown argument '%s' (see --help)", arg);
            return MW_OPTIONS_ERROR;
        }
        if (def->kind == OPT_KIND_HELP || def->kind == OPT_KIND_VERSION) {
            if (eq != NULL) {
                snprintf(err, err_len, "%s takes no value", def->name);
                return MW_OPTIONS_ERROR;
            }
            return def->kind == OPT_KIND_HELP ? MW_OPTIONS_HELP : MW_OPTIONS_VERSION;
        }
        if (def->kind == OPT_KIND_FLAG) {
            if (eq != NULL) {
                snprintf(err, err_len, "%s takes no value", def->name);
                return MW_OPTIONS_ERROR;
            }
            *(bool *)(void *)((char *)opts + def->offset) = true;
            continue;
        }
        if ((def->kind == OPT_KIND_NAMES || def->kind == OPT_KIND_LORA) && eq == NULL) {
            /* As vLLM: the values run up to the next flag. */
            int n = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (apply_value(def, argv[++i], opts, err, err_len) != 0)
                    return MW_OPTIONS_ERROR;
                n++;
            }
            if (n == 0) {
                snprintf(err, err_len, "%s: missing value", def->name);
                return MW_OPTIONS_ERROR;
            }
            continue;
        }
        const char *value = NULL;
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            i++;
            value = argv[i];
        } else {
            snprintf(err, err_len, "%s: missing value", def->name);
            return MW_OPTIONS_ERROR;
        }
        if (apply_value(def, value, opts, err, err_len) != 0)
            return MW_OPTIONS_ERROR;
        if (def->kind == OPT_KIND_LISTEN)
            have_listen = true;
    }
    if (!have_listen) {
        snprintf(err, err_len, "--listen HOST:PORT is required (see --help)");
        return MW_OPTIONS_ERROR;
    }
    if (opts->workers > 0 && (opts->port == 0 || opts->port + (uint64_t)opts->workers > 65536)) {
        snprintf(err, err_len,
                 "--workers %" PRIu32 ": needs --listen HOST:PORT, PORT > 0, PORT + N - 1 <= 65535",
                 opts->workers);
        return MW_OPTIONS_ERROR;
    }
    /* The first served name is the one responses carry (vLLM's model_name). */
    if (opts->n_names > 0)
        snprintf(opts->model, sizeof(opts->model), "%s", opts->names[0]);
    else
        snprintf(opts->names[opts->n_names++], MW_MODEL_MAX, "%s", opts->model);
    return MW_OPTIONS_RUN;
}

void mw_options_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s --listen HOST:PORT [flags]\n"
            "\n"
            "A stand-in for a vLLM OpenAI-compatible server with a simulated prefix\n"
            "cache, scheduler and P/D KV transfer, plus /mock/* test controls.\n"
            "Version %s. See docs/mockworker.md.\n"
            "\n"
            "flags:\n",
            prog, SY_VERSION);
    for (size_t i = 0; i < sizeof(opt_defs) / sizeof(opt_defs[0]); i++) {
        const struct opt_def *d = &opt_defs[i];
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s", d->name, d->arg != NULL ? " " : "",
                 d->arg != NULL ? d->arg : "");
        fprintf(out, "  %-30s %s\n", left, d->help);
    }
}
