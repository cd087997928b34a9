/*
 * The config walker: reads one YAML document against the schema tables
 * (config_schema.c) into a struct cfg.
 *
 * libyaml's event API gives a flat stream of events with 0-based marks and no
 * types. This is a small recursive descent over that stream: a mapping is
 * read row by row of its table, each value by its row's kind, with the
 * syntax of scalars left to config_values.c. The walker keeps the key path
 * of the value it stands on ("workers[0].role") and stops at the first
 * problem with one message
 *
 *   FILE:LINE:COL: key.path: expected ..., got '...'
 *
 * with 1-based line and column, pointing at the offending value (at the key
 * for unknown and duplicate keys). It never skips a subtree it does not
 * know, so its recursion depth is the schema's. After a mapping (or a
 * workers entry) it runs its row's finish check, which reports through the
 * same cfg_yaml_fail_at.
 *
 * A struct cfg_parser lives on one loader's stack and is used by one thread;
 * nothing here writes globals.
 */
#include "common/config_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_MSG_MAX 1024

int cfg_yaml_init(struct cfg_parser *p, struct cfg *cfg, const char *name, const char *input,
                  size_t len, char *err, size_t err_len)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->input = (const unsigned char *)input;
    p->input_len = len;
    p->cfg = cfg;
    p->err = err;
    p->err_len = err_len;
    if (!yaml_parser_initialize(&p->yaml))
        return cfg_yaml_fail_oom(p);
    yaml_parser_set_input_string(&p->yaml, p->input, len);
    return 0;
}

void cfg_yaml_fini(struct cfg_parser *p)
{
    if (p->have_event)
        yaml_event_delete(&p->event);
    p->have_event = false;
    yaml_parser_delete(&p->yaml);
    free(p->pos);
    p->pos = NULL;
}

/* ---- messages and the key path --------------------------------------------- */

void cfg_yaml_show_text(const char *text, size_t len, char *buf, size_t buf_len)
{
    size_t n = len;
    size_t o = 0;
    bool cut = false;

    if (n > CFG_SHOW_MAX) {
        n = CFG_SHOW_MAX;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
            n--;
        cut = true;
    }
    for (size_t i = 0; i < n && o + 1 < buf_len; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    for (int i = 0; cut && i < 3 && o + 1 < buf_len; i++)
        buf[o++] = '.';
    buf[o] = '\0';
}

int cfg_yaml_fail_at(struct cfg_parser *p, yaml_mark_t mark, const char *fmt, ...)
{
    char msg[CFG_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->path_len > 0)
        cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: %s: %s", p->name, mark.line + 1,
                    mark.column + 1, p->path, msg);
    else
        cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: %s", p->name, mark.line + 1, mark.column + 1,
                    msg);
    return -EINVAL;
}

int cfg_yaml_fail_oom(struct cfg_parser *p)
{
    cfg_set_err(p->err, p->err_len, "%s: out of memory", p->name);
    return -ENOMEM;
}

/* How the current event looks in a message: 'text', a mapping, ... */
static void describe_event(const yaml_event_t *ev, char *buf, size_t len)
{
    char shown[CFG_SHOW_BUF];

    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        cfg_yaml_show_text((const char *)ev->data.scalar.value, ev->data.scalar.length, shown,
                           sizeof(shown));
        snprintf(buf, len, "'%s'", shown);
        break;
    case YAML_MAPPING_START_EVENT:
        snprintf(buf, len, "a mapping");
        break;
    case YAML_SEQUENCE_START_EVENT:
        snprintf(buf, len, "a sequence");
        break;
    case YAML_ALIAS_EVENT: {
        const char *anchor = (const char *)ev->data.alias.anchor;
        cfg_yaml_show_text(anchor, strlen(anchor), shown, sizeof(shown));
        snprintf(buf, len, "an alias (*%s)", shown);
        break;
    }
    default:
        snprintf(buf, len, "nothing");
        break;
    }
}

static int fail_expected(struct cfg_parser *p, const char *expected)
{
    char got[CFG_SHOW_BUF + 16];

    describe_event(&p->event, got, sizeof(got));
    return cfg_yaml_fail_at(p, p->event.start_mark, "expected %s, got %s", expected, got);
}

/* libyaml's reader reports a byte offset only: turn it into a mark. */
static yaml_mark_t mark_at_offset(const unsigned char *input, size_t len, size_t offset)
{
    yaml_mark_t mark = {.index = offset, .line = 0, .column = 0};

    for (size_t i = 0; i < offset && i < len; i++) {
        if (input[i] == '\n') {
            mark.line++;
            mark.column = 0;
        } else if ((input[i] & 0xc0) != 0x80) {
            mark.column++;
        }
    }
    return mark;
}

static int fail_syntax(struct cfg_parser *p)
{
    yaml_mark_t mark = p->yaml.problem_mark;
    const char *problem = p->yaml.problem != NULL ? p->yaml.problem : "unknown problem";

    if (p->yaml.error == YAML_MEMORY_ERROR)
        return cfg_yaml_fail_oom(p);
    if (p->yaml.error == YAML_READER_ERROR)
        mark = mark_at_offset(p->input, p->input_len, p->yaml.problem_offset);
    cfg_set_err(p->err, p->err_len, "%s:%zu:%zu: YAML syntax error: %s", p->name, mark.line + 1,
                mark.column + 1, problem);
    return -EINVAL;
}

static int next_event(struct cfg_parser *p)
{
    if (p->have_event) {
        yaml_event_delete(&p->event);
        p->have_event = false;
    }
    if (!yaml_parser_parse(&p->yaml, &p->event))
        return fail_syntax(p);
    p->have_event = true;
    return 0;
}

/* Cut to fit: the key path is only shown. */
size_t cfg_yaml_path_push(struct cfg_parser *p, const char *fmt, ...)
{
    size_t saved = p->path_len;
    size_t room = sizeof(p->path) - p->path_len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(p->path + p->path_len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        p->path[p->path_len] = '\0';
    else if ((size_t)n >= room)
        p->path_len = sizeof(p->path) - 1;
    else
        p->path_len += (size_t)n;
    return saved;
}

size_t cfg_yaml_path_push_key(struct cfg_parser *p, const char *key)
{
    return cfg_yaml_path_push(p, "%s%s", p->path_len > 0 ? "." : "", key);
}

static void path_pop(struct cfg_parser *p, size_t len)
{
    p->path_len = len;
    p->path[len] = '\0';
}

/* A plain ~, null or nothing: an absent value. */
static bool event_is_null(const yaml_event_t *ev)
{
    const char *v;

    if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    v = (const char *)ev->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* The current event's text; fails naming expected unless it is a scalar without NUL bytes. */
static int want_scalar(struct cfg_parser *p, const char *expected, const char **text)
{
    const yaml_event_t *ev = &p->event;

    if (ev->type != YAML_SCALAR_EVENT ||
        strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
        return fail_expected(p, expected);
    *text = (const char *)ev->data.scalar.value;
    return 0;
}

/* ---- values by kind ---------------------------------------------------------- */

static int parse_value(struct cfg_parser *p, const struct cfg_key *k, void *base);

/*
 * Reads the mapping that starts at the current event into base by table;
 * leaves the walker on its end. A null value counts as an empty mapping
 * when null_ok. what names the mapping in messages (NULL: "a mapping").
 */
static int parse_mapping(struct cfg_parser *p, const struct cfg_key *table, void *base,
                         struct cfg_map_seen *seen, bool null_ok, const char *what)
{
    int rc;

    memset(seen, 0, sizeof(*seen));
    if (null_ok && event_is_null(&p->event))
        return 0;
    if (p->event.type != YAML_MAPPING_START_EVENT)
        return fail_expected(p, what != NULL ? what : "a mapping");
    for (;;) {
        const char *key;
        yaml_mark_t key_mark;
        size_t saved;
        int i;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (p->event.type != YAML_SCALAR_EVENT)
            return fail_expected(p, "a key");
        key = (const char *)p->event.data.scalar.value;
        key_mark = p->event.start_mark;
        i = strlen(key) == p->event.data.scalar.length ? cfg_key_index(table, key) : -1;
        if (i < 0) {
            char shown[CFG_SHOW_BUF];
            char keys[CFG_MSG_MAX / 2];
            cfg_yaml_show_text(key, p->event.data.scalar.length, shown, sizeof(shown));
            cfg_key_list(table, keys, sizeof(keys));
            cfg_yaml_path_push_key(p, shown);
            return cfg_yaml_fail_at(p, key_mark, "unknown key (expected one of %s)", keys);
        }
        saved = cfg_yaml_path_push_key(p, table[i].name);
        if (seen->mask & (UINT32_C(1) << i))
            return cfg_yaml_fail_at(p, key_mark, "duplicate key (first at line %zu)",
                                    seen->key_mark[i].line + 1);
        rc = next_event(p);
        if (rc != 0)
            return rc;
        seen->mask |= UINT32_C(1) << i;
        seen->key_mark[i] = key_mark;
        seen->value_mark[i] = p->event.start_mark;
        rc = parse_value(p, &table[i], base);
        if (rc != 0)
            return rc;
        path_pop(p, saved);
    }
}

static int parse_section(struct cfg_parser *p, const struct cfg_key *k, void *field)
{
    struct cfg_map_seen seen;
    int rc = parse_mapping(p, k->child, field, &seen, true, k->expect);

    if (rc == 0 && k->finish != NULL)
        rc = k->finish(p, k->child, field, &seen);
    return rc;
}

static int parse_string(struct cfg_parser *p, const struct cfg_key *k, char *dst)
{
    const char *text = "";
    size_t n;
    int rc;

    if (!event_is_null(&p->event)) {
        rc = want_scalar(p, k->expect, &text);
        if (rc != 0)
            return rc;
    }
    n = strlen(text);
    if (n >= k->size || (k->valid != NULL && !k->valid(text)))
        return fail_expected(p, k->expect);
    memcpy(dst, text, n + 1);
    return 0;
}

static int parse_u32(struct cfg_parser *p, const struct cfg_key *k, uint32_t *dst)
{
    char expected[64];
    const char *text = NULL;
    uint64_t v;
    int rc;

    snprintf(expected, sizeof(expected), "an integer in %" PRIu64 "..%" PRIu64, k->min, k->max);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_parse_uint(text, &v) != 0 || v < k->min || v > k->max)
        return fail_expected(p, expected);
    *dst = (uint32_t)v;
    return 0;
}

static int parse_unit_value(struct cfg_parser *p, const struct cfg_key *k, uint64_t *dst)
{
    bool is_duration = k->kind == CFG_KIND_DURATION;
    char lo[32];
    char hi[32];
    char expected[128];
    const char *text = NULL;
    uint64_t v;
    int rc;

    if (is_duration) {
        cfg_format_duration(k->min, lo, sizeof(lo));
        cfg_format_duration(k->max, hi, sizeof(hi));
    } else {
        cfg_format_size(k->min, lo, sizeof(lo));
        cfg_format_size(k->max, hi, sizeof(hi));
    }
    snprintf(expected, sizeof(expected), "%s in %s..%s",
             is_duration ? "a duration (ms|s|m|h)" : "a size (bytes, KiB|MiB|GiB or KB|MB|GB)", lo,
             hi);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    rc = is_duration ? cfg_parse_duration_ms(text, &v) : cfg_parse_size(text, &v);
    if (rc != 0 || v < k->min || v > k->max)
        return fail_expected(p, expected);
    *dst = v;
    return 0;
}

static int parse_bool(struct cfg_parser *p, bool *dst)
{
    const char *expected = "true|false";
    const char *text = NULL;
    int rc = want_scalar(p, expected, &text);

    if (rc != 0)
        return rc;
    if (cfg_parse_bool(text, dst) != 0)
        return fail_expected(p, expected);
    return 0;
}

static int parse_double(struct cfg_parser *p, const struct cfg_key *k, double *dst)
{
    char expected[64];
    const char *text = NULL;
    double d;
    int rc;

    if (isinf(k->dmax))
        snprintf(expected, sizeof(expected), "a number >= %g", k->dmin);
    else
        snprintf(expected, sizeof(expected), "a number in %g..%g", k->dmin, k->dmax);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_parse_number(text, &d) != 0 || d < k->dmin || d > k->dmax)
        return fail_expected(p, expected);
    *dst = d;
    return 0;
}

static int parse_addr(struct cfg_parser *p, const struct cfg_key *k, char *dst)
{
    const char *expected = "HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)";
    char host[CFG_ADDR_MAX];
    const char *text = NULL;
    uint16_t port;
    size_t n;
    int rc = want_scalar(p, expected, &text);

    if (rc != 0)
        return rc;
    n = strlen(text);
    if (n >= k->size || cfg_parse_host_port(text, host, sizeof(host), &port) != 0)
        return fail_expected(p, expected);
    memcpy(dst, text, n + 1);
    return 0;
}

static int parse_enum(struct cfg_parser *p, const struct cfg_key *k, void *field)
{
    const struct cfg_enum_name *names = k->names;
    char list[128];
    char expected[160];
    const char *text = NULL;
    int value = 0;
    int rc;

    cfg_enum_list(names, list, sizeof(list));
    snprintf(expected, sizeof(expected), "one of %s", list);
    rc = want_scalar(p, expected, &text);
    if (rc != 0)
        return rc;
    if (cfg_enum_parse(names, text, &value) != 0)
        return fail_expected(p, expected);
    cfg_key_set_enum(k, field, value);
    return 0;
}

static int parse_status_list(struct cfg_parser *p, struct cfg_retry *retry)
{
    size_t n = 0;
    int rc;

    if (event_is_null(&p->event)) {
        retry->n_on_status = 0;
        return 0;
    }
    if (p->event.type != YAML_SEQUENCE_START_EVENT)
        return fail_expected(p, "a list of HTTP status codes like [502, 503]");
    for (;;) {
        const char *text = NULL;
        uint64_t v;
        size_t saved;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_SEQUENCE_END_EVENT)
            break;
        saved = cfg_yaml_path_push(p, "[%zu]", n);
        if (n == CFG_ON_STATUS_MAX)
            return fail_expected(p, "at most 32 status codes");
        rc = want_scalar(p, "an HTTP status code in 100..599", &text);
        if (rc != 0)
            return rc;
        if (cfg_parse_uint(text, &v) != 0 || v < 100 || v > 599)
            return fail_expected(p, "an HTTP status code in 100..599");
        for (size_t j = 0; j < n; j++) {
            if (retry->on_status[j] == (int)v)
                return fail_expected(p, "a status code not listed before");
        }
        retry->on_status[n++] = (int)v;
        path_pop(p, saved);
    }
    retry->n_on_status = n;
    return 0;
}

static int parse_str_list(struct cfg_parser *p, const struct cfg_key *k, struct cfg_str_list *list)
{
    char expected[160];
    size_t n = 0;
    int rc;

    list->n = 0;
    if (event_is_null(&p->event))
        return 0;
    snprintf(expected, sizeof(expected), "a list of strings, each %s", k->expect);
    if (p->event.type != YAML_SEQUENCE_START_EVENT)
        return fail_expected(p, expected);
    for (;;) {
        const char *text = NULL;
        size_t saved;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_SEQUENCE_END_EVENT)
            break;
        saved = cfg_yaml_path_push(p, "[%zu]", n);
        if (n == CFG_LIST_MAX)
            return fail_expected(p, "at most 16 entries");
        rc = want_scalar(p, k->expect, &text);
        if (rc != 0)
            return rc;
        if (strlen(text) >= CFG_LIST_ITEM_MAX || (k->valid != NULL && !k->valid(text)))
            return fail_expected(p, k->expect);
        for (size_t j = 0; j < n; j++) {
            if (strcmp(list->item[j], text) == 0)
                return fail_expected(p, "an entry not listed before");
        }
        snprintf(list->item[n++], CFG_LIST_ITEM_MAX, "%s", text);
        path_pop(p, saved);
    }
    list->n = n;
    return 0;
}

static int grow_workers(struct cfg_parser *p)
{
    struct cfg *cfg = p->cfg;
    struct cfg_worker *workers;
    struct cfg_worker_pos *pos;
    size_t cap;

    if (cfg->n_workers < p->workers_cap)
        return 0;
    cap = p->workers_cap == 0 ? 16 : p->workers_cap * 2;
    if (cap > CFG_WORKERS_LIMIT)
        cap = CFG_WORKERS_LIMIT;
    workers = realloc(cfg->workers, cap * sizeof(*workers));
    if (workers == NULL)
        return cfg_yaml_fail_oom(p);
    cfg->workers = workers;
    pos = realloc(p->pos, cap * sizeof(*pos));
    if (pos == NULL)
        return cfg_yaml_fail_oom(p);
    p->pos = pos;
    p->workers_cap = cap;
    return 0;
}

/* One entry of the list, read by the row's child table and checked by its finish. */
static int parse_worker(struct cfg_parser *p, const struct cfg_key *k, size_t i)
{
    struct cfg_worker *w = &p->cfg->workers[i];
    struct cfg_worker_pos *pos = &p->pos[i];
    struct cfg_map_seen seen;
    int rc;

    memset(w, 0, sizeof(*w));
    memset(pos, 0, sizeof(*pos));
    cfg_schema_apply_defaults(k->child, w);
    w->line = (int)p->event.start_mark.line + 1;
    pos->entry = p->event.start_mark;
    p->cfg->n_workers = i + 1;
    rc = parse_mapping(p, k->child, w, &seen, false, k->expect);
    if (rc != 0 || k->finish == NULL)
        return rc;
    return k->finish(p, k->child, w, &seen);
}

static int parse_workers(struct cfg_parser *p, const struct cfg_key *k)
{
    int rc;

    if (event_is_null(&p->event))
        return 0;
    if (p->event.type != YAML_SEQUENCE_START_EVENT)
        return fail_expected(p, "a list of workers");
    for (size_t i = 0;; i++) {
        size_t saved;

        rc = next_event(p);
        if (rc != 0)
            return rc;
        if (p->event.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        if (i == CFG_WORKERS_LIMIT)
            return cfg_yaml_fail_at(p, p->event.start_mark, "expected at most %d workers, got more",
                                    CFG_WORKERS_LIMIT);
        rc = grow_workers(p);
        if (rc != 0)
            return rc;
        saved = cfg_yaml_path_push(p, "[%zu]", i);
        rc = parse_worker(p, k, i);
        if (rc != 0)
            return rc;
        path_pop(p, saved);
    }
}

static int parse_value(struct cfg_parser *p, const struct cfg_key *k, void *base)
{
    void *field = (char *)base + k->offset;

    switch (k->kind) {
    case CFG_KIND_MAP:
        return parse_section(p, k, field);
    case CFG_KIND_STRING:
        return parse_string(p, k, field);
    case CFG_KIND_U32:
        return parse_u32(p, k, field);
    case CFG_KIND_DURATION:
    case CFG_KIND_SIZE:
        return parse_unit_value(p, k, field);
    case CFG_KIND_BOOL:
        return parse_bool(p, field);
    case CFG_KIND_DOUBLE:
        return parse_double(p, k, field);
    case CFG_KIND_ADDR:
        return parse_addr(p, k, field);
    case CFG_KIND_ROLE:
    case CFG_KIND_POLICY:
    case CFG_KIND_GATE:
    case CFG_KIND_PD_FALLBACK:
    case CFG_KIND_LOAD_SIGNAL:
        return parse_enum(p, k, field);
    case CFG_KIND_STATUS_LIST:
        return parse_status_list(p, field);
    case CFG_KIND_WORKERS:
        return parse_workers(p, k);
    case CFG_KIND_STR_LIST:
        return parse_str_list(p, k, field);
    case CFG_KIND_UNSET:
        break;
    }
    return cfg_yaml_fail_at(p, p->event.start_mark, "internal error: key without a kind");
}

/* stream-start, then nothing or one document whose root is the mapping of sections. */
int cfg_yaml_walk(struct cfg_parser *p, const struct cfg_key *root)
{
    struct cfg_map_seen seen;
    int rc;

    rc = next_event(p); /* stream start */
    if (rc != 0)
        return rc;
    rc = next_event(p);
    if (rc != 0)
        return rc;
    if (p->event.type == YAML_STREAM_END_EVENT)
        return 0;
    rc = next_event(p); /* past document start: the root node */
    if (rc != 0)
        return rc;
    rc = parse_mapping(p, root, p->cfg, &seen, true, NULL);
    if (rc != 0)
        return rc;
    rc = next_event(p); /* document end */
    if (rc != 0)
        return rc;
    rc = next_event(p);
    if (rc != 0)
        return rc;
    if (p->event.type != YAML_STREAM_END_EVENT)
        return cfg_yaml_fail_at(p, p->event.start_mark,
                                "expected a single YAML document, got another");
    return 0;
}
