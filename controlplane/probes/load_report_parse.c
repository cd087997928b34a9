/*
 * A forgiving reader of the Prometheus text format (see load_report_parse.h),
 * written as a cursor over a bounded buffer: every step checks the end, so
 * a page cut anywhere (a scrape stopped by its size cap) reads as far as it
 * goes. A line that does not parse is skipped, not fatal: one odd series
 * from a newer vLLM must not cost the whole report.
 */
#include "controlplane/probes/load_report_parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LRP_VALUE_MAX 64  /* longest number spelling we accept */
#define LRP_LABEL_MAX 256 /* longer model_name values never match */

enum lrp_metric {
    LRP_OTHER = 0,
    LRP_RUNNING,
    LRP_WAITING,
    LRP_KV,
    LRP_LORA,
    LRP_CACHE_CONFIG,
    LRP_SLEEP,
};

/* vllm:engine_sleep_state's sleep_state label. */
enum lrp_sleep_label {
    LRP_SLEEP_OTHER = 0,
    LRP_SLEEP_AWAKE,
    LRP_SLEEP_WEIGHTS_OFFLOADED, /* sleep level 1 */
    LRP_SLEEP_DISCARD_ALL,       /* sleep level 2 */
};

/* What lrp_labels captures of a vllm:lora_requests_info sample. */
struct lrp_lora_labels {
    char running[LRP_LORA_LIST_MAX];
    size_t running_len;
    uint64_t engine; /* hash of the engine label; 0 when absent */
};

/* The newest sample of one engine. */
struct lrp_lora_engine {
    bool used;
    uint64_t engine;
    double ts;
    struct shm_adapter_set running;
};

struct lrp_cursor {
    const char *p;
    const char *end;
};

static bool lrp_is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool lrp_is_name_char(char c)
{
    return lrp_is_name_start(c) || (c >= '0' && c <= '9');
}

static void lrp_skip_blanks(struct lrp_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* The name at the cursor: [start, *len). */
static const char *lrp_name(struct lrp_cursor *c, size_t *len)
{
    const char *start = c->p;
    if (c->p >= c->end || !lrp_is_name_start(*c->p)) {
        *len = 0;
        return start;
    }
    while (c->p < c->end && lrp_is_name_char(*c->p))
        c->p++;
    *len = (size_t)(c->p - start);
    return start;
}

static bool lrp_name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && memcmp(name, want, len) == 0;
}

static enum lrp_metric lrp_metric_of(const char *name, size_t len)
{
    if (lrp_name_is(name, len, "vllm:num_requests_running"))
        return LRP_RUNNING;
    if (lrp_name_is(name, len, "vllm:num_requests_waiting"))
        return LRP_WAITING;
    if (lrp_name_is(name, len, "vllm:kv_cache_usage_perc"))
        return LRP_KV;
    if (lrp_name_is(name, len, "vllm:lora_requests_info"))
        return LRP_LORA;
    if (lrp_name_is(name, len, "vllm:cache_config_info"))
        return LRP_CACHE_CONFIG;
    if (lrp_name_is(name, len, "vllm:engine_sleep_state"))
        return LRP_SLEEP;
    return LRP_OTHER;
}

/*
 * A quoted label value, unescaped into out (cap bytes, NUL-terminated).
 * Returns false on a malformed value; *fits is false when it was longer.
 */
static bool lrp_label_value(struct lrp_cursor *c, char *out, size_t cap, bool *fits)
{
    size_t n = 0;
    *fits = true;
    if (c->p >= c->end || *c->p != '"')
        return false;
    c->p++;
    while (c->p < c->end && *c->p != '"' && *c->p != '\n') {
        char ch = *c->p++;
        if (ch == '\\') {
            if (c->p >= c->end || *c->p == '\n')
                return false;
            ch = *c->p++;
            if (ch == 'n')
                ch = '\n';
        }
        if (n + 1 < cap)
            out[n++] = ch;
        else
            *fits = false;
    }
    out[n] = '\0';
    if (c->p >= c->end || *c->p != '"')
        return false;
    c->p++;
    return true;
}

/* A running_lora_adapters value cut by its buffer: drop the partial name. */
static size_t lrp_whole_names(const char *list, size_t len, bool fits)
{
    if (fits)
        return len;
    while (len > 0 && list[len - 1] != ',')
        len--;
    return len;
}

/*
 * {name="value",...}: sets *model_ok to whether model_name (if present)
 * equals model (no filter when model is NULL or ""); with lora non-NULL,
 * captures the running adapters and the engine. False when malformed.
 */
static bool lrp_labels(struct lrp_cursor *c, const char *model, bool *model_ok,
                       struct lrp_lora_labels *lora, uint32_t *block_size,
                       enum lrp_sleep_label *sleep)
{
    *model_ok = true;
    if (c->p >= c->end || *c->p != '{')
        return true; /* no labels */
    c->p++;
    for (;;) {
        lrp_skip_blanks(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return true;
        }
        size_t nlen;
        const char *name = lrp_name(c, &nlen);
        if (nlen == 0)
            return false;
        lrp_skip_blanks(c);
        if (c->p >= c->end || *c->p != '=')
            return false;
        c->p++;
        lrp_skip_blanks(c);
        char value[LRP_LABEL_MAX];
        bool fits;
        if (lora != NULL && lrp_name_is(name, nlen, "running_lora_adapters")) {
            if (!lrp_label_value(c, lora->running, sizeof(lora->running), &fits))
                return false;
            lora->running_len = lrp_whole_names(lora->running, strlen(lora->running), fits);
        } else if (!lrp_label_value(c, value, sizeof(value), &fits)) {
            return false;
        } else if (lora != NULL && lrp_name_is(name, nlen, "engine")) {
            /* Low bit set: an engine label never reads as none (0). */
            lora->engine = shm_adapter_hash(value, strlen(value)) | 1u;
        } else if (block_size != NULL && lrp_name_is(name, nlen, "block_size")) {
            char *endp = NULL;
            unsigned long bs = strtoul(value, &endp, 10);
            *block_size = endp != value && *endp == '\0' && bs <= UINT32_MAX ? (uint32_t)bs : 0;
        } else if (sleep != NULL && lrp_name_is(name, nlen, "sleep_state")) {
            *sleep = strcmp(value, "awake") == 0               ? LRP_SLEEP_AWAKE
                     : strcmp(value, "weights_offloaded") == 0 ? LRP_SLEEP_WEIGHTS_OFFLOADED
                     : strcmp(value, "discard_all") == 0       ? LRP_SLEEP_DISCARD_ALL
                                                               : LRP_SLEEP_OTHER;
        }
        if (model != NULL && model[0] != '\0' && lrp_name_is(name, nlen, "model_name"))
            *model_ok = fits && strcmp(value, model) == 0;
        lrp_skip_blanks(c);
        if (c->p < c->end && *c->p == ',')
            c->p++;
        else if (c->p >= c->end || *c->p != '}')
            return false;
    }
}

/* The sample value: a finite number >= 0 (Go/Python spellings, e.g. "3.0"). */
static bool lrp_value(struct lrp_cursor *c, double *out)
{
    lrp_skip_blanks(c);
    const char *start = c->p;
    while (c->p < c->end && *c->p != ' ' && *c->p != '\t' && *c->p != '\n' && *c->p != '\r')
        c->p++;
    size_t len = (size_t)(c->p - start);
    if (len == 0 || len >= LRP_VALUE_MAX)
        return false;
    char buf[LRP_VALUE_MAX];
    memcpy(buf, start, len);
    buf[len] = '\0';
    char *endp = NULL;
    double v = strtod(buf, &endp);
    if (endp != buf + len || !isfinite(v) || v < 0)
        return false;
    *out = v;
    return true;
}

static uint64_t lrp_add_sat(uint64_t a, double v)
{
    if (v >= 18446744073709549568.0) /* the largest double below 2^64 */
        return UINT64_MAX;
    uint64_t b = (uint64_t)llround(v);
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/*
 * One lora_requests_info sample of value ts: the engine's state when newer
 * than what it had (a tie unites both: neither is known to be older).
 */
static void lrp_lora_sample(struct lrp_lora_engine *engines, const struct lrp_lora_labels *l,
                            double ts)
{
    struct lrp_lora_engine *e = NULL;
    for (unsigned i = 0; i < LRP_LORA_ENGINES && e == NULL; i++)
        if (!engines[i].used || engines[i].engine == l->engine)
            e = &engines[i];
    if (e == NULL)
        e = &engines[l->engine % LRP_LORA_ENGINES]; /* full: share an entry */
    struct shm_adapter_set set = {{0}};
    shm_adapter_set_add_list(&set, l->running, l->running_len);
    if (!e->used || ts > e->ts) {
        e->running = set;
        e->ts = ts;
    } else if (ts == e->ts) {
        shm_adapter_set_union(&e->running, &set);
    }
    e->used = true;
    e->engine = l->engine;
}

/* One vllm:engine_sleep_state sample: an engine whose "awake" reads 0
 * sleeps, and the whole worker with it (vLLM sleeps every engine at once;
 * while they wake one by one, a request may still land on a sleeping one). */
static void lrp_sleep_sample(struct lrp_report *out, enum lrp_sleep_label label, double v)
{
    switch (label) {
    case LRP_SLEEP_AWAKE:
        out->has_sleep_state = true;
        if (v == 0)
            out->sleeping = true;
        break;
    case LRP_SLEEP_WEIGHTS_OFFLOADED:
        if (v != 0 && out->sleep_level < 1)
            out->sleep_level = 1;
        break;
    case LRP_SLEEP_DISCARD_ALL:
        if (v != 0)
            out->sleep_level = 2;
        break;
    case LRP_SLEEP_OTHER:
        break;
    }
}

int lrp_parse(const char *text, size_t len, const char *model, struct lrp_report *out)
{
    memset(out, 0, sizeof(*out));
    if (text == NULL)
        return -ENODATA;
    struct lrp_cursor c = {.p = text, .end = text + (len < LRP_INPUT_MAX ? len : LRP_INPUT_MAX)};
    double kv_sum = 0;
    uint32_t kv_n = 0;
    struct lrp_lora_labels lora;
    struct lrp_lora_engine engines[LRP_LORA_ENGINES] = {0};
    while (c.p < c.end) {
        const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
        struct lrp_cursor line = {.p = c.p, .end = nl != NULL ? nl : c.end};
        c.p = nl != NULL ? nl + 1 : c.end;
        lrp_skip_blanks(&line);
        if (line.p >= line.end || *line.p == '#')
            continue;
        size_t nlen;
        const char *name = lrp_name(&line, &nlen);
        enum lrp_metric m = lrp_metric_of(name, nlen);
        if (m == LRP_OTHER)
            continue; /* another family (or garbage): not ours to judge */
        bool model_ok;
        double v;
        lrp_skip_blanks(&line);
        if (m == LRP_LORA) {
            lora.running_len = 0;
            lora.engine = 0;
        }
        uint32_t block_size = 0;
        enum lrp_sleep_label sleep = LRP_SLEEP_OTHER;
        if (!lrp_labels(&line, model, &model_ok, m == LRP_LORA ? &lora : NULL,
                        m == LRP_CACHE_CONFIG ? &block_size : NULL,
                        m == LRP_SLEEP ? &sleep : NULL) ||
            !lrp_value(&line, &v)) {
            out->bad_lines++;
            continue;
        }
        if (!model_ok)
            continue;
        switch (m) {
        case LRP_RUNNING:
            out->running = lrp_add_sat(out->running, v);
            out->has_running = true;
            out->engines++;
            break;
        case LRP_WAITING:
            out->waiting = lrp_add_sat(out->waiting, v);
            out->has_waiting = true;
            break;
        case LRP_KV:
            kv_sum += v;
            kv_n++;
            break;
        case LRP_LORA:
            lrp_lora_sample(engines, &lora, v);
            out->has_lora = true;
            break;
        case LRP_CACHE_CONFIG:
            if (out->block_size == 0) /* the first engine's; they share the config */
                out->block_size = block_size;
            break;
        case LRP_SLEEP:
            lrp_sleep_sample(out, sleep, v);
            break;
        case LRP_OTHER:
            break;
        }
    }
    for (unsigned i = 0; i < LRP_LORA_ENGINES; i++)
        shm_adapter_set_union(&out->lora_running, &engines[i].running);
    if (kv_n > 0) {
        double mean = kv_sum / kv_n;
        out->kv_cache_usage = mean > 1.0 ? 1.0 : mean;
        out->has_kv = true;
    }
    if (!out->sleeping)
        out->sleep_level = 0;
    return out->has_running || out->has_waiting ? 0 : -ENODATA;
}
