/*
 * Small string helpers for hot paths. str_copy is snprintf(dst, size,
 * "%s", src) without the format machinery: about 600 instructions per call
 * in glibc for a short id (callgrind), most of a request's bookkeeping
 * copies. Header only: each is a few lines and inlined.
 */
#ifndef SY_COMMON_STR_H
#define SY_COMMON_STR_H

#include <stddef.h>
#include <string.h>

/* Copies src into dst[size] (size > 0), cut to size - 1 bytes and always
 * NUL-terminated, as snprintf with "%s" would; returns the bytes copied. */
static inline size_t str_copy(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
    return n;
}

#endif
