/* The types of buf.h: types only, including only types headers. */
#ifndef SY_COMMON_BUF_TYPES_H
#define SY_COMMON_BUF_TYPES_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Caller storage; buf_init / buf_fini. Fields are readable; write through the API. */
struct buf {
    char *data;   /* NULL until the first append; then NUL-terminated at len */
    size_t len;   /* payload bytes */
    size_t alloc; /* bytes allocated, payload + NUL */
    size_t max;   /* hard cap on len, fixed at buf_init */
    int err;      /* first failure (negative errno), 0 = none; sticky until buf_reset */
};

#endif
