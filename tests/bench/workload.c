/*
 * Workload files and plans of the routing-quality benchmark (see
 * workload.h). The YAML is flat: scalar keys at the top level and the same
 * keys again under `quick:` for make bench-quick. Unknown keys and bad
 * values are errors naming FILE:LINE:COL, as in the daemons' config.
 *
 * Text is made of 4-byte tokens (three letters and a space), so the mock
 * worker's token count (bytes / 4) is exact. A group's system prompt and a
 * request's question are drawn from generators seeded by (seed, group) and
 * (seed, group, index): the same file and seed always give the same bytes.
 * A multi_turn workload's shared head (shared_system_tokens) comes from a
 * generator of its own, seeded by the workload's seed alone; a private
 * head (private_head_share) from the conversation's.
 */
#include "tests/bench/workload.h"

#include "common/buf.h"
#include "common/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <yaml.h>

#define WL_MAX_FILE (1u << 20)
#define WL_MAX_REQS 1000000u

/* ---- random numbers --------------------------------------------------------- */

/*
 * The seed of the generator for (seed, a, b): splitmix64 (common/rng.h)
 * started from a mix of the three and advanced once. Plans, and the
 * reports computed from them, depend on this exact derivation.
 */
static uint64_t wl_seed3(uint64_t seed, uint64_t a, uint64_t b)
{
    struct rng r;
    rng_seed(&r, seed ^ (a * 0x100000001b3ull) ^ (b * 0xc2b2ae3d27d4eb4full));
    (void)rng_next(&r);
    return r.state;
}

/* A generator started at wl_seed3(seed, a, b). */
static struct rng wl_rng3(uint64_t seed, uint64_t a, uint64_t b)
{
    struct rng r;
    rng_seed(&r, wl_seed3(seed, a, b));
    return r;
}

/* ---- parsing -------------------------------------------------------------- */

const char *wl_kind_name(enum wl_kind kind)
{
    switch (kind) {
    case WL_KIND_SHARED_PREFIX:
        return "shared_prefix";
    case WL_KIND_MULTI_TURN:
        return "multi_turn";
    case WL_KIND_HOT_PREFIX:
        return "hot_prefix";
    case WL_KIND_NONE:
        break;
    }
    return "none";
}

void wl_spec_format(const struct wl_spec *s, char *buf, size_t len)
{
    int n = 0;
    switch (s->kind) {
    case WL_KIND_SHARED_PREFIX:
        n = snprintf(buf, len, "groups=%u prompts_per_group=%u ", s->groups, s->prompts_per_group);
        break;
    case WL_KIND_MULTI_TURN:
        if (s->sequential_turns)
            n = snprintf(buf, len,
                         "sequential_turns=true turns=%u think_ms=%g max_concurrency=%u "
                         "duration_s=%g warmup_s=%g ",
                         s->turns, s->think_ms, s->max_concurrency, s->duration_s, s->warmup_s);
        else
            n = snprintf(buf, len, "conversations=%u turns=%u ", s->conversations, s->turns);
        break;
    case WL_KIND_HOT_PREFIX:
        n = snprintf(buf, len, "groups=%u requests=%u hot_share=%g ", s->groups, s->requests,
                     s->hot_share);
        break;
    case WL_KIND_NONE:
        break;
    }
    if (n >= 0 && (size_t)n < len && s->shared_system_tokens > 0) {
        int m =
            snprintf(buf + n, len - (size_t)n, "shared_system_tokens=%u ", s->shared_system_tokens);
        n = m < 0 ? -1 : n + m;
    }
    if (n >= 0 && (size_t)n < len && s->private_head_share > 0) {
        int m = snprintf(buf + n, len - (size_t)n, "private_head_share=%g ", s->private_head_share);
        n = m < 0 ? -1 : n + m;
    }
    if (n >= 0 && (size_t)n < len && s->bypass_share > 0) {
        int m = snprintf(buf + n, len - (size_t)n, "bypass_share=%g ", s->bypass_share);
        n = m < 0 ? -1 : n + m;
    }
    if (n < 0 || (size_t)n >= len)
        n = 0;
    snprintf(buf + n, len - (size_t)n,
             "system_tokens=%u question_tokens=%u output_tokens=%u rate=%g seed=%llu",
             s->system_tokens, s->question_tokens, s->output_tokens, s->rate,
             (unsigned long long)s->seed);
}

static int wl_fail(char *err, size_t errlen, const char *name, const yaml_node_t *node,
                   const char *key, const char *what, const char *got)
{
    snprintf(err, errlen, "%s:%zu:%zu: %s: %s, got '%s'", name, node->start_mark.line + 1,
             node->start_mark.column + 1, key, what, got);
    return -EINVAL;
}

static int wl_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    char *end = NULL;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

static int wl_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

struct wl_ukey {
    const char *key;
    size_t off;
    unsigned lo, hi;
};

#define WL_U(k, lo, hi)                                                                            \
    {                                                                                              \
#k, offsetof(struct wl_spec, k), lo, hi                                                    \
    }
static const struct wl_ukey wl_ukeys[] = {
    WL_U(groups, 1, 100000),          WL_U(prompts_per_group, 1, 100000),
    WL_U(conversations, 1, 100000),   WL_U(turns, 1, 1000),
    WL_U(requests, 1, WL_MAX_REQS),   WL_U(system_tokens, 0, 1000000),
    WL_U(question_tokens, 1, 100000), WL_U(output_tokens, 1, 100000),
    WL_U(max_concurrency, 0, 100000), WL_U(shared_system_tokens, 0, 1000000),
};

struct wl_dkey {
    const char *key;
    size_t off;
    double lo, hi;
    const char *what;
};

#define WL_D(k, lo, hi, what)                                                                      \
    {                                                                                              \
#k, offsetof(struct wl_spec, k), lo, hi, what                                              \
    }
static const struct wl_dkey wl_dkeys[] = {
    WL_D(hot_share, 0.0, 1.0, "expected a number in 0..1"),
    WL_D(private_head_share, 0.0, 1.0, "expected a number in 0..1"),
    WL_D(bypass_share, 0.0, 1.0, "expected a number in 0..1"),
    WL_D(rate, 0.001, 1e6, "expected requests/s in 0.001..1e6"),
    WL_D(think_ms, 0.0, 3600000.0, "expected milliseconds in 0..3600000"),
    WL_D(duration_s, 0.1, 86400.0, "expected seconds in 0.1..86400"),
    WL_D(warmup_s, 0.0, 86400.0, "expected seconds in 0..86400"),
};

static int wl_apply(yaml_document_t *doc, yaml_node_t *map, const char *name, bool top,
                    yaml_node_t **quick, struct wl_spec *spec, char *err, size_t errlen)
{
    if (map->type != YAML_MAPPING_NODE)
        return wl_fail(err, errlen, name, map, top ? "(top)" : "quick", "expected a mapping", "?");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (k == NULL || v == NULL || k->type != YAML_SCALAR_NODE)
            return wl_fail(err, errlen, name, map, "(key)", "expected a scalar key", "?");
        const char *key = (const char *)k->data.scalar.value;
        if (top && strcmp(key, "quick") == 0) {
            *quick = v;
            continue;
        }
        if (v->type != YAML_SCALAR_NODE)
            return wl_fail(err, errlen, name, v, key, "expected a scalar", "(collection)");
        const char *val = (const char *)v->data.scalar.value;
        int rc = -ENOENT;
        if (strcmp(key, "name") == 0) {
            if (strlen(val) == 0 || strlen(val) >= sizeof(spec->name) ||
                strspn(val, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(val))
                return wl_fail(err, errlen, name, v, key, "expected [a-z0-9_-]{1,63}", val);
            snprintf(spec->name, sizeof(spec->name), "%s", val);
            rc = 0;
        } else if (strcmp(key, "kind") == 0) {
            rc = 0;
            if (strcmp(val, "shared_prefix") == 0)
                spec->kind = WL_KIND_SHARED_PREFIX;
            else if (strcmp(val, "multi_turn") == 0)
                spec->kind = WL_KIND_MULTI_TURN;
            else if (strcmp(val, "hot_prefix") == 0)
                spec->kind = WL_KIND_HOT_PREFIX;
            else
                return wl_fail(err, errlen, name, v, key,
                               "expected one of shared_prefix|multi_turn|hot_prefix", val);
        } else if (strcmp(key, "sequential_turns") == 0) {
            if (strcmp(val, "true") == 0)
                spec->sequential_turns = true;
            else if (strcmp(val, "false") == 0)
                spec->sequential_turns = false;
            else
                return wl_fail(err, errlen, name, v, key, "expected true or false", val);
            rc = 0;
        } else if (strcmp(key, "seed") == 0) {
            unsigned s = 0;
            if (wl_uint(val, 0, 4000000000u, &s) != 0)
                return wl_fail(err, errlen, name, v, key, "expected an integer seed", val);
            spec->seed = s;
            rc = 0;
        } else {
            for (size_t i = 0; i < sizeof(wl_ukeys) / sizeof(wl_ukeys[0]); i++) {
                const struct wl_ukey *u = &wl_ukeys[i];
                if (strcmp(key, u->key) != 0)
                    continue;
                char what[64];
                snprintf(what, sizeof(what), "expected an integer in %u..%u", u->lo, u->hi);
                if (wl_uint(val, u->lo, u->hi, (unsigned *)((char *)spec + u->off)) != 0)
                    return wl_fail(err, errlen, name, v, key, what, val);
                rc = 0;
            }
            for (size_t i = 0; i < sizeof(wl_dkeys) / sizeof(wl_dkeys[0]); i++) {
                const struct wl_dkey *d = &wl_dkeys[i];
                if (strcmp(key, d->key) != 0)
                    continue;
                if (wl_double(val, d->lo, d->hi, (double *)((char *)spec + d->off)) != 0)
                    return wl_fail(err, errlen, name, v, key, d->what, val);
                rc = 0;
            }
        }
        if (rc != 0)
            return wl_fail(err, errlen, name, k, key, "unknown key", key);
    }
    return 0;
}

static int wl_check(const struct wl_spec *s, const char *name, char *err, size_t errlen)
{
    const char *missing = NULL;
    if (s->kind == WL_KIND_NONE)
        missing = "kind";
    else if (s->name[0] == '\0')
        missing = "name";
    else if (s->rate <= 0)
        missing = "rate";
    else if (s->output_tokens == 0)
        missing = "output_tokens";
    else if (s->question_tokens == 0)
        missing = "question_tokens";
    else if (s->kind == WL_KIND_SHARED_PREFIX && (s->groups == 0 || s->prompts_per_group == 0))
        missing = "groups/prompts_per_group";
    else if (s->kind == WL_KIND_MULTI_TURN && !s->sequential_turns &&
             (s->conversations == 0 || s->turns == 0))
        missing = "conversations/turns";
    else if (s->sequential_turns && (s->turns == 0 || s->duration_s <= 0))
        missing = "turns/duration_s";
    else if (s->kind == WL_KIND_HOT_PREFIX && (s->groups < 2 || s->requests == 0))
        missing = "groups (>= 2)/requests";
    if (missing != NULL) {
        snprintf(err, errlen, "%s: missing or invalid %s", name, missing);
        return -EINVAL;
    }
    /* The keys of the sequential model mean nothing without it. */
    struct {
        bool broken;
        const char *key, *why;
    } rules[] = {
        {s->sequential_turns && s->kind != WL_KIND_MULTI_TURN, "sequential_turns",
         "only for kind multi_turn"},
        {s->sequential_turns && s->conversations != 0, "conversations",
         "not used with sequential_turns (conversations start during duration_s)"},
        {s->sequential_turns && s->warmup_s >= s->duration_s, "warmup_s",
         "must be below duration_s"},
        {!s->sequential_turns && s->think_ms != 0, "think_ms", "only with sequential_turns: true"},
        {!s->sequential_turns && s->max_concurrency != 0, "max_concurrency",
         "only with sequential_turns: true"},
        {!s->sequential_turns && s->duration_s != 0, "duration_s",
         "only with sequential_turns: true"},
        {!s->sequential_turns && s->warmup_s != 0, "warmup_s", "only with sequential_turns: true"},
        {s->shared_system_tokens != 0 && s->kind != WL_KIND_MULTI_TURN, "shared_system_tokens",
         "only for kind multi_turn"},
        {s->private_head_share != 0 && s->shared_system_tokens == 0, "private_head_share",
         "only with shared_system_tokens"},
    };
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        if (rules[i].broken) {
            snprintf(err, errlen, "%s: %s: %s", name, rules[i].key, rules[i].why);
            return -EINVAL;
        }
    }
    return 0;
}

int wl_parse_string(const char *yaml, size_t len, const char *name, bool quick,
                    struct wl_spec *spec, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = 0;

    memset(spec, 0, sizeof(*spec));
    spec->hot_share = 0.5;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%zu:%zu: %s", name, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1, parser.problem ? parser.problem : "bad YAML");
        rc = -EINVAL;
        goto out_parser;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL) {
        snprintf(err, errlen, "%s: empty workload", name);
        rc = -EINVAL;
        goto out_doc;
    }
    yaml_node_t *quick_node = NULL;
    rc = wl_apply(&doc, root, name, true, &quick_node, spec, err, errlen);
    if (rc == 0 && quick && quick_node != NULL)
        rc = wl_apply(&doc, quick_node, name, false, NULL, spec, err, errlen);
    if (rc == 0)
        rc = wl_check(spec, name, err, errlen);
out_doc:
    yaml_document_delete(&doc);
out_parser:
    yaml_parser_delete(&parser);
    return rc;
}

int wl_parse_file(const char *path, bool quick, struct wl_spec *spec, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    char *buf = malloc(WL_MAX_FILE);
    if (buf == NULL) {
        fclose(f);
        return -ENOMEM;
    }
    size_t n = fread(buf, 1, WL_MAX_FILE, f);
    fclose(f);
    int rc = -EFBIG;
    if (n < WL_MAX_FILE)
        rc = wl_parse_string(buf, n, path, quick, spec, err, errlen);
    else
        snprintf(err, errlen, "%s: larger than %u bytes", path, WL_MAX_FILE);
    free(buf);
    return rc;
}

/* ---- text ------------------------------------------------------------------ */

/* Every text and body is capped at 64 MiB including its NUL. */
#define WL_TEXT_MAX ((64u << 20) - 1)

/* Appends; a failure stays in b's sticky error, checked once at the end. */
static void wl_put(struct buf *b, const char *s, size_t n)
{
    (void)buf_append(b, s, n);
}

/* Empties b for the next part, keeping a failure. */
static void wl_restart(struct buf *b)
{
    if (buf_error(b) == 0)
        buf_reset(b);
}

static void wl_puts(struct buf *b, const char *s)
{
    wl_put(b, s, strlen(s));
}

/* tokens 4-byte words ("abc ") drawn from seed s. */
static void wl_words(struct buf *b, uint64_t s, unsigned tokens)
{
    struct rng g;
    rng_seed(&g, s);
    for (unsigned i = 0; i < tokens; i++) {
        uint64_t r = rng_next(&g);
        char w[4] = {(char)('a' + r % 26), (char)('a' + (r >> 8) % 26),
                     (char)('a' + (r >> 16) % 26), ' '};
        wl_put(b, w, 4);
    }
}

/* ---- plans ------------------------------------------------------------------ */

static int wl_completion(const struct wl_spec *sp, struct wl_request *r, unsigned group,
                         unsigned index)
{
    struct buf text = BUF_INIT(WL_TEXT_MAX), body = BUF_INIT(WL_TEXT_MAX);
    wl_words(&text, wl_seed3(sp->seed, group, 0xffffffffu), sp->system_tokens);
    wl_words(&text, wl_seed3(sp->seed, group, index), sp->question_tokens);
    char tail[160];
    snprintf(tail, sizeof(tail),
             "\",\"max_tokens\":%u,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             sp->output_tokens);
    wl_puts(&body, "{\"model\":\"mock\",\"prompt\":\"");
    wl_put(&body, text.data, text.len);
    wl_puts(&body, tail);
    if (buf_error(&text) != 0 || buf_error(&body) != 0) {
        buf_fini(&text);
        buf_fini(&body);
        return -ENOMEM;
    }
    r->group = group;
    r->text = text.data;
    r->text_len = text.len;
    r->body = body.data;
    r->body_len = body.len;
    r->output_tokens = sp->output_tokens;
    snprintf(r->session, sizeof(r->session), "g%u", group);
    return 0;
}

/* The generator of the shared head: the group index 0xffffffff is no
 * conversation's (a plan holds fewer than WL_MAX_REQS). */
#define WL_SHARED_GROUP 0xffffffffu
#define WL_SHARED_INDEX 0x5a4edu
/* Indexes of a conversation's private head and of its draw of whether it
 * has one: above every turn's (2 * turns + 1 < 2001) and its own
 * context's (0xffffffff). */
#define WL_PRIVATE_HEAD_INDEX 0xfffffffeu
#define WL_PRIVATE_DRAW_INDEX 0xfffffffdu

/* Whether conversation c's head is its own (private_head_share). */
static bool wl_private_head(const struct wl_spec *sp, unsigned c)
{
    if (sp->private_head_share <= 0)
        return false;
    struct rng s = wl_rng3(sp->seed, c, WL_PRIVATE_DRAW_INDEX);
    return rng_unit(&s) < sp->private_head_share;
}

/* Turn t of conversation c: system prompt (the workload's shared head, then
 * the conversation's own), then turns 0..t-1 replayed (user question,
 * assistant reply of output_tokens words), then question t. The mock
 * hashes role then content of each message, so turn t's text extends turn
 * t-1's, and every conversation's text starts with the same shared head. */
static int wl_chat_turn(const struct wl_spec *sp, struct wl_request *r, unsigned c, unsigned t)
{
    struct buf text = BUF_INIT(WL_TEXT_MAX), body = BUF_INIT(WL_TEXT_MAX),
               part = BUF_INIT(WL_TEXT_MAX);
    wl_puts(&body, "{\"model\":\"mock\",\"messages\":[");
    if (sp->shared_system_tokens > 0 || sp->system_tokens > 0) {
        wl_words(&part,
                 wl_private_head(sp, c) ? wl_seed3(sp->seed, c, WL_PRIVATE_HEAD_INDEX)
                                        : wl_seed3(sp->seed, WL_SHARED_GROUP, WL_SHARED_INDEX),
                 sp->shared_system_tokens);
        wl_words(&part, wl_seed3(sp->seed, c, 0xffffffffu), sp->system_tokens);
        wl_puts(&text, "system");
        wl_put(&text, part.data, part.len);
        wl_puts(&body, "{\"role\":\"system\",\"content\":\"");
        wl_put(&body, part.data, part.len);
        wl_puts(&body, "\"},");
    }
    for (unsigned i = 0; i <= t; i++) {
        wl_restart(&part);
        wl_words(&part, wl_seed3(sp->seed, c, 2 * i), sp->question_tokens);
        wl_puts(&text, "user");
        wl_put(&text, part.data, part.len);
        wl_puts(&body, "{\"role\":\"user\",\"content\":\"");
        wl_put(&body, part.data, part.len);
        wl_puts(&body, "\"}");
        if (i == t)
            break;
        wl_restart(&part);
        wl_words(&part, wl_seed3(sp->seed, c, 2 * i + 1), sp->output_tokens);
        wl_puts(&text, "assistant");
        wl_put(&text, part.data, part.len);
        wl_puts(&body, ",{\"role\":\"assistant\",\"content\":\"");
        wl_put(&body, part.data, part.len);
        wl_puts(&body, "\"},");
    }
    char tail[160];
    snprintf(tail, sizeof(tail),
             "],\"max_tokens\":%u,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             sp->output_tokens);
    wl_puts(&body, tail);
    int part_err = buf_error(&part);
    buf_fini(&part);
    if (buf_error(&text) != 0 || buf_error(&body) != 0 || part_err != 0) {
        buf_fini(&text);
        buf_fini(&body);
        return -ENOMEM;
    }
    r->group = c;
    r->turn = t;
    r->chat = true;
    r->text = text.data;
    r->text_len = text.len;
    r->body = body.data;
    r->body_len = body.len;
    r->output_tokens = sp->output_tokens;
    snprintf(r->session, sizeof(r->session), "c%u", c);
    return 0;
}

static size_t wl_count(const struct wl_spec *sp)
{
    switch (sp->kind) {
    case WL_KIND_SHARED_PREFIX:
        return (size_t)sp->groups * sp->prompts_per_group;
    case WL_KIND_MULTI_TURN:
        return (size_t)sp->conversations * sp->turns;
    case WL_KIND_HOT_PREFIX:
        return sp->requests;
    case WL_KIND_NONE:
        break;
    }
    return 0;
}

/* Sequential model: conversation starts of a Poisson process at
 * rate / turns per second during [0, duration_s), first one at 0; their
 * count in *n (capped so the plan stays under WL_MAX_REQS). */
static double *wl_conversation_starts(const struct wl_spec *sp, struct rng *rng, size_t *n)
{
    size_t cap = 64, max = WL_MAX_REQS / sp->turns;
    double *at = malloc(cap * sizeof(*at)), t = 0;
    *n = 0;
    while (at != NULL && t < sp->duration_s && *n < max) {
        if (*n == cap) {
            double *p = realloc(at, 2 * cap * sizeof(*at));
            if (p == NULL) {
                free(at);
                return NULL;
            }
            at = p;
            cap *= 2;
        }
        at[(*n)++] = t;
        t += -log(rng_unit(rng)) * (double)sp->turns / sp->rate;
    }
    return at;
}

/* bypass_share: which requests skip the router (a draw per request from
 * its own generator, so the rest of the plan is what it is without the
 * key), and the worker each group's bypassing client uses (a hash of the
 * seed and the group: one client with its own routing, not a balancer). */
static void wl_mark_bypass(const struct wl_spec *sp, struct wl_plan *plan)
{
    if (sp->bypass_share <= 0)
        return;
    struct rng draw = wl_rng3(sp->seed, 0xb1a5, 0);
    for (size_t i = 0; i < plan->n; i++) {
        struct wl_request *r = &plan->req[i];
        r->bypass = rng_unit(&draw) < sp->bypass_share;
        r->bypass_key = (uint32_t)(wl_seed3(sp->seed, 0xb1a5, r->group) >> 32);
    }
}

static int wl_plan_sequential(const struct wl_spec *sp, struct wl_plan *plan, struct rng *rng)
{
    size_t conversations = 0;
    double *start = wl_conversation_starts(sp, rng, &conversations);
    if (start == NULL)
        return -ENOMEM;
    int rc = 0;
    plan->req = calloc(conversations * sp->turns, sizeof(*plan->req));
    if (plan->req == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    plan->sequential = true;
    plan->turns = sp->turns;
    plan->max_concurrency = sp->max_concurrency;
    plan->stop_s = sp->duration_s;
    plan->warmup_s = sp->warmup_s;
    for (size_t c = 0; c < conversations && rc == 0; c++) {
        /* Think times from their own generator: the same (seed, c, t)
         * always waits as long, whatever the rate. */
        struct rng think = wl_rng3(sp->seed, 0x7417c, c);
        for (unsigned t = 0; t < sp->turns && rc == 0; t++, plan->n++) {
            struct wl_request *r = &plan->req[plan->n];
            rc = wl_chat_turn(sp, r, (unsigned)c, t);
            r->at_s = start[c];
            double u = rng_unit(&think);
            r->think_s = t > 0 ? -log(u) * sp->think_ms / 1000.0 : 0;
        }
    }
    if (rc == 0)
        wl_mark_bypass(sp, plan);
out:
    free(start);
    return rc;
}

int wl_plan_build(const struct wl_spec *sp, struct wl_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    struct rng rng = wl_rng3(sp->seed, 0x5eed, 0);
    if (sp->rate <= 0)
        return -EINVAL;
    if (sp->sequential_turns) {
        if (sp->kind != WL_KIND_MULTI_TURN || sp->turns == 0 || sp->duration_s <= 0)
            return -EINVAL;
        int rc = wl_plan_sequential(sp, plan, &rng);
        if (rc != 0)
            wl_plan_fini(plan);
        return rc;
    }
    size_t n = wl_count(sp);
    if (n == 0 || n > WL_MAX_REQS)
        return -EINVAL;
    plan->req = calloc(n, sizeof(*plan->req));
    if (plan->req == NULL)
        return -ENOMEM;
    int rc = 0;

    if (sp->kind == WL_KIND_SHARED_PREFIX) {
        /* Every (group, prompt) once, shuffled (Fisher-Yates), as SGLang's
         * generated-shared-prefix dataset is. */
        unsigned *order = malloc(n * sizeof(*order));
        if (order == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            order[i] = (unsigned)i;
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = rng_next(&rng) % (i + 1);
            unsigned tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        for (size_t i = 0; i < n && rc == 0; i++, plan->n++)
            rc = wl_completion(sp, &plan->req[i], order[i] / sp->prompts_per_group,
                               order[i] % sp->prompts_per_group);
        free(order);
    } else if (sp->kind == WL_KIND_HOT_PREFIX) {
        for (size_t i = 0; i < n && rc == 0; i++, plan->n++) {
            unsigned g = 0;
            if (rng_unit(&rng) > sp->hot_share)
                g = 1 + (unsigned)(rng_next(&rng) % (sp->groups - 1));
            rc = wl_completion(sp, &plan->req[i], g, (unsigned)i);
        }
    } else {
        /* Turn-major: every conversation's turn t before any turn t+1, so
         * a conversation's turns are conversations/rate seconds apart. */
        size_t i = 0;
        for (unsigned t = 0; t < sp->turns && rc == 0; t++)
            for (unsigned c = 0; c < sp->conversations && rc == 0; c++, i++, plan->n++)
                rc = wl_chat_turn(sp, &plan->req[i], c, t);
    }
    if (rc != 0)
        goto out;

    wl_mark_bypass(sp, plan);

    /* Open loop: exponential inter-arrival times, first arrival at 0. */
    double at = 0;
    for (size_t i = 0; i < plan->n; i++) {
        plan->req[i].at_s = at;
        at += -log(rng_unit(&rng)) / sp->rate;
    }
out:
    if (rc != 0)
        wl_plan_fini(plan);
    return rc;
}

void wl_plan_fini(struct wl_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->req[i].body);
        free(plan->req[i].text);
    }
    free(plan->req);
    memset(plan, 0, sizeof(*plan));
}

/* ---- hit-rate ceiling --------------------------------------------------------- */

/* One LRU cache: open addressing on the block hash, recency as a tick. */
struct wl_lru {
    uint64_t *key; /* 0 = empty (a real hash of 0 is remapped to 1) */
    uint64_t *tick;
    size_t cap, used, slots;
};

static size_t wl_lru_find(const struct wl_lru *c, uint64_t h)
{
    size_t i = (size_t)(h % c->slots);
    while (c->key[i] != 0 && c->key[i] != h)
        i = (i + 1) % c->slots;
    return i;
}

/* Removes slot i, re-inserting the probe chain behind it. */
static void wl_lru_erase(struct wl_lru *c, size_t i)
{
    c->key[i] = 0;
    c->used--;
    for (size_t j = (i + 1) % c->slots; c->key[j] != 0; j = (j + 1) % c->slots) {
        uint64_t k = c->key[j], t = c->tick[j];
        c->key[j] = 0;
        size_t to = wl_lru_find(c, k);
        c->key[to] = k;
        c->tick[to] = t;
    }
}

static void wl_lru_touch(struct wl_lru *c, uint64_t h, uint64_t now)
{
    size_t i = wl_lru_find(c, h);
    if (c->key[i] == h) {
        c->tick[i] = now;
        return;
    }
    if (c->used == c->cap) {
        size_t old = 0;
        uint64_t best = UINT64_MAX;
        for (size_t j = 0; j < c->slots; j++)
            if (c->key[j] != 0 && c->tick[j] < best) {
                best = c->tick[j];
                old = j;
            }
        wl_lru_erase(c, old);
        i = wl_lru_find(c, h);
    }
    c->key[i] = h;
    c->tick[i] = now;
    c->used++;
}

static double wl_ceiling(const struct wl_plan *plan, const size_t *order, size_t n,
                         unsigned block_tokens, size_t capacity_blocks, bool routed_only);

double wl_hit_ceiling(const struct wl_plan *plan, const size_t *order, size_t n,
                      unsigned block_tokens, size_t capacity_blocks)
{
    return wl_ceiling(plan, order, n, block_tokens, capacity_blocks, false);
}

double wl_hit_ceiling_routed(const struct wl_plan *plan, const size_t *order, size_t n,
                             unsigned block_tokens, size_t capacity_blocks)
{
    return wl_ceiling(plan, order, n, block_tokens, capacity_blocks, true);
}

static double wl_ceiling(const struct wl_plan *plan, const size_t *order, size_t n,
                         unsigned block_tokens, size_t capacity_blocks, bool routed_only)
{
    if (order == NULL)
        n = plan->n;
    if (n == 0 || block_tokens == 0 || capacity_blocks == 0)
        return 0;
    struct wl_lru c = {.cap = capacity_blocks, .slots = capacity_blocks * 2 + 1};
    c.key = calloc(c.slots, sizeof(*c.key));
    c.tick = calloc(c.slots, sizeof(*c.tick));
    size_t max_blocks = 0;
    for (size_t i = 0; i < plan->n; i++) {
        size_t b = plan->req[i].text_len / (block_tokens * 4u);
        if (b > max_blocks)
            max_blocks = b;
    }
    uint64_t *h = malloc((max_blocks + 1) * sizeof(*h));
    double hits = 0, queries = 0;
    uint64_t now = 0;
    if (c.key == NULL || c.tick == NULL || h == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct wl_request *r = &plan->req[order != NULL ? order[i] : i];
        size_t bytes = block_tokens * 4u, nb = r->text_len / bytes;
        size_t tokens = (r->text_len + 3) / 4, hit = 0;
        uint64_t prev = 0;
        for (size_t b = 0; b < nb; b++) {
            prev = XXH3_64bits_withSeed(r->text + b * bytes, bytes, prev);
            h[b] = prev != 0 ? prev : 1;
        }
        while (hit < nb && c.key[wl_lru_find(&c, h[hit])] == h[hit])
            hit++;
        size_t hit_tokens = hit * block_tokens;
        if (!routed_only || !r->bypass) {
            hits += (double)(hit_tokens < tokens ? hit_tokens : tokens);
            queries += (double)tokens;
        }
        for (size_t b = nb; b-- > 0;)
            wl_lru_touch(&c, h[b], ++now);
    }
out:
    free(h);
    free(c.key);
    free(c.tick);
    return queries > 0 ? hits / queries : 0;
}
