/*
 * Worker URLs parsed once (CURLOPT_CURLU): curl then copies a parsed URL
 * for each transfer instead of parsing the string (about 3% of a small
 * request's instructions). An entry lives as long as its loop, since a
 * transfer may still use it; a loop that has seen 4,096 distinct URLs
 * (workers come and go) passes new ones as strings.
 *
 * Threading: the loop's thread only.
 */
#ifndef SY_DATAPLANE_UPSTREAM_URL_H
#define SY_DATAPLANE_UPSTREAM_URL_H

#include <curl/curl.h>

#include "dataplane/loop.h"

/* url parsed, from the loop's table or parsed now; NULL: pass it as a string. */
CURLU *dp_up_url_parsed(struct dp_loop *loop, const char *url);

/* Frees the table (after every transfer of the loop ended). */
void dp_up_urls_fini(struct dp_loop *loop);

#endif
