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

#include <stddef.h>

#include <curl/curl.h>
#include "dataplane/types/upstream_url_types.h"

struct dp_up_url;

/* url parsed, from table tab or parsed now; NULL: pass it as a string. */
CURLU *dp_up_url_parsed(struct dp_up_urls *tab, const char *url);

/* Frees table tab (after every transfer of its loop ended). */
void dp_up_urls_fini(struct dp_up_urls *tab);

#endif
