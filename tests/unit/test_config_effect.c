/*
 * Unit tests of the reload effects in the schema rows (common/config_schema.c,
 * read through cfg_key_effect in common/config_diff.c): every leaf row
 * has an effect, its own or a mapping's above it, and cfg_key_effect says
 * the same for every key's dotted name. This first version also pins every
 * key to the effect controlplane/admin/reload.c's prefix table gives it,
 * before the reload switches from that table to the rows.
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
#include "controlplane/admin/reload.h"

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

static void compare_with_prefix_table(const char *name, void *arg)
{
    int *bad = arg;
    int rows = (int)cfg_key_effect(name), table = (int)cp_reload_effect_of(name);
    if (rows != table) {
        fprintf(stderr, "%s: the schema rows say %d, reload.c's prefix table %d\n", name, rows,
                table);
        (*bad)++;
    }
}

static void test_same_effects_as_the_prefix_table(void **state)
{
    (void)state;
    int bad = 0;
    cfg_each_key(compare_with_prefix_table, &bad);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_leaf_row_has_an_effect),
        cmocka_unit_test(test_same_effects_as_the_prefix_table),
    };
    return cmocka_run_group_tests_name("config_effect", tests, NULL, NULL);
}
