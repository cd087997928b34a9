/*
 * Unit tests of controlplane/admin/reload.c's key table: how each key takes
 * effect, that a key the table does not know needs a restart (a reload
 * that silently ignored a change would be worse than one refused), and
 * that docs/operations.md's table lists every key of the schema with the
 * same way of taking effect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "controlplane/admin/reload.h"

static void test_effects(void **state)
{
    (void)state;
    assert_int_equal(cp_reload_effect_of("workers"), CP_EFFECT_RELOAD);
    assert_int_equal(cp_reload_effect_of("controlplane.health.interval"), CP_EFFECT_RELOAD);
    assert_int_equal(cp_reload_effect_of("controlplane.health.initial"), CP_EFFECT_RELOAD);
    assert_int_equal(cp_reload_effect_of("dataplane.retry.max_attempts"),
                     CP_EFFECT_DATAPLANE_RESTART);
    assert_int_equal(cp_reload_effect_of("policy.name"), CP_EFFECT_DATAPLANE_RESTART);
    /* The control plane maps KV events with it: a restart of both. */
    assert_int_equal(cp_reload_effect_of("policy.precise_cache_aware.block_size"),
                     CP_EFFECT_RESTART);
    assert_int_equal(cp_reload_effect_of("policy.precise_cache_aware.tokenize_timeout"),
                     CP_EFFECT_DATAPLANE_RESTART);
    assert_int_equal(cp_reload_effect_of("controlplane.admin_listen"), CP_EFFECT_RESTART);
    assert_int_equal(cp_reload_effect_of("shm.max_workers"), CP_EFFECT_RESTART);
    assert_int_equal(cp_reload_effect_of("some_future_section.key"), CP_EFFECT_RESTART);
    assert_int_equal(cp_reload_effect_of("workers_extra"), CP_EFFECT_RESTART);
}

struct doc {
    char *text;
    int missing;
};

static const char *effect_words(enum cp_effect e)
{
    switch (e) {
    case CP_EFFECT_RELOAD:
        return "control-plane reload";
    case CP_EFFECT_DATAPLANE_RESTART:
        return "data-plane hot restart";
    default:
        return "restart";
    }
}

/* The row "| `key` | how |" must exist and its how must say the table's effect. */
static void check_row(const char *name, void *arg)
{
    struct doc *d = arg;
    char row[160];
    snprintf(row, sizeof(row), "| `%s` | ", name);
    const char *at = strstr(d->text, row);
    if (at == NULL) {
        fprintf(stderr, "docs/operations.md: no row for key %s\n", name);
        d->missing++;
        return;
    }
    const char *how = at + strlen(row);
    const char *want = effect_words(cp_reload_effect_of(name));
    const char *eol = strchr(how, '\n');
    size_t n = eol != NULL ? (size_t)(eol - how) : strlen(how);
    char line[512];
    snprintf(line, sizeof(line), "%.*s", (int)n, how);
    if (strstr(line, want) == NULL) {
        fprintf(stderr, "docs/operations.md: key %s says '%s', the reload treats it as '%s'\n",
                name, line, want);
        d->missing++;
    }
}

static void test_operations_doc_lists_every_key(void **state)
{
    (void)state;
    FILE *f = fopen("docs/operations.md", "r");
    assert_non_null(f);
    struct doc d = {.text = calloc(1, 1 << 20)};
    assert_non_null(d.text);
    size_t n = fread(d.text, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 0);
    cfg_each_key(check_row, &d);
    free(d.text);
    assert_int_equal(d.missing, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_effects),
        cmocka_unit_test(test_operations_doc_lists_every_key),
    };
    return cmocka_run_group_tests_name("reload", tests, NULL, NULL);
}
