/*
 * The KV-event batch decoder (see kv_event_decode.h): a cursor over the
 * msgpack bytes, written here rather than msgpack-c's unpacker because
 * that one builds a tree of every object in a zone whose size follows the
 * input (a payload of one-byte integers costs 24 bytes of memory per
 * byte), while this reads each value in place, writes only into the
 * decoder's fixed arrays and walks what it skips with a depth limit.
 *
 * An event map is read twice: once to find its "type" (msgspec writes the
 * tag first, but nothing in msgpack promises an order), then for its
 * fields. Fields are dispatched by name; an array event's element i is
 * the field named at position i of its kind's field list (the order of
 * vLLM's struct definitions), so both forms share one field reader.
 */
#include "controlplane/kv/kv_event_decode.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVD_DEFAULT_MAX_EVENTS    4096
#define KVD_DEFAULT_MAX_HASHES    65536
#define KVD_DEFAULT_MAX_TOKEN_IDS (1u << 20)
#define KVD_LORA_ARENA            (64 * 1024) /* LoRA names and salts of a batch */

struct kvd_decoder {
    struct kvd_limits lim;
    struct kv_event *events;
    uint64_t *hashes;
    uint32_t *tokens;
    char *arena; /* NUL-terminated LoRA names */
    /* Use of the arrays by the batch being decoded. */
    size_t n_events, n_hashes, n_tokens, arena_used;
    struct kvd_counts counts;
    char *err;
    size_t err_len;
};

struct cursor {
    const unsigned char *p;
    const unsigned char *end;
};

/* ---- errors ------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) static int fail(struct kvd_decoder *d, int rc,
                                                      const char *fmt, ...)
{
    if (d->err != NULL && d->err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* ---- msgpack primitives ------------------------------------------------------ */

static size_t left(const struct cursor *c)
{
    return (size_t)(c->end - c->p);
}

static bool take(struct cursor *c, size_t n, const unsigned char **out)
{
    if (left(c) < n)
        return false;
    *out = c->p;
    c->p += n;
    return true;
}

static uint64_t be(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Reads a big-endian length or value of n bytes. */
static bool take_be(struct cursor *c, size_t n, uint64_t *out)
{
    const unsigned char *p;
    if (!take(c, n, &p))
        return false;
    *out = be(p, n);
    return true;
}

static int peek(const struct cursor *c)
{
    return c->p < c->end ? *c->p : -1;
}

/* nil: consumed, true. */
static bool take_nil(struct cursor *c)
{
    if (peek(c) != 0xc0)
        return false;
    c->p++;
    return true;
}

/* An integer of any width; *neg when it was negative (value is then two's
 * complement). false when the next value is not an integer or is cut. */
static bool take_int(struct cursor *c, uint64_t *v, bool *neg)
{
    int b = peek(c);
    if (b < 0)
        return false;
    *neg = false;
    if (b <= 0x7f) {
        c->p++;
        *v = (uint64_t)b;
        return true;
    }
    if (b >= 0xe0) {
        c->p++;
        *v = (uint64_t)(int64_t)(int8_t)b;
        *neg = true;
        return true;
    }
    static const size_t width[] = {1, 2, 4, 8};
    if (b >= 0xcc && b <= 0xcf) {
        c->p++;
        return take_be(c, width[b - 0xcc], v);
    }
    if (b >= 0xd0 && b <= 0xd3) {
        c->p++;
        size_t w = width[b - 0xd0];
        if (!take_be(c, w, v))
            return false;
        if (w < 8 && (*v >> (8 * w - 1)) != 0)
            *v |= ~0ull << (8 * w); /* sign-extend */
        *neg = (int64_t)*v < 0;
        return true;
    }
    return false;
}

static bool take_float(struct cursor *c, double *out)
{
    int b = peek(c);
    uint64_t v;
    if (b == 0xca) {
        c->p++;
        if (!take_be(c, 4, &v))
            return false;
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, sizeof(f));
        *out = f;
        return true;
    }
    if (b == 0xcb) {
        c->p++;
        if (!take_be(c, 8, &v))
            return false;
        memcpy(out, &v, sizeof(*out));
        return true;
    }
    bool neg;
    if (!take_int(c, &v, &neg))
        return false;
    *out = neg ? (double)(int64_t)v : (double)v;
    return true;
}

/* A str (or, when bin_ok, a bin): its bytes in place. */
static bool take_bytes(struct cursor *c, bool bin_ok, const unsigned char **s, size_t *n)
{
    int b = peek(c);
    uint64_t len;
    if (b >= 0xa0 && b <= 0xbf) {
        c->p++;
        len = (uint64_t)(b & 0x1f);
    } else if (b >= 0xd9 && b <= 0xdb) {
        c->p++;
        if (!take_be(c, (size_t)1 << (b - 0xd9), &len))
            return false;
    } else if (bin_ok && b >= 0xc4 && b <= 0xc6) {
        c->p++;
        if (!take_be(c, (size_t)1 << (b - 0xc4), &len))
            return false;
    } else {
        return false;
    }
    if (len > left(c))
        return false;
    *n = (size_t)len;
    return take(c, *n, s);
}

static bool take_str_eq(struct cursor *c, const char *want)
{
    struct cursor save = *c;
    const unsigned char *s;
    size_t n;
    if (take_bytes(c, false, &s, &n) && n == strlen(want) && memcmp(s, want, n) == 0)
        return true;
    *c = save;
    return false;
}

/* An array (map: true) header; its count is checked against the bytes left
 * (each element takes at least one byte, a map entry two). */
static bool take_header(struct cursor *c, bool map, uint64_t *n)
{
    int b = peek(c);
    int fix = map ? 0x80 : 0x90;
    int h16 = map ? 0xde : 0xdc;
    if (b >= fix && b <= fix + 0x0f) {
        c->p++;
        *n = (uint64_t)(b & 0x0f);
    } else if (b == h16 || b == h16 + 1) {
        c->p++;
        if (!take_be(c, b == h16 ? 2 : 4, n))
            return false;
    } else {
        return false;
    }
    return *n <= left(c) / (map ? 2 : 1);
}

static bool is_map(const struct cursor *c)
{
    int b = peek(c);
    return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
}

static bool is_array(const struct cursor *c)
{
    int b = peek(c);
    return (b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd;
}

/* Skips one value of any type, containers to KVD_MAX_DEPTH levels. */
static bool skip(struct cursor *c, int depth)
{
    int b = peek(c);
    if (b < 0 || depth > KVD_MAX_DEPTH)
        return false;
    const unsigned char *p;
    uint64_t n, v;
    bool neg;
    if (take_int(c, &v, &neg))
        return true;
    if (b == 0xc0 || b == 0xc2 || b == 0xc3) {
        c->p++;
        return true;
    }
    if (b == 0xca || b == 0xcb) {
        double f;
        return take_float(c, &f);
    }
    if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb) || (b >= 0xc4 && b <= 0xc6)) {
        size_t len;
        return take_bytes(c, true, &p, &len);
    }
    if (b >= 0xd4 && b <= 0xd8) { /* fixext 1..16: type byte + data */
        c->p++;
        return take(c, 1 + ((size_t)1 << (b - 0xd4)), &p);
    }
    if (b >= 0xc7 && b <= 0xc9) { /* ext 8/16/32: length, type byte, data */
        c->p++;
        return take_be(c, (size_t)1 << (b - 0xc7), &n) && n < left(c) && take(c, 1 + (size_t)n, &p);
    }
    bool map = is_map(c);
    if (map || is_array(c)) {
        if (!take_header(c, map, &n))
            return false;
        for (uint64_t i = 0; i < n * (map ? 2 : 1); i++)
            if (!skip(c, depth + 1))
                return false;
        return true;
    }
    return false; /* 0xc1, never used */
}

/* ---- fields ------------------------------------------------------------------ */

enum field {
    F_UNKNOWN = 0,
    F_BLOCK_HASHES,
    F_PARENT,
    F_TOKEN_IDS,
    F_BLOCK_SIZE,
    F_MEDIUM,
    F_LORA_NAME,
    F_EXTRA_KEYS,
    F_GROUP_IDX,
    F_SPEC_KIND,
    F_IGNORED, /* known, not needed: lora_id, kv_cache_spec_sliding_window, ... */
};

struct field_name {
    const char *name;
    enum field f;
};

/* Each kind's fields in vLLM's declaration order (the array form's order). */
static const struct field_name stored_fields[] = {
    {"block_hashes", F_BLOCK_HASHES},
    {"parent_block_hash", F_PARENT},
    {"token_ids", F_TOKEN_IDS},
    {"block_size", F_BLOCK_SIZE},
    {"lora_id", F_IGNORED},
    {"medium", F_MEDIUM},
    {"lora_name", F_LORA_NAME},
    {"extra_keys", F_EXTRA_KEYS},
    {"group_idx", F_GROUP_IDX},
    {"kv_cache_spec_kind", F_SPEC_KIND},
    {"kv_cache_spec_sliding_window", F_IGNORED},
    {"locality", F_IGNORED},
};
static const struct field_name removed_fields[] = {
    {"block_hashes", F_BLOCK_HASHES},
    {"medium", F_MEDIUM},
    {"group_idx", F_GROUP_IDX},
    {"locality", F_IGNORED},
};

struct kind_def {
    const char *tag;
    enum kv_event_kind kind;
    const struct field_name *fields;
    size_t n_fields;
};

static const struct kind_def kinds[] = {
    {"BlockStored", KV_EVENT_BLOCK_STORED, stored_fields,
     sizeof(stored_fields) / sizeof(stored_fields[0])},
    {"BlockRemoved", KV_EVENT_BLOCK_REMOVED, removed_fields,
     sizeof(removed_fields) / sizeof(removed_fields[0])},
    {"AllBlocksCleared", KV_EVENT_ALL_BLOCKS_CLEARED, NULL, 0},
};

static const struct kind_def *kind_of(const unsigned char *tag, size_t n)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strlen(kinds[i].tag) == n && memcmp(kinds[i].tag, tag, n) == 0)
            return &kinds[i];
    return NULL;
}

static enum field field_named(const struct kind_def *k, const unsigned char *name, size_t n)
{
    for (size_t i = 0; i < k->n_fields; i++)
        if (strlen(k->fields[i].name) == n && memcmp(k->fields[i].name, name, n) == 0)
            return k->fields[i].f;
    return F_UNKNOWN;
}

/* A block hash: an integer (as unsigned 64-bit) or a digest's last 8 bytes. */
static bool take_hash(struct cursor *c, uint64_t *out)
{
    bool neg;
    if (take_int(c, out, &neg))
        return true;
    const unsigned char *s;
    size_t n;
    if (!take_bytes(c, true, &s, &n))
        return false;
    size_t k = n < 8 ? n : 8;
    *out = be(s + n - k, k);
    return true;
}

static int read_hashes(struct kvd_decoder *d, struct cursor *c, struct kv_event *e)
{
    uint64_t n;
    if (!take_header(c, false, &n))
        return fail(d, -EINVAL, "block_hashes: expected an array");
    if (n > d->lim.max_hashes - d->n_hashes)
        return fail(d, -E2BIG, "more than %zu block hashes in a batch", d->lim.max_hashes);
    uint64_t *out = d->hashes + d->n_hashes;
    for (uint64_t i = 0; i < n; i++)
        if (!take_hash(c, &out[i]))
            return fail(d, -EINVAL, "block_hashes[%llu]: expected an integer or bytes",
                        (unsigned long long)i);
    e->block_hashes = out;
    e->n_block_hashes = (size_t)n;
    d->n_hashes += (size_t)n;
    return 0;
}

static int read_tokens(struct kvd_decoder *d, struct cursor *c, struct kv_event *e)
{
    uint64_t n;
    if (!take_header(c, false, &n))
        return fail(d, -EINVAL, "token_ids: expected an array");
    if (n > d->lim.max_token_ids - d->n_tokens)
        return fail(d, -E2BIG, "more than %zu token ids in a batch", d->lim.max_token_ids);
    uint32_t *out = d->tokens + d->n_tokens;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v;
        bool neg;
        if (!take_int(c, &v, &neg) || neg || v > UINT32_MAX)
            return fail(d, -EINVAL, "token_ids[%llu]: expected an integer in 0..2^32-1",
                        (unsigned long long)i);
        out[i] = (uint32_t)v;
    }
    e->token_ids = out;
    e->n_token_ids = (size_t)n;
    d->n_tokens += (size_t)n;
    return 0;
}

/* The strings of extra_keys[0], the first block's extra keys: vLLM's
 * generate_block_hash_extra_keys makes them lora_name (with a LoRA), the
 * multimodal keys (arrays), cache_salt (the first block only), then
 * prompt-embedding digests (bytes). Only strings are kept, in place. */
struct extra_strs {
    const unsigned char *first, *last;
    size_t first_len, last_len, n;
};

static int read_extra_keys(struct kvd_decoder *d, struct cursor *c, struct extra_strs *x)
{
    uint64_t n;
    if (take_nil(c))
        return 0;
    if (!take_header(c, false, &n))
        return fail(d, -EINVAL, "extra_keys: expected nil or an array");
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k;
        if (i > 0) {
            if (!skip(c, 2))
                return fail(d, -EINVAL, "extra_keys: truncated");
            continue;
        }
        if (take_nil(c))
            continue;
        if (!take_header(c, false, &k))
            return fail(d, -EINVAL, "extra_keys[0]: expected nil or an array");
        for (uint64_t j = 0; j < k; j++) {
            const unsigned char *s;
            size_t len;
            if (take_bytes(c, false, &s, &len)) {
                if (x->n++ == 0) {
                    x->first = s;
                    x->first_len = len;
                }
                x->last = s;
                x->last_len = len;
            } else if (!skip(c, 3)) {
                return fail(d, -EINVAL, "extra_keys[0][%llu]: truncated", (unsigned long long)j);
            }
        }
    }
    return 0;
}

/* The salt among extra_keys[0]'s strings: the last one, unless the only
 * one is the LoRA name vLLM puts first. Copied into the arena. */
static void resolve_salt(struct kvd_decoder *d, const struct extra_strs *x, struct kv_event *e)
{
    if (x->n == 0 || e->has_parent)
        return; /* vLLM salts a chain's first block only */
    if (x->n == 1 && e->lora_name != NULL && strlen(e->lora_name) == x->first_len &&
        memcmp(e->lora_name, x->first, x->first_len) == 0)
        return;
    if (x->last_len > KVD_SALT_MAX || x->last_len + 1 > KVD_LORA_ARENA - d->arena_used) {
        e->salt_unreadable = true;
        return;
    }
    char *dst = d->arena + d->arena_used;
    memcpy(dst, x->last, x->last_len);
    dst[x->last_len] = '\0';
    d->arena_used += x->last_len + 1;
    e->salt = dst;
    e->salt_len = x->last_len;
}

static const struct {
    const char *name;
    enum kv_spec_kind kind;
} spec_kinds[] = {
    {"full_attention", KV_SPEC_FULL_ATTENTION},
    {"mla_attention", KV_SPEC_FULL_ATTENTION},
    {"sink_full_attention", KV_SPEC_FULL_ATTENTION},
    {"sliding_window", KV_SPEC_SLIDING_WINDOW},
    {"sliding_window_mla", KV_SPEC_SLIDING_WINDOW},
    {"chunked_local_attention", KV_SPEC_CHUNKED_LOCAL},
    {"mamba", KV_SPEC_MAMBA},
};

static enum kv_spec_kind spec_kind_of(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < sizeof(spec_kinds) / sizeof(spec_kinds[0]); i++)
        if (strlen(spec_kinds[i].name) == n && memcmp(spec_kinds[i].name, s, n) == 0)
            return spec_kinds[i].kind;
    return KV_SPEC_OTHER;
}

static int read_field(struct kvd_decoder *d, struct cursor *c, enum field f, struct kv_event *e,
                      struct extra_strs *x)
{
    const unsigned char *s;
    size_t n;
    uint64_t v;
    bool neg;
    switch (f) {
    case F_BLOCK_HASHES:
        return read_hashes(d, c, e);
    case F_PARENT:
        if (take_nil(c)) {
            e->has_parent = false;
            return 0;
        }
        if (!take_hash(c, &e->parent_block_hash))
            return fail(d, -EINVAL, "parent_block_hash: expected nil, an integer or bytes");
        e->has_parent = true;
        return 0;
    case F_TOKEN_IDS:
        return read_tokens(d, c, e);
    case F_BLOCK_SIZE:
        if (!take_int(c, &v, &neg) || neg || v > UINT32_MAX)
            return fail(d, -EINVAL, "block_size: expected an integer in 0..2^32-1");
        e->block_size = (uint32_t)v;
        return 0;
    case F_MEDIUM:
        if (take_nil(c)) {
            e->medium = KV_MEDIUM_GPU;
            return 0;
        }
        if (!take_bytes(c, false, &s, &n))
            return fail(d, -EINVAL, "medium: expected nil or a string");
        e->medium = n == 3 && memcmp(s, "GPU", 3) == 0       ? KV_MEDIUM_GPU
                    : n == 3 && memcmp(s, "CPU", 3) == 0     ? KV_MEDIUM_CPU
                    : n == 7 && memcmp(s, "STORAGE", 7) == 0 ? KV_MEDIUM_STORAGE
                                                             : KV_MEDIUM_OTHER;
        return 0;
    case F_LORA_NAME:
        if (take_nil(c)) {
            e->lora_name = NULL;
            return 0;
        }
        if (!take_bytes(c, false, &s, &n))
            return fail(d, -EINVAL, "lora_name: expected nil or a string");
        if (n > KVD_LORA_NAME_MAX || memchr(s, '\0', n) != NULL)
            return fail(d, n > KVD_LORA_NAME_MAX ? -E2BIG : -EINVAL,
                        "lora_name: longer than %d bytes or holding a NUL", KVD_LORA_NAME_MAX);
        if (n + 1 > KVD_LORA_ARENA - d->arena_used)
            return fail(d, -E2BIG, "LoRA names of a batch over %d bytes", KVD_LORA_ARENA);
        char *dst = d->arena + d->arena_used;
        memcpy(dst, s, n);
        dst[n] = '\0';
        d->arena_used += n + 1;
        e->lora_name = dst;
        return 0;
    case F_EXTRA_KEYS:
        return read_extra_keys(d, c, x);
    case F_GROUP_IDX:
        if (take_nil(c)) {
            e->has_group = false;
            return 0;
        }
        if (!take_int(c, &v, &neg) || neg || v > UINT32_MAX)
            return fail(d, -EINVAL, "group_idx: expected nil or an integer in 0..2^32-1");
        e->has_group = true;
        e->group_idx = (uint32_t)v;
        return 0;
    case F_SPEC_KIND:
        if (take_nil(c)) {
            e->spec_kind = KV_SPEC_UNSET;
            return 0;
        }
        if (!take_bytes(c, false, &s, &n))
            return fail(d, -EINVAL, "kv_cache_spec_kind: expected nil or a string");
        e->spec_kind = spec_kind_of(s, n);
        return 0;
    case F_UNKNOWN:
        d->counts.unknown_fields++;
        __attribute__((fallthrough));
    default:
        return skip(c, 1) ? 0 : fail(d, -EINVAL, "truncated or malformed value");
    }
}

/* ---- events ------------------------------------------------------------------ */

/* The tag of a map event (the cursor is left where it was). 0, or 1 when
 * the map has no "type", or <0. */
static int map_tag(struct kvd_decoder *d, struct cursor c, const unsigned char **tag, size_t *n)
{
    uint64_t entries;
    if (!take_header(&c, true, &entries))
        return fail(d, -EINVAL, "event: bad map header");
    for (uint64_t i = 0; i < entries; i++) {
        if (take_str_eq(&c, "type")) {
            if (!take_bytes(&c, false, tag, n))
                return fail(d, -EINVAL, "event type: expected a string");
            return 0;
        }
        if (!skip(&c, 2) || !skip(&c, 2))
            return fail(d, -EINVAL, "event: truncated map");
    }
    return 1;
}

/* One event into d->events (unless its tag is unknown: skipped, counted). */
static int read_event(struct kvd_decoder *d, struct cursor *c)
{
    const unsigned char *tag;
    size_t tag_len;
    uint64_t n;
    bool map = is_map(c);
    struct cursor body = *c;
    if (map) {
        int rc = map_tag(d, *c, &tag, &tag_len);
        if (rc < 0)
            return rc;
        if (rc > 0)
            return fail(d, -EINVAL, "event map without a \"type\"");
        (void)take_header(&body, true, &n);
    } else {
        if (!take_header(&body, false, &n) || n == 0 || !take_bytes(&body, false, &tag, &tag_len))
            return fail(d, -EINVAL, "event: expected a map or an array starting with its tag");
        n--;
    }
    const struct kind_def *k = kind_of(tag, tag_len);
    if (k == NULL) {
        d->counts.unknown_events++;
        return skip(c, 1) ? 0 : fail(d, -EINVAL, "event: truncated");
    }
    if (d->n_events == d->lim.max_events)
        return fail(d, -E2BIG, "more than %zu events in a batch", d->lim.max_events);
    struct kv_event *e = &d->events[d->n_events];
    memset(e, 0, sizeof(*e));
    e->kind = k->kind;
    e->medium = KV_MEDIUM_GPU;
    struct extra_strs x = {0};
    for (uint64_t i = 0; i < n; i++) {
        enum field f;
        if (map) {
            if (take_str_eq(&body, "type")) {
                if (!skip(&body, 2))
                    return fail(d, -EINVAL, "event: truncated");
                continue;
            }
            const unsigned char *key;
            size_t key_len;
            if (take_bytes(&body, false, &key, &key_len)) {
                f = field_named(k, key, key_len);
            } else if (skip(&body, 2)) {
                f = F_UNKNOWN; /* a key that is not a string */
            } else {
                return fail(d, -EINVAL, "event: truncated");
            }
        } else {
            f = i < k->n_fields ? k->fields[i].f : F_UNKNOWN;
        }
        int rc = read_field(d, &body, f, e, &x);
        if (rc != 0)
            return rc;
    }
    if (e->kind == KV_EVENT_BLOCK_STORED)
        resolve_salt(d, &x, e);
    d->n_events++;
    *c = body;
    return 0;
}

static int read_events(struct kvd_decoder *d, struct cursor *c)
{
    uint64_t n;
    if (!take_header(c, false, &n))
        return fail(d, -EINVAL, "events: expected an array");
    for (uint64_t i = 0; i < n; i++) {
        int rc = read_event(d, c);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int read_rank(struct kvd_decoder *d, struct cursor *c, int *rank)
{
    if (take_nil(c)) {
        *rank = -1;
        return 0;
    }
    uint64_t v;
    bool neg;
    if (!take_int(c, &v, &neg) || neg || v > 1u << 20)
        return fail(d, -EINVAL, "data_parallel_rank: expected nil or a small integer");
    *rank = (int)v;
    return 0;
}

/* ---- the batch --------------------------------------------------------------- */

static int read_batch(struct kvd_decoder *d, struct cursor *c, struct kv_event_batch *out)
{
    uint64_t n;
    bool have_events = false;
    int rc = 0;
    if (is_map(c)) {
        if (!take_header(c, true, &n))
            return fail(d, -EINVAL, "batch: bad map header");
        for (uint64_t i = 0; i < n && rc == 0; i++) {
            if (take_str_eq(c, "ts")) {
                if (!take_float(c, &out->ts))
                    rc = fail(d, -EINVAL, "ts: expected a number");
            } else if (take_str_eq(c, "events")) {
                rc = read_events(d, c);
                have_events = true;
            } else if (take_str_eq(c, "data_parallel_rank")) {
                rc = read_rank(d, c, &out->dp_rank);
            } else {
                d->counts.unknown_fields++;
                if (!skip(c, 1) || !skip(c, 1))
                    rc = fail(d, -EINVAL, "batch: truncated map");
            }
        }
    } else if (is_array(c)) {
        if (!take_header(c, false, &n) || n < 2)
            return fail(d, -EINVAL, "batch: expected [ts, events, data_parallel_rank]");
        if (!take_float(c, &out->ts))
            return fail(d, -EINVAL, "ts: expected a number");
        rc = read_events(d, c);
        have_events = true;
        if (rc == 0 && n >= 3)
            rc = read_rank(d, c, &out->dp_rank);
        for (uint64_t i = 3; i < n && rc == 0; i++) {
            d->counts.unknown_fields++;
            if (!skip(c, 1))
                rc = fail(d, -EINVAL, "batch: truncated");
        }
    } else {
        return fail(d, -EINVAL, "batch: expected an array or a map");
    }
    if (rc == 0 && !have_events)
        rc = fail(d, -EINVAL, "batch without events");
    return rc;
}

int kvd_decode(struct kvd_decoder *d, const void *data, size_t len, struct kv_event_batch *out,
               struct kvd_counts *counts, char *err, size_t err_len)
{
    d->n_events = d->n_hashes = d->n_tokens = d->arena_used = 0;
    memset(&d->counts, 0, sizeof(d->counts));
    d->err = err;
    d->err_len = err_len;
    if (err != NULL && err_len > 0)
        err[0] = '\0';
    memset(out, 0, sizeof(*out));
    out->dp_rank = -1;
    struct cursor c = {.p = data, .end = (const unsigned char *)data + len};
    int rc = data == NULL && len > 0 ? fail(d, -EINVAL, "no data") : read_batch(d, &c, out);
    if (rc == 0 && c.p != c.end)
        rc = fail(d, -EINVAL, "%zu bytes after the batch", left(&c));
    if (counts != NULL) {
        counts->unknown_fields += d->counts.unknown_fields;
        counts->unknown_events += d->counts.unknown_events;
    }
    if (rc != 0) {
        memset(out, 0, sizeof(*out));
        out->dp_rank = -1;
        return rc;
    }
    out->events = d->events;
    out->n_events = d->n_events;
    return 0;
}

/* ---- lifecycle --------------------------------------------------------------- */

struct kvd_decoder *kvd_create(const struct kvd_limits *limits)
{
    struct kvd_decoder *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    if (limits != NULL)
        d->lim = *limits;
    if (d->lim.max_events == 0)
        d->lim.max_events = KVD_DEFAULT_MAX_EVENTS;
    if (d->lim.max_hashes == 0)
        d->lim.max_hashes = KVD_DEFAULT_MAX_HASHES;
    if (d->lim.max_token_ids == 0)
        d->lim.max_token_ids = KVD_DEFAULT_MAX_TOKEN_IDS;
    d->events = calloc(d->lim.max_events, sizeof(*d->events));
    d->hashes = calloc(d->lim.max_hashes, sizeof(*d->hashes));
    d->tokens = calloc(d->lim.max_token_ids, sizeof(*d->tokens));
    d->arena = malloc(KVD_LORA_ARENA);
    if (d->events == NULL || d->hashes == NULL || d->tokens == NULL || d->arena == NULL) {
        kvd_destroy(d);
        return NULL;
    }
    return d;
}

void kvd_destroy(struct kvd_decoder *d)
{
    if (d == NULL)
        return;
    free(d->events);
    free(d->hashes);
    free(d->tokens);
    free(d->arena);
    free(d);
}
