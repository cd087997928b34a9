/*
 * The PodList scanner (see source_kubernetes_list.h). A state machine over
 * the top-level object; inside a member's value (or an item) only the
 * nesting depth and the string state are tracked, and the bytes are copied
 * when the value is one the source reads. A scalar value has no closing
 * byte: it ends at the first delimiter, which is then read again in the
 * state after the value.
 */
#include "controlplane/sources/source_kubernetes_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    LS_BEGIN = 0,   /* white space, then '{' */
    LS_KEY_OR_END,  /* after '{': a key or '}' */
    LS_KEY,         /* after ',': a key */
    LS_IN_KEY,      /* inside a key's string */
    LS_COLON,       /* after a key */
    LS_VALUE,       /* after ':' */
    LS_IN_VALUE,    /* inside a value (or an item) */
    LS_AFTER_VALUE, /* ',' or '}' */
    LS_ITEM_OR_END, /* after the items array's '[' */
    LS_ITEM,        /* after ',' in the items array */
    LS_AFTER_ITEM,  /* ',' or ']' */
    LS_DONE,        /* white space only */
};

enum {
    LS_SKIP = 0, /* a member the source does not read */
    LS_KEEP,     /* kind, apiVersion, metadata */
    LS_ELEMENT,  /* an element of items */
};

static const char *const kept_members[] = {"kind", "apiVersion", "metadata"};

void kube_ls_init(struct kube_list_scan *s, size_t max_value, kube_ls_item_fn on_item, void *user)
{
    memset(s, 0, sizeof(*s));
    s->max_value = max_value;
    s->on_item = on_item;
    s->user = user;
    kube_ls_reset(s);
}

void kube_ls_fini(struct kube_list_scan *s)
{
    free(s->buf);
    json_decref(s->rest);
    s->buf = NULL;
    s->rest = NULL;
}

void kube_ls_reset(struct kube_list_scan *s)
{
    char *buf = s->buf;
    size_t cap = s->cap, max = s->max_value;
    kube_ls_item_fn fn = s->on_item;
    void *user = s->user;
    json_decref(s->rest);
    memset(s, 0, sizeof(*s));
    s->buf = buf;
    s->cap = cap;
    s->max_value = max;
    s->on_item = fn;
    s->user = user;
    s->at = LS_BEGIN;
}

static bool ls_fail(struct kube_list_scan *s, const char *why)
{
    if (!s->failed)
        snprintf(s->why, sizeof(s->why), "%s", why);
    s->failed = true;
    return false;
}

static bool ls_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool ls_copy(struct kube_list_scan *s, char c)
{
    if (!s->vcopy)
        return true;
    if (s->len + 1 > s->max_value) {
        char why[160];
        snprintf(why, sizeof(why), "a list %s of more than %zu bytes",
                 s->member == LS_ELEMENT ? "item" : "member", s->max_value);
        return ls_fail(s, why);
    }
    if (s->len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        if (cap > s->max_value)
            cap = s->max_value;
        char *b = realloc(s->buf, cap);
        if (b == NULL)
            return ls_fail(s, "out of memory reading the list");
        s->buf = b;
        s->cap = cap;
    }
    s->buf[s->len++] = c;
    return true;
}

/* The first byte of a value: what kind it is. */
static bool ls_start_value(struct kube_list_scan *s, char c, int member)
{
    s->member = member;
    s->vcopy = member != LS_SKIP;
    s->len = 0;
    s->vdepth = 0;
    s->vstr = false;
    s->vesc = false;
    s->vscalar = false;
    if (c == '{' || c == '[')
        s->vdepth = 1;
    else if (c == '"')
        s->vstr = true;
    else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n')
        s->vscalar = true;
    else
        return ls_fail(s, "the list is no JSON object of the expected shape");
    s->at = LS_IN_VALUE;
    return ls_copy(s, c);
}

/* A value ended: hand it up or keep it. */
static bool ls_end_value(struct kube_list_scan *s)
{
    s->at = s->member == LS_ELEMENT ? LS_AFTER_ITEM : LS_AFTER_VALUE;
    if (s->member == LS_SKIP)
        return true;
    json_error_t jerr;
    json_t *v = json_loadb(s->buf, s->len, JSON_DECODE_ANY, &jerr);
    s->len = 0;
    if (v == NULL) {
        char why[160];
        snprintf(why, sizeof(why), "a malformed list %s (%.100s)",
                 s->member == LS_ELEMENT ? "item" : "member", jerr.text);
        return ls_fail(s, why);
    }
    if (s->member == LS_KEEP) {
        if (s->rest == NULL)
            s->rest = json_object();
        json_object_set_new(s->rest, s->key, v);
        return true;
    }
    s->items++;
    bool ok = s->on_item == NULL || s->on_item(s->user, v);
    json_decref(v);
    return ok ? true : ls_fail(s, "refused");
}

/* One byte inside a value. *again: the byte ended a scalar and belongs to
 * the state after it. */
static bool ls_in_value(struct kube_list_scan *s, char c, bool *again)
{
    if (s->vscalar) {
        if (c == ',' || c == '}' || c == ']' || ls_is_space(c)) {
            *again = true;
            return ls_end_value(s);
        }
        return ls_copy(s, c);
    }
    if (!ls_copy(s, c))
        return false;
    if (s->vstr) {
        if (s->vesc)
            s->vesc = false;
        else if (c == '\\')
            s->vesc = true;
        else if (c == '"') {
            s->vstr = false;
            if (s->vdepth == 0)
                return ls_end_value(s);
        }
        return true;
    }
    if (c == '"') {
        s->vstr = true;
    } else if (c == '{' || c == '[') {
        s->vdepth++;
    } else if (c == '}' || c == ']') {
        if (--s->vdepth == 0)
            return ls_end_value(s);
    }
    return true;
}

static int ls_member_of(const struct kube_list_scan *s)
{
    for (size_t i = 0; i < sizeof(kept_members) / sizeof(kept_members[0]); i++)
        if (strcmp(s->key, kept_members[i]) == 0)
            return LS_KEEP;
    return LS_SKIP;
}

static bool ls_byte(struct kube_list_scan *s, char c)
{
    bool again;
    do {
        again = false;
        switch (s->at) {
        case LS_IN_VALUE:
            if (!ls_in_value(s, c, &again))
                return false;
            break;
        case LS_IN_KEY:
            if (s->key_esc) {
                s->key_esc = false;
            } else if (c == '\\') {
                s->key_esc = true;
                s->key_bad = true; /* an escaped name is no member the source reads */
            } else if (c == '"') {
                s->key[s->key_bad ? 0 : s->key_len] = '\0';
                if (s->key_bad)
                    s->key[0] = '\x01'; /* matches nothing */
                s->at = LS_COLON;
            } else if (s->key_len + 1 < sizeof(s->key)) {
                s->key[s->key_len++] = c;
            } else {
                s->key_bad = true; /* longer than every member the source reads */
            }
            break;
        default:
            if (ls_is_space(c))
                break;
            switch (s->at) {
            case LS_BEGIN:
                if (c != '{')
                    return ls_fail(s, "the list is no JSON object");
                s->at = LS_KEY_OR_END;
                break;
            case LS_KEY_OR_END:
            case LS_KEY:
                if (c == '}' && s->at == LS_KEY_OR_END) {
                    s->at = LS_DONE;
                    break;
                }
                if (c != '"')
                    return ls_fail(s, "the list is no JSON object of the expected shape");
                s->key_len = 0;
                s->key_esc = false;
                s->key_bad = false;
                s->at = LS_IN_KEY;
                break;
            case LS_COLON:
                if (c != ':')
                    return ls_fail(s, "the list is no JSON object of the expected shape");
                s->at = LS_VALUE;
                break;
            case LS_VALUE:
                if (strcmp(s->key, "items") == 0 && c == '[') {
                    s->in_items = true;
                    s->items_array = true;
                    s->at = LS_ITEM_OR_END;
                    break;
                }
                if (!ls_start_value(s, c, ls_member_of(s)))
                    return false;
                break;
            case LS_AFTER_VALUE:
                if (c == ',')
                    s->at = LS_KEY;
                else if (c == '}')
                    s->at = LS_DONE;
                else
                    return ls_fail(s, "the list is no JSON object of the expected shape");
                break;
            case LS_ITEM_OR_END:
            case LS_ITEM:
                if (c == ']' && s->at == LS_ITEM_OR_END) {
                    s->in_items = false;
                    s->at = LS_AFTER_VALUE;
                    break;
                }
                if (!ls_start_value(s, c, LS_ELEMENT))
                    return false;
                break;
            case LS_AFTER_ITEM:
                if (c == ',') {
                    s->at = LS_ITEM;
                } else if (c == ']') {
                    s->in_items = false;
                    s->at = LS_AFTER_VALUE;
                } else {
                    return ls_fail(s, "the list's items are no JSON array");
                }
                break;
            default: /* LS_DONE */
                return ls_fail(s, "bytes after the list's JSON object");
            }
        }
    } while (again);
    return true;
}

bool kube_ls_feed(struct kube_list_scan *s, const char *bytes, size_t len)
{
    if (s->failed)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!ls_byte(s, bytes[i]))
            return false;
    return true;
}

json_t *kube_ls_finish(struct kube_list_scan *s)
{
    if (s->failed)
        return NULL;
    if (s->at != LS_DONE) {
        ls_fail(s, s->at == LS_BEGIN ? "an empty list body" : "the list body was cut short");
        return NULL;
    }
    json_t *out = s->rest != NULL ? json_incref(s->rest) : json_object();
    if (s->items_array)
        json_object_set_new(out, "items", json_array());
    return out;
}
