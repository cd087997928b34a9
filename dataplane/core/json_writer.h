/*
 * A small JSON text writer into a fixed buffer, for the records the data
 * plane emits per request (access-log lines, trace spans): no allocation,
 * and valid JSON whatever the input. Strings are escaped (quote,
 * backslash, every control character) and checked as UTF-8: a byte that
 * does not start or continue a valid sequence (overlongs, surrogates and
 * code points past U+10FFFF included) is written as U+FFFD, so a hostile
 * model name or worker id can neither end the string nor make the line
 * unparsable.
 *
 * The caller writes the structure ('{', ',', ...) with dp_jw_raw. When the
 * buffer is full every further write is refused and dp_jw_ok turns false:
 * check once at the end and drop the record (never emit a truncated one).
 *
 * Ownership: caller storage over a caller's buffer. Threading: none.
 */
#ifndef SY_DATAPLANE_JSON_WRITER_H
#define SY_DATAPLANE_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dp_jw {
    char *buf;
    size_t len, cap;
    bool overflow;
};

void dp_jw_init(struct dp_jw *w, char *buf, size_t cap);
/* Bytes as they are (structure, or text known to be valid JSON). */
void dp_jw_raw(struct dp_jw *w, const char *s, size_t n);
void dp_jw_lit(struct dp_jw *w, const char *s);
/* A JSON string of n bytes of s, escaped and made valid UTF-8. */
void dp_jw_strn(struct dp_jw *w, const char *s, size_t n);
/* The same of a NUL-terminated s; NULL writes null. */
void dp_jw_str(struct dp_jw *w, const char *s);
void dp_jw_u64(struct dp_jw *w, uint64_t v);
/* A u64 as a JSON string ("123"): how OTLP/JSON spells 64-bit integers. */
void dp_jw_u64_str(struct dp_jw *w, uint64_t v);
/* "key": — the key is escaped like any string. */
void dp_jw_key(struct dp_jw *w, const char *key);
/* False once a write did not fit. */
bool dp_jw_ok(const struct dp_jw *w);

#endif
