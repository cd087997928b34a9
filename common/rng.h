/*
 * The one random-number module. Two different needs, two different sources:
 *
 *  - struct rng: a small, fast, seedable PRNG (splitmix64: 64-bit state,
 *    one add and two multiplies per draw, passes BigCrush) for routing
 *    choices, jitter, load generation and workloads. Seed it explicitly
 *    when a sequence must be reproducible (benchmark workloads and their
 *    reports depend on splitmix64's exact sequence: keep the algorithm),
 *    or with rng_seed_random() otherwise. Its output is predictable from a
 *    few outputs: never use it for anything a client must not guess.
 *  - rng_fill_random(): bytes straight from the kernel (getrandom) for
 *    what must be unpredictable: tokens, keys, seeds. Costs a system call.
 *  - rng_secret64(): 64 unpredictable bits at a time for what a client
 *    sees and must not be able to predict (the data plane's request ids
 *    and trace ids, the JSON skeleton's marker nonces): every value comes
 *    from the kernel's generator, drawn in per-thread blocks of 64 values
 *    (one getrandom per 64 values, about one per 20 requests), since a
 *    system call per value was a measurable part of a small request's
 *    cost. An earlier splitmix64 stream let a client invert one
 *    X-Request-Id and predict the next one exactly (docs/security.md,
 *    row 8): never serve these from a struct rng.
 *
 * Invariants: rng_next() from a state s gives the same value on every
 * platform and build; rng_seed(r, x) followed by draws is the reference
 * splitmix64 sequence for seed x (tests pin its first values).
 *
 * Threading: a struct rng has no lock; give each thread (event loop) its
 * own. rng_fill_random(), rng_seed_random() and rng_secret64() are
 * thread-safe; rng_secret64()'s blocks are per thread, never shared (a
 * process that forks must not draw them on both sides of the fork).
 *
 * Users: the random policies' state (dataplane/policy/rng.h), the health
 * prober's jitter and the Kubernetes source's backoff are struct rngs
 * seeded with rng_seed_random(); request ids, trace ids and skeleton
 * nonces are rng_secret64().
 */
#ifndef SY_COMMON_RNG_H
#define SY_COMMON_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Caller storage; the whole state (copying it forks the sequence). */
struct rng {
    uint64_t state;
};

/* Starts the reference splitmix64 sequence of seed. */
static inline void rng_seed(struct rng *r, uint64_t seed)
{
    r->state = seed;
}

/* Seeds from getrandom (never blocks); falls back to clock and address bits. */
void rng_seed_random(struct rng *r);

/* splitmix64's output function: a cheap, well-mixed, stateless hash of x. */
static inline uint64_t rng_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next 64 random bits. */
static inline uint64_t rng_next(struct rng *r)
{
    uint64_t x = r->state;
    r->state += 0x9e3779b97f4a7c15ull;
    return rng_mix64(x);
}

/*
 * Uniform in [0, n) for n >= 1 (n == 0 returns 0). Plain modulo: the bias
 * is below n / 2^64, negligible for fleets and workloads, and keeps
 * sequences equal to the former hand-written `next() % n`.
 */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n > 0 ? rng_next(r) % n : 0;
}

/* Uniform in (0, 1]: never 0, so -log(rng_unit()) is finite. */
static inline double rng_unit(struct rng *r)
{
    return ((double)(rng_next(r) >> 11) + 1.0) / 9007199254740992.0;
}

/*
 * Fills n bytes from the kernel's CSPRNG (getrandom, blocking only until
 * the pool is initialised at boot). Returns 0 or a negative errno; on
 * failure the contents of buf are unspecified and must not be used.
 */
int rng_fill_random(void *buf, size_t n);

/* 64 unpredictable bits from the calling thread's block of kernel randomness. */
uint64_t rng_secret64(void);

#endif
