/*
 * Micro-benchmark of cache_aware's decision (hashing, index lookups and
 * recording included) with 256 workers and an index pre-filled with 1M
 * blocks: p50/p99 per decision for 8K- and 32K-token prompts (4 bytes per
 * token) cycling through 256 prompts, for 8K-token prompts that are each
 * a new question, on one thread and with several threads sharing the index.
 * Prints "name value unit" lines for tests/bench/run.sh.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proc.h"
#include "common/rng.h"
#include "dataplane/policy/cache_aware.h"
#include "shm/prefix_index.h"

#define WORKERS 256
#define GROUPS  64

struct run {
    struct pix_index *ix;
    size_t tokens;
    int decisions;
    unsigned seed;
    uint64_t *lat_ns;
};

/* cache_aware as configured by default (rendezvous on, bound 1.25). */
static const struct ca_params params = {.cache_threshold = 0.5,
                                        .balance_abs_threshold = 32,
                                        .balance_rel_threshold = 1.5,
                                        .balance_gate = CFG_BALANCE_GATE_PER_REQUEST,
                                        .rendezvous = true,
                                        .bounded_load_factor = 1.25};

/* Prompts share one of GROUPS system prefixes (3/4 of the text) and end
 * with a question of their own, as in a shared-prefix workload. The
 * question's letters come from a generator seeded by `uniq`, so two
 * prompts' questions differ from their first block (a formula of the
 * position and the seed, as this once was, repeats after 26 seeds, and
 * the "new" questions were mostly recorded already). */
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

#define PROMPTS 256

/* Prompts are generated before timing starts; decisions cycle through them.
 * After the first cycle every prompt is recorded whole: a decision hashes
 * its question (the memo holds its family's latest prompt, another one)
 * and records nothing new, as for repeated questions in a real workload. */
static void *run_decisions(void *arg)
{
    struct run *r = arg;
    size_t len = r->tokens * 4;
    char *buf = malloc(len * PROMPTS);
    struct ca_candidate cands[WORKERS];
    unsigned s = r->seed;
    for (int p = 0; p < PROMPTS; p++) {
        s = s * 1103515245u + 12345u;
        fill_prompt(buf + (size_t)p * len, len, (s >> 8) % GROUPS,
                    (unsigned)p + r->seed * 1000003u);
    }
    for (int i = 0; i < r->decisions; i++) {
        s = s * 1103515245u + 12345u;
        for (int w = 0; w < WORKERS; w++)
            cands[w] = (struct ca_candidate){.slot = (uint32_t)w, .load = (s >> (w % 16)) % 8};
        struct ca_choice ch;
        uint64_t t0 = proc_monotonic_ns();
        ca_decide(r->ix, &params, "bench", buf + (size_t)(i % PROMPTS) * len, len, cands, WORKERS,
                  &ch);
        r->lat_ns[i] = proc_monotonic_ns() - t0;
    }
    free(buf);
    return NULL;
}

/* The common case of a shared-prefix workload: every decision is a new
 * question after one of the GROUPS prefixes, so its tail is hashed and
 * recorded for the first time (in the cycling runs above, a repeat visit
 * has its whole prompt recorded already). The prompt is written just
 * before its decision, as the dataplane has just read and scanned it;
 * WARM_UP decisions first, untimed, so the index and the hash memo hold
 * every prefix. */
#define WARM_UP 2000

static void run_new_questions(struct run *r)
{
    size_t len = r->tokens * 4;
    char *buf = malloc(len);
    struct ca_candidate cands[WORKERS];
    unsigned s = r->seed;
    for (int i = 0; i < WARM_UP + r->decisions; i++) {
        s = s * 1103515245u + 12345u;
        fill_prompt(buf, len, (s >> 8) % GROUPS, (unsigned)i + r->seed * 1000003u);
        for (int w = 0; w < WORKERS; w++)
            cands[w] = (struct ca_candidate){.slot = (uint32_t)w, .load = (s >> (w % 16)) % 8};
        struct ca_choice ch;
        uint64_t t0 = proc_monotonic_ns();
        ca_decide(r->ix, &params, "bench", buf, len, cands, WORKERS, &ch);
        uint64_t took = proc_monotonic_ns() - t0;
        if (i >= WARM_UP)
            r->lat_ns[i - WARM_UP] = took;
    }
    free(buf);
}

static void report(const char *name, uint64_t *lat, size_t n)
{
    qsort(lat, n, sizeof(*lat), cmp_u64);
    printf("%s_p50 %.2f us\n", name, (double)lat[n / 2] / 1000.0);
    printf("%s_p99 %.2f us\n", name, (double)lat[n * 99 / 100] / 1000.0);
}

int main(int argc, char **argv)
{
    int decisions = argc > 1 ? atoi(argv[1]) : 20000;
    struct pix_index *ix = pix_create(1u << 20);
    /* Pre-fill with 1M distinct blocks. */
    uint64_t h[1024];
    for (uint64_t i = 0; i < (1u << 20); i += 1024) {
        for (size_t k = 0; k < 1024; k++)
            h[k] = (i + k + 1) * 0x9e3779b97f4a7c15ull;
        pix_record(ix, h, 0, 1024, (uint32_t)(i / 1024 % WORKERS));
    }
    printf("pix_memory %.1f MiB\n", (double)pix_memory_bytes(ix) / (1 << 20));
    size_t sizes[2] = {8192, 32768};
    for (int k = 0; k < 2; k++) {
        struct run r = {.ix = ix, .tokens = sizes[k], .decisions = decisions, .seed = 1};
        r.lat_ns = calloc((size_t)decisions, sizeof(uint64_t));
        run_decisions(&r);
        char name[64];
        snprintf(name, sizeof(name), "cache_aware_%zuk", sizes[k] / 1024);
        report(name, r.lat_ns, (size_t)decisions);
        free(r.lat_ns);
    }
    {
        struct run r = {.ix = ix, .tokens = 8192, .decisions = decisions, .seed = 7};
        r.lat_ns = calloc((size_t)decisions, sizeof(uint64_t));
        run_new_questions(&r);
        report("cache_aware_8k_new", r.lat_ns, (size_t)decisions);
        free(r.lat_ns);
    }
    /* Throughput as threads are added (8K-token prompts). */
    for (int threads = 1; threads <= 4; threads *= 2) {
        pthread_t tid[4];
        struct run r[4];
        uint64_t t0 = proc_monotonic_ns();
        /* Includes each thread's prompt generation; compare across rows only. */
        for (int t = 0; t < threads; t++) {
            r[t] = (struct run){
                .ix = ix, .tokens = 8192, .decisions = decisions / 2, .seed = 100u + (unsigned)t};
            r[t].lat_ns = calloc((size_t)decisions, sizeof(uint64_t));
            pthread_create(&tid[t], NULL, run_decisions, &r[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            free(r[t].lat_ns);
        }
        double secs = (double)(proc_monotonic_ns() - t0) / 1e9;
        printf("cache_aware_8k_threads_%d %.0f decisions/s\n", threads,
               (double)threads * (decisions / 2) / secs);
    }
    pix_destroy(ix);
    return 0;
}
