/*
 * The data plane's random numbers for what a client sees and must not be
 * able to predict: request ids (X-Request-Id) and the nonces of the JSON
 * skeleton's markers. Every value comes from the kernel's generator
 * (getrandom): an earlier splitmix64 stream let a client invert one
 * X-Request-Id and predict the next one exactly. A syscall per value was a
 * measurable part of a small request's cost, so each thread draws a block
 * of values at once and hands them out one by one (one getrandom per 64
 * values, i.e. per ~20 requests).
 *
 * Threading: any thread; each has its own block, never shared.
 */
#ifndef SY_DATAPLANE_RANDOM64_H
#define SY_DATAPLANE_RANDOM64_H

#include <stdint.h>

/* 64 unpredictable bits. */
uint64_t dp_random64(void);

#endif
