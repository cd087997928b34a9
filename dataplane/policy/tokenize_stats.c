/*
 * precise_cache_aware's counters (see tokenize_stats.h).
 */
#include "dataplane/policy/tokenize_stats.h"

#include "common/histogram.h"

#include <stdatomic.h>
#include <stdint.h>

static _Atomic uint64_t tok_fallbacks[DP_TOK_FB_COUNT];
static _Atomic uint64_t tok_results[DP_TOK_RES_COUNT];
static _Atomic uint64_t tok_cache_hits;
/* Round trips run from well under a millisecond (a local worker) to the
 * tokenize_timeout (50 ms by default, up to seconds when raised). */
static const double tok_bounds_s[] = {0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                      0.05,    0.1,    0.25,  0.5,   1,     2.5,  5};
static struct histogram tok_duration = {.bounds = tok_bounds_s,
                                        .n_bounds = sizeof(tok_bounds_s) / sizeof(tok_bounds_s[0])};

void dp_tok_count_fallback(enum dp_tok_fallback why)
{
    if (why > DP_TOK_FB_UNSET && why < DP_TOK_FB_COUNT)
        atomic_fetch_add_explicit(&tok_fallbacks[why], 1, memory_order_relaxed);
}

void dp_tok_count_result(enum dp_tok_result r)
{
    if (r < DP_TOK_RES_COUNT)
        atomic_fetch_add_explicit(&tok_results[r], 1, memory_order_relaxed);
}

void dp_tok_observe_duration(double seconds)
{
    histogram_observe(&tok_duration, seconds);
}

void dp_tok_count_cache_hit(void)
{
    atomic_fetch_add_explicit(&tok_cache_hits, 1, memory_order_relaxed);
}

void dp_tok_metrics_write(struct prom_writer *w)
{
    static const char *const reasons[DP_TOK_FB_COUNT] = {
        [DP_TOK_FB_TIMEOUT] = "timeout",
        [DP_TOK_FB_ERROR] = "error",
        [DP_TOK_FB_UNSUPPORTED] = "unsupported",
        [DP_TOK_FB_NO_INDEX] = "no_index",
    };
    static const char *const results[DP_TOK_RES_COUNT] = {"ok", "timeout", "error"};
    prom_family(w, "switchyard_precise_fallbacks_total", PROM_COUNTER,
                "precise_cache_aware requests routed by approximate match, by reason.");
    for (int r = DP_TOK_FB_UNSET + 1; r < DP_TOK_FB_COUNT; r++)
        prom_sample_u64(w, NULL, &(struct prom_label){"reason", reasons[r]}, 1,
                        atomic_load_explicit(&tok_fallbacks[r], memory_order_relaxed));
    prom_family(w, "switchyard_tokenize_requests_total", PROM_COUNTER,
                "POST /tokenize round trips of precise_cache_aware, by result.");
    for (int r = 0; r < DP_TOK_RES_COUNT; r++)
        prom_sample_u64(w, NULL, &(struct prom_label){"result", results[r]}, 1,
                        atomic_load_explicit(&tok_results[r], memory_order_relaxed));
    prom_family(w, "switchyard_tokenize_cache_hits_total", PROM_COUNTER,
                "Requests whose token chain came from the loop's tokenize cache.");
    prom_sample_u64(w, NULL, NULL, 0, atomic_load_explicit(&tok_cache_hits, memory_order_relaxed));
    prom_family(w, "switchyard_tokenize_duration_seconds", PROM_HISTOGRAM,
                "POST /tokenize round trips of precise_cache_aware, any result, in seconds.");
    histogram_write(&tok_duration, w, NULL, 0);
}
