/*
 * Prefill/decode's state in a loop (struct dp_pd_loop, embedded in struct
 * dp_loop): types only, apart from pd.h's functions, so loop.h can embed
 * it without depending on pd. Touched only by pd.c once the loop's driver
 * has cleared it.
 */
#ifndef SY_DATAPLANE_PD_STATE_H
#define SY_DATAPLANE_PD_STATE_H

#include "dataplane/policy.h"

/* A loop's P/D state (in struct dp_loop; touched only by pd.c): the legs'
 * policies, policy.prefill and policy.decode. */
struct dp_pd_loop {
    struct pol_policy prefill, decode;
};

#endif
