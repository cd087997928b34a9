/*
 * Unit tests of the config loader (common/config.c and its config_values.c,
 * config_schema.c and config_yaml.c, all included to reach their static
 * helpers). They pin the defaults, check that the schema rows are their only
 * source (every row has a default its own rules accept; an empty file gives
 * exactly those), load a file that sets every key to a non-default value,
 * load the shipped example, and check the exact error
 * message (file, line, column, key path, wording) for malformed inputs,
 * plus the scalar parsers: durations, sizes, HOST:PORT and worker URLs.
 * File paths are relative to the repository root, where make runs tests.
 */
#include "common/config.c"
#include "common/config_values.c"
#include "common/config_schema.c"
#include "common/config_yaml.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define ERR_LEN 512

/* A cfg that must look exactly like the defaults, no workers. */
static void assert_defaults(const struct cfg *cfg)
{
    static const int on_status[] = {408, 429, 500, 502, 503, 504};

    assert_string_equal(cfg->shm.name, "/switchyard");
    assert_int_equal(cfg->shm.max_workers, 1024);
    assert_int_equal(cfg->shm.max_dataplanes, 8);
    assert_string_equal(cfg->controlplane.admin_listen, "127.0.0.1:8081");
    assert_string_equal(cfg->controlplane.admin_token_file, "");
    assert_string_equal(cfg->controlplane.admin_socket, "/run/switchyard/admin.sock");
    assert_string_equal(cfg->controlplane.health.path, "/health");
    assert_int_equal(cfg->controlplane.health.interval_ms, 5000);
    assert_int_equal(cfg->controlplane.health.timeout_ms, 2000);
    assert_int_equal(cfg->controlplane.health.failure_threshold, 3);
    assert_int_equal(cfg->controlplane.health.success_threshold, 2);
    assert_string_equal(cfg->dataplane.listen, "127.0.0.1:8080");
    assert_int_equal(cfg->dataplane.threads, 0);
    assert_int_equal(cfg->dataplane.max_body, 32 * 1024 * 1024);
    assert_int_equal(cfg->dataplane.max_header_size, 6 * 1024);
    assert_int_equal(cfg->dataplane.connect_timeout_ms, 2000);
    assert_int_equal(cfg->dataplane.first_byte_timeout_ms, 600000);
    assert_int_equal(cfg->dataplane.idle_timeout_ms, 120000);
    assert_int_equal(cfg->dataplane.drain_timeout_ms, 600000);
    assert_false(cfg->dataplane.debug_headers);
    assert_int_equal(cfg->dataplane.header_timeout_ms, 30000);
    assert_int_equal(cfg->dataplane.upload_min_rate, 1024);
    assert_int_equal(cfg->dataplane.per_ip_connection_limit, 0);
    assert_string_equal(cfg->dataplane.metrics_listen, "");
    assert_false(cfg->controlplane.admin_insecure);
    assert_int_equal(cfg->dataplane.retry.max_attempts, 3);
    assert_int_equal(cfg->dataplane.retry.n_on_status, 6);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(cfg->dataplane.retry.on_status[i], on_status[i]);
    assert_int_equal(cfg->dataplane.retry.backoff_ms, 50);
    assert_string_equal(cfg->dataplane.api_keys_file, "");
    assert_string_equal(cfg->dataplane.upstream_api_key_file, "");
    assert_int_equal(cfg->admission.max_inflight_per_worker, 0);
    assert_int_equal(cfg->admission.max_waiting_per_worker, 0);
    assert_true(cfg->admission.max_kv_usage == 0);
    assert_int_equal(cfg->admission.queue.max_depth, 1000);
    assert_int_equal(cfg->admission.queue.max_wait_ms, 30000);
    assert_false(cfg->admission.forward_priority);
    assert_int_equal(cfg->dataplane.retry.backoff_max_ms, 2000);
    assert_int_equal(cfg->policy.name, CFG_POLICY_CACHE_AWARE);
    assert_true(cfg->policy.cache_threshold == 0.5);
    assert_int_equal(cfg->policy.balance_abs_threshold, 32);
    assert_true(cfg->policy.balance_rel_threshold == 1.5);
    assert_int_equal(cfg->policy.balance_gate, CFG_BALANCE_GATE_PER_REQUEST);
    assert_int_equal(cfg->policy.pd_fallback, CFG_PD_FALLBACK_LOCAL_PREFILL);
    assert_int_equal(cfg->policy.prefill.name, CFG_POLICY_CACHE_AWARE);
    assert_int_equal(cfg->policy.decode.name, CFG_POLICY_LEAST_LOAD);
    assert_null(cfg->workers);
    assert_int_equal(cfg->n_workers, 0);
}

static int load(struct cfg *cfg, const char *yaml, char *err)
{
    return cfg_load_string(cfg, "t.yaml", yaml, strlen(yaml), err, ERR_LEN);
}

static void test_defaults(void **state)
{
    struct cfg cfg;

    (void)state;
    memset(&cfg, 0x5a, sizeof(cfg));
    cfg_init_defaults(&cfg);
    assert_defaults(&cfg);
    assert_string_equal(cfg.path, "");
    cfg_fini(&cfg);
    assert_defaults(&cfg);
    cfg_fini(&cfg); /* twice is harmless */
    cfg_fini(NULL);
}

/* Inputs with nothing to set leave every default in place. */
static void test_empty_inputs(void **state)
{
    static const char *const inputs[] = {
        "",
        "---\n",
        "# only a comment\n",
        "~\n",
        "shm:\n",
        "workers:\n",
        "workers: []\n",
        "shm: {}\ncontrolplane:\n  health: {}\npolicy: {prefill: {}}\n",
    };
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        int rc = load(&cfg, inputs[i], err);
        if (rc != 0)
            fail_msg("input %zu: %s", i, err);
        assert_string_equal(err, "");
        assert_defaults(&cfg);
        assert_string_equal(cfg.path, "t.yaml");
        cfg_fini(&cfg);
    }
    /* A NULL buffer is an empty file. */
    assert_int_equal(cfg_load_string(&cfg, "n.yaml", NULL, 0, err, sizeof(err)), 0);
    assert_defaults(&cfg);
    cfg_fini(&cfg);
}

/* ---- the schema rows are the truth about defaults ----------------------- */

/* Whether the field row k describes holds k's default. */
static bool row_holds_default(const struct cfg_key *k, const void *field)
{
    switch (k->kind) {
    case CFG_KIND_STRING:
    case CFG_KIND_ADDR:
        return strcmp(field, k->def.s) == 0;
    case CFG_KIND_U32:
        return *(const uint32_t *)field == k->def.u;
    case CFG_KIND_DURATION:
    case CFG_KIND_SIZE:
        return *(const uint64_t *)field == k->def.u;
    case CFG_KIND_BOOL:
        return *(const bool *)field == (k->def.u != 0);
    case CFG_KIND_DOUBLE:
        return *(const double *)field == k->def.d;
    case CFG_KIND_ROLE:
        return (uint64_t) * (const enum cfg_role *)field == k->def.u;
    case CFG_KIND_POLICY:
        return (uint64_t) * (const enum cfg_policy_name *)field == k->def.u;
    case CFG_KIND_GATE:
        return (uint64_t) * (const enum cfg_balance_gate *)field == k->def.u;
    case CFG_KIND_PD_FALLBACK:
        return (uint64_t) * (const enum cfg_pd_fallback *)field == k->def.u;
    case CFG_KIND_LOAD_SIGNAL:
        return (uint64_t) * (const enum cfg_load_signal *)field == k->def.u;
    case CFG_KIND_STATUS_LIST: {
        const struct cfg_retry *retry = field;
        if (retry->n_on_status != k->def.n)
            return false;
        for (size_t i = 0; i < k->def.n; i++) {
            if (retry->on_status[i] != k->def.list[i])
                return false;
        }
        return true;
    }
    case CFG_KIND_STR_LIST:
        return ((const struct cfg_str_list *)field)->n == 0;
    case CFG_KIND_WORKERS: {
        const struct cfg *cfg = field; /* the row's offset is 0: the whole cfg */
        return cfg->workers == NULL && cfg->n_workers == 0;
    }
    case CFG_KIND_MAP:
    case CFG_KIND_UNSET:
        break;
    }
    fail_msg("row '%s' has no kind with a default", k->name);
    return false;
}

/*
 * Walks table over base (the mapping's struct): every leaf row's field must
 * hold its default (want_default) or differ from it (!want_default). Rows
 * named in skip are left out.
 */
static void check_rows_against(const struct cfg_key *table, const void *base, const char *where,
                               bool want_default, const char *const *skip)
{
    for (const struct cfg_key *k = table; k->name != NULL; k++) {
        const void *field = (const char *)base + k->offset;
        bool skipped = false;

        for (size_t i = 0; skip != NULL && skip[i] != NULL; i++)
            skipped = skipped || strcmp(skip[i], k->name) == 0;
        if (skipped)
            continue;
        if (k->kind == CFG_KIND_MAP) {
            char sub[128];
            snprintf(sub, sizeof(sub), "%s%s%s", where, where[0] ? "." : "", k->name);
            check_rows_against(k->child, field, sub, want_default, skip);
            continue;
        }
        if (row_holds_default(k, field) != want_default)
            fail_msg("%s%s%s: %s its schema default", where, where[0] ? "." : "", k->name,
                     want_default ? "does not hold" : "still holds");
    }
}

/* Every row has a kind and a default that its own rules accept. */
static void check_table(const struct cfg_key *table, const char *where)
{
    size_t n = 0;

    for (const struct cfg_key *k = table; k->name != NULL; k++, n++) {
        if (n >= CFG_TABLE_MAX)
            fail_msg("%s: more than %d keys", where, CFG_TABLE_MAX);
        if (k->kind == CFG_KIND_UNSET)
            fail_msg("%s.%s: no kind", where, k->name);
        if (cfg_key_index(table, k->name) != (int)n)
            fail_msg("%s.%s: listed twice", where, k->name);
        if (k->kind == CFG_KIND_MAP) {
            assert_non_null(k->child);
            check_table(k->child, k->name);
            continue;
        }
        if (!k->def.is_set)
            fail_msg("%s.%s: no default", where, k->name);
        switch (k->kind) {
        case CFG_KIND_STRING:
            assert_non_null(k->def.s);
            assert_true(strlen(k->def.s) < k->size);
            /* "" stands for none or derived (admin_token_file, a worker's id). */
            if (k->valid != NULL && k->def.s[0] != '\0' && !k->valid(k->def.s))
                fail_msg("%s.%s: default '%s' is not valid", where, k->name, k->def.s);
            break;
        case CFG_KIND_ADDR: {
            char host[CFG_ADDR_MAX];
            uint16_t port;
            assert_non_null(k->def.s);
            assert_true(strlen(k->def.s) < k->size);
            assert_int_equal(cfg_parse_host_port(k->def.s, host, sizeof(host), &port), 0);
            break;
        }
        case CFG_KIND_U32:
            assert_true(k->max <= UINT32_MAX);
            /* fall through */
        case CFG_KIND_DURATION:
        case CFG_KIND_SIZE:
            if (k->def.u < k->min || k->def.u > k->max)
                fail_msg("%s.%s: default %" PRIu64 " out of %" PRIu64 "..%" PRIu64, where, k->name,
                         k->def.u, k->min, k->max);
            break;
        case CFG_KIND_BOOL:
            assert_true(k->def.u <= 1);
            break;
        case CFG_KIND_DOUBLE:
            assert_true(k->def.d >= k->dmin && k->def.d <= k->dmax);
            break;
        case CFG_KIND_ROLE:
        case CFG_KIND_POLICY:
        case CFG_KIND_GATE:
        case CFG_KIND_PD_FALLBACK:
        case CFG_KIND_LOAD_SIGNAL:
            assert_non_null(k->names);
            if (strcmp(enum_to_name(k->names, (int)k->def.u), "unset") == 0)
                fail_msg("%s.%s: default %" PRIu64 " has no name", where, k->name, k->def.u);
            break;
        case CFG_KIND_STATUS_LIST:
            assert_true(k->def.n <= CFG_ON_STATUS_MAX);
            for (size_t i = 0; i < k->def.n; i++) {
                assert_in_range(k->def.list[i], 100, 599);
                for (size_t j = 0; j < i; j++)
                    assert_int_not_equal(k->def.list[i], k->def.list[j]);
            }
            break;
        case CFG_KIND_STR_LIST:
            assert_non_null(k->valid);
            assert_non_null(k->expect);
            break;
        case CFG_KIND_WORKERS:
            assert_non_null(k->child);
            assert_non_null(k->finish);
            check_table(k->child, k->name);
            break;
        case CFG_KIND_MAP:
        case CFG_KIND_UNSET:
            break;
        }
    }
    /* struct cfg_map_seen has one bit per row. */
    assert_true(n <= CFG_TABLE_MAX);
}

static void test_schema_rows(void **state)
{
    (void)state;
    check_table(cfg_schema_root, "");
}

/* cfg_init_defaults and an empty file give exactly the rows' defaults, and a
 * workers entry gets its table's defaults for what it leaves out. */
static void test_defaults_are_the_schema_rows(void **state)
{
    static const char *const derived[] = {"url", "id", NULL};
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    memset(&cfg, 0x5a, sizeof(cfg));
    cfg_init_defaults(&cfg);
    check_rows_against(cfg_schema_root, &cfg, "", true, NULL);
    cfg_fini(&cfg);

    assert_int_equal(load(&cfg, "", err), 0);
    check_rows_against(cfg_schema_root, &cfg, "", true, NULL);
    cfg_fini(&cfg);

    assert_int_equal(load(&cfg, "workers:\n  - url: http://a:1\n", err), 0);
    assert_int_equal(cfg.n_workers, 1);
    check_rows_against(cfg_schema_root[cfg_key_index(cfg_schema_root, "workers")].child,
                       &cfg.workers[0], "workers[0]", true, derived);
    cfg_fini(&cfg);
}

/* The 1-based line of path that starts with prefix (asserts there is one):
 * keeps the expected line numbers true when keys are added above. */
static int line_of(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    int n = 0, found = 0;
    while (found == 0 && fgets(line, sizeof(line), f) != NULL) {
        n++;
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            found = n;
    }
    fclose(f);
    assert_true(found > 0);
    return found;
}

/* tests/unit/configs/full.yaml sets every key to a non-default value. */
static void test_full_file_round_trip(void **state)
{
    const char *path = "tests/unit/configs/full.yaml";
    struct cfg cfg;
    char err[ERR_LEN];
    int rc;

    (void)state;
    rc = cfg_load_file(&cfg, path, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    /* Every row of the schema, workers entries aside, was set away from its default. */
    check_rows_against(cfg_schema_root, &cfg, "", false, NULL);
    check_rows_against(cfg_schema_root[cfg_key_index(cfg_schema_root, "workers")].child,
                       &cfg.workers[0], "workers[0]", false, NULL);
    assert_string_equal(cfg.path, path);
    assert_string_equal(cfg.shm.name, "/sy-test");
    assert_int_equal(cfg.shm.max_workers, 4);
    assert_int_equal(cfg.shm.max_dataplanes, 2);
    assert_int_equal(cfg.shm.prefix_index_blocks, 8192);
    assert_int_equal(cfg.shm.kv_index_blocks, 65536);
    assert_string_equal(cfg.controlplane.admin_listen, "[::1]:9081");
    assert_string_equal(cfg.controlplane.admin_token_file, "/etc/switchyard/token");
    assert_string_equal(cfg.controlplane.admin_socket, "/tmp/sy-test.sock");
    assert_true(cfg.controlplane.admin_insecure);
    assert_int_equal(cfg.controlplane.admin_allowed_hosts.n, 2);
    assert_string_equal(cfg.controlplane.admin_allowed_hosts.item[1], "Admin.Example");
    assert_int_equal(cfg.controlplane.reset_load_timeout_ms, 45000);
    assert_string_equal(cfg.controlplane.health.path, "/v1/health?deep=1");
    assert_int_equal(cfg.controlplane.health.interval_ms, 250);
    assert_int_equal(cfg.controlplane.health.timeout_ms, 100);
    assert_int_equal(cfg.controlplane.health.failure_threshold, 5);
    assert_int_equal(cfg.controlplane.health.success_threshold, 1);
    assert_string_equal(cfg.controlplane.load_reports.path, "/v2/metrics");
    assert_int_equal(cfg.controlplane.load_reports.interval_ms, 0);
    assert_int_equal(cfg.controlplane.load_reports.timeout_ms, 300);
    assert_int_equal(cfg.controlplane.load_reports.stale_after_ms, 2000);
    assert_int_equal(cfg.policy.load_signal, CFG_LOAD_SIGNAL_OWN);
    assert_true(cfg.policy.kv_overload == 0.75);
    assert_string_equal(cfg.controlplane.health.initial, "healthy");
    assert_int_equal(cfg.controlplane.health.models_interval_ms, 5000);
    assert_string_equal(cfg.dataplane.listen, "0.0.0.0:18080");
    assert_int_equal(cfg.dataplane.threads, 4);
    assert_int_equal(cfg.dataplane.max_body, 64 * 1024);
    assert_int_equal(cfg.dataplane.max_header_size, 16 * 1024);
    assert_int_equal(cfg.dataplane.connect_timeout_ms, 1000);
    assert_int_equal(cfg.dataplane.first_byte_timeout_ms, 120000);
    assert_int_equal(cfg.dataplane.idle_timeout_ms, 3600000);
    assert_int_equal(cfg.dataplane.drain_timeout_ms, 0);
    assert_int_equal(cfg.dataplane.header_timeout_ms, 5000);
    assert_int_equal(cfg.dataplane.upload_min_rate, 100);
    assert_int_equal(cfg.dataplane.per_ip_connection_limit, 16);
    assert_int_equal(cfg.dataplane.max_connections, 5000);
    assert_string_equal(cfg.dataplane.metrics_listen, "127.0.0.1:19090");
    assert_true(cfg.dataplane.debug_headers);
    assert_int_equal(cfg.dataplane.retry.max_attempts, 5);
    assert_int_equal(cfg.dataplane.retry.n_on_status, 2);
    assert_int_equal(cfg.dataplane.retry.on_status[0], 502);
    assert_int_equal(cfg.dataplane.retry.on_status[1], 503);
    assert_int_equal(cfg.dataplane.retry.backoff_ms, 10);
    assert_int_equal(cfg.dataplane.retry.backoff_max_ms, 1000);
    assert_int_equal(cfg.dataplane.response_ttl_ms, 600000);
    assert_int_equal(cfg.dataplane.response_table_size, 1024);
    assert_int_equal(cfg.dataplane.cors.allowed_origins.n, 2);
    assert_string_equal(cfg.dataplane.cors.allowed_origins.item[1], "http://[::1]:3000");
    assert_int_equal(cfg.dataplane.cors.allowed_headers.n, 1);
    assert_string_equal(cfg.dataplane.cors.allowed_headers.item[0], "Authorization");
    assert_string_equal(cfg.dataplane.upstream_tls.ca_file, "/etc/switchyard/workers-ca.pem");
    assert_string_equal(cfg.dataplane.upstream_tls.client_cert_file, "/etc/switchyard/router.pem");
    assert_string_equal(cfg.dataplane.upstream_tls.client_key_file, "/etc/switchyard/router.key");
    assert_false(cfg.dataplane.upstream_tls.verify);
    assert_string_equal(cfg.dataplane.tls.cert_file, "/etc/switchyard/tls.crt");
    assert_string_equal(cfg.dataplane.tls.key_file, "/etc/switchyard/tls.key");
    assert_string_equal(cfg.dataplane.tls.client_ca_file, "/etc/switchyard/clients-ca.pem");
    assert_string_equal(cfg.dataplane.tls.min_version, "1.3");
    assert_string_equal(cfg.dataplane.plain_listen, "127.0.0.1:18079");
    assert_string_equal(cfg.dataplane.tls.priorities, "SECURE256:-VERS-TLS1.2");
    assert_int_equal(cfg.dataplane.strip_headers.n, 2);
    assert_string_equal(cfg.dataplane.strip_headers.item[1], "Cookie");
    assert_false(cfg.dataplane.metrics_tenant_labels);
    assert_string_equal(cfg.dataplane.cache_salt_key_file, "/etc/switchyard/cache-salt-key");
    assert_int_equal(cfg.discovery.kubernetes.max_list_items, 500);
    assert_int_equal(cfg.discovery.kubernetes.max_pods, 2048);
    assert_int_equal(cfg.policy.name, CFG_POLICY_POWER_OF_TWO);
    assert_true(cfg.policy.cache_threshold == 0.25);
    assert_int_equal(cfg.policy.balance_abs_threshold, 8);
    assert_true(cfg.policy.balance_rel_threshold == 2.0);
    assert_int_equal(cfg.policy.balance_gate, CFG_BALANCE_GATE_FLEET);
    assert_int_equal(cfg.policy.prefill.name, CFG_POLICY_ROUND_ROBIN);
    assert_int_equal(cfg.policy.decode.name, CFG_POLICY_CONSISTENT_HASH);
    assert_int_equal(cfg.policy.pd_fallback, CFG_PD_FALLBACK_ERROR);
    assert_false(cfg.policy.rendezvous);
    assert_true(cfg.policy.bounded_load_factor == 1.5);
    assert_false(cfg.policy.bounded_affinity);
    assert_true(cfg.policy.affinity_load_factor == 3.0);
    assert_int_equal(cfg.policy.precise_cache_aware.block_size, 32);
    assert_string_equal(cfg.policy.precise_cache_aware.tokenizer_url,
                        "http://127.0.0.1:8100/tokenize");
    assert_int_equal(cfg.policy.precise_cache_aware.tokenize_timeout_ms, 80);
    assert_int_equal(cfg.policy.precise_cache_aware.tokenize_cache_entries, 100);
    assert_int_equal(cfg.policy.precise_cache_aware.speculative_ttl_ms, 3000);
    assert_string_equal(cfg.dataplane.access_log, "/var/log/switchyard/access.log");
    assert_int_equal(cfg.dataplane.access_log_buffer, 64 * 1024);
    assert_false(cfg.tracing.propagate);
    assert_string_equal(cfg.tracing.otlp_endpoint, "http://127.0.0.1:4318");
    assert_string_equal(cfg.tracing.service_name, "edge-router");
    assert_int_equal(cfg.tracing.batch_size, 64);
    assert_int_equal(cfg.tracing.batch_interval_ms, 250);
    assert_int_equal(cfg.tracing.queue_size, 128 * 1024);
    assert_int_equal(cfg.tracing.export_timeout_ms, 500);
    assert_true(cfg.discovery.kubernetes.enabled);
    assert_string_equal(cfg.discovery.kubernetes.namespace_name, "llm");
    assert_string_equal(cfg.discovery.kubernetes.port_name, "http");
    assert_int_equal(cfg.discovery.kubernetes.resync_ms, 30000);
    assert_string_equal(cfg.dataplane.api_keys_file, "/etc/switchyard/keys.yaml");
    assert_string_equal(cfg.dataplane.upstream_api_key_file, "/etc/switchyard/worker-key");
    assert_int_equal(cfg.admission.max_inflight_per_worker, 4);
    assert_int_equal(cfg.admission.max_waiting_per_worker, 8);
    assert_true(cfg.admission.max_kv_usage == 0.9);
    assert_int_equal(cfg.admission.queue.max_depth, 50);
    assert_int_equal(cfg.admission.queue.max_wait_ms, 5000);
    assert_true(cfg.admission.forward_priority);

    assert_int_equal(cfg.n_workers, 3);
    assert_string_equal(cfg.workers[0].id, "w1");
    assert_string_equal(cfg.workers[0].url, "http://127.0.0.1:9001");
    assert_string_equal(cfg.workers[0].model, "mock");
    assert_int_equal(cfg.workers[0].role, CFG_ROLE_PREFILL);
    assert_int_equal(cfg.workers[0].line, line_of(path, "  - url: http://127.0.0.1:9001"));
    /* Canonical url (lower-case host, no slash) and the id derived from it. */
    assert_string_equal(cfg.workers[1].id, "worker-b.example:8443");
    assert_string_equal(cfg.workers[1].url, "https://worker-b.example:8443");
    assert_string_equal(cfg.workers[1].model, "meta-llama/Llama-3.1-8B");
    assert_int_equal(cfg.workers[1].role, CFG_ROLE_DECODE);
    assert_int_equal(cfg.workers[1].line, line_of(path, "  - url: https://Worker-B.example"));
    assert_string_equal(cfg.workers[2].id, "::1:9003");
    assert_string_equal(cfg.workers[2].url, "http://[::1]:9003");
    assert_string_equal(cfg.workers[2].model, "");
    assert_int_equal(cfg.workers[2].role, CFG_ROLE_REGULAR);
    assert_int_equal(cfg.workers[2].line, line_of(path, "  - url: http://[::1]:9003"));
    cfg_fini(&cfg);
    assert_defaults(&cfg);
}

static void test_example_local_yaml(void **state)
{
    struct cfg cfg;
    char err[ERR_LEN];
    int rc;

    (void)state;
    rc = cfg_load_file(&cfg, "deploy/examples/local.yaml", err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    assert_string_equal(cfg.shm.name, "/switchyard-local");
    assert_string_equal(cfg.controlplane.admin_socket, "build/run-local/admin.sock");
    assert_string_equal(cfg.controlplane.admin_listen, "127.0.0.1:8081");
    assert_string_equal(cfg.dataplane.listen, "127.0.0.1:8080");
    assert_int_equal(cfg.policy.name, CFG_POLICY_CACHE_AWARE);
    assert_int_equal(cfg.n_workers, 3);
    for (size_t i = 0; i < 3; i++) {
        char id[8];
        char url[64];
        snprintf(id, sizeof(id), "w%zu", i + 1);
        snprintf(url, sizeof(url), "http://127.0.0.1:%zu", 9001 + i);
        assert_string_equal(cfg.workers[i].id, id);
        assert_string_equal(cfg.workers[i].url, url);
        assert_string_equal(cfg.workers[i].model, "mock");
        assert_int_equal(cfg.workers[i].role, CFG_ROLE_REGULAR);
    }
    cfg_fini(&cfg);
}

struct bad_case {
    const char *yaml;
    const char *message;
};

/* 140 characters: longer than CFG_ADDR_MAX, and quoted cut to CFG_SHOW_MAX. */
static const char long_listen[] =
    "dataplane:\n  listen: "
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:80\n";

static const struct bad_case bad_cases[] = {
    {"dataplane:\n  lisen: 127.0.0.1:8080\n",
     "t.yaml:2:3: dataplane.lisen: unknown key (expected one of listen|threads|max_body|"
     "max_header_size|connect_timeout|first_byte_timeout|idle_timeout|drain_timeout|"
     "header_timeout|upload_min_rate|per_ip_connection_limit|max_connections|metrics_listen|"
     "debug_headers|retry|access_log|access_log_buffer|api_keys_file|"
     "upstream_api_key_file|response_ttl|response_table_size|cors|upstream_tls|tls|"
     "plain_listen|strip_headers|metrics_tenant_labels|cache_salt_key_file)"},
    {"dataplane:\n  strip_headers: [\"bad name\"]\n",
     "t.yaml:2:19: dataplane.strip_headers[0]: expected a header name, got 'bad name'"},
    {"dataplane:\n  tls:\n    priorities: \"NORMAL -X\"\n",
     "t.yaml:3:17: dataplane.tls.priorities: expected a GnuTLS priority string of at most 255 "
     "printable characters, or \"\", got 'NORMAL -X'"},
    {"dataplane:\n  tls:\n    min_version: 1.1\n",
     "t.yaml:3:18: dataplane.tls.min_version: expected one of 1.2|1.3, got '1.1'"},
    {"dataplane:\n  tls:\n    client_ca_file: /ca.pem\n",
     "t.yaml:3:21: dataplane.tls.client_ca_file: expected cert_file and key_file too (client "
     "certificates are asked only over TLS), got only '/ca.pem'"},
    {"dataplane:\n  upstream_tls:\n    client_cert_file: /c.pem\n",
     "t.yaml:3:23: dataplane.upstream_tls.client_cert_file: expected client_key_file too (a client "
     "certificate needs its key), got only '/c.pem'"},
    {"workers:\n  - url: http://127.0.0.1:9001\n    weight: 2\n",
     "t.yaml:3:5: workers[0].weight: unknown key (expected one of url|id|model|role|kv_events)"},
    {"shmm:\n  name: /x\n",
     "t.yaml:1:1: shmm: unknown key (expected one of shm|controlplane|dataplane|policy|tracing|"
     "discovery|admission|workers)"},
    {"discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:1\n",
     "t.yaml:3:17: discovery.kubernetes.api_server: expected an https:// URL (plain http needs "
     "insecure_http: true), got 'http://127.0.0.1:1'"},
    {"discovery:\n  kubernetes:\n    scheme: ftp\n",
     "t.yaml:3:13: discovery.kubernetes.scheme: expected http or https, got 'ftp'"},
    {"workers:\n  - url: http://127.0.0.1:9001\n    role: x\n",
     "t.yaml:3:11: workers[0].role: expected one of regular|prefill|decode, got 'x'"},
    {"controlplane:\n  health:\n    interval: 5\n",
     "t.yaml:3:15: controlplane.health.interval: expected a duration (ms|s|m|h) in 10ms..1h, "
     "got '5'"},
    {"controlplane:\n  health:\n    interval: 5ms\n",
     "t.yaml:3:15: controlplane.health.interval: expected a duration (ms|s|m|h) in 10ms..1h, "
     "got '5ms'"},
    {"controlplane:\n  health:\n    interval: 61m\n",
     "t.yaml:3:15: controlplane.health.interval: expected a duration (ms|s|m|h) in 10ms..1h, "
     "got '61m'"},
    {"controlplane:\n  health: {timeout: 0}\n",
     "t.yaml:2:21: controlplane.health.timeout: expected a duration (ms|s|m|h) in 1ms..1h, "
     "got '0'"},
    {"controlplane:\n  health:\n    failure_threshold: 101\n",
     "t.yaml:3:24: controlplane.health.failure_threshold: expected an integer in 1..100, "
     "got '101'"},
    {"dataplane:\n  idle_timeout: 99999999999999999999ms\n",
     "t.yaml:2:17: dataplane.idle_timeout: expected a duration (ms|s|m|h) in 1ms..24h, "
     "got '99999999999999999999ms'"},
    {"dataplane:\n  idle_timeout: -1s\n",
     "t.yaml:2:17: dataplane.idle_timeout: expected a duration (ms|s|m|h) in 1ms..24h, "
     "got '-1s'"},
    {"dataplane:\n  retry:\n    max_attempts: 11\n",
     "t.yaml:3:19: dataplane.retry.max_attempts: expected an integer in 1..10, got '11'"},
    {"dataplane:\n  threads: 257\n",
     "t.yaml:2:12: dataplane.threads: expected an integer in 0..256, got '257'"},
    {"dataplane:\n  max_body: 2GiB\n",
     "t.yaml:2:13: dataplane.max_body: expected a size (bytes, KiB|MiB|GiB or KB|MB|GB) in "
     "1KiB..1GiB, got '2GiB'"},
    {"dataplane:\n  max_body: 32mb\n",
     "t.yaml:2:13: dataplane.max_body: expected a size (bytes, KiB|MiB|GiB or KB|MB|GB) in "
     "1KiB..1GiB, got '32mb'"},
    {"dataplane:\n  max_header_size: 512\n",
     "t.yaml:2:20: dataplane.max_header_size: expected a size (bytes, KiB|MiB|GiB or KB|MB|GB) "
     "in 1KiB..1MiB, got '512'"},
    {"dataplane: {max_body: 99999999999999999999GiB}\n",
     "t.yaml:1:23: dataplane.max_body: expected a size (bytes, KiB|MiB|GiB or KB|MB|GB) in "
     "1KiB..1GiB, got '99999999999999999999GiB'"},
    {"dataplane:\n  listen:\n    host: a\n",
     "t.yaml:3:5: dataplane.listen: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), "
     "got a mapping"},
    {"dataplane:\n  listen: [1, 2]\n",
     "t.yaml:2:11: dataplane.listen: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), "
     "got a sequence"},
    {"dataplane:\n  listen: 127.0.0.1:65536\n",
     "t.yaml:2:11: dataplane.listen: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), "
     "got '127.0.0.1:65536'"},
    {long_listen,
     "t.yaml:2:11: dataplane.listen: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), "
     "got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
    {"dataplane:\n  listen: 127.0.0.1:8080\n  listen: 127.0.0.1:8081\n",
     "t.yaml:3:3: dataplane.listen: duplicate key (first at line 2)"},
    {"dataplane:\n  metrics_listen: nowhere\n",
     "t.yaml:2:19: dataplane.metrics_listen: expected HOST:PORT (e.g. 127.0.0.1:9090), or \"\" for "
     "the listen address, got 'nowhere'"},
    {"dataplane:\n  debug_headers: yes\n",
     "t.yaml:2:18: dataplane.debug_headers: expected true|false, got 'yes'"},
    {"dataplane:\n  retry:\n    backoff: 5s\n",
     "t.yaml:3:14: dataplane.retry.backoff: expected at most backoff_max (2s), got '5s'"},
    {"dataplane:\n  retry: {backoff_max: 10ms}\n",
     "t.yaml:2:24: dataplane.retry.backoff_max: expected at least backoff (50ms), got '10ms'"},
    {"dataplane:\n  retry:\n    on_status: [500, 600]\n",
     "t.yaml:3:22: dataplane.retry.on_status[1]: expected an HTTP status code in 100..599, "
     "got '600'"},
    {"dataplane:\n  retry:\n    on_status: [500, 502, 500]\n",
     "t.yaml:3:27: dataplane.retry.on_status[2]: expected a status code not listed before, "
     "got '500'"},
    {"dataplane:\n  retry:\n    on_status: 503\n",
     "t.yaml:3:16: dataplane.retry.on_status: expected a list of HTTP status codes like "
     "[502, 503], got '503'"},
    {"shm: /switchyard\n", "t.yaml:1:6: shm: expected a mapping, got '/switchyard'"},
    {"shm:\n  name: /a/b\n",
     "t.yaml:2:9: shm.name: expected a POSIX shm name: '/' then 1..249 characters, no other "
     "'/', got '/a/b'"},
    {"shm:\n  max_workers: 0\n",
     "t.yaml:2:16: shm.max_workers: expected an integer in 1..65536, got '0'"},
    {"shm:\n  max_dataplanes: 65\n",
     "t.yaml:2:19: shm.max_dataplanes: expected an integer in 1..64, got '65'"},
    {"controlplane:\n  admin_socket: \"\"\n",
     "t.yaml:2:17: controlplane.admin_socket: expected a socket path of 1..107 characters "
     "without control characters, got ''"},
    {"controlplane:\n  health:\n    path: health\n",
     "t.yaml:3:11: controlplane.health.path: expected an HTTP path starting with '/' (at most "
     "255 characters, no spaces), got 'health'"},
    {"policy:\n  name: fastest\n",
     "t.yaml:2:9: policy.name: expected one of round_robin|random|power_of_two|least_load|"
     "consistent_hash|cache_aware|precise_cache_aware, got 'fastest'"},
    {"policy:\n  prefill: { name: fastest }\n",
     "t.yaml:2:20: policy.prefill.name: expected one of round_robin|random|power_of_two|"
     "least_load|consistent_hash|cache_aware|precise_cache_aware, got 'fastest'"},
    {"policy:\n  decode: least_load\n",
     "t.yaml:2:11: policy.decode: expected a mapping like { name: least_load }, "
     "got 'least_load'"},
    {"policy:\n  balance_gate: global\n",
     "t.yaml:2:17: policy.balance_gate: expected one of per_request|fleet, got 'global'"},
    {"policy:\n  pd_fallback: retry\n",
     "t.yaml:2:16: policy.pd_fallback: expected one of local_prefill|error, got 'retry'"},
    {"policy: {cache_threshold: 1.5}\n",
     "t.yaml:1:27: policy.cache_threshold: expected a number in 0..1, got '1.5'"},
    {"policy: {cache_threshold: nan}\n",
     "t.yaml:1:27: policy.cache_threshold: expected a number in 0..1, got 'nan'"},
    {"policy: {balance_rel_threshold: 0.5}\n",
     "t.yaml:1:33: policy.balance_rel_threshold: expected a number >= 1, got '0.5'"},
    {"workers:\n  url: http://127.0.0.1:9001\n",
     "t.yaml:2:3: workers: expected a list of workers, got a mapping"},
    {"workers:\n  - http://127.0.0.1:9001\n",
     "t.yaml:2:5: workers[0]: expected a mapping with url and optional id, model, role, "
     "kv_events, got 'http://127.0.0.1:9001'"},
    {"workers:\n  - id: w1\n    model: m\n", "t.yaml:2:5: workers[0]: missing required key 'url'"},
    {"workers:\n  - url: http://127.0.0.1\n",
     "t.yaml:2:10: workers[0].url: expected an http(s)://HOST:PORT URL (an explicit port is "
     "required), got 'http://127.0.0.1'"},
    {"workers:\n  - url: ftp://127.0.0.1:21\n",
     "t.yaml:2:10: workers[0].url: expected an http(s)://HOST:PORT URL (the scheme must be http "
     "or https), got 'ftp://127.0.0.1:21'"},
    {"workers:\n  - url: http://127.0.0.1:9001/v1\n",
     "t.yaml:2:10: workers[0].url: expected an http(s)://HOST:PORT URL (the path must be empty "
     "or /), got 'http://127.0.0.1:9001/v1'"},
    {"workers:\n  - url: 127.0.0.1:9001\n",
     "t.yaml:2:10: workers[0].url: expected an http(s)://HOST:PORT URL (Unsupported URL "
     "scheme), got '127.0.0.1:9001'"},
    {"workers:\n  - url: http://127.0.0.1:9001\n    id: w/1\n",
     "t.yaml:3:9: workers[0].id: expected 1..63 characters of [A-Za-z0-9._:-], got 'w/1'"},
    {"workers:\n  - url: http://127.0.0.1:9001\n    model: \"a\\tb\"\n",
     "t.yaml:3:12: workers[0].model: expected a model name of at most 127 characters without "
     "control characters, got 'a?b'"},
    {"workers:\n  - url: http://h\xc3\xa9.example:80\n",
     "t.yaml:2:10: workers[0].url: expected a HOST:PORT usable as worker id (1..63 characters of "
     "[A-Za-z0-9._:-]) or an explicit id, got 'http://h\xc3\xa9.example:80'"},
    {"workers:\n  - {url: 'http://a:1', id: w}\n  - {url: 'http://b:1', id: w}\n",
     "t.yaml:3:29: workers[1].id: expected a unique id, got 'w' (also workers[0] at line 2)"},
    {"workers:\n  - url: http://127.0.0.1:9001\n  - url: HTTP://127.0.0.1:9001/\n",
     "t.yaml:3:10: workers[1].url: expected a unique url, got 'http://127.0.0.1:9001' "
     "(also workers[0] at line 2)"},
    {"workers:\n  - url: http://h:1\n  - url: https://h:1\n",
     "t.yaml:3:10: workers[1].id: expected a unique id, got 'h:1' (also workers[0] at line 2)"},
    /* The earliest repeat wins, wherever its first use is. */
    {"workers:\n  - {url: 'http://a:1', id: x}\n  - {url: 'http://b:1', id: y}\n"
     "  - {url: 'http://c:1', id: y}\n  - {url: 'http://d:1', id: x}\n",
     "t.yaml:4:29: workers[2].id: expected a unique id, got 'y' (also workers[1] at line 3)"},
    {"shm: {max_workers: 1}\nworkers: [{url: 'http://a:1'}, {url: 'http://a:2'}]\n",
     "t.yaml:2:32: workers: expected at most 1 workers (shm.max_workers), got 2"},
    {"dataplane:\n  listen: &a 127.0.0.1:1\ncontrolplane:\n  admin_listen: *a\n",
     "t.yaml:4:17: controlplane.admin_listen: expected HOST:PORT (e.g. 127.0.0.1:8080 or "
     "[::1]:8080), got an alias (*a)"},
    {"- a\n", "t.yaml:1:1: expected a mapping, got a sequence"},
    {"? [a]\n: 1\n", "t.yaml:1:3: expected a key, got a sequence"},
    {"shm: {}\n---\nshm: {}\n", "t.yaml:2:1: expected a single YAML document, got another"},
    {"dataplane:\n  listen: 127.0.0.1:8080\n threads: 2\n",
     "t.yaml:3:2: YAML syntax error: did not find expected key"},
    {"dataplane: {listen: 127.0.0.1:8080\n",
     "t.yaml:2:1: YAML syntax error: did not find expected ',' or '}'"},
    {"shm:\n  name: \"/x\xff\"\n", "t.yaml:2:12: YAML syntax error: invalid leading UTF-8 octet"},
    {"controlplane:\n  admin_allowed_hosts: [\"router.internal:8081\"]\n",
     "t.yaml:2:25: controlplane.admin_allowed_hosts[0]: expected a DNS name like router.internal "
     "(no port), got 'router.internal:8081'"},
    {"dataplane:\n  cors:\n    allowed_origins: [\"https://a.example/app\"]\n",
     "t.yaml:3:23: dataplane.cors.allowed_origins[0]: expected \"*\" or an origin like "
     "https://app.example:8443 (no path), got 'https://a.example/app'"},
    {"dataplane:\n  cors:\n    allowed_headers: [\"a b\"]\n",
     "t.yaml:3:23: dataplane.cors.allowed_headers[0]: expected \"*\" or a header name, got 'a b'"},
    {"dataplane:\n  cors:\n    allowed_origins: \"*\"\n",
     "t.yaml:3:22: dataplane.cors.allowed_origins: expected a list of strings, each \"*\" or an "
     "origin like https://app.example:8443 (no path), got '*'"},
    {"dataplane:\n  cors:\n    allowed_headers: [a, A, a]\n",
     "t.yaml:3:29: dataplane.cors.allowed_headers[2]: expected an entry not listed before, got "
     "'a'"},
};

/* Each malformed input fails with exactly its message and leaves the defaults. */
static void test_malformed_messages(void **state)
{
    struct cfg cfg;
    char err[ERR_LEN];

    size_t failed = 0;

    (void)state;
    /* Report every mismatch, then fail. */
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        int rc = load(&cfg, bad_cases[i].yaml, err);
        if (rc != -EINVAL || strcmp(err, bad_cases[i].message) != 0) {
            print_error("case %zu: rc %d\n got: %s\nwant: %s\n", i, rc, err, bad_cases[i].message);
            failed++;
        }
        assert_defaults(&cfg);
        assert_string_equal(cfg.path, "");
    }
    assert_int_equal(failed, 0);
}

static void test_on_status_limit(void **state)
{
    char yaml[512] = "dataplane:\n  retry:\n    on_status: [";
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    for (int i = 0; i < CFG_ON_STATUS_MAX; i++) {
        char item[16];
        snprintf(item, sizeof(item), "%d, ", 500 + i);
        strcat(yaml, item);
    }
    strcat(yaml, "599]\n");
    assert_int_equal(load(&cfg, yaml, err), -EINVAL);
    /* Items of "5xx, " start at column 17: the 33rd at 17 + 32 * 5. */
    assert_string_equal(err, "t.yaml:3:177: dataplane.retry.on_status[32]: expected at most 32 "
                             "status codes, got '599'");

    /* Exactly 32 fit; an empty list means "never retry on a status". */
    strcpy(strrchr(yaml, ','), "]\n");
    assert_int_equal(load(&cfg, yaml, err), 0);
    assert_int_equal(cfg.dataplane.retry.n_on_status, 32);
    assert_int_equal(cfg.dataplane.retry.on_status[31], 531);
    cfg_fini(&cfg);
    assert_int_equal(load(&cfg, "dataplane: {retry: {on_status: []}}\n", err), 0);
    assert_int_equal(cfg.dataplane.retry.n_on_status, 0);
    cfg_fini(&cfg);
}

/* Many workers: all kept in order; a late duplicate is still found and named. */
static void test_many_workers(void **state)
{
    enum { N = 3000 };
    size_t cap = N * 48 + 64;
    char *yaml = malloc(cap);
    size_t len;
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    assert_non_null(yaml);
    len = (size_t)snprintf(yaml, cap, "shm: {max_workers: 4000}\nworkers:\n");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(yaml + len, cap - len, "  - url: http://10.0.%d.%d:8000\n", i / 256,
                                i % 256);
    assert_int_equal(load(&cfg, yaml, err), 0);
    assert_int_equal(cfg.n_workers, N);
    assert_string_equal(cfg.workers[N - 1].id, "10.0.11.183:8000");
    assert_int_equal(cfg.workers[N - 1].line, N + 2);
    cfg_fini(&cfg);

    /* The last entry repeats the first. */
    len += (size_t)snprintf(yaml + len, cap - len, "  - url: http://10.0.0.0:8000\n");
    assert_int_equal(load(&cfg, yaml, err), -EINVAL);
    assert_string_equal(err, "t.yaml:3003:10: workers[3000].url: expected a unique url, got "
                             "'http://10.0.0.0:8000' (also workers[0] at line 3)");
    assert_null(cfg.workers);
    free(yaml);
}

static void test_file_errors(void **state)
{
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    assert_int_equal(cfg_load_file(&cfg, "tests/unit/configs/missing.yaml", err, sizeof(err)),
                     -ENOENT);
    assert_string_equal(err, "tests/unit/configs/missing.yaml: cannot open: No such file or "
                             "directory");
    assert_defaults(&cfg);
    assert_int_equal(cfg_load_file(&cfg, "tests/unit/configs", err, sizeof(err)), -EISDIR);
    assert_string_equal(err, "tests/unit/configs: cannot open: Is a directory");
    /* Messages name the file as given. */
    assert_int_equal(cfg_load_file(&cfg, "tests/unit/configs/bad_role.yaml", err, sizeof(err)),
                     -EINVAL);
    assert_string_equal(err, "tests/unit/configs/bad_role.yaml:4:11: workers[0].role: expected "
                             "one of regular|prefill|decode, got 'leader'");
    assert_defaults(&cfg);
}

/* A short or missing error buffer is cut, never overrun. */
static void test_small_err_buffer(void **state)
{
    struct cfg cfg;
    char err[16];

    (void)state;
    memset(err, 'x', sizeof(err));
    assert_int_equal(cfg_load_string(&cfg, "t.yaml", "shm: 1\n", 7, err, 10), -EINVAL);
    assert_string_equal(err, "t.yaml:1:");
    assert_int_equal(err[10], 'x');
    assert_int_equal(cfg_load_string(&cfg, "t.yaml", "shm: 1\n", 7, NULL, 0), -EINVAL);
    assert_int_equal(cfg_load_string(&cfg, NULL, "shm: 1\n", 7, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "<string>:1:6: s");
}

struct duration_case {
    const char *text;
    int rc;
    uint64_t ms;
};

static void test_parse_duration(void **state)
{
    static const struct duration_case cases[] = {
        {"0", 0, 0},
        {"000", 0, 0},
        {"0ms", 0, 0},
        {"250ms", 0, 250},
        {"5s", 0, 5000},
        {"2m", 0, 120000},
        {"1h", 0, 3600000},
        {"600s", 0, 600000},
        {"18446744073709551615ms", 0, UINT64_MAX},
        {"5124095576030h", 0, UINT64_C(5124095576030) * 3600000},
        {"5124095576031h", -EINVAL, 0}, /* overflows 64 bits */
        {"18446744073709552s", -EINVAL, 0},
        {"18446744073709551616ms", -EINVAL, 0},
        {"5", -EINVAL, 0},
        {"", -EINVAL, 0},
        {"s", -EINVAL, 0},
        {"-1s", -EINVAL, 0},
        {"+1s", -EINVAL, 0},
        {"1.5s", -EINVAL, 0},
        {"5 s", -EINVAL, 0},
        {" 5s", -EINVAL, 0},
        {"5S", -EINVAL, 0},
        {"1d", -EINVAL, 0},
        {"1us", -EINVAL, 0},
        {"1m30s", -EINVAL, 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t ms = 12345;
        int rc = cfg_parse_duration_ms(cases[i].text, &ms);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, want %d", cases[i].text, rc, cases[i].rc);
        if (rc == 0 && ms != cases[i].ms)
            fail_msg("'%s': %" PRIu64 " ms, want %" PRIu64, cases[i].text, ms, cases[i].ms);
        if (rc != 0 && ms != 12345)
            fail_msg("'%s': output written on error", cases[i].text);
    }
    assert_int_equal(cfg_parse_duration_ms(NULL, NULL), -EINVAL);
}

static void test_parse_size(void **state)
{
    static const struct duration_case cases[] = {
        {"0", 0, 0},
        {"1048576", 0, 1048576},
        {"64KiB", 0, 65536},
        {"32MiB", 0, 33554432},
        {"1GiB", 0, 1073741824},
        {"2KB", 0, 2000},
        {"3MB", 0, 3000000},
        {"4GB", 0, 4000000000},
        {"18446744073709551615", 0, UINT64_MAX},
        {"17179869183GiB", 0, UINT64_C(17179869183) << 30},
        {"17179869184GiB", -EINVAL, 0}, /* 2^64 */
        {"18446744073709551616", -EINVAL, 0},
        {"", -EINVAL, 0},
        {"KiB", -EINVAL, 0},
        {"1kib", -EINVAL, 0},
        {"1 MiB", -EINVAL, 0},
        {"1TiB", -EINVAL, 0},
        {"1B", -EINVAL, 0},
        {"-1", -EINVAL, 0},
        {"1.5MiB", -EINVAL, 0},
        {"0x10", -EINVAL, 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t bytes = 12345;
        int rc = cfg_parse_size(cases[i].text, &bytes);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, want %d", cases[i].text, rc, cases[i].rc);
        if (rc == 0 && bytes != cases[i].ms)
            fail_msg("'%s': %" PRIu64 " bytes, want %" PRIu64, cases[i].text, bytes, cases[i].ms);
    }
}

/* The static formatter used in range messages picks the largest exact unit. */
static void test_format_with_unit(void **state)
{
    char buf[32];

    (void)state;
    format_with_unit(0, duration_units, buf, sizeof(buf));
    assert_string_equal(buf, "0");
    format_with_unit(1500, duration_units, buf, sizeof(buf));
    assert_string_equal(buf, "1500ms");
    format_with_unit(7200000, duration_units, buf, sizeof(buf));
    assert_string_equal(buf, "2h");
    format_with_unit(UINT64_C(1) << 30, size_units, buf, sizeof(buf));
    assert_string_equal(buf, "1GiB");
    format_with_unit(1000, size_units, buf, sizeof(buf));
    assert_string_equal(buf, "1KB");
    format_with_unit(1023, size_units, buf, sizeof(buf));
    assert_string_equal(buf, "1023");
}

struct host_port_case {
    const char *text;
    int rc;
    const char *host;
    uint16_t port;
};

static void test_parse_host_port(void **state)
{
    static const struct host_port_case cases[] = {
        {"127.0.0.1:8080", 0, "127.0.0.1", 8080},
        {"0.0.0.0:1", 0, "0.0.0.0", 1},
        {"localhost:65535", 0, "localhost", 65535},
        {"my_host-1.example:80", 0, "my_host-1.example", 80},
        {"[::1]:80", 0, "::1", 80},
        {"[::]:8080", 0, "::", 8080},
        {"[2001:db8::5]:443", 0, "2001:db8::5", 443},
        {"::1:80", -EINVAL, NULL, 0},
        {"[::1]80", -EINVAL, NULL, 0},
        {"[::1]", -EINVAL, NULL, 0},
        {"[::1:80", -EINVAL, NULL, 0},
        {"[]:80", -EINVAL, NULL, 0},
        {"[zz]:80", -EINVAL, NULL, 0},
        {"[127.0.0.1]:80", -EINVAL, NULL, 0},
        {"300.1.1.1:80", -EINVAL, NULL, 0},
        {"127.1:80", -EINVAL, NULL, 0},
        {"host:0", -EINVAL, NULL, 0},
        {"host:65536", -EINVAL, NULL, 0},
        {"host:99999999999999999999999", -EINVAL, NULL, 0},
        {"host:", -EINVAL, NULL, 0},
        {":80", -EINVAL, NULL, 0},
        {"*:80", -EINVAL, NULL, 0},
        {"host:8a", -EINVAL, NULL, 0},
        {"host:+80", -EINVAL, NULL, 0},
        {"host:-1", -EINVAL, NULL, 0},
        {"host 1:80", -EINVAL, NULL, 0},
        {"host", -EINVAL, NULL, 0},
        {"", -EINVAL, NULL, 0},
    };
    char host[CFG_ADDR_MAX];
    uint16_t port;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc;
        port = 7;
        rc = cfg_parse_host_port(cases[i].text, host, sizeof(host), &port);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, want %d", cases[i].text, rc, cases[i].rc);
        if (rc != 0)
            continue;
        assert_string_equal(host, cases[i].host);
        assert_int_equal(port, cases[i].port);
    }
    /* The host buffer bounds what is written. */
    assert_int_equal(cfg_parse_host_port("localhost:80", host, 9, &port), -ENOSPC);
    assert_int_equal(cfg_parse_host_port("localhost:80", host, 10, &port), 0);
    assert_string_equal(host, "localhost");
    assert_int_equal(cfg_parse_host_port(NULL, host, sizeof(host), &port), -EINVAL);
}

struct url_case {
    const char *url;
    int rc;
    const char *canon_or_reason;
    const char *id;
};

static void test_worker_url(void **state)
{
    static const struct url_case cases[] = {
        {"http://127.0.0.1:9001", 0, "http://127.0.0.1:9001", "127.0.0.1:9001"},
        {"http://127.0.0.1:9001/", 0, "http://127.0.0.1:9001", "127.0.0.1:9001"},
        {"HTTPS://Worker.Example:443", 0, "https://worker.example:443", "worker.example:443"},
        {"https://[::1]:8443", 0, "https://[::1]:8443", "::1:8443"},
        {"http://h:01", 0, "http://h:1", "h:1"},
        {"http://h", -EINVAL, "an explicit port is required", ""},
        {"http://h:0", -EINVAL, "the port must be in 1..65535", ""},
        {"http://h:65536", -EINVAL, "Port number was not a decimal number between 0 and 65535", ""},
        {"ftp://h:21", -EINVAL, "the scheme must be http or https", ""},
        {"h:1", -EINVAL, "Unsupported URL scheme", ""},
        {"http://:1", -EINVAL, "No host part in the URL", ""},
        {"http://h:1/v1", -EINVAL, "the path must be empty or /", ""},
        {"http://h:1//", -EINVAL, "the path must be empty or /", ""},
        {"http://h:1?x=1", -EINVAL, "a query is not allowed", ""},
        {"http://h:1/?", -EINVAL, "a query is not allowed", ""},
        {"http://h:1#top", -EINVAL, "a fragment is not allowed", ""},
        {"http://u:p@h:1", -EINVAL, "user info is not allowed", ""},
        {"http://[fe80::1%25eth0]:1", -EINVAL, "an IPv6 zone id is not allowed", ""},
        {"http://h:1 ", -EINVAL, "Port number was not a decimal number between 0 and 65535", ""},
        {"", -EINVAL, "Bad scheme", ""},
    };
    char canon[CFG_URL_MAX];
    char id[CFG_ID_MAX];
    char reason[128];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct url_case *c = &cases[i];
        int rc = cfg_canon_worker_url(c->url, canon, sizeof(canon), id, sizeof(id), reason,
                                      sizeof(reason));
        if (rc != c->rc)
            fail_msg("'%s': rc %d (%s), want %d", c->url, rc, reason, c->rc);
        if (rc == 0) {
            assert_string_equal(canon, c->canon_or_reason);
            assert_string_equal(reason, "");
        } else {
            assert_string_equal(reason, c->canon_or_reason);
        }
        assert_string_equal(id, c->id);
        /* The short form agrees. */
        rc = cfg_check_worker_url(c->url, id, sizeof(id), reason, sizeof(reason));
        assert_int_equal(rc, c->rc);
        assert_string_equal(id, c->id);
    }
    /* An id that does not fit is left empty; a canon that does not fit is an error. */
    assert_int_equal(cfg_canon_worker_url("http://worker.example:80", canon, sizeof(canon), id, 8,
                                          reason, sizeof(reason)),
                     0);
    assert_string_equal(id, "");
    assert_int_equal(cfg_canon_worker_url("http://worker.example:80", canon, 12, id, sizeof(id),
                                          reason, sizeof(reason)),
                     -ENOSPC);
    assert_string_equal(reason, "longer than 11 characters as scheme://host:port");
    assert_int_equal(cfg_check_worker_url(NULL, id, sizeof(id), reason, sizeof(reason)), -EINVAL);
}

static void test_worker_id(void **state)
{
    char longest[CFG_ID_MAX + 1];

    (void)state;
    assert_true(cfg_worker_id_is_valid("w1"));
    assert_true(cfg_worker_id_is_valid("gpu-node_7.rack:3"));
    assert_true(cfg_worker_id_is_valid("::1:9001"));
    assert_false(cfg_worker_id_is_valid(""));
    assert_false(cfg_worker_id_is_valid(NULL));
    assert_false(cfg_worker_id_is_valid("w 1"));
    assert_false(cfg_worker_id_is_valid("w/1"));
    assert_false(cfg_worker_id_is_valid("[::1]:80"));
    assert_false(cfg_worker_id_is_valid("w\xc3\xa9"));
    memset(longest, 'a', sizeof(longest));
    longest[CFG_ID_MAX - 1] = '\0'; /* 63 characters */
    assert_true(cfg_worker_id_is_valid(longest));
    longest[CFG_ID_MAX - 1] = 'a';
    longest[CFG_ID_MAX] = '\0'; /* 64 */
    assert_false(cfg_worker_id_is_valid(longest));
}

/* A worker's kv_events: defaults, values, the endpoint rule, replay alone. */
static void test_worker_kv_events(void **state)
{
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    assert_true(cfg_kv_endpoint_is_valid(""));
    assert_true(cfg_kv_endpoint_is_valid("tcp://*:5557"));
    assert_true(cfg_kv_endpoint_is_valid("tcp://:5557"));
    assert_true(cfg_kv_endpoint_is_valid("tcp://10.0.0.5:5557"));
    assert_true(cfg_kv_endpoint_is_valid("tcp://vllm-0.vllm:5557"));
    assert_true(cfg_kv_endpoint_is_valid("tcp://[::1]:5557"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://h:0"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://h:65536"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://h:"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://h"));
    assert_false(cfg_kv_endpoint_is_valid("ipc:///tmp/x"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://h h:1"));
    assert_false(cfg_kv_endpoint_is_valid("tcp://[::1:5557"));

    assert_int_equal(load(&cfg, "workers:\n  - url: http://h:1\n", err), 0);
    assert_string_equal(cfg.workers[0].kv_events.endpoint, "");
    assert_int_equal(cfg.workers[0].kv_events.data_parallel_size, 1);
    cfg_fini(&cfg);
    assert_int_equal(
        load(&cfg,
             "workers:\n  - url: http://h:1\n    kv_events: {endpoint: \"tcp://*:5557\", "
             "replay_endpoint: \"tcp://*:5558\", data_parallel_size: 2}\n",
             err),
        0);
    assert_string_equal(cfg.workers[0].kv_events.endpoint, "tcp://*:5557");
    assert_string_equal(cfg.workers[0].kv_events.replay_endpoint, "tcp://*:5558");
    assert_int_equal(cfg.workers[0].kv_events.data_parallel_size, 2);
    cfg_fini(&cfg);
    assert_int_equal(
        load(&cfg, "workers:\n  - url: http://h:1\n    kv_events: {endpoint: \"h:5557\"}\n", err),
        -EINVAL);
    assert_non_null(strstr(err, "workers[0].kv_events.endpoint"));
    cfg_fini(&cfg);
    assert_int_equal(load(&cfg,
                          "workers:\n  - url: http://h:1\n    kv_events: {replay_endpoint: "
                          "\"tcp://*:5558\"}\n",
                          err),
                     -EINVAL);
    assert_non_null(strstr(err, "replay_endpoint"));
    cfg_fini(&cfg);
}

static void test_enum_names(void **state)
{
    enum cfg_role role = CFG_ROLE_UNSET;
    enum cfg_policy_name name = CFG_POLICY_UNSET;

    (void)state;
    for (int r = CFG_ROLE_REGULAR; r <= CFG_ROLE_DECODE; r++) {
        assert_int_equal(cfg_role_parse(cfg_role_name((enum cfg_role)r), &role), 0);
        assert_int_equal(role, r);
    }
    for (int n = CFG_POLICY_ROUND_ROBIN; n <= CFG_POLICY_CACHE_AWARE; n++) {
        assert_int_equal(cfg_policy_name_parse(cfg_policy_name_str((enum cfg_policy_name)n), &name),
                         0);
        assert_int_equal(name, n);
    }
    assert_string_equal(cfg_role_name(CFG_ROLE_PREFILL), "prefill");
    assert_string_equal(cfg_policy_name_str(CFG_POLICY_POWER_OF_TWO), "power_of_two");
    assert_string_equal(cfg_role_name(CFG_ROLE_UNSET), "unset");
    assert_string_equal(cfg_policy_name_str((enum cfg_policy_name)99), "unset");
    role = CFG_ROLE_DECODE;
    assert_int_equal(cfg_role_parse("Regular", &role), -EINVAL);
    assert_int_equal(role, CFG_ROLE_DECODE);
    assert_int_equal(cfg_role_parse(NULL, &role), -EINVAL);
    assert_int_equal(cfg_policy_name_parse("unset", &name), -EINVAL);
}

/* Quoted values are cut at CFG_SHOW_MAX bytes without splitting UTF-8. */
static void test_show_text(void **state)
{
    char text[CFG_SHOW_MAX + 8];
    char buf[CFG_SHOW_BUF];

    (void)state;
    cfg_yaml_show_text("a\nb\x7f", 4, buf, sizeof(buf));
    assert_string_equal(buf, "a?b?");
    memset(text, 'x', sizeof(text));
    text[CFG_SHOW_MAX - 1] = '\xc3';
    text[CFG_SHOW_MAX] = '\xa9';
    cfg_yaml_show_text(text, sizeof(text), buf, sizeof(buf));
    assert_int_equal(strlen(buf), CFG_SHOW_MAX - 1 + 3);
    assert_string_equal(buf + CFG_SHOW_MAX - 1, "...");
    cfg_yaml_show_text(text, sizeof(text), buf, 5);
    assert_string_equal(buf, "xxxx");
}

/* Keys and values may be quoted; block scalars and flow style are YAML, too. */
static void test_yaml_styles(void **state)
{
    const char *yaml = "\"dataplane\":\n"
                       "  'listen': \"127.0.0.1:1\"\n"
                       "  max_body: '1024'\n"
                       "  debug_headers: TRUE\n"
                       "workers:\n"
                       "  - url: \"http://a:1\"\n"
                       "    model: >-\n"
                       "      folded\n"
                       "      name\n";
    struct cfg cfg;
    char err[ERR_LEN];

    (void)state;
    if (load(&cfg, yaml, err) != 0)
        fail_msg("%s", err);
    assert_string_equal(cfg.dataplane.listen, "127.0.0.1:1");
    assert_int_equal(cfg.dataplane.max_body, 1024);
    assert_true(cfg.dataplane.debug_headers);
    assert_int_equal(cfg.n_workers, 1);
    assert_string_equal(cfg.workers[0].model, "folded name");
    cfg_fini(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_inputs),
        cmocka_unit_test(test_schema_rows),
        cmocka_unit_test(test_defaults_are_the_schema_rows),
        cmocka_unit_test(test_full_file_round_trip),
        cmocka_unit_test(test_example_local_yaml),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_on_status_limit),
        cmocka_unit_test(test_many_workers),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_small_err_buffer),
        cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_format_with_unit),
        cmocka_unit_test(test_parse_host_port),
        cmocka_unit_test(test_worker_url),
        cmocka_unit_test(test_worker_id),
        cmocka_unit_test(test_worker_kv_events),
        cmocka_unit_test(test_enum_names),
        cmocka_unit_test(test_show_text),
        cmocka_unit_test(test_yaml_styles),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
