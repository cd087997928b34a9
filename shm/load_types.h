/* The types of load.h: types only, including only types headers. */
#ifndef SY_SHM_LOAD_TYPES_H
#define SY_SHM_LOAD_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One increment's ownership. Caller storage (usually inside a request). */
struct shm_load_guard {
    uint32_t slot;
    uint32_t generation;
    uint32_t lease;
    bool held;
};

#endif
