/*
 * Pooled latency percentiles over several runs of one benchmark cell, and a
 * bootstrap confidence interval for the ratio of two cells' percentiles
 * (make bench's P/D section compares the two balance gates with it).
 *
 * Why pooled: a 5-second run measures a few hundred requests, so its p99 is
 * its 4th slowest request, and whether one agent's first turn landed on a
 * cold worker moves it by 3x. The median of per-run p99s inherits that
 * noise; the p99 of all runs' requests together is an estimate from ten
 * times the samples. Why resample runs, not requests: requests of one run
 * share its history (queues, caches), so they are not independent draws;
 * runs are.
 */
#ifndef SWITCHYARD_BENCH_POOLED_H
#define SWITCHYARD_BENCH_POOLED_H

#include <stddef.h>
#include <stdint.h>

/* One run's measured latencies in ms, sorted ascending. */
struct pl_run {
    double *v;
    size_t n;
};

/*
 * Reads the TTFT of the requests that succeeded and were sent in
 * [w0, w1) seconds from a `switchyard-bench run --csv` file (columns
 * start_s, ttft_ms, ok). Returns 0, or -errno (-EINVAL: not such a file).
 */
int pl_read_csv(const char *path, double w0, double w1, struct pl_run *out);

/* Sorts v[0..n) ascending. */
void pl_sort(double *v, size_t n);

/* Nearest-rank percentile q (0..100] of sorted v[0..n); NAN if n == 0. */
double pl_rank(const double *sorted, size_t n, double q);

/* Takes ownership of v[0..n) (malloc'd), sorting it. */
void pl_run_adopt(struct pl_run *r, double *v, size_t n);

void pl_run_free(struct pl_run *r);

/* Nearest-rank percentile q (0..100] of the runs' samples together; NAN if none. */
double pl_pooled_pct(const struct pl_run *runs, size_t n_runs, double q);

/*
 * 95% interval of pooled_pct(a) / pooled_pct(b): `iters` times, draw
 * n_a runs from a and n_b runs from b with replacement and take the ratio;
 * the 2.5th and 97.5th percentiles of those ratios. Deterministic for a
 * seed. Returns 0, or -EINVAL (an empty side) / -ENOMEM.
 */
int pl_bootstrap_ratio(const struct pl_run *a, size_t n_a, const struct pl_run *b, size_t n_b,
                       double q, unsigned iters, uint64_t seed, double *lo, double *hi);

/*
 * The same interval when the runs are paired: a[i] and b[i] were measured
 * under one arrival plan (make bench gives both policies of a repetition
 * the same seed). Each draw takes the same run indices on both sides, so
 * what the two runs of a pair share (a burst of arrivals that makes both
 * tails long) cancels in the ratio instead of widening its interval; what
 * is left is how the policies differ under the same traffic.
 */
int pl_bootstrap_ratio_paired(const struct pl_run *a, const struct pl_run *b, size_t n, double q,
                              unsigned iters, uint64_t seed, double *lo, double *hi);

#endif
