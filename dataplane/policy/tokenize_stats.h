/*
 * The counters of precise_cache_aware's tokenize step and fallbacks
 * (tokenize.h, policy/precise_cache_aware.c), apart from both so that the
 * metrics page can read them without depending on either. Process-wide
 * relaxed atomics: any thread counts, the metrics page reads.
 */
#ifndef SY_DATAPLANE_TOKENIZE_STATS_H
#define SY_DATAPLANE_TOKENIZE_STATS_H

#include "common/prom.h"

/* Why a request under precise_cache_aware was routed by approximate match. */
enum dp_tok_fallback {
    DP_TOK_FB_UNSET = 0,
    DP_TOK_FB_TIMEOUT,     /* no answer within tokenize_timeout */
    DP_TOK_FB_ERROR,       /* refused, an error status, an answer without tokens */
    DP_TOK_FB_UNSUPPORTED, /* a body shape that is not tokenized */
    DP_TOK_FB_NO_INDEX,    /* no KV holder index (the segment could not be attached) */
    DP_TOK_FB_COUNT,
};

/* How a POST /tokenize ended. */
enum dp_tok_result {
    DP_TOK_RES_OK,
    DP_TOK_RES_TIMEOUT,
    DP_TOK_RES_ERROR,
    DP_TOK_RES_COUNT,
};

void dp_tok_count_fallback(enum dp_tok_fallback why);
void dp_tok_count_result(enum dp_tok_result r);
void dp_tok_count_cache_hit(void);
/* One POST /tokenize round trip took seconds (ok, timed out or failed). */
void dp_tok_observe_duration(double seconds);

/* switchyard_precise_fallbacks_total{reason}, switchyard_tokenize_requests_total
 * {result}, switchyard_tokenize_cache_hits_total,
 * switchyard_tokenize_duration_seconds. */
void dp_tok_metrics_write(struct prom_writer *w);

#endif
