/*
 * A latency histogram any thread can observe into and a /metrics page can
 * write: fixed bucket bounds (seconds, ascending, given at init and
 * borrowed), one relaxed atomic counter per bucket plus the sum, so
 * observing costs a few atomic adds and never takes a lock. Written with
 * prom_histogram (common/prom.h) as a Prometheus histogram series.
 *
 * A reader racing observers may see a count and a sum from slightly
 * different moments; for a latency distribution that is noise, never a
 * wrong bucket.
 */
#ifndef SY_COMMON_HISTOGRAM_H
#define SY_COMMON_HISTOGRAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"

#define HISTOGRAM_MAX_BOUNDS 24

struct histogram {
    const double *bounds; /* borrowed, ascending, n_bounds of them */
    size_t n_bounds;
    _Atomic uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1]; /* per bucket; the last above every bound */
    _Atomic uint64_t sum_ns;                           /* sum of the values, in 1e-9 units */
};

/* Zeroes h and sets its bounds (at most HISTOGRAM_MAX_BOUNDS: more are
 * ignored). */
void histogram_init(struct histogram *h, const double *bounds, size_t n_bounds);

/* Counts value (seconds; a negative one counts as 0) in its bucket: the
 * first bound it does not exceed (le semantics), else the last bucket. */
void histogram_observe(struct histogram *h, double value);

/* How many values h counted (the sum of its buckets). */
uint64_t histogram_count(const struct histogram *h);

/* Writes h as one series of the open histogram family (prom_family with
 * PROM_HISTOGRAM first). Returns as prom_histogram. */
int histogram_write(const struct histogram *h, struct prom_writer *w,
                    const struct prom_label *labels, size_t n_labels);

#endif
