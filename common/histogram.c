/*
 * Lock-free latency histograms (see histogram.h).
 */
#include "common/histogram.h"

#include <string.h>

void histogram_init(struct histogram *h, const double *bounds, size_t n_bounds)
{
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->n_bounds = n_bounds < HISTOGRAM_MAX_BOUNDS ? n_bounds : HISTOGRAM_MAX_BOUNDS;
}

void histogram_observe(struct histogram *h, double value)
{
    if (!(value > 0)) /* negative, zero or NaN */
        value = 0;
    size_t b = 0;
    while (b < h->n_bounds && value > h->bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->counts[b], 1, memory_order_relaxed);
    /* Whole nanoseconds; a value past 2^64 ns (584 years) is not a latency. */
    double ns = value * 1e9;
    atomic_fetch_add_explicit(&h->sum_ns, ns < 1.8e19 ? (uint64_t)ns : UINT64_MAX / 2,
                              memory_order_relaxed);
}

uint64_t histogram_count(const struct histogram *h)
{
    uint64_t n = 0;
    for (size_t b = 0; b <= h->n_bounds; b++)
        n += atomic_load_explicit(&h->counts[b], memory_order_relaxed);
    return n;
}

int histogram_write(const struct histogram *h, struct prom_writer *w,
                    const struct prom_label *labels, size_t n_labels)
{
    uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1];
    for (size_t b = 0; b <= h->n_bounds; b++)
        counts[b] = atomic_load_explicit(&h->counts[b], memory_order_relaxed);
    double sum = (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9;
    return prom_histogram(w, labels, n_labels, h->bounds, counts, h->n_bounds, sum);
}
