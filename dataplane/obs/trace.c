/*
 * W3C trace context (see trace.h).
 */
#include "dataplane/obs/trace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/rng.h"

#define DP_TP_PREFIX "traceparent: "

static int tp_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case is invalid too */
}

/* n lowercase hex digits at s into *out (n <= 16). */
static bool tp_hex(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = tp_hexval(s[i]);
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

int dp_trace_parse(const char *value, struct dp_trace_ctx *ctx)
{
    if (value == NULL)
        return -EINVAL;
    size_t len = strlen(value);
    uint64_t version, hi, lo, parent, flags;
    if (len < DP_TRACEPARENT_LEN || !tp_hex(value, 2, &version) || version == 0xff ||
        value[2] != '-' || !tp_hex(value + 3, 16, &hi) || !tp_hex(value + 19, 16, &lo) ||
        value[35] != '-' || !tp_hex(value + 36, 16, &parent) || value[52] != '-' ||
        !tp_hex(value + 53, 2, &flags))
        return -EINVAL;
    /* Version 00 is exactly this long; a later one may carry more after a '-'. */
    if (version == 0 ? len != DP_TRACEPARENT_LEN : len > DP_TRACEPARENT_LEN && value[55] != '-')
        return -EINVAL;
    if ((hi == 0 && lo == 0) || parent == 0)
        return -EINVAL;
    ctx->trace_hi = hi;
    ctx->trace_lo = lo;
    ctx->parent_id = parent;
    /* Only the sampled bit is defined for version 00: pass that on. */
    ctx->flags = (uint8_t)(flags & 0x01);
    return 0;
}

void dp_trace_hex64(char out[16], uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++)
        out[i] = hex[(v >> (60 - 4 * i)) & 0xf];
}

void dp_trace_format(const struct dp_trace_ctx *ctx, uint64_t span_id,
                     char out[DP_TRACEPARENT_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "00-", 3);
    dp_trace_hex64(out + 3, ctx->trace_hi);
    dp_trace_hex64(out + 19, ctx->trace_lo);
    out[35] = '-';
    dp_trace_hex64(out + 36, span_id);
    out[52] = '-';
    out[53] = hex[ctx->flags >> 4 & 0xf];
    out[54] = hex[ctx->flags & 0xf];
    out[55] = '\0';
}

uint64_t dp_trace_new_id(void)
{
    uint64_t v;
    while ((v = rng_secret64()) == 0)
        ;
    return v;
}

bool dp_trace_start(struct dp_trace_ctx *ctx, const char *client_traceparent)
{
    ctx->span_id = dp_trace_new_id();
    ctx->header = NULL;
    if (dp_trace_parse(client_traceparent, ctx) == 0)
        return true;
    do {
        ctx->trace_hi = rng_secret64();
        ctx->trace_lo = rng_secret64();
    } while (ctx->trace_hi == 0 && ctx->trace_lo == 0);
    ctx->parent_id = 0;
    ctx->flags = 0x01;
    return false;
}

bool dp_trace_header_is_replaced(const char *name, size_t len, bool keep_state)
{
    if (len == 11 && strncasecmp(name, "traceparent", 11) == 0)
        return true;
    return !keep_state && len == 10 && strncasecmp(name, "tracestate", 10) == 0;
}

int dp_trace_add_header(struct dp_trace_ctx *ctx, struct curl_slist **list)
{
    char line[sizeof(DP_TP_PREFIX) + DP_TRACEPARENT_LEN];
    memcpy(line, DP_TP_PREFIX, sizeof(DP_TP_PREFIX) - 1);
    dp_trace_format(ctx, ctx->span_id, line + sizeof(DP_TP_PREFIX) - 1);
    struct curl_slist *nl = curl_slist_append(*list, line);
    if (nl == NULL)
        return -ENOMEM;
    *list = nl;
    struct curl_slist *last = nl;
    while (last->next != NULL)
        last = last->next;
    ctx->header = last;
    return 0;
}

void dp_trace_set_span(struct dp_trace_ctx *ctx, uint64_t span_id)
{
    if (ctx->header == NULL ||
        strlen(ctx->header->data) != sizeof(DP_TP_PREFIX) - 1 + DP_TRACEPARENT_LEN)
        return;
    dp_trace_hex64(ctx->header->data + sizeof(DP_TP_PREFIX) - 1 + 36, span_id);
}
