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
 *    request ids, nonces and tokens, which must be unpredictable. Costs a
 *    system call; a caller that needs many small values can draw a block
 *    (e.g. 256 bytes) and slice it on one thread, never sharing it across
 *    fork().
 *
 * Invariants: rng_next() from a state s gives the same value on every
 * platform and build; rng_seed(r, x) followed by draws is the reference
 * splitmix64 sequence for seed x (tests pin its first values).
 *
 * Threading: a struct rng has no lock; give each thread (event loop) its
 * own. rng_fill_random() and rng_seed_random() are thread-safe.
 *
 * Adoption: dataplane/policy/rng.h's pol_rng becomes a struct rng seeded
 * with rng_seed_random(); dataplane/http/request.c's id generator draws its
 * bytes with rng_fill_random() (the planned fix for guessable ids); the
 * health prober's jitter uses a struct rng.
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

#endif
