/*
 * The schema seen by dotted key names: what changed between two loaded
 * configs, key by key (cfg_diff), the list of every key's name
 * (cfg_each_key), and how a change of one takes effect (cfg_key_effect,
 * from its row or the mapping rows above it). All walk the schema tables
 * (config_schema.c), so a key added there is compared, listed and judged
 * with no edit here: the control plane's reload judges a new config by this
 * diff and these effects, and a test checks that the operations guide
 * documents every listed key with its effect.
 */
#include "common/config.h"
#include "common/config_internal.h"

#include <stdio.h>
#include <string.h>

/* Whether one leaf field differs between a and b (the mapping's structs). */
static bool cfg_field_differs(const struct cfg_key *k, const void *a, const void *b)
{
    const void *fa = (const char *)a + k->offset;
    const void *fb = (const char *)b + k->offset;
    switch (k->kind) {
    case CFG_KIND_STRING:
    case CFG_KIND_ADDR:
        return strcmp(fa, fb) != 0;
    case CFG_KIND_U32:
        return *(const uint32_t *)fa != *(const uint32_t *)fb;
    case CFG_KIND_DURATION:
    case CFG_KIND_SIZE:
        return *(const uint64_t *)fa != *(const uint64_t *)fb;
    case CFG_KIND_BOOL:
        return *(const bool *)fa != *(const bool *)fb;
    case CFG_KIND_DOUBLE:
        return *(const double *)fa != *(const double *)fb;
    case CFG_KIND_STATUS_LIST: {
        const struct cfg_retry *ra = fa, *rb = fb;
        return ra->n_on_status != rb->n_on_status ||
               memcmp(ra->on_status, rb->on_status, ra->n_on_status * sizeof(ra->on_status[0])) !=
                   0;
    }
    case CFG_KIND_WORKERS: {
        const struct cfg *ca = fa, *cb = fb; /* the row's offset is 0: the whole cfg */
        if (ca->n_workers != cb->n_workers)
            return true;
        for (size_t i = 0; i < ca->n_workers; i++) {
            const struct cfg_worker *wa = &ca->workers[i], *wb = &cb->workers[i];
            if (strcmp(wa->id, wb->id) != 0 || strcmp(wa->url, wb->url) != 0 ||
                strcmp(wa->model, wb->model) != 0 || wa->role != wb->role ||
                strcmp(wa->kv_events.endpoint, wb->kv_events.endpoint) != 0 ||
                strcmp(wa->kv_events.replay_endpoint, wb->kv_events.replay_endpoint) != 0 ||
                wa->kv_events.data_parallel_size != wb->kv_events.data_parallel_size)
                return true;
        }
        return false;
    }
    case CFG_KIND_MAP:
    case CFG_KIND_UNSET:
        return false;
    default:
        /* The enum kinds: every enum of the config is stored as an int-sized enum. */
        return memcmp(fa, fb, sizeof(int)) != 0;
    }
}

struct cfg_diff_out {
    char (*names)[CFG_KEY_NAME_MAX];
    size_t cap;
    size_t n;
};

static void cfg_diff_table(const struct cfg_key *table, const void *a, const void *b,
                           const char *prefix, struct cfg_diff_out *out)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++) {
        char name[CFG_KEY_NAME_MAX];
        snprintf(name, sizeof(name), "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", k->name);
        if (k->kind == CFG_KIND_MAP) {
            cfg_diff_table(k->child, (const char *)a + k->offset, (const char *)b + k->offset, name,
                           out);
            continue;
        }
        if (!cfg_field_differs(k, a, b))
            continue;
        if (out->n < out->cap)
            snprintf(out->names[out->n], CFG_KEY_NAME_MAX, "%s", name);
        out->n++;
    }
}

size_t cfg_diff(const struct cfg *a, const struct cfg *b, char (*names)[CFG_KEY_NAME_MAX],
                size_t cap)
{
    struct cfg_diff_out out = {.names = names, .cap = cap};
    cfg_diff_table(cfg_schema_root, a, b, "", &out);
    return out.n;
}

static void cfg_each_in(const struct cfg_key *table, const char *prefix,
                        void (*fn)(const char *name, void *arg), void *arg)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++) {
        char name[CFG_KEY_NAME_MAX];
        snprintf(name, sizeof(name), "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", k->name);
        if (k->kind == CFG_KIND_MAP)
            cfg_each_in(k->child, name, fn, arg);
        else
            fn(name, arg);
    }
}

void cfg_each_key(void (*fn)(const char *name, void *arg), void *arg)
{
    cfg_each_in(cfg_schema_root, "", fn, arg);
}

/* The row of table whose name is the len bytes at name, or NULL. */
static const struct cfg_key *cfg_row_named(const struct cfg_key *table, const char *name,
                                           size_t len)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++)
        if (strlen(k->name) == len && memcmp(k->name, name, len) == 0)
            return k;
    return NULL;
}

enum cfg_reload_effect cfg_key_effect(const char *key)
{
    const struct cfg_key *table = cfg_schema_root;
    enum cfg_reload_effect effect = CFG_EFFECT_UNSET;
    for (const char *part = key;;) {
        const char *dot = strchr(part, '.');
        size_t len = dot != NULL ? (size_t)(dot - part) : strlen(part);
        const struct cfg_key *k = cfg_row_named(table, part, len);
        if (k == NULL)
            return CFG_EFFECT_RESTART;
        if (k->effect != CFG_EFFECT_UNSET)
            effect = k->effect;
        /* Only mappings have names below them ("workers" is one key). */
        if (dot == NULL)
            return k->kind == CFG_KIND_MAP || effect == CFG_EFFECT_UNSET ? CFG_EFFECT_RESTART
                                                                         : effect;
        if (k->kind != CFG_KIND_MAP)
            return CFG_EFFECT_RESTART;
        table = k->child;
        part = dot + 1;
    }
}
