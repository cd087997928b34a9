/*
 * Decisions at fleet scale, for the "scale" benchmark section
 * (tests/bench/sections/80-scale.sh): p50/p99 of one cache_aware and one
 * precise_cache_aware decision among N candidate workers, N given.
 *
 * As micro_policy.c (whose 256-worker figures this extends): prompts of 8K
 * tokens at 4 bytes a token, sharing one of 64 system prefixes (3/4 of the
 * text) and ending with a question of their own, every decision a new
 * question (WARM_UP decisions untimed first), candidates' loads varying.
 *   cache_aware: ca_decide over the approximate prefix index (hashing,
 *     lookups and recording included), pre-filled with 1 M blocks dealt
 *     over the N workers.
 *   precise_cache_aware: pca_decide over an exact holder index in
 *     which every worker holds HELD_PER_WORKER blocks (chains of 32), plus
 *     the prefixes' holders, and speculative entries on (the default TTL);
 *     apart (pca_chain), hashing the request's 512 blocks into its chain
 *     (tkc_chain), which the request pays once whatever the policy.
 * Excluded from both: reading the registry and the loads from the segment
 * into the candidates (the end-to-end rate of the section includes them).
 * Prints "name value unit" lines: scale_N_ca_p50 ... scale_N_pca_p99.
 *
 * Usage: micro_scale WORKERS [DECISIONS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proc.h"
#include "common/rng.h"
#include "common/token_chain.h"
#include "dataplane/policy/cache_aware.h"
#include "dataplane/policy/precise_cache_aware.h"
#include "shm/kv_holders.h"
#include "shm/prefix_index.h"

#define GROUPS          64
#define TOKENS          8192
#define BLOCK           16
#define WARM_UP         2000
#define HELD_PER_WORKER 256

static const struct ca_params params = {.cache_threshold = 0.5,
                                        .balance_abs_threshold = 32,
                                        .balance_rel_threshold = 1.5,
                                        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
                                        .rendezvous = true,
                                        .bounded_load_factor = 1.25};

/* As micro_policy.c's fill_prompt. */
static void fill_prompt(char *buf, size_t len, unsigned group, unsigned uniq)
{
    size_t shared = len * 3 / 4;
    for (size_t i = 0; i < shared; i++)
        buf[i] = (char)('a' + ((i * 31u + group * 17u + (i >> 5) * group) % 26u));
    struct rng r;
    rng_seed(&r, (uint64_t)uniq << 32 | group);
    for (size_t i = shared; i < len; i++)
        buf[i] = (char)('a' + (rng_next(&r) >> 59) % 26u);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(unsigned n, const char *name, uint64_t *lat, size_t count)
{
    qsort(lat, count, sizeof(*lat), cmp_u64);
    printf("scale_%u_%s_p50 %.2f us\n", n, name, (double)lat[count / 2] / 1000.0);
    printf("scale_%u_%s_p99 %.2f us\n", n, name, (double)lat[count * 99 / 100] / 1000.0);
}

static void fill_cands(struct ca_candidate *c, unsigned n, unsigned s)
{
    for (unsigned w = 0; w < n; w++)
        c[w] = (struct ca_candidate){.slot = w, .load = (s >> (w % 16)) % 8, .rdv_seed = w + 1};
}

static void run_ca(unsigned n, int decisions, uint64_t *lat)
{
    struct pix_index *ix = pix_create(1u << 20);
    uint64_t h[1024];
    for (uint64_t i = 0; i < (1u << 20); i += 1024) {
        for (size_t k = 0; k < 1024; k++)
            h[k] = (i + k + 1) * 0x9e3779b97f4a7c15ull;
        pix_record(ix, h, 0, 1024, (uint32_t)(i / 1024 % n));
    }
    printf("scale_%u_pix_memory %.1f MiB\n", n, (double)pix_memory_bytes(ix) / (1 << 20));
    size_t len = TOKENS * 4;
    char *buf = malloc(len);
    struct ca_candidate *cands = calloc(n, sizeof(*cands));
    unsigned s = 7;
    for (int i = 0; i < WARM_UP + decisions; i++) {
        s = s * 1103515245u + 12345u;
        fill_prompt(buf, len, (s >> 8) % GROUPS, (unsigned)i + 7000021u);
        fill_cands(cands, n, s);
        struct ca_choice ch;
        uint64_t t0 = proc_monotonic_ns();
        ca_decide(ix, &params, "bench", buf, len, cands, n, &ch);
        uint64_t took = proc_monotonic_ns() - t0;
        if (i >= WARM_UP)
            lat[i - WARM_UP] = took;
    }
    free(cands);
    free(buf);
    pix_destroy(ix);
}

static void run_pca(unsigned n, int decisions, uint64_t *lat, uint64_t *chain_lat)
{
    /* Every worker's own blocks, then the 64 prefixes held by a few workers each. */
    size_t cap = (size_t)n * HELD_PER_WORKER * 2 + (1u << 16);
    struct kvh_index *ix = kvh_create(cap);
    uint64_t seed = tkc_seed("bench");
    for (unsigned w = 0; w < n; w++) {
        uint64_t prev = seed ^ ((uint64_t)(w + 1) * 0x9e3779b97f4a7c15ull);
        for (unsigned b = 0; b < HELD_PER_WORKER; b++) {
            prev = prev * 6364136223846793005ull + 1442695040888963407ull;
            kvh_add(ix, prev, w);
        }
    }
    size_t len = TOKENS * 4;
    char *buf = malloc(len);
    uint32_t *tokens = malloc(TOKENS * sizeof(uint32_t));
    uint64_t *chain = malloc((TOKENS / BLOCK) * sizeof(uint64_t));
    for (unsigned g = 0; g < GROUPS; g++) {
        fill_prompt(buf, len, g, 1);
        memcpy(tokens, buf, len);
        size_t nc = tkc_chain(seed, tokens, TOKENS * 3 / 4, BLOCK, chain, TOKENS / BLOCK);
        for (unsigned k = 0; k < 3; k++)
            for (size_t b = 0; b < nc; b++)
                kvh_add(ix, chain[b], (g * 7u + k * 131u) % n);
    }
    printf("scale_%u_kvh_facts %zu\n", n, kvh_count(ix));
    printf("scale_%u_kvh_memory %.1f MiB\n", n, (double)kvh_memory_bytes(ix) / (1 << 20));
    struct pca_spec *spec = pca_spec_create(2000);
    struct ca_candidate *cands = calloc(n, sizeof(*cands));
    unsigned s = 11;
    uint64_t now_ms = 1;
    for (int i = 0; i < WARM_UP + decisions; i++) {
        s = s * 1103515245u + 12345u;
        fill_prompt(buf, len, (s >> 8) % GROUPS, (unsigned)i + 9000011u);
        fill_cands(cands, n, s);
        struct ca_choice ch;
        /* The token ids as the data plane has them after its tokenizer
         * step: 4 bytes of text each; hashing them into the chain is the
         * request's, done once whatever the policy decides. */
        uint64_t t0 = proc_monotonic_ns();
        memcpy(tokens, buf, len);
        size_t nc = tkc_chain(seed, tokens, TOKENS, BLOCK, chain, TOKENS / BLOCK);
        uint64_t t1 = proc_monotonic_ns();
        pca_decide(ix, spec, &params, chain, nc, cands, n, now_ms, &ch);
        uint64_t t2 = proc_monotonic_ns();
        now_ms += 1;
        if (i >= WARM_UP) {
            lat[i - WARM_UP] = t2 - t1;
            chain_lat[i - WARM_UP] = t1 - t0;
        }
    }
    pca_spec_destroy(spec);
    free(cands);
    free(chain);
    free(tokens);
    free(buf);
    kvh_destroy(ix);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: micro_scale WORKERS [DECISIONS]\n");
        return 2;
    }
    unsigned n = (unsigned)atoi(argv[1]);
    int decisions = argc > 2 ? atoi(argv[2]) : 20000;
    if (n == 0 || n >= PIX_SLOT_LIMIT || decisions <= 0)
        return 2;
    uint64_t *lat = calloc((size_t)decisions, sizeof(uint64_t));
    run_ca(n, decisions, lat);
    report(n, "ca", lat, (size_t)decisions);
    uint64_t *chain_lat = calloc((size_t)decisions, sizeof(uint64_t));
    run_pca(n, decisions, lat, chain_lat);
    report(n, "pca", lat, (size_t)decisions);
    report(n, "pca_chain", chain_lat, (size_t)decisions);
    free(chain_lat);
    free(lat);
    return 0;
}
