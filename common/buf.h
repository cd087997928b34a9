/*
 * The one growable byte buffer, capped (curl's dynbuf rule): every buffer
 * gets a hard maximum at buf_init() and never grows past it, so a peer that
 * sends too much costs at most that many bytes. Use it for request and
 * response bodies, collected headers, Prometheus text, prompt text.
 *
 * Invariants: len <= max. data is NULL until the first append; after that
 * it is always NUL-terminated at data[len] (the NUL is not counted in len
 * or in max), so text can be handed to string functions and parsers
 * directly. Memory grows by doubling from 256 bytes, clamped to max + 1.
 * The first failure (-E2BIG past the cap, -ENOMEM) is sticky: it is kept in
 * err, the contents stay as they were before the failing call, and every
 * later append fails with the same code until buf_reset(). That lets a
 * writer issue many appends and check once (buf_error()), and a body that
 * was refused once is never accepted truncated in the middle.
 *
 * Ownership and threading: caller storage (struct buf inside the owner),
 * one thread at a time; no locking. buf_fini() frees; buf_detach() hands
 * the bytes over to the caller (free() them) and leaves the buffer empty.
 *
 * Adoption (dataplane request bodies, P/D responses): replace a
 * {data, len, cap} triple plus realloc loop by a struct buf initialised with
 * the configured limit (e.g. max_body); "too large" is buf_append() ==
 * -E2BIG; hand the bytes on with buf_detach() or read b.data / b.len.
 */
#ifndef SY_COMMON_BUF_H
#define SY_COMMON_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include "common/buf_types.h"

/* Static initialiser of an empty buffer capped at max bytes. */
#define BUF_INIT(max_bytes)                                                                        \
    {                                                                                              \
        NULL, 0, 0, (max_bytes), 0                                                                 \
    }

/* Makes b empty, capped at max payload bytes. Allocates nothing. */
void buf_init(struct buf *b, size_t max);

/* Frees the memory; b is empty again (same max), usable or droppable. */
void buf_fini(struct buf *b);

/* Empties b and clears its error, keeping the memory for reuse. */
void buf_reset(struct buf *b);

/*
 * Appends n bytes of src. Returns 0; -E2BIG when len + n would pass max;
 * -ENOMEM; or the sticky error of an earlier failure. On failure nothing is
 * appended. n == 0 succeeds (and allocates, so data becomes "").
 */
int buf_append(struct buf *b, const void *src, size_t n);

/* buf_append of a NUL-terminated string (without its NUL). */
int buf_append_str(struct buf *b, const char *s);

/* Appends printf-formatted text; same returns as buf_append (-EINVAL on a bad format). */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Drops the first n bytes (all when n >= len), moving the rest to the front. */
void buf_consume(struct buf *b, size_t n);

/*
 * Hands the bytes over: returns data (NUL-terminated; an allocated "" when
 * nothing was appended) and its length in *len (may be NULL); the caller
 * frees it. b is left empty with the same max and no error. Returns NULL
 * (b unchanged) only when allocating the empty string fails.
 */
char *buf_detach(struct buf *b, size_t *len);

/*
 * The other way: b's contents become data[0..len) (malloc'd, NUL at
 * data[len]; a body rewritten elsewhere), b owns it and frees its old
 * bytes. Returns 0, or -E2BIG when len > max (b unchanged, data still the
 * caller's): the cap holds for adopted bytes too.
 */
int buf_adopt(struct buf *b, char *data, size_t len);

/*
 * Gives back the growth slack: the allocation becomes len + 1 bytes, for a
 * buffer that is complete and will be kept a long time (a request body
 * held by a stream). Contents, cap and error are unchanged; when the
 * smaller allocation fails the buffer stays as it was. Later appends grow
 * it again as usual.
 */
void buf_shrink(struct buf *b);

/*
 * Makes room for n more bytes in one allocation, for a writer that knows
 * (or bounds) the final size: appends up to it then never reallocate and
 * copy. Returns 0, -E2BIG when n passes the cap or -ENOMEM; either way
 * nothing changes and no error is recorded (later appends grow as usual).
 */
int buf_reserve(struct buf *b, size_t n);

/*
 * Makes room for n more bytes the way an append grows (doubling, clamped
 * to the cap) but records no error: for a writer to whom "no room now" is
 * back-pressure rather than failure (the relay pauses its producer and
 * tries again once its reader made room). After it returns 0, appending up
 * to n bytes cannot fail. Returns 0, -E2BIG when n passes the cap (or the
 * sticky error, when there is one) or -ENOMEM; nothing changes on failure.
 */
int buf_make_room(struct buf *b, size_t n);

/* The sticky error, 0 when every append so far succeeded. */
int buf_error(const struct buf *b);

/* Bytes that may still be appended before the cap. */
size_t buf_room(const struct buf *b);

#endif
