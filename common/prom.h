/*
 * The one Prometheus text-format (0.0.4) writer. Every /metrics page in
 * the project (the dataplane's, the control plane's, the mock worker's)
 * writes through it, so the rules below hold everywhere:
 *
 *  - A family is opened with prom_family(): its "# HELP" and "# TYPE"
 *    lines are written once, the first time. Calling prom_family() again
 *    for the family that is open is a no-op (handy inside loops); opening a
 *    family that was already closed by another is a caller bug and fails
 *    with -EEXIST (Prometheus wants a family's samples together).
 *  - Samples belong to the open family: their name is the family's plus a
 *    suffix ("" or "_total" for counters as the Python client writes them,
 *    histograms add "_bucket", "_sum", "_count" themselves).
 *  - Label values are escaped (backslash, double quote, newline), so a
 *    worker id or model name can never break the page. HELP text escapes
 *    backslash and newline.
 *  - Numbers: integers as decimal; doubles in the shortest spelling that
 *    reads back exactly ("NaN", "+Inf", "-Inf" spelled out); histogram
 *    bounds with %g and sums with %.6f, as the dataplane always printed
 *    them. A value whose historical spelling must not change (the mock
 *    worker's "3.0", vLLM style) goes through prom_sample_text().
 *
 * Output goes to a struct buf (common/buf.h) owned by the caller, so the
 * page is capped; the writer's error, and the buffer's, are sticky: write
 * everything, then check prom_error() once and answer 500 on failure.
 *
 * Threading: a writer and its buffer belong to one thread for the length
 * of one page. Reading the values (atomics, snapshots) is the caller's job.
 *
 * Adoption: dataplane/obs/metrics.c replaces its dp_text + text_add() and its
 * render_hist/render_hist_series with a struct buf + prom_family() +
 * prom_sample_u64()/prom_histogram() (per-bucket counts, not cumulative).
 * The control plane's /metrics (admin_routes.c, admin_http.c) already
 * writes through it and hands buf_detach()'s bytes to MHD.
 */
#ifndef SY_COMMON_PROM_H
#define SY_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define PROM_NAME_MAX     128 /* longest family name */
#define PROM_FAMILIES_MAX 256 /* families remembered for the -EEXIST check */

enum prom_type {
    PROM_TYPE_NONE = 0,
    PROM_COUNTER,
    PROM_GAUGE,
    PROM_HISTOGRAM,
    PROM_UNTYPED,
};

/* One label; value is escaped on output, name is written as is. */
struct prom_label {
    const char *name;
    const char *value;
};

/* Caller storage; prom_init. Touch through the API only. */
struct prom_writer {
    struct buf *out; /* borrowed */
    char family[PROM_NAME_MAX];
    enum prom_type type;              /* of the open family; NONE before the first */
    uint64_t seen[PROM_FAMILIES_MAX]; /* hashes of families opened so far */
    size_t n_seen;
    int err; /* first failure, sticky */
};

/* Starts a page written at the end of out (which keeps its cap and contents). */
void prom_init(struct prom_writer *w, struct buf *out);

/*
 * Opens family name (a valid metric name shorter than PROM_NAME_MAX) of
 * type with help text: writes HELP and TYPE unless it is already the open
 * family. Returns 0, -EEXIST (opened before, then left), -EINVAL (bad
 * name or type), or the buffer's error.
 */
int prom_family(struct prom_writer *w, const char *name, enum prom_type type, const char *help);

/*
 * Writes one sample of the open family: NAME+suffix{labels} value.
 * suffix may be NULL or ""; labels may be NULL when n_labels is 0.
 * Returns 0, -EINVAL (no open family) or the buffer's error.
 */
int prom_sample_u64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, uint64_t value);
int prom_sample_i64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, int64_t value);
int prom_sample_f64(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                    size_t n_labels, double value);
/* value is written verbatim: the caller guarantees it is a valid number. */
int prom_sample_text(struct prom_writer *w, const char *suffix, const struct prom_label *labels,
                     size_t n_labels, const char *value);

/*
 * Writes one histogram series of the open (histogram) family: one
 * NAME_bucket line per bound with le="%g" and cumulative counts, then
 * le="+Inf", NAME_sum (%.6f) and NAME_count. counts holds n_bounds + 1
 * per-bucket (not cumulative) counts, the last one above every bound;
 * bounds ascend. labels come before le. Returns as prom_sample_u64.
 */
int prom_histogram(struct prom_writer *w, const struct prom_label *labels, size_t n_labels,
                   const double *bounds, const uint64_t *counts, size_t n_bounds, double sum);

/* The first failure of the writer or its buffer, 0 when all went well. */
int prom_error(const struct prom_writer *w);

#endif
