/*
 * The upstream side's state in a loop (struct dp_up, embedded in struct
 * dp_loop): types only, apart from upstream.h's functions, so loop.h can
 * embed it without depending on the upstream module. Touched only by
 * upstream.c once the loop's driver has cleared it.
 */
#ifndef SY_DATAPLANE_CORE_UPSTREAM_TYPES_H
#define SY_DATAPLANE_CORE_UPSTREAM_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/curl_epoll_types.h"
#include "dataplane/types/upstream_url_types.h"

#define DP_EASY_POOL 256u

struct dp_up_handlers;

/* A loop's upstream side (in struct dp_loop; touched only by upstream.c). */
struct dp_up {
    /* The multi handle and its sockets in the loop's epoll set (tag
     * DP_TAG_CURL, idle keep-alive sockets parked) and curl's timer. */
    struct cep cep;
    struct dp_up_urls urls; /* worker URLs parsed once (upstream_url.h) */
    CURL *pool[DP_EASY_POOL];
    size_t n_pool;
    const struct dp_up_handlers *handlers; /* borrowed, static */
    CURLSH *tls_share; /* TLS sessions of the pool's handles (tls_client.h); may be NULL */
};

#endif
