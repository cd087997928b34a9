/*
 * Prefill/decode's state in a loop (struct dp_pd_loop, embedded in struct
 * dp_loop) and a request's prefill usage (struct dp_pd_usage): types only, apart from pd.h's
 * functions, so loop.h can embed it without depending on pd. Touched only by pd.c once the loop's
 * driver has cleared it.
 */
#ifndef SY_DATAPLANE_CORE_PD_TYPES_H
#define SY_DATAPLANE_CORE_PD_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "dataplane/types/policy_types.h"

/* The prefill answer's usage, which the decode answer's takes (pd.h). */
struct dp_pd_usage {
    bool known; /* the prefill answer had usage.prompt_tokens */
    bool cached_known;
    int64_t prompt_tokens;
    int64_t cached_tokens; /* usage.prompt_tokens_details.cached_tokens */
};

/* A loop's P/D state (in struct dp_loop; touched only by pd.c): the legs'
 * policies, policy.prefill and policy.decode. */
struct dp_pd_loop {
    struct pol_policy prefill, decode;
};

#endif
