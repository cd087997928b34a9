/*
 * Micro-benchmark of the load counters: one uncontended increment+decrement
 * (a guard's whole life) and reading the loads of 256 workers for one
 * routing decision. Prints "name value unit" lines for tests/bench/run.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "shm/lease.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"

#define WORKERS 256

int main(void)
{
    char name[64], err[512];
    snprintf(name, sizeof(name), "/sy-bench-%d", (int)getpid());
    struct shm_segment seg;
    enum shm_open_outcome outcome;
    if (shm_segment_open_owner(&seg, name, 1024, 8, &outcome, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct shm_segment dp;
    struct shm_lease_handle lease;
    if (shm_segment_attach(&dp, name, err, sizeof(err)) != 0 ||
        shm_lease_claim(&dp, &lease, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    uint32_t slots[WORKERS], gens[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        struct shm_worker_info w = {.role = CFG_ROLE_REGULAR, .healthy = true}, placed;
        snprintf(w.id, sizeof(w.id), "w%d", i);
        snprintf(w.url, sizeof(w.url), "http://127.0.0.1:%d", 10000 + i);
        if (shm_registry_add(&seg, &w, &placed) != 0)
            return 1;
        slots[i] = placed.slot;
        gens[i] = placed.generation;
    }

    enum { PAIRS = 20000000, READS = 200000 };
    uint64_t t0 = proc_monotonic_ns();
    for (int i = 0; i < PAIRS; i++) {
        struct shm_load_guard g;
        shm_load_acquire(&dp, lease.index, slots[i & 7], gens[i & 7], &g);
        shm_load_release(&dp, &g);
    }
    uint64_t t1 = proc_monotonic_ns();
    printf("shm_inc_dec_pair %.1f ns\n", (double)(t1 - t0) / PAIRS);

    /* Some load everywhere so the sums do real work. */
    struct shm_load_guard held[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        shm_load_acquire(&dp, lease.index, slots[i], gens[i], &held[i]);
    uint64_t loads[WORKERS], check = 0;
    t0 = proc_monotonic_ns();
    for (int i = 0; i < READS; i++) {
        shm_load_read_many(&dp, slots, gens, WORKERS, loads);
        check += loads[i % WORKERS];
    }
    t1 = proc_monotonic_ns();
    printf("shm_read_256_loads %.3f us\n", (double)(t1 - t0) / READS / 1000.0);
    if (check != READS) {
        fprintf(stderr, "unexpected load sum %llu\n", (unsigned long long)check);
        return 1;
    }
    for (int i = 0; i < WORKERS; i++)
        shm_load_release(&dp, &held[i]);
    shm_lease_release(&lease);
    shm_segment_close(&dp);
    shm_segment_close(&seg);
    shm_segment_unlink(name);
    return 0;
}
