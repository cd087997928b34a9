/* The types of api_keys.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_CORE_API_KEYS_TYPES_H
#define SY_DATAPLANE_CORE_API_KEYS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_TENANT_NAME_MAX 64u /* with the NUL */

#define DP_KEY_HASH_LEN 32u /* SHA-256 */

/* A tenant's priority band; the enum's order is the queue's (high first). */
enum dp_prio {
    DP_PRIO_UNSET = 0,
    DP_PRIO_HIGH,
    DP_PRIO_NORMAL,
    DP_PRIO_LOW,
    DP_PRIO_COUNT,
};

/* One tenant of the keys file. A limit of 0 means "no limit". */
struct dp_tenant {
    char name[DP_TENANT_NAME_MAX];
    uint8_t key_sha256[DP_KEY_HASH_LEN];
    enum dp_prio priority; /* default normal */
    double requests_per_s; /* 0 = no request-rate limit */
    uint32_t burst;        /* requests; default: requests_per_s rounded up, at least 1 */
    uint64_t tokens_per_min;
    /* Forwarded with a cache_salt derived from the router's secret and the
     * tenant's name (cache_salt.h): its prompts share no cached block with
     * another tenant's, and routing matches only its own prefixes. */
    bool cache_isolation;
};

struct dp_keys {
    struct dp_tenant *tenants; /* owned */
    size_t n;
};

#endif
