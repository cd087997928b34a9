/*
 * The dataplane's per-thread pseudo-random numbers (request ids, skeleton
 * nonces), defined in request.c: unique and not guessable by clients; not
 * for secrets. Declared on its own so a module that needs a random number
 * (pd.c) does not include the request module for it.
 *
 * Threading: any thread; each has its own state.
 */
#ifndef SY_DATAPLANE_RANDOM64_H
#define SY_DATAPLANE_RANDOM64_H

#include <stdint.h>

/* A per-thread pseudo-random 64-bit number. */
uint64_t dp_random64(void);

#endif
