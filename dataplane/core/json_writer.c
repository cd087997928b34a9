/*
 * The JSON text writer (see json_writer.h). The UTF-8 check follows the
 * well-formed byte sequences table of Unicode 15, chapter 3 (table 3-7).
 */
#include "dataplane/core/json_writer.h"

#include <stdio.h>
#include <string.h>

void dp_jw_init(struct dp_jw *w, char *buf, size_t cap)
{
    w->buf = buf;
    w->len = 0;
    w->cap = cap;
    w->overflow = false;
}

void dp_jw_raw(struct dp_jw *w, const char *s, size_t n)
{
    if (w->overflow || n > w->cap - w->len) {
        w->overflow = true;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

void dp_jw_lit(struct dp_jw *w, const char *s)
{
    dp_jw_raw(w, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t jw_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* bounds of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* no overlongs */
        else if (c == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

void dp_jw_strn(struct dp_jw *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    dp_jw_raw(w, "\"", 1);
    size_t i = 0;
    while (i < n && !w->overflow) {
        /* The longest run that needs no escape goes in one copy. */
        size_t run = i;
        while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
            run++;
        if (run > i) {
            dp_jw_raw(w, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            dp_jw_raw(w, e, 2);
            i++;
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};
            dp_jw_raw(w, e, 6);
            i++;
        } else {
            size_t len = jw_utf8_len(p + i, n - i);
            if (len == 0) {
                dp_jw_raw(w, "\\ufffd", 6);
                i++;
            } else {
                dp_jw_raw(w, s + i, len);
                i += len;
            }
        }
    }
    dp_jw_raw(w, "\"", 1);
}

void dp_jw_str(struct dp_jw *w, const char *s)
{
    if (s == NULL)
        dp_jw_raw(w, "null", 4);
    else
        dp_jw_strn(w, s, strlen(s));
}

void dp_jw_u64(struct dp_jw *w, uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
    dp_jw_raw(w, num, (size_t)n);
}

void dp_jw_u64_str(struct dp_jw *w, uint64_t v)
{
    dp_jw_raw(w, "\"", 1);
    dp_jw_u64(w, v);
    dp_jw_raw(w, "\"", 1);
}

void dp_jw_key(struct dp_jw *w, const char *key)
{
    dp_jw_str(w, key);
    dp_jw_raw(w, ":", 1);
}

bool dp_jw_ok(const struct dp_jw *w)
{
    return !w->overflow;
}
