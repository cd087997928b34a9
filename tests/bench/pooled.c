/* Pooled percentiles and their bootstrap interval (see pooled.h). */
#include "tests/bench/pooled.h"

#include "common/rng.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pl_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void pl_sort(double *v, size_t n)
{
    if (n > 1) /* an empty run's v may be NULL, which qsort must not see */
        qsort(v, n, sizeof(*v), pl_cmp_double);
}

double pl_rank(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return NAN;
    size_t k = (size_t)ceil(q / 100.0 * (double)n);
    return sorted[k == 0 ? 0 : k - 1];
}

void pl_run_adopt(struct pl_run *r, double *v, size_t n)
{
    pl_sort(v, n);
    r->v = v;
    r->n = n;
}

void pl_run_free(struct pl_run *r)
{
    free(r->v);
    *r = (struct pl_run){0};
}

/* Index of column `name` in a CSV header line, or -1. */
static int pl_column(const char *header, const char *name)
{
    size_t len = strlen(name);
    int col = 0;
    for (const char *p = header;; col++) {
        const char *end = p + strcspn(p, ",\r\n");
        if ((size_t)(end - p) == len && memcmp(p, name, len) == 0)
            return col;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

/* Field `col` of a CSV line as a number; false when absent or not a number. */
static bool pl_field(const char *line, int col, double *out)
{
    const char *p = line;
    for (int c = 0; c < col; c++) {
        p = strchr(p, ',');
        if (p == NULL)
            return false;
        p++;
    }
    char *end;
    errno = 0;
    *out = strtod(p, &end);
    return end != p && errno == 0 && (*end == ',' || *end == '\n' || *end == '\r' || *end == '\0');
}

int pl_read_csv(const char *path, double w0, double w1, struct pl_run *out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    char line[512];
    int c_start = -1, c_ttft = -1, c_ok = -1;
    if (fgets(line, sizeof(line), f) != NULL) {
        c_start = pl_column(line, "start_s");
        c_ttft = pl_column(line, "ttft_ms");
        c_ok = pl_column(line, "ok");
    }
    if (c_start < 0 || c_ttft < 0 || c_ok < 0) {
        fclose(f);
        return -EINVAL;
    }
    double *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        double start, ttft, ok;
        if (!pl_field(line, c_start, &start) || !pl_field(line, c_ttft, &ttft) ||
            !pl_field(line, c_ok, &ok)) {
            rc = -EINVAL;
            break;
        }
        if (ok != 1 || start < w0 || start >= w1)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            double *nv = realloc(v, cap * sizeof(*v));
            if (nv == NULL) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        v[n++] = ttft;
    }
    fclose(f);
    if (rc != 0) {
        free(v);
        return rc;
    }
    pl_run_adopt(out, v, n);
    return 0;
}

/* The samples of runs[pick[0..k)] together, sorted, into buf (big enough). */
static size_t pl_gather(const struct pl_run *runs, const size_t *pick, size_t k, double *buf)
{
    size_t n = 0;
    for (size_t i = 0; i < k; i++) {
        if (runs[pick[i]].n == 0)
            continue; /* its v may be NULL */
        memcpy(buf + n, runs[pick[i]].v, runs[pick[i]].n * sizeof(*buf));
        n += runs[pick[i]].n;
    }
    pl_sort(buf, n);
    return n;
}

double pl_pooled_pct(const struct pl_run *runs, size_t n_runs, double q)
{
    size_t total = 0;
    for (size_t i = 0; i < n_runs; i++)
        total += runs[i].n;
    double *buf = malloc((total ? total : 1) * sizeof(*buf));
    size_t *all = malloc((n_runs ? n_runs : 1) * sizeof(*all));
    double r = NAN;
    if (buf != NULL && all != NULL) {
        for (size_t i = 0; i < n_runs; i++)
            all[i] = i;
        r = pl_rank(buf, pl_gather(runs, all, n_runs, buf), q);
    }
    free(buf);
    free(all);
    return r;
}

/* Draws n run indices in [0, n) with replacement. */
static void pl_draw(size_t n, struct rng *rng, size_t *pick)
{
    for (size_t i = 0; i < n; i++)
        pick[i] = (size_t)rng_below(rng, n);
}

/* Both bootstraps: paired draws one set of indices for both sides. */
static int pl_bootstrap(const struct pl_run *a, size_t n_a, const struct pl_run *b, size_t n_b,
                        bool paired, double q, unsigned iters, uint64_t seed, double *lo,
                        double *hi)
{
    if (n_a == 0 || n_b == 0 || iters == 0 || (paired && n_a != n_b))
        return -EINVAL;
    /* A resample holds at most n times the largest run. */
    size_t most = 0;
    for (size_t i = 0; i < n_a; i++)
        most = a[i].n * n_a > most ? a[i].n * n_a : most;
    for (size_t i = 0; i < n_b; i++)
        most = b[i].n * n_b > most ? b[i].n * n_b : most;
    double *buf = malloc((most ? most : 1) * sizeof(*buf));
    size_t *pick = malloc((n_a > n_b ? n_a : n_b) * sizeof(*pick));
    double *ratios = malloc(iters * sizeof(*ratios));
    int rc = buf != NULL && pick != NULL && ratios != NULL ? 0 : -ENOMEM;
    size_t kept = 0;
    /* splitmix64 from seed: a fixed, portable sequence, so a report can be recomputed. */
    struct rng rng;
    rng_seed(&rng, seed);
    for (unsigned it = 0; rc == 0 && it < iters; it++) {
        pl_draw(n_a, &rng, pick);
        double x = pl_rank(buf, pl_gather(a, pick, n_a, buf), q);
        if (!paired)
            pl_draw(n_b, &rng, pick);
        double y = pl_rank(buf, pl_gather(b, pick, n_b, buf), q);
        if (isfinite(x) && isfinite(y) && y > 0)
            ratios[kept++] = x / y;
    }
    if (rc == 0 && kept == 0)
        rc = -EINVAL;
    if (rc == 0) {
        pl_sort(ratios, kept);
        *lo = pl_rank(ratios, kept, 2.5);
        *hi = pl_rank(ratios, kept, 97.5);
    }
    free(buf);
    free(pick);
    free(ratios);
    return rc;
}

int pl_bootstrap_ratio(const struct pl_run *a, size_t n_a, const struct pl_run *b, size_t n_b,
                       double q, unsigned iters, uint64_t seed, double *lo, double *hi)
{
    return pl_bootstrap(a, n_a, b, n_b, false, q, iters, seed, lo, hi);
}

int pl_bootstrap_ratio_paired(const struct pl_run *a, const struct pl_run *b, size_t n, double q,
                              unsigned iters, uint64_t seed, double *lo, double *hi)
{
    return pl_bootstrap(a, n, b, n, true, q, iters, seed, lo, hi);
}
