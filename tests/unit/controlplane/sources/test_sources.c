/*
 * Unit tests of the control plane's worker sources (controlplane/sources/source.h,
 * registry_sync.c, source_static.c, source_api.c) on a real private
 * segment: an unchanged worker keeps its slot and generation, a changed one
 * gets a new generation, an unproposed one is removed, and invariant 12 (a
 * source never touches another source's worker; an id of another source is
 * refused). That a stale source keeps what it had is the source's own
 * guard: the Kubernetes source does not sync while stale (e2e
 * test_kubernetes). Each test has its own segment and registry writer.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_api.h"
#include "controlplane/sources/source_static.h"
#include "shm/registry.h"
#include "shm/segment.h"

static char test_name[64];

/* The state of each test: its registry writer, over its own segment. */
static struct shm_segment test_seg;
static struct cp_registry test_reg;

static int setup_segment(void **state)
{
    static int n;
    char err[512] = "";
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    snprintf(test_name, sizeof(test_name), "/sy-unit-src-%d-%d", (int)getpid(), n++);
    if (shm_segment_open_owner(&test_seg, test_name, 8, 2, &outcome, err, sizeof(err)) != 0)
        fail_msg("open_owner: %s", err);
    cp_registry_init(&test_reg, &test_seg);
    *state = &test_reg;
    return 0;
}

static int teardown_segment(void **state)
{
    struct cp_registry *reg = *state;
    shm_segment_close(reg->seg);
    cp_registry_fini(reg);
    shm_unlink(test_name);
    return 0;
}

static struct cp_source_worker sw(const char *id, const char *url, const char *model)
{
    struct cp_source_worker w = {.role = CFG_ROLE_REGULAR};
    snprintf(w.id, sizeof(w.id), "%s", id);
    snprintf(w.url, sizeof(w.url), "%s", url);
    snprintf(w.model, sizeof(w.model), "%s", model);
    return w;
}

static int sync_set(struct cp_registry *reg, enum cp_source_kind kind,
                    const struct cp_source_worker *ws, size_t n)
{
    char err[512] = "";
    struct cp_source_set set = {.kind = kind, .workers = ws, .n = n};
    return cp_registry_sync(reg, &set, err, sizeof(err));
}

static struct shm_worker_info must_find(struct shm_segment *seg, const char *id)
{
    struct shm_worker_info w;
    if (shm_registry_find(seg, id, &w) != 0)
        fail_msg("worker %s is not in the registry", id);
    return w;
}

static bool is_present(struct shm_segment *seg, const char *id)
{
    struct shm_worker_info w;
    return shm_registry_find(seg, id, &w) == 0;
}

static size_t count_workers(struct shm_segment *seg)
{
    struct shm_worker_info all[8];
    return shm_registry_snapshot(seg, all, 8);
}

static void test_unchanged_worker_keeps_slot_and_generation(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", ""),
                                    sw("w2", "http://127.0.0.1:9002", "m")};
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a = must_find(seg, "w1"), b = must_find(seg, "w2");
    assert_int_equal(a.source, CP_SOURCE_STATIC);
    assert_false(a.from_api);
    /* A model learned for w1 (proposed empty) is no change; health is kept. */
    assert_int_equal(shm_registry_set_names(seg, a.slot, "learned", ""), 0);
    assert_int_equal(shm_registry_set_healthy(seg, b.slot, false), 0);
    uint64_t changes = shm_registry_changes(seg);

    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a2 = must_find(seg, "w1"), b2 = must_find(seg, "w2");
    assert_int_equal(a2.slot, a.slot);
    assert_int_equal(a2.generation, a.generation);
    assert_string_equal(a2.model, "learned");
    assert_int_equal(b2.slot, b.slot);
    assert_int_equal(b2.generation, b.generation);
    assert_false(b2.healthy);
    assert_int_equal(shm_registry_changes(seg), changes); /* nothing written */
}

static void test_changed_worker_gets_new_generation(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m"),
                                    sw("w2", "http://127.0.0.1:9002", "m")};
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a = must_find(seg, "w1"), b = must_find(seg, "w2");

    snprintf(ws[0].url, sizeof(ws[0].url), "http://127.0.0.1:9011");
    ws[1].role = CFG_ROLE_DECODE;
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a2 = must_find(seg, "w1"), b2 = must_find(seg, "w2");
    assert_string_equal(a2.url, "http://127.0.0.1:9011");
    assert_false(a2.slot == a.slot && a2.generation == a.generation);
    if (a2.slot == a.slot)
        assert_int_equal(a2.generation, a.generation + 1);
    assert_int_equal(b2.role, CFG_ROLE_DECODE);
    assert_false(b2.slot == b.slot && b2.generation == b.generation);
    /* The old slots keep their generation (invariant 6): a freed slot that
     * was reused moved on by exactly one. */
    assert_true(shm_registry_generation(seg, a.slot) >= a.generation);
}

/* The registry carries each worker's kv_events beside the segment: set on
 * add, changed in place for a kept worker (the slot stays), gone with it. */
static void test_kv_events_carried(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m"),
                                    sw("w2", "http://127.0.0.1:9002", "m")};
    snprintf(ws[0].kv_events.endpoint, sizeof(ws[0].kv_events.endpoint), "tcp://*:5557");
    ws[0].kv_events.data_parallel_size = 1;
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a = must_find(seg, "w1"), b = must_find(seg, "w2");
    const struct cfg_kv_events *kv = cp_registry_kv_events(reg, a.slot, a.generation);
    assert_non_null(kv);
    assert_string_equal(kv->endpoint, "tcp://*:5557");
    assert_null(cp_registry_kv_events(reg, b.slot, b.generation));
    assert_null(cp_registry_kv_events(reg, a.slot, a.generation + 1)); /* another occupant */

    uint64_t v = cp_registry_kv_version(reg);
    snprintf(ws[0].kv_events.endpoint, sizeof(ws[0].kv_events.endpoint), "tcp://*:6000");
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a2 = must_find(seg, "w1");
    assert_int_equal(a2.slot, a.slot);
    assert_int_equal(a2.generation, a.generation);
    assert_string_equal(cp_registry_kv_events(reg, a.slot, a.generation)->endpoint, "tcp://*:6000");
    assert_true(cp_registry_kv_version(reg) != v);
    v = cp_registry_kv_version(reg);
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    assert_true(cp_registry_kv_version(reg) == v); /* nothing changed */

    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws + 1, 1), 0);
    assert_null(cp_registry_kv_events(reg, a.slot, a.generation));
}

static void test_unproposed_worker_is_removed(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m"),
                                    sw("w2", "http://127.0.0.1:9002", "m")};
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 2), 0);
    struct shm_worker_info a = must_find(seg, "w1");
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 1), 0);
    assert_false(is_present(seg, "w2"));
    struct shm_worker_info a2 = must_find(seg, "w1");
    assert_int_equal(a2.generation, a.generation);
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, NULL, 0), 0);
    assert_int_equal(count_workers(seg), 0);
}

static void test_source_never_touches_another_sources_worker(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct shm_worker_info in = {.role = CFG_ROLE_PREFILL}, api;
    snprintf(in.id, sizeof(in.id), "a1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9101");
    assert_int_equal(cp_source_api_add(reg, &in, &api), 0);
    assert_true(api.from_api);
    assert_int_equal(api.source, CP_SOURCE_API);
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m")};
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 1), 0);

    /* The config proposing nothing removes its own worker, not the API's. */
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, NULL, 0), 0);
    assert_false(is_present(seg, "w1"));
    struct shm_worker_info api2 = must_find(seg, "a1");
    assert_int_equal(api2.slot, api.slot);
    assert_int_equal(api2.generation, api.generation);
    assert_true(api2.from_api);
    assert_int_equal(api2.role, CFG_ROLE_PREFILL);

    /* And the other way round. */
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 1), 0);
    struct shm_worker_info st = must_find(seg, "w1");
    assert_int_equal(sync_set(reg, CP_SOURCE_API, NULL, 0), 0);
    assert_false(is_present(seg, "a1"));
    assert_int_equal(must_find(seg, "w1").generation, st.generation);
    assert_int_equal(cp_registry_retire(reg, CP_SOURCE_API, "w1"), -EPERM);
    assert_int_equal(must_find(seg, "w1").generation, st.generation);
}

static void test_id_of_another_source_is_refused(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR}, api;
    snprintf(in.id, sizeof(in.id), "w1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9101");
    assert_int_equal(cp_source_api_add(reg, &in, &api), 0);
    uint64_t changes = shm_registry_changes(seg);

    /* Same id, whether or not the url matches: refused, nothing changed. */
    char err[512] = "";
    struct cp_source_worker ws[] = {sw("w2", "http://127.0.0.1:9002", "m"),
                                    sw("w1", "http://127.0.0.1:9001", "m")};
    struct cp_source_set set = {.kind = CP_SOURCE_STATIC, .workers = ws, .n = 2};
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "worker w1"));
    assert_non_null(strstr(err, "admin API"));
    snprintf(ws[1].url, sizeof(ws[1].url), "http://127.0.0.1:9101");
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EEXIST);
    assert_int_equal(shm_registry_changes(seg), changes);
    assert_false(is_present(seg, "w2"));
    struct shm_worker_info api2 = must_find(seg, "w1");
    assert_int_equal(api2.generation, api.generation);
    assert_true(api2.from_api);

    /* Another source's url under a new id is refused too. */
    struct cp_source_worker dup_url[] = {sw("w3", "http://127.0.0.1:9101", "m")};
    set.workers = dup_url;
    set.n = 1;
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "http://127.0.0.1:9101"));

    /* The API cannot take a configured id either. */
    set.workers = ws;
    set.n = 1;
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), 0);
    snprintf(in.id, sizeof(in.id), "w2");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9102");
    assert_int_equal(cp_source_api_add(reg, &in, NULL), -EEXIST);
    assert_int_equal(must_find(seg, "w2").source, CP_SOURCE_STATIC);
}

static void test_set_naming_an_id_twice_is_refused(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    char err[512] = "";
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m"),
                                    sw("w1", "http://127.0.0.1:9002", "m")};
    struct cp_source_set set = {.kind = CP_SOURCE_STATIC, .workers = ws, .n = 2};
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EINVAL);
    assert_int_equal(count_workers(seg), 0);
}

static void test_static_source_syncs_the_config(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cfg_worker cw[2] = {
        {.id = "w1", .url = "http://127.0.0.1:9001", .role = CFG_ROLE_REGULAR},
        {.id = "w2", .url = "http://127.0.0.1:9101", .role = CFG_ROLE_DECODE}};
    struct cfg cfg = {.path = "/etc/sy.yaml", .workers = cw, .n_workers = 2};
    char err[512] = "";
    assert_int_equal(cp_source_static_sync(reg, &cfg, err, sizeof(err)), 0);
    struct shm_worker_info w2 = must_find(seg, "w2");
    assert_int_equal(w2.source, CP_SOURCE_STATIC);
    assert_int_equal(w2.role, CFG_ROLE_DECODE);

    /* An error names the config file. */
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR};
    snprintf(in.id, sizeof(in.id), "a1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9201");
    assert_int_equal(cp_source_api_add(reg, &in, NULL), 0);
    snprintf(cw[1].id, sizeof(cw[1].id), "a1");
    assert_int_equal(cp_source_static_sync(reg, &cfg, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "/etc/sy.yaml: worker a1"));
}

static void test_api_delete_removes_any_worker(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    struct cp_source_worker ws[] = {sw("w1", "http://127.0.0.1:9001", "m")};
    assert_int_equal(sync_set(reg, CP_SOURCE_STATIC, ws, 1), 0);
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR}, api;
    snprintf(in.id, sizeof(in.id), "a1");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9101");
    assert_int_equal(cp_source_api_add(reg, &in, &api), 0);

    assert_int_equal(cp_source_api_delete(reg, &api), 0);
    assert_false(is_present(seg, "a1"));
    assert_int_equal(shm_registry_generation(seg, api.slot), api.generation);
    /* DELETE of a configured worker: the operator's override, as always. */
    struct shm_worker_info w1 = must_find(seg, "w1");
    assert_int_equal(cp_source_api_delete(reg, &w1), 0);
    assert_false(is_present(seg, "w1"));
}

/* The refusal names the first worker at fault in the set's order (for a
 * duplicate, the later of the two), whatever the order of ids and urls:
 * the sync looks them up in sorted indexes. */
static void test_refusal_names_the_first_worker_at_fault(void **state)
{
    struct cp_registry *reg = *state;
    struct shm_segment *seg = reg->seg;
    char err[512] = "";
    struct cp_source_worker ws[] = {
        sw("z", "http://127.0.0.1:9005", "m"), sw("b", "http://127.0.0.1:9002", "m"),
        sw("z", "http://127.0.0.1:9007", "m"), sw("a", "http://127.0.0.1:9002", "m"),
        sw("z", "http://127.0.0.1:9009", "m"),
    };
    struct cp_source_set set = {.kind = CP_SOURCE_STATIC, .workers = ws, .n = 5};
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "worker z: its id or url http://127.0.0.1:9007"));
    set.n = 2; /* z, b */
    struct shm_worker_info in = {.role = CFG_ROLE_REGULAR}, api;
    snprintf(in.id, sizeof(in.id), "b");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9100");
    assert_int_equal(cp_source_api_add(reg, &in, &api), 0);
    snprintf(in.id, sizeof(in.id), "x");
    snprintf(in.url, sizeof(in.url), "http://127.0.0.1:9005");
    assert_int_equal(cp_source_api_add(reg, &in, &api), 0);
    /* z clashes by url (first), b by id (second): z is named. */
    assert_int_equal(cp_registry_sync(reg, &set, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "worker z: url http://127.0.0.1:9005"));
    assert_non_null(strstr(err, "(x, added by the admin API)"));
    assert_int_equal(count_workers(seg), 2);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup_segment, teardown_segment)
    const struct CMUnitTest tests[] = {
        T(test_unchanged_worker_keeps_slot_and_generation),
        T(test_changed_worker_gets_new_generation),
        T(test_kv_events_carried),
        T(test_unproposed_worker_is_removed),
        T(test_source_never_touches_another_sources_worker),
        T(test_id_of_another_source_is_refused),
        T(test_set_naming_an_id_twice_is_refused),
        T(test_static_source_syncs_the_config),
        T(test_api_delete_removes_any_worker),
        T(test_refusal_names_the_first_worker_at_fault),
    };
#undef T
    return cmocka_run_group_tests_name("cp_sources", tests, NULL, NULL);
}
