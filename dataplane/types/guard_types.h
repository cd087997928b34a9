/* The types of guard.h: types only, including only types headers. */
#ifndef SY_DATAPLANE_GUARD_TYPES_H
#define SY_DATAPLANE_GUARD_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm/load_types.h"

/* Process-wide; dp_guards_init / dp_guards_fini. */
struct dp_guards {
    struct shm_segment *seg; /* borrowed */
    uint32_t lease;
    uint32_t max_workers;
    _Atomic uint64_t *live; /* max_workers words: generation << 32 | live guards */
};

/* One attempt's increment. Caller storage inside the attempt. */
struct dp_guard {
    struct shm_load_guard shm;
    bool held;
};

#endif
