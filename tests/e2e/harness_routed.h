/*
 * Requests whose routing an end-to-end test reads back: prompt text drawn
 * from a seed, and a POST through the router that must be answered 200 and
 * names, in the data plane's debug headers (dataplane.debug_headers: true),
 * the worker that served it and the routing decision. The routing tests
 * (cache_aware, the shared prefix index, precise_cache_aware, load reports)
 * all ask the same two questions of a request, so they ask them here.
 * Any thread; functions assert (cmocka): a request that is not answered
 * 200 fails the test on the caller's line of the test binary.
 */
#ifndef SY_TESTS_E2E_HARNESS_ROUTED_H
#define SY_TESTS_E2E_HARNESS_ROUTED_H

#include <stddef.h>

/* len bytes of lowercase text, distinct per seed from byte 0 (malloc'd,
 * NUL-terminated; the caller frees it). */
char *h_routed_text(unsigned seed, size_t len);

/* POSTs the JSON text json to base + path and asserts 200; the
 * x-switchyard-worker header into worker and, when decision is not NULL,
 * x-switchyard-decision into decision (both must be there). */
void h_routed_post(const char *base, const char *path, const char *json, char *worker, size_t wlen,
                   char *decision, size_t dlen);

#endif
