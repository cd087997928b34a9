/*
 * Capped growable byte buffer; see buf.h for the contract. Growth doubles
 * from BUF_MIN_ALLOC and is clamped to max + 1 so the allocation never
 * exceeds what the cap allows; every size computation is written so that it
 * cannot overflow size_t (max may be SIZE_MAX - 1 at most in practice).
 */
#include "common/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MIN_ALLOC 256

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->max = max;
    b->err = 0;
}

void buf_fini(struct buf *b)
{
    free(b->data);
    buf_init(b, b->max);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

int buf_error(const struct buf *b)
{
    return b->err;
}

size_t buf_room(const struct buf *b)
{
    return b->err != 0 ? 0 : b->max - b->len;
}

/* Makes room for n more payload bytes plus the NUL. Does not set err. */
static int buf_grow(struct buf *b, size_t n)
{
    if (n > b->max - b->len)
        return -E2BIG;
    size_t need = b->len + n + 1; /* <= max + 1: no overflow unless max == SIZE_MAX */
    if (need == 0)
        return -E2BIG;
    if (need <= b->alloc)
        return 0;
    size_t alloc = b->alloc > 0 ? b->alloc : BUF_MIN_ALLOC;
    while (alloc < need && alloc <= SIZE_MAX / 2)
        alloc *= 2;
    if (alloc < need)
        alloc = need;
    if (alloc - 1 > b->max)
        alloc = b->max + 1;
    char *grown = realloc(b->data, alloc);
    if (grown == NULL)
        return -ENOMEM;
    b->data = grown;
    b->alloc = alloc;
    return 0;
}

int buf_append(struct buf *b, const void *src, size_t n)
{
    if (b->err != 0)
        return b->err;
    int rc = buf_grow(b, n);
    if (rc != 0) {
        b->err = rc;
        return rc;
    }
    if (n > 0)
        memcpy(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    if (b->err != 0)
        return b->err;
    va_list again;
    va_copy(again, ap);
    size_t room = b->alloc > b->len ? b->alloc - b->len : 0;
    int n = vsnprintf(room > 0 ? b->data + b->len : NULL, room, fmt, ap);
    int rc = 0;
    if (n < 0) {
        rc = -EINVAL;
    } else if ((size_t)n >= room) {
        /* Did not fit (or no memory yet): grow to the exact size and format again. */
        rc = buf_grow(b, (size_t)n);
        if (rc == 0)
            vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    if (rc != 0) {
        b->err = rc;
        if (b->data != NULL)
            b->data[b->len] = '\0'; /* undo a partial format */
        return rc;
    }
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_consume(struct buf *b, size_t n)
{
    /* Nothing to drop: no move either (a reader that consumes what it has
     * parsed after every read would otherwise move its whole unfinished
     * line each time, quadratic in the line). */
    if (b->data == NULL || n == 0)
        return;
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    b->data[b->len] = '\0';
}

int buf_reserve(struct buf *b, size_t n)
{
    if (b->err != 0 || n > b->max - b->len)
        return -E2BIG;
    size_t need = b->len + n + 1;
    if (need <= b->alloc)
        return 0;
    char *grown = realloc(b->data, need);
    if (grown == NULL)
        return -ENOMEM;
    if (b->data == NULL)
        grown[0] = '\0';
    b->data = grown;
    b->alloc = need;
    return 0;
}

int buf_make_room(struct buf *b, size_t n)
{
    if (b->err != 0)
        return b->err;
    int rc = buf_grow(b, n);
    if (rc == 0 && b->len == 0)
        b->data[0] = '\0'; /* a first allocation reads as "" */
    return rc;
}

void buf_shrink(struct buf *b)
{
    if (b->data == NULL || b->alloc <= b->len + 1)
        return;
    char *fit = realloc(b->data, b->len + 1);
    if (fit == NULL)
        return;
    b->data = fit;
    b->alloc = b->len + 1;
}

char *buf_detach(struct buf *b, size_t *len)
{
    char *data = b->data;
    if (data == NULL) {
        data = calloc(1, 1);
        if (data == NULL)
            return NULL;
    }
    if (len != NULL)
        *len = b->len;
    buf_init(b, b->max);
    return data;
}

int buf_adopt(struct buf *b, char *data, size_t len)
{
    if (len > b->max)
        return -E2BIG;
    free(b->data);
    b->data = data;
    b->len = len;
    b->alloc = len + 1;
    b->err = 0;
    return 0;
}
