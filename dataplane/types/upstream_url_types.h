/* The types of upstream_url.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_UPSTREAM_URL_TYPES_H
#define SY_DATAPLANE_UPSTREAM_URL_TYPES_H

#include <stddef.h>
#include <curl/curl.h>

/* A loop's table: an open-addressing table of url_slots entries (a power
 * of two), n_urls of them used. Zeroed = empty. */
struct dp_up_urls {
    struct dp_up_url *urls;
    size_t n_urls, url_slots;
};

#endif
