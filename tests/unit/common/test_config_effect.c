/*
 * Unit tests of the reload effects in the schema rows (common/config_schema.c,
 * read through cfg_key_effect in common/config_diff.c): every leaf row has
 * an effect, its own or a mapping's above it, and cfg_key_effect says the
 * same for every key; a name that is no key needs a restart (a reload that
 * silently ignored a change would be worse than one refused); and
 * docs/operations.md's table gives every key of the schema, and no other,
 * beginning with the words of its row's effect. File paths are relative to the repository
 * root, where make runs tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/config_internal.h"

struct walk {
    size_t leaves;
    int bad;
};

/* Every leaf below table resolves to an effect, and cfg_key_effect agrees
 * for the keys it names (those outside a workers entry). */
static void check_effects(const struct cfg_key *table, const char *prefix,
                          enum cfg_reload_effect above, bool named, struct walk *w)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++) {
        char name[CFG_KEY_NAME_MAX];
        snprintf(name, sizeof(name), "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", k->name);
        enum cfg_reload_effect effect = k->effect != CFG_EFFECT_UNSET ? k->effect : above;
        if (k->kind == CFG_KIND_MAP) {
            check_effects(k->child, name, effect, named, w);
            continue;
        }
        w->leaves++;
        if (effect == CFG_EFFECT_UNSET) {
            fprintf(stderr, "%s: no reload effect in its row or a mapping's above it\n", name);
            w->bad++;
        } else if (named && cfg_key_effect(name) != effect) {
            fprintf(stderr, "%s: cfg_key_effect says %d, the rows %d\n", name, cfg_key_effect(name),
                    effect);
            w->bad++;
        }
        /* A workers entry's keys change with the list: one key, "workers". */
        if (k->kind == CFG_KIND_WORKERS)
            check_effects(k->child, name, effect, false, w);
    }
}

static void test_every_leaf_row_has_an_effect(void **state)
{
    (void)state;
    struct walk w = {0};
    check_effects(cfg_schema_root, "", CFG_EFFECT_UNSET, true, &w);
    assert_true(w.leaves > 100);
    assert_int_equal(w.bad, 0);
}

static void test_effects(void **state)
{
    (void)state;
    assert_int_equal(cfg_key_effect("workers"), CFG_EFFECT_RELOAD);
    assert_int_equal(cfg_key_effect("controlplane.health.interval"), CFG_EFFECT_RELOAD);
    assert_int_equal(cfg_key_effect("controlplane.health.initial"), CFG_EFFECT_RELOAD);
    assert_int_equal(cfg_key_effect("discovery.kubernetes.namespace"), CFG_EFFECT_RELOAD);
    assert_int_equal(cfg_key_effect("dataplane.retry.max_attempts"), CFG_EFFECT_DATAPLANE_RESTART);
    assert_int_equal(cfg_key_effect("policy.name"), CFG_EFFECT_DATAPLANE_RESTART);
    /* A row that differs from its mapping's. */
    assert_int_equal(cfg_key_effect("controlplane.load_reports.stale_after"),
                     CFG_EFFECT_DATAPLANE_RESTART);
    assert_int_equal(cfg_key_effect("controlplane.load_reports.interval"), CFG_EFFECT_RESTART);
    /* The control plane maps KV events with it: a restart of both. */
    assert_int_equal(cfg_key_effect("policy.precise_cache_aware.block_size"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("policy.precise_cache_aware.tokenize_timeout"),
                     CFG_EFFECT_DATAPLANE_RESTART);
    assert_int_equal(cfg_key_effect("controlplane.admin_listen"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("shm.max_workers"), CFG_EFFECT_RESTART);
    /* Names that are no key. */
    assert_int_equal(cfg_key_effect("some_future_section.key"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("workers_extra"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("workers.url"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("dataplane"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("controlplane.health"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("dataplane.listen.port"), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect("dataplane."), CFG_EFFECT_RESTART);
    assert_int_equal(cfg_key_effect(""), CFG_EFFECT_RESTART);
}

#define DOC_PATH "docs/operations.md"
#define DOC_MAX  (1 << 20)

struct doc {
    char *table; /* docs/operations.md's "key | takes effect by" table, NUL-ended */
    int bad;
};

/* Whether a row's how begins with the words of effect e. */
static bool says_effect(const char *how, enum cfg_reload_effect e)
{
    switch (e) {
    case CFG_EFFECT_RELOAD:
        return strncmp(how, "control-plane reload", 20) == 0;
    case CFG_EFFECT_DATAPLANE_RESTART:
        return strncmp(how, "data-plane hot restart", 22) == 0;
    default:
        return strncmp(how, "control-plane restart", 21) == 0 ||
               strncmp(how, "full restart", 12) == 0;
    }
}

static const char *effect_words(enum cfg_reload_effect e)
{
    switch (e) {
    case CFG_EFFECT_RELOAD:
        return "control-plane reload";
    case CFG_EFFECT_DATAPLANE_RESTART:
        return "data-plane hot restart";
    default:
        return "control-plane restart or full restart";
    }
}

/* The row "| `key` | how |" must exist and its how must begin with the row's effect. */
static void check_doc_row(const char *name, void *arg)
{
    struct doc *d = arg;
    char row[160];
    snprintf(row, sizeof(row), "| `%s` | ", name);
    const char *at = strstr(d->table, row);
    if (at == NULL) {
        fprintf(stderr, DOC_PATH ": no row for key %s\n", name);
        d->bad++;
        return;
    }
    const char *how = at + strlen(row);
    enum cfg_reload_effect effect = cfg_key_effect(name);
    if (!says_effect(how, effect)) {
        const char *eol = strchr(how, '\n');
        int n = eol != NULL ? (int)(eol - how) : (int)strlen(how);
        fprintf(stderr, DOC_PATH ": key %s says '%.*s', its schema row '%s'\n", name, n, how,
                effect_words(effect));
        d->bad++;
    }
}

struct key_search {
    const char *name;
    bool found;
};

static void match_key(const char *name, void *arg)
{
    struct key_search *s = arg;
    s->found = s->found || strcmp(s->name, name) == 0;
}

/* Cuts text down to the table under its "| key | takes effect by |" head. */
static char *doc_table(char *text)
{
    char *table = strstr(text, "\n| key | takes effect by |\n");
    assert_non_null(table);
    table++;
    char *end = strstr(table, "\n\n");
    if (end != NULL)
        end[1] = '\0';
    return table;
}

static void test_operations_doc_agrees_with_the_rows(void **state)
{
    (void)state;
    FILE *f = fopen(DOC_PATH, "r");
    assert_non_null(f);
    char *text = calloc(1, DOC_MAX);
    assert_non_null(text);
    size_t n = fread(text, 1, DOC_MAX - 1, f);
    fclose(f);
    assert_true(n > 0);
    struct doc d = {.table = doc_table(text)};
    cfg_each_key(check_doc_row, &d);
    /* And no row for a key the schema does not have. */
    size_t rows = 0;
    for (char *line = strstr(d.table, "\n| `"); line != NULL; line = strstr(line + 1, "\n| `")) {
        char name[CFG_KEY_NAME_MAX];
        if (sscanf(line, "\n| `%95[^`]` |", name) != 1)
            continue;
        rows++;
        struct key_search s = {.name = name};
        cfg_each_key(match_key, &s);
        if (!s.found) {
            fprintf(stderr, DOC_PATH ": row for %s, which is no key of the schema\n", name);
            d.bad++;
        }
    }
    free(text);
    assert_true(rows > 100);
    assert_int_equal(d.bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_leaf_row_has_an_effect),
        cmocka_unit_test(test_effects),
        cmocka_unit_test(test_operations_doc_agrees_with_the_rows),
    };
    return cmocka_run_group_tests_name("config_effect", tests, NULL, NULL);
}
