/*
 * End-to-end tests of security review II's findings about hostile peers of
 * the control plane (docs/security.md): the peers it reads without trusting
 * them with its resources. Each test replays the attack through the real
 * binaries and failed before its fix.
 *
 *  - Row 17: a worker publishing KV-cache events evicts every other
 *    worker from the KV holder index by flooding BlockStored (a hostile
 *    publisher went from 0 to 6,919 of 7,680 facts, a good worker from 512
 *    to 5). Two mock workers publish their real events; one of them is
 *    sent prompts until it has stored three times the index's capacity.
 *    The other must keep every fact it reported, and the flooder's held-back
 *    blocks are counted under its name.
 *  - Row 20: a hostile Kubernetes API server (switchyard-fakekube's
 *    flood_list fault) answers the pod list with millions of tiny items,
 *    with more pods than discovery.kubernetes.max_pods, or with pods that
 *    each deserve a warning. The control plane's peak RSS stays bounded,
 *    its log gains a bounded number of lines, the refusal names the key,
 *    and the registry keeps the last good view until the server behaves.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/kv_holders.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_fleet.h"
#include "tests/e2e/harness_precise.h"

/* ---- row 17: one worker cannot evict the others from the KV holder index ---- */

#define KV_GOOD_PROMPTS  8
#define KV_GOOD_BLOCKS   64 /* 512 facts, as in the review */
#define KV_FLOOD_BLOCKS  480
#define KV_FLOOD_PROMPTS 48 /* 23,040 stores: three times the index's 7,680 */

/* Starts mock i publishing its KV events (as h_precise_fleet_start does) with
 * an LRU that never evicts, so it only ever sends BlockStored. */
static void kv_start_worker(struct h_precise_fleet *f, size_t i)
{
    struct h_precise_worker *w = &f->w[i];
    uint16_t p, q;
    assert_int_equal(h_free_port(&p), 0);
    assert_int_equal(h_free_port(&q), 0);
    snprintf(w->id, sizeof(w->id), "w%zu", i + 1);
    snprintf(w->pub, sizeof(w->pub), "tcp://127.0.0.1:%u", p);
    snprintf(w->replay, sizeof(w->replay), "tcp://127.0.0.1:%u", q);
    snprintf(w->kv_events, sizeof(w->kv_events),
             "kv_events:\n  endpoint: \"tcp://*:%u\"\n  replay_endpoint: \"tcp://*:%u\"\n", p, q);
    const char *argv[] = {"--model",
                          H_FLEET_MODEL,
                          "--kv-events-endpoint",
                          w->pub,
                          "--kv-events-replay-endpoint",
                          w->replay,
                          "--kv-blocks",
                          "1000000",
                          NULL};
    memcpy(w->argv, argv, sizeof(argv));
    struct h_fleet *fl = &f->fleet;
    assert_int_equal(h_mock_startv(&fl->mock[i], w->argv), 0);
    assert_int_equal(h_config_add_worker(&fl->cfg, fl->mock[i].url, w->id, H_FLEET_MODEL, NULL), 0);
    fl->cfg.workers[fl->cfg.n_workers - 1].extra = w->kv_events;
}

/* Two publishing workers in front of the smallest index (4,096 asked,
 * 7,680 held: 512 buckets of 15), as in the review. */
static void kv_fleet_start(struct h_precise_fleet *f)
{
    memset(f, 0, sizeof(*f));
    f->fleet.n = 2;
    for (size_t i = 0; i < 2; i++)
        kv_start_worker(f, i);
    f->fleet.cfg.shm_extra = "kv_index_blocks: 4096\n";
    snprintf(f->policy_extra, sizeof(f->policy_extra), "%s  tokenize_timeout: 2s\n",
             H_PRECISE_POLICY_EXACT);
    h_fleet_start_router(&f->fleet, &(struct h_fleet_opts){
                                        .policy = "precise_cache_aware",
                                        .policy_extra = f->policy_extra,
                                        .health_interval = "100ms",
                                        .dataplane_extra = H_PRECISE_DATAPLANE_EXTRA,
                                    });
    assert_int_equal(
        h_url(f->cp_metrics, sizeof(f->cp_metrics), f->fleet.cfg.admin_port, "/metrics"), 0);
    assert_int_equal(h_wait_until(h_precise_dp_attached, f->fleet.dp, H_PRECISE_WAIT_MS), 0);
    f->ix = h_precise_attach_holders(f->fleet.cfg.shm_name);
    h_precise_wait_cp_metric_ge(f, "switchyard_kv_events_subscriptions", 2);
    for (size_t i = 0; i < 2; i++) {
        char sample[160];
        snprintf(sample, sizeof(sample), "switchyard_kv_events_batches_total{worker=\"%s\"}",
                 f->w[i].id);
        h_precise_fleet_probe_until(f, i, sample);
    }
}

/* Blocks of content the index says worker i holds. */
static size_t kv_held(const struct h_precise_fleet *f, size_t i, const char *content)
{
    uint64_t chain[KV_GOOD_BLOCKS + 1];
    size_t n = h_precise_chain(content, chain, KV_GOOD_BLOCKS + 1);
    uint32_t slot = h_precise_slot(&f->fleet, f->w[i].id);
    size_t k = 0;
    for (size_t b = 0; b < n; b++)
        k += kvh_has(f->ix, chain[b], slot);
    return k;
}

static size_t kv_held_all(const struct h_precise_fleet *f, char *const *prompts)
{
    size_t k = 0;
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++)
        k += kv_held(f, 0, prompts[p]);
    return k;
}

struct kv_good_wait {
    const struct h_precise_fleet *f;
    char *const *prompts;
};

static bool kv_good_all_held(void *arg)
{
    const struct kv_good_wait *g = arg;
    return kv_held_all(g->f, g->prompts) == KV_GOOD_PROMPTS * KV_GOOD_BLOCKS;
}

static long long kv_limited(const struct h_precise_fleet *f, const char *id, const char *action)
{
    char sample[160];
    snprintf(sample, sizeof(sample),
             "switchyard_kv_share_limited_total{worker=\"%s\",action=\"%s\"}", id, action);
    long long v = h_precise_cp_metric(f, sample);
    return v < 0 ? 0 : v;
}

static void test_kv_flood_keeps_other_workers_facts(void **state)
{
    (void)state;
    struct h_precise_fleet f;
    kv_fleet_start(&f);
    long long cap = h_precise_cp_metric(&f, "switchyard_kv_index_capacity");
    assert_int_equal(cap, 7680);

    /* The good worker reports 512 blocks. */
    char *good[KV_GOOD_PROMPTS];
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++) {
        good[p] = h_precise_blocks(7000 + (unsigned)p, KV_GOOD_BLOCKS);
        h_precise_fleet_chat_direct(&f, 0, good[p]);
    }
    struct kv_good_wait gw = {&f, good};
    assert_int_equal(h_wait_until(kv_good_all_held, &gw, H_PRECISE_WAIT_MS), 0);

    /* The other floods: every prompt new, nothing ever removed. */
    long long before = h_precise_cp_metric(&f, "switchyard_kv_blocks_total{op=\"stored\"}");
    for (size_t p = 0; p < KV_FLOOD_PROMPTS; p++) {
        char *c = h_precise_blocks(9000 + (unsigned)p, KV_FLOOD_BLOCKS);
        h_precise_fleet_chat_direct(&f, 1, c);
        free(c);
    }
    /* Applied: every flood block went through the index. */
    h_precise_wait_cp_metric_ge(&f, "switchyard_kv_blocks_total{op=\"stored\"}",
                                before + KV_FLOOD_PROMPTS * KV_FLOOD_BLOCKS);

    size_t kept = kv_held_all(&f, good);
    size_t bad = kvh_slot_count(f.ix, h_precise_slot(&f.fleet, f.w[1].id));
    fprintf(stderr, "good worker keeps %zu of %d facts; the flooder holds %zu of %lld\n", kept,
            KV_GOOD_PROMPTS * KV_GOOD_BLOCKS, bad, cap);
    assert_int_equal(kept, KV_GOOD_PROMPTS * KV_GOOD_BLOCKS);
    /* The flooder recycled its own facts, counted under its name. */
    assert_true(kv_limited(&f, f.w[1].id, "self_evicted") + kv_limited(&f, f.w[1].id, "refused") >
                0);
    assert_int_equal(
        kv_limited(&f, f.w[0].id, "self_evicted") + kv_limited(&f, f.w[0].id, "refused"), 0);
    for (size_t p = 0; p < KV_GOOD_PROMPTS; p++)
        free(good[p]);
    h_precise_fleet_stop(&f);
}

/* ---- row 20: a hostile Kubernetes API server ---------------------------------- */

#define KUBE_NS        "default"
#define KUBE_MAX_ITEMS 500 /* per page; pages are asked of this size */
#define KUBE_MAX_PODS  1000
/* The control plane's peak RSS bound (the attack once took it to 2.7 GB).
 * AddressSanitizer keeps freed memory resident in its quarantine (256 MB by
 * default) and adds its shadow: the bound under it is that much higher. */
#if defined(__SANITIZE_ADDRESS__)
#define KUBE_RSS_KIB (400 * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KUBE_RSS_KIB (400 * 1024)
#endif
#endif
#ifndef KUBE_RSS_KIB
#define KUBE_RSS_KIB (100 * 1024)
#endif
#define KUBE_WAIT_MS 30000

/* Everything the Kubernetes test started; in its stack frame. */
struct kube_env {
    char fk[64]; /* http://127.0.0.1:PORT of the fake API server */
    struct h_proc *fk_proc, *cp;
    struct h_mock mock;
    struct h_config cfg;
    struct shm_segment seg;
    bool attached;
    char admin[64];
    size_t lines0; /* the control plane's log lines before an attack */
};

static bool kube_fake_answers(void *arg)
{
    const struct kube_env *e = arg;
    char url[128];
    snprintf(url, sizeof(url), "%s/api/v1/namespaces/" KUBE_NS "/pods", e->fk);
    struct h_resp r;
    struct h_req q = {.url = url, .timeout_ms = 500};
    bool ok = h_http(&q, &r) == 0 && r.status == 200;
    h_resp_fini(&r);
    return ok;
}

static bool kube_attach(void *arg)
{
    struct kube_env *e = arg;
    char err[256];
    return shm_segment_attach(&e->seg, e->cfg.shm_name, err, sizeof(err)) == 0;
}

static void kube_fault(const struct kube_env *e, const char *json)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/fake/faults", e->fk);
    struct h_req q = {.method = "POST", .url = url, .body = json};
    struct h_resp r;
    assert_int_equal(h_http(&q, &r), 0);
    if (r.status != 200)
        fail_msg("fault %s: %ld %s", json, r.status, r.body);
    h_resp_fini(&r);
}

/* Fake, one mock as pod p0's container, the control plane (no data plane:
 * the registry is what is watched). */
static void kube_start(struct kube_env *e)
{
    memset(e, 0, sizeof(*e));
    uint16_t port;
    assert_int_equal(h_free_port(&port), 0);
    char bin[H_PATH_MAX], listen[32];
    assert_int_equal(h_bin_path("switchyard-fakekube", bin, sizeof(bin)), 0);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    snprintf(e->fk, sizeof(e->fk), "http://%s", listen);
    const char *argv[] = {bin, "--listen", listen, NULL};
    assert_int_equal(h_spawn("fakekube", argv, &e->fk_proc), 0);
    assert_int_equal(h_wait_until(kube_fake_answers, e, H_READY_TIMEOUT_MS), 0);
    assert_int_equal(h_mock_startv(&e->mock, (const char *const[]){"--model", "mock", NULL}), 0);
    static char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "discovery:\n"
             "  kubernetes:\n"
             "    api_server: http://127.0.0.1:%u\n"
             "    insecure_http: true\n"
             "    namespace: " KUBE_NS "\n"
             "    label_selector: app=vllm\n"
             "    port_name: http\n"
             "    token_file: /nonexistent\n"
             "    ca_file: \"\"\n"
             "    resync: 1s\n"
             "    watch_timeout: 30s\n"
             "    max_list_items: %d\n"
             "    max_pods: %d\n",
             (unsigned)port, KUBE_MAX_ITEMS, KUBE_MAX_PODS);
    e->cfg.extra_yaml = yaml;
    assert_int_equal(h_config_write(&e->cfg, NULL), 0);
    snprintf(e->admin, sizeof(e->admin), "http://127.0.0.1:%u", (unsigned)e->cfg.admin_port);
    assert_int_equal(h_start_controlplane(e->cfg.path, &e->cp), 0);
    assert_int_equal(h_wait_until(kube_attach, e, H_READY_TIMEOUT_MS), 0);
    e->attached = true;
}

static void kube_put_p0(const struct kube_env *e)
{
    char url[192], body[1024];
    snprintf(url, sizeof(url), "%s/fake/namespaces/" KUBE_NS "/pods/p0", e->fk);
    snprintf(body, sizeof(body),
             "{\"metadata\":{\"labels\":{\"app\":\"vllm\",\"switchyard.io/model\":\"mock\"}},"
             "\"spec\":{\"containers\":[{\"name\":\"vllm\",\"ports\":[{\"name\":\"http\","
             "\"containerPort\":%u}]}]},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\",\"conditions\":[{"
             "\"type\":\"Ready\",\"status\":\"True\"}]}}",
             (unsigned)e->mock.port);
    struct h_req q = {.method = "PUT", .url = url, .body = body};
    struct h_resp r;
    assert_int_equal(h_http(&q, &r), 0);
    assert_true(r.status == 200 || r.status == 201);
    h_resp_fini(&r);
}

static bool kube_p0_registered(void *arg)
{
    struct kube_env *e = arg;
    struct shm_worker_info w;
    return shm_registry_find(&e->seg, "p0", &w) == 0;
}

/* The control plane's peak resident memory (VmHWM), in KiB; -1 if unknown. */
static long kube_cp_peak_kib(const struct kube_env *e)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)e->cp->pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static size_t kube_cp_log_lines(const struct kube_env *e)
{
    FILE *f = fopen(e->cp->log_path, "re");
    if (f == NULL)
        return 0;
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* What an attack is waited on: the control plane says `needle`, or it
 * went over a bound already (then the asserts after the wait say which). */
struct kube_attack_wait {
    struct kube_env *e;
    const char *needle;
};

static bool kube_attack_settled(void *arg)
{
    const struct kube_attack_wait *w = arg;
    return h_proc_log_contains(w->e->cp, w->needle) || kube_cp_peak_kib(w->e) > KUBE_RSS_KIB ||
           kube_cp_log_lines(w->e) > w->e->lines0 + 1000 || !h_proc_is_running(w->e->cp);
}

/* Waits for the needle, then checks the bounds: memory, log lines (at most
 * max_new more than before the attack). */
static void kube_expect(struct kube_env *e, const char *needle, size_t max_new)
{
    struct kube_attack_wait w = {e, needle};
    (void)h_wait_until(kube_attack_settled, &w, KUBE_WAIT_MS);
    long peak = kube_cp_peak_kib(e);
    size_t lines = kube_cp_log_lines(e);
    fprintf(stderr, "control plane: peak RSS %ld KiB, %zu new log lines, waiting for \"%s\"\n",
            peak, lines - e->lines0, needle);
    assert_true(h_proc_is_running(e->cp));
    assert_true(peak > 0 && peak < KUBE_RSS_KIB);
    if (lines > e->lines0 + max_new)
        fail_msg("%zu new log lines (at most %zu)", lines - e->lines0, max_new);
    if (!h_proc_log_contains(e->cp, needle))
        fail_msg("the control plane never said \"%s\"", needle);
}

/* Bogus pods that each deserve a warning (a role label that is no role),
 * with the container port the config names (else that is the warning). */
#define KUBE_BAD_ROLE_POD                                                                          \
    "{\"metadata\":{\"labels\":{\"app\":\"vllm\",\"switchyard.io/role\":\"bogus\"}},"              \
    "\"spec\":{\"containers\":[{\"ports\":[{\"name\":\"http\",\"containerPort\":1}]}]}}"

struct kube_fresh_wait {
    struct kube_env *e;
    const char *metrics;
};

/* p0 is registered and the source sees its API server. */
static bool kube_fresh(void *arg)
{
    const struct kube_fresh_wait *w = arg;
    return kube_p0_registered(w->e) &&
           h_metric_at(w->metrics, "switchyard_discovery_stale{source=\"kubernetes\"}") == 0;
}

static void test_kube_hostile_lists_bounded(void **state)
{
    (void)state;
    struct kube_env e;
    kube_start(&e);
    kube_put_p0(&e);
    assert_int_equal(h_wait_until(kube_p0_registered, &e, KUBE_WAIT_MS), 0);
    char stale[160];
    snprintf(stale, sizeof(stale), "%s/metrics", e.admin);

    /* 1. Two million items of "{}" (6 MB) in one page, whatever the limit
     * asked: refused at item 501, the last good view kept. */
    e.lines0 = kube_cp_log_lines(&e);
    kube_fault(&e, "{\"flood_list\": {\"items\": 2000000}, \"expire\": true}");
    kube_expect(&e, "discovery.kubernetes.max_list_items", 40);
    assert_true(kube_p0_registered(&e));
    assert_int_equal(h_metric_at(stale, "switchyard_discovery_stale{source=\"kubernetes\"}"), 1);
    assert_true(h_metric_at(stale, "switchyard_discovery_lists_refused_total{source=\"kubernetes\","
                                   "limit=\"max_list_items\"}") >= 1);

    /* 2. More pods than max_pods, paged by 500 as the real server pages
     * them: the list is refused once its pages pass the bound. */
    e.lines0 = kube_cp_log_lines(&e);
    kube_fault(&e, "{\"flood_list\": {\"items\": 1500, \"named\": true, \"honour_limit\": true, "
                   "\"item\": " KUBE_BAD_ROLE_POD "}}");
    kube_expect(&e, "discovery.kubernetes.max_pods", 40);
    assert_true(kube_p0_registered(&e));

    /* 3. The server behaves again: p0 is listed again, the source fresh. */
    kube_fault(&e, "{\"flood_list\": null, \"expire\": true}");
    struct kube_fresh_wait fw = {&e, stale};
    assert_int_equal(h_wait_until(kube_fresh, &fw, KUBE_WAIT_MS), 0);

    /* 4. Within the bounds, 800 pods each worth a warning: one line says
     * how many (the first version wrote one a pod). */
    e.lines0 = kube_cp_log_lines(&e);
    kube_fault(&e, "{\"flood_list\": {\"items\": 800, \"named\": true, \"honour_limit\": true, "
                   "\"item\": " KUBE_BAD_ROLE_POD "}}");
    kube_expect(&e, "800 pods whose role label", 40);
    shm_segment_close(&e.seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        H_TEST(test_kv_flood_keeps_other_workers_facts),
        H_TEST(test_kube_hostile_lists_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
