/*
 * Prometheus text-format writer; see prom.h for the rules. Every output
 * goes through buf_append/buf_printf, whose sticky error makes a failed
 * page fail as a whole; the writer adds its own sticky error for caller
 * bugs (sample without family, family reopened) so they surface in tests.
 */
#include "common/prom.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void prom_init(struct prom_writer *w, struct buf *out)
{
    memset(w, 0, sizeof(*w));
    w->out = out;
}

int prom_error(const struct prom_writer *w)
{
    return w->err != 0 ? w->err : buf_error(w->out);
}

static int prom_fail(struct prom_writer *w, int rc)
{
    if (w->err == 0)
        w->err = rc;
    return rc;
}

static const char *prom_type_name(enum prom_type type)
{
    switch (type) {
    case PROM_COUNTER:
        return "counter";
    case PROM_GAUGE:
        return "gauge";
    case PROM_HISTOGRAM:
        return "histogram";
    case PROM_UNTYPED:
        return "untyped";
    case PROM_TYPE_NONE:
        break;
    }
    return NULL;
}

/* FNV-1a: only to remember which families were opened. */
static uint64_t prom_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static bool prom_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= PROM_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == ':';
        if (!ok)
            return false;
    }
    return true;
}

/* HELP text: backslash and newline escaped. */
static void prom_put_help(struct buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            buf_append(b, "\\\\", 2);
        else if (*s == '\n')
            buf_append(b, "\\n", 2);
        else
            buf_append(b, s, 1);
    }
}

/* Label value: backslash, double quote and newline escaped. */
static void prom_put_label_value(struct buf *b, const char *s)
{
    const char *run = s;
    for (; *s != '\0'; s++) {
        const char *esc = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
        if (esc == NULL)
            continue;
        buf_append(b, run, (size_t)(s - run));
        buf_append(b, esc, 2);
        run = s + 1;
    }
    buf_append(b, run, (size_t)(s - run));
}

int prom_family(struct prom_writer *w, const char *name, enum prom_type type, const char *help)
{
    if (w->err != 0)
        return w->err;
    if (w->type != PROM_TYPE_NONE && strcmp(w->family, name) == 0 && w->type == type)
        return 0;
    const char *tname = prom_type_name(type);
    if (tname == NULL || !prom_name_ok(name))
        return prom_fail(w, -EINVAL);
    uint64_t h = prom_hash(name);
    for (size_t i = 0; i < w->n_seen; i++)
        if (w->seen[i] == h)
            return prom_fail(w, -EEXIST);
    if (w->n_seen < PROM_FAMILIES_MAX)
        w->seen[w->n_seen++] = h;
    snprintf(w->family, sizeof(w->family), "%s", name);
    w->type = type;
    struct buf *b = w->out;
    buf_printf(b, "# HELP %s ", name);
    prom_put_help(b, help != NULL ? help : "");
    buf_printf(b, "\n# TYPE %s %s\n", name, tname);
    return buf_error(b);
}

/* NAME+suffix{labels[,extra_name="extra_value"]} without the value. */
static int prom_put_series(struct prom_writer *w, const char *suffix,
                           const struct prom_label *labels, size_t n_labels, const char *extra_name,
                           const char *extra_value)
{
    if (w->err != 0)
        return w->err;
    if (w->type == PROM_TYPE_NONE)
        return prom_fail(w, -EINVAL);
    struct buf *b = w->out;
    buf_append_str(b, w->family);
    if (suffix != NULL)
        buf_append_str(b, suffix);
    if (n_labels > 0 || extra_name != NULL) {
        buf_append(b, "{", 1);
        for (size_t i = 0; i < n_labels; i++) {
            if (i > 0)
                buf_append(b, ",", 1);
            buf_append_str(b, labels[i].name);
            buf_append(b, "=\"", 2);
            prom_put_label_value(b, labels[i].value != NULL ? labels[i].value : "");
            buf_append(b, "\"", 1);
        }
        if (extra_name != NULL) {
            if (n_labels > 0)
                buf_append(b, ",", 1);
            buf_printf(b, "%s=\"%s\"", extra_name, extra_value);
        }
        buf_append(b, "}", 1);
    }
    return buf_error(b);
}

int prom_sample_text(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                     size_t n_labels, const char *value)
{
    int rc = prom_put_series(w, suffix, labels, n_labels, NULL, NULL);
    if (rc != 0)
        return rc;
    buf_printf(w->out, " %s\n", value);
    return buf_error(w->out);
}

int prom_sample_u64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, uint64_t value)
{
    char v[24];
    snprintf(v, sizeof(v), "%" PRIu64, value);
    return prom_sample_text(w, suffix, labels, n_labels, v);
}

int prom_sample_i64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, int64_t value)
{
    char v[24];
    snprintf(v, sizeof(v), "%" PRId64, value);
    return prom_sample_text(w, suffix, labels, n_labels, v);
}

/* Shortest of %.15g..%.17g that reads back as the same double. */
static void prom_format_double(char *out, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(out, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, len, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

int prom_sample_f64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, double value)
{
    char v[40];
    prom_format_double(v, sizeof(v), value);
    return prom_sample_text(w, suffix, labels, n_labels, v);
}

int prom_histogram(struct prom_writer *w, const struct prom_label *labels, size_t n_labels,
                   const double *bounds, const uint64_t *counts, size_t n_bounds, double sum)
{
    if (w->err != 0)
        return w->err;
    if (w->type != PROM_HISTOGRAM)
        return prom_fail(w, -EINVAL);
    uint64_t cum = 0;
    char le[40];
    for (size_t i = 0; i <= n_bounds; i++) {
        cum += counts[i];
        if (i < n_bounds)
            snprintf(le, sizeof(le), "%g", bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        prom_put_series(w, "_bucket", labels, n_labels, "le", le);
        buf_printf(w->out, " %" PRIu64 "\n", cum);
    }
    prom_put_series(w, "_sum", labels, n_labels, NULL, NULL);
    buf_printf(w->out, " %.6f\n", sum);
    prom_put_series(w, "_count", labels, n_labels, NULL, NULL);
    buf_printf(w->out, " %" PRIu64 "\n", cum);
    return prom_error(w);
}
