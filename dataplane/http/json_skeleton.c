/*
 * Long strings set aside from a JSON body (see json_skeleton.h). The scan
 * only has to find string boundaries: a string starts at a quote outside a
 * string and ends at the next quote not preceded by an odd run of
 * backslashes. Everything else is copied as it is for jansson to judge.
 *
 * Marker: the string "\u0001sy<nonce as 16 hex digits>.<index>". A client
 * cannot guess the nonce, so no real string is taken for a marker.
 */
#include "dataplane/http/json_skeleton.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/rng.h"

#define SKEL_MARK_RAW     "\"\\u0001sy" /* as written into the skeleton and as dumped */
#define SKEL_MARK_DECODED "\001sy"      /* as jansson decodes it */
#define SKEL_MARK_MAX     (sizeof(SKEL_MARK_RAW) + 16 + 1 + 20 + 2)

/* The skeleton and a spliced body are never longer than what they are
 * made from (a body already capped by max_body, or jansson's dump of it),
 * so their buffer needs no cap of its own. */
#define SKEL_BUF_MAX (SIZE_MAX - 1)

/* The closing quote of the string whose contents start at body[from], or len. */
static size_t skel_string_end(const char *body, size_t len, size_t from)
{
    size_t at = from;
    for (;;) {
        const char *q = memchr(body + at, '"', len - at);
        if (q == NULL)
            return len;
        size_t pos = (size_t)(q - body);
        size_t backslashes = 0;
        while (pos - backslashes > from && body[pos - backslashes - 1] == '\\')
            backslashes++;
        if (backslashes % 2 == 0)
            return pos;
        at = pos + 1;
    }
}

int dp_skel_build(struct dp_skel *s, const char *body, size_t len, size_t min_string,
                  uint64_t nonce)
{
    memset(s, 0, sizeof(*s));
    s->nonce = nonce;
    struct buf b = BUF_INIT(SKEL_BUF_MAX);
    size_t cap_spans = 0;
    size_t copied = 0; /* body[0..copied) is in the skeleton */
    size_t at = 0;
    int rc = 0;
    while (at < len) {
        const char *q = memchr(body + at, '"', len - at);
        if (q == NULL)
            break;
        size_t open = (size_t)(q - body);
        size_t end = skel_string_end(body, len, open + 1);
        if (end >= len)
            break; /* unterminated: left as it is, for jansson to refuse */
        if (end - (open + 1) >= min_string) {
            if (s->n_spans == cap_spans) {
                size_t ncap = cap_spans ? cap_spans * 2 : 8;
                struct dp_skel_span *ns = realloc(s->spans, ncap * sizeof(*ns));
                if (ns == NULL) {
                    rc = -ENOMEM;
                    goto out_fail;
                }
                s->spans = ns;
                cap_spans = ncap;
            }
            s->spans[s->n_spans] = (struct dp_skel_span){.off = open + 1, .len = end - open - 1};
            char mark[SKEL_MARK_MAX];
            int n = snprintf(mark, sizeof(mark), SKEL_MARK_RAW "%016" PRIx64 ".%zu\"", nonce,
                             s->n_spans);
            s->n_spans++;
            if (buf_append(&b, body + copied, open - copied) != 0 ||
                buf_append(&b, mark, (size_t)n) != 0) {
                rc = -ENOMEM;
                goto out_fail;
            }
            copied = end + 1;
        }
        at = end + 1;
    }
    if (buf_append(&b, body + copied, len - copied) != 0) {
        rc = -ENOMEM;
        goto out_fail;
    }
    s->text = buf_detach(&b, &s->len);
    return 0;

out_fail:
    buf_fini(&b);
    free(s->spans);
    memset(s, 0, sizeof(*s));
    return rc;
}

/* Parses "<16 hex>.<index>" after a marker prefix; the index or SIZE_MAX. */
static size_t skel_mark_index(const struct dp_skel *s, const char *p, size_t len, size_t *used)
{
    char want[17];
    snprintf(want, sizeof(want), "%016" PRIx64, s->nonce);
    if (len < 18 || memcmp(p, want, 16) != 0 || p[16] != '.')
        return SIZE_MAX;
    size_t idx = 0, i = 17;
    if (i >= len || p[i] < '0' || p[i] > '9')
        return SIZE_MAX;
    while (i < len && p[i] >= '0' && p[i] <= '9' && idx < s->n_spans)
        idx = idx * 10 + (size_t)(p[i++] - '0');
    if (idx >= s->n_spans)
        return SIZE_MAX;
    *used = i;
    return idx;
}

const struct dp_skel_span *dp_skel_span(const struct dp_skel *s, const char *str, size_t len)
{
    size_t mark = sizeof(SKEL_MARK_DECODED) - 1;
    if (s->n_spans == 0 || len <= mark || memcmp(str, SKEL_MARK_DECODED, mark) != 0)
        return NULL;
    size_t used = 0;
    size_t idx = skel_mark_index(s, str + mark, len - mark, &used);
    if (idx == SIZE_MAX || mark + used != len)
        return NULL;
    return &s->spans[idx];
}

char *dp_skel_splice(const struct dp_skel *s, const char *body, const char *dumped,
                     size_t dumped_len, size_t *out_len)
{
    struct buf b = BUF_INIT(SKEL_BUF_MAX);
    size_t mark = sizeof(SKEL_MARK_RAW) - 1;
    size_t at = 0;
    while (at < dumped_len) {
        const char *hit =
            s->n_spans > 0 ? memmem(dumped + at, dumped_len - at, SKEL_MARK_RAW, mark) : NULL;
        if (hit == NULL)
            break;
        size_t pos = (size_t)(hit - dumped);
        size_t used = 0;
        size_t idx = skel_mark_index(s, hit + mark, dumped_len - pos - mark, &used);
        size_t close = pos + mark + used;
        if (idx == SIZE_MAX || close >= dumped_len || dumped[close] != '"') {
            /* Not one of ours: copy the quote and look further. */
            if (buf_append(&b, dumped + at, pos + 1 - at) != 0)
                goto out_fail;
            at = pos + 1;
            continue;
        }
        const struct dp_skel_span *sp = &s->spans[idx];
        if (buf_append(&b, dumped + at, pos + 1 - at) != 0 ||
            buf_append(&b, body + sp->off, sp->len) != 0 || buf_append(&b, "\"", 1) != 0)
            goto out_fail;
        at = close + 1;
    }
    if (buf_append(&b, dumped + at, dumped_len - at) != 0)
        goto out_fail;
    return buf_detach(&b, out_len);

out_fail:
    buf_fini(&b);
    return NULL;
}

void dp_skel_fini(struct dp_skel *s)
{
    free(s->text);
    free(s->spans);
    memset(s, 0, sizeof(*s));
}

json_t *dp_skel_string(const struct dp_skel *s, const char *body, json_t *str)
{
    const struct dp_skel_span *sp =
        json_is_string(str) ? dp_skel_span(s, json_string_value(str), json_string_length(str))
                            : NULL;
    if (sp == NULL)
        return json_incref(str);
    char *quoted = malloc(sp->len + 2);
    if (quoted == NULL)
        return NULL;
    quoted[0] = '"';
    memcpy(quoted + 1, body + sp->off, sp->len);
    quoted[sp->len + 1] = '"';
    json_t *v = json_loadb(quoted, sp->len + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    free(quoted);
    if (v != NULL && !json_is_string(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

int dp_skel_doc_open(struct dp_skel_doc *d, const char *body, size_t len)
{
    d->body = body != NULL ? body : "";
    d->root = NULL;
    if (dp_skel_build(&d->skel, d->body, body != NULL ? len : 0, DP_SKEL_MIN_STRING,
                      rng_secret64()) != 0)
        return -ENOMEM;
    json_error_t jerr;
    /* As the request parser: an escaped NUL is valid JSON (and is dumped
     * back escaped). */
    d->root = json_loadb(d->skel.text, d->skel.len, JSON_ALLOW_NUL, &jerr);
    if (d->root == NULL || !json_is_object(d->root)) {
        json_decref(d->root);
        d->root = NULL;
        dp_skel_fini(&d->skel);
        return -EINVAL;
    }
    return 0;
}

int dp_skel_doc_close(struct dp_skel_doc *d, char **out, size_t *out_len)
{
    int rc = -ENOMEM;
    char *text = out != NULL ? json_dumps(d->root, JSON_COMPACT) : NULL;
    if (text != NULL) {
        *out = dp_skel_splice(&d->skel, d->body, text, strlen(text), out_len);
        rc = *out != NULL ? 0 : -ENOMEM;
        free(text);
    }
    json_decref(d->root);
    d->root = NULL;
    dp_skel_fini(&d->skel);
    return rc;
}
