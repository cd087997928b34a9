/*
 * Fuzz target: a worker's /metrics page, as the control plane's load-report
 * scraper reads it (the worker is outside our trust: any bytes may come).
 * The page is parsed with and without a model filter.
 *
 * Oracle: the report is within its stated bounds (KV usage a fraction in
 * 0..1, never NaN), and a filtered parse never counts more than the
 * unfiltered one.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "controlplane/probes/load_report_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lrp_report all, one;
    (void)lrp_parse((const char *)data, size, NULL, &all);
    (void)lrp_parse((const char *)data, size, "m", &one);
    if (isnan(all.kv_cache_usage) || all.kv_cache_usage < 0.0 || all.kv_cache_usage > 1.0)
        abort();
    if (one.running > all.running || one.waiting > all.waiting)
        abort();
    return 0;
}
