/*
 * Admin REST routes (see admin_routes.h and docs/admin-api.md). Input is
 * validated with the config loader's own rules (cfg_canon_worker_url,
 * cfg_worker_id_is_valid, cfg_role_parse) so a worker added at run time
 * obeys exactly what a configured one does. Errors are {"error": "..."}.
 */
#include "controlplane/admin/admin_routes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/prom.h"
#include "controlplane/admin/adapters.h"
#include "controlplane/admin/admin_channel.h"
#include "controlplane/admin/decisions.h"
#include "controlplane/admin/fleet_metrics.h"
#include "controlplane/probes/health_prober.h"
#include "controlplane/kv/kv_subscriber.h"
#include "controlplane/probes/load_reports.h"
#include "controlplane/admin/reset_load.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_api.h"
#include "controlplane/sources/source_kubernetes.h"
#include "shm/buckets.h"
#include "shm/lease.h"
#include "shm/effective_load.h"
#include "shm/load.h"
#include "shm/load_report.h"
#include "shm/registry.h"

const char *const adm_route_labels[ADM_ROUTE_COUNT] = {
    [ADM_ROUTE_UNSET] = "unset",
    [ADM_ROUTE_WORKERS] = "/workers",
    [ADM_ROUTE_WORKER] = "/workers/{id}",
    [ADM_ROUTE_DRAIN] = "/workers/{id}/drain",
    [ADM_ROUTE_RESET_LOAD] = "/workers/{id}/reset_load",
    [ADM_ROUTE_STATUS] = "/status",
    [ADM_ROUTE_METRICS] = "/metrics",
    [ADM_ROUTE_RELOAD] = "/reload",
    [ADM_ROUTE_PAGE] = "/",
    [ADM_ROUTE_DECISIONS] = "/decisions",
    [ADM_ROUTE_DECISIONS_HISTORY] = "/decisions/history",
    [ADM_ROUTE_ADAPTERS] = "/adapters",
    [ADM_ROUTE_ADAPTER] = "/adapters/{name}",
    [ADM_ROUTE_OTHER] = "other",
};

/* Splits "/workers/ID[/ACTION]". Returns the route and copies the id. */
static enum adm_route_id adm_split(const char *url, char *id, size_t id_len)
{
    id[0] = '\0';
    if (strcmp(url, "/workers") == 0 || strcmp(url, "/workers/") == 0)
        return ADM_ROUTE_WORKERS;
    if (strcmp(url, "/status") == 0)
        return ADM_ROUTE_STATUS;
    if (strcmp(url, "/metrics") == 0)
        return ADM_ROUTE_METRICS;
    if (strcmp(url, "/reload") == 0)
        return ADM_ROUTE_RELOAD;
    if (strcmp(url, "/") == 0)
        return ADM_ROUTE_PAGE; /* served by admin_http.c, before auth */
    if (strcmp(url, "/decisions") == 0)
        return ADM_ROUTE_DECISIONS;
    if (strcmp(url, "/decisions/history") == 0)
        return ADM_ROUTE_DECISIONS_HISTORY;
    if (strcmp(url, "/adapters") == 0)
        return ADM_ROUTE_ADAPTERS;
    if (strncmp(url, "/adapters/", 10) == 0) {
        size_t an = strlen(url + 10);
        if (an == 0 || an >= id_len || strchr(url + 10, '/') != NULL)
            return ADM_ROUTE_OTHER;
        memcpy(id, url + 10, an + 1);
        return ADM_ROUTE_ADAPTER;
    }
    if (strncmp(url, "/workers/", 9) != 0)
        return ADM_ROUTE_OTHER;
    const char *rest = url + 9;
    const char *slash = strchr(rest, '/');
    size_t n = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= id_len)
        return ADM_ROUTE_OTHER;
    memcpy(id, rest, n);
    id[n] = '\0';
    if (slash == NULL)
        return ADM_ROUTE_WORKER;
    if (strcmp(slash, "/drain") == 0)
        return ADM_ROUTE_DRAIN;
    if (strcmp(slash, "/reset_load") == 0)
        return ADM_ROUTE_RESET_LOAD;
    return ADM_ROUTE_OTHER;
}

enum adm_route_id adm_route_match(const char *url)
{
    char id[CFG_ID_MAX];
    return adm_split(url, id, sizeof(id));
}

/* The worker's names (aliases) the report says may be running. */
static json_t *adm_running_adapters(const struct shm_worker_info *w,
                                    const struct shm_load_report *r)
{
    json_t *names = json_array();
    for (const char *p = w->aliases; *p != '\0';) {
        size_t n = strcspn(p, "\n");
        if (shm_adapter_set_may_have(&r->running_adapters, shm_adapter_hash(p, n)))
            json_array_append_new(names, json_stringn(p, n));
        p += n;
        if (*p == '\n')
            p++;
    }
    return names;
}

/*
 * The worker's last load report (null when it has none, shown with its
 * age even when stale) and the load routing sees now (shm/effective_load.h:
 * own in-flight combined with a fresh report).
 */
static void adm_worker_report_json(const struct adm_ctx *ctx, const struct shm_worker_info *w,
                                   uint64_t own, json_t *j)
{
    struct shm_el_params p;
    shm_el_params_from_cfg(ctx->cfg, &p);
    uint64_t now = proc_wall_ms();
    struct shm_load_report r;
    bool have = shm_load_report_read(ctx->seg, w->slot, w->generation, &r) == 0;
    json_t *reported = json_null();
    if (have)
        reported = json_pack("{s:I, s:I, s:f, s:I}", "running", (json_int_t)r.running, "waiting",
                             (json_int_t)r.waiting, "kv_cache_usage", r.kv_cache_usage, "age_ms",
                             (json_int_t)(now > r.unix_ms ? now - r.unix_ms : 0));
    if (have) /* its names the report's running set (a Bloom set) may hold */
        json_object_set_new(reported, "running_adapters", adm_running_adapters(w, &r));
    json_object_set_new(j, "reported", reported);
    struct shm_el_load el;
    shm_el_combine(&p, own, have ? &r : NULL, now, &el);
    json_object_set_new(j, "effective_load", json_integer((json_int_t)el.effective));
}

static json_t *adm_worker_json(const struct adm_ctx *ctx, const struct shm_worker_info *w)
{
    const struct shm_segment *seg = ctx->seg;
    json_t *by_dp = json_object();
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        if (!shm_lease_is_active(seg, i))
            continue;
        char key[40];
        shm_lease_holder_key(seg, i, key, sizeof(key));
        json_object_set_new(by_dp, key,
                            json_integer(shm_load_in_lease(seg, i, w->slot, w->generation)));
    }
    uint64_t own = shm_load_of(seg, w->slot, w->generation);
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:I, s:o, s:i, s:i, s:b, s:s}", "id", w->id,
                  "url", w->url, "model", w->model, "role", cfg_role_name(w->role), "healthy",
                  w->healthy, "draining", w->draining, "load", (json_int_t)own,
                  "inflight_by_dataplane", by_dp, "slot", (int)w->slot, "generation",
                  (int)w->generation, "from_api", w->from_api, "source", cp_source_key(w->source));
    json_object_set_new(j, "sleeping", json_boolean(w->sleeping));
    adm_worker_report_json(ctx, w, own, j);
    const char *ns, *name, *uid;
    if (w->source == CP_SOURCE_KUBERNETES && ctx->kube != NULL &&
        cp_kube_pod_of(ctx->kube, w->id, &ns, &name, &uid))
        json_object_set_new(
            j, "pod", json_pack("{s:s, s:s, s:s}", "namespace", ns, "name", name, "uid", uid));
    /* healthy alone cannot tell "not probed yet" (health.initial) from "failing". */
    json_object_set_new(
        j, "health",
        json_string(w->healthy ? "healthy"
                    : ctx->hc != NULL && hc_is_unknown(ctx->hc, w->slot, w->generation)
                        ? "unknown"
                        : "unhealthy"));
    return j;
}

static void adm_list_workers(struct adm_ctx *ctx, struct adm_reply *reply)
{
    struct shm_worker_info *all = calloc(ctx->seg->max_workers, sizeof(*all));
    if (all == NULL) {
        adm_reply_error(reply, 503, "out of memory");
        return;
    }
    size_t n = shm_registry_snapshot(ctx->seg, all, ctx->seg->max_workers);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, adm_worker_json(ctx, &all[i]));
    free(all);
    adm_reply_json(reply, 200, json_pack("{s:o}", "workers", arr));
}

static bool adm_model_is_valid(const char *m)
{
    if (strlen(m) >= CFG_MODEL_MAX)
        return false;
    for (; *m != '\0'; m++)
        if ((unsigned char)*m < 0x20 || *m == 0x7f)
            return false;
    return true;
}

/* Reads an optional string member; false (with reply set) when it is not a string. */
static bool adm_opt_string(json_t *obj, const char *key, const char **out, struct adm_reply *reply)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    if (!json_is_string(v)) {
        adm_reply_error(reply, 400, "'%s' must be a string", key);
        return false;
    }
    *out = json_string_value(v);
    return true;
}

static void adm_add_worker(struct adm_ctx *ctx, const char *body, size_t len,
                           struct adm_reply *reply)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        adm_reply_error(reply, 400, "body must be a JSON object: %s",
                        root == NULL ? jerr.text : "got another JSON type");
        goto out_decref;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "url") != 0 && strcmp(key, "id") != 0 && strcmp(key, "model") != 0 &&
            strcmp(key, "role") != 0) {
            adm_reply_error(reply, 400, "unknown field '%s' (expected url, id, model, role)", key);
            goto out_decref;
        }
    }
    const char *url, *id, *model, *role;
    if (!adm_opt_string(root, "url", &url, reply) || !adm_opt_string(root, "id", &id, reply) ||
        !adm_opt_string(root, "model", &model, reply) ||
        !adm_opt_string(root, "role", &role, reply))
        goto out_decref;
    if (url == NULL) {
        adm_reply_error(reply, 400, "missing required field 'url'");
        goto out_decref;
    }
    struct shm_worker_info add = {.role = CFG_ROLE_REGULAR};
    char err[256] = "", def_id[CFG_ID_MAX] = "";
    if (cfg_canon_worker_url(url, add.url, sizeof(add.url), def_id, sizeof(def_id), err,
                             sizeof(err)) != 0) {
        adm_reply_error(reply, 400, "invalid url '%.200s': %s", url, err);
        goto out_decref;
    }
    const char *use_id = id != NULL ? id : def_id;
    if (!cfg_worker_id_is_valid(use_id)) {
        adm_reply_error(reply, 400,
                        id != NULL ? "invalid id: 1..63 characters of [A-Za-z0-9._:-]"
                                   : "the url gives no valid default id: pass an explicit 'id'");
        goto out_decref;
    }
    snprintf(add.id, sizeof(add.id), "%s", use_id);
    if (model != NULL && !adm_model_is_valid(model)) {
        adm_reply_error(reply, 400, "invalid model: at most 127 characters, no control characters");
        goto out_decref;
    }
    snprintf(add.model, sizeof(add.model), "%s", model != NULL ? model : "");
    if (role != NULL && cfg_role_parse(role, &add.role) != 0) {
        adm_reply_error(reply, 400, "invalid role '%.64s' (expected regular|prefill|decode)", role);
        goto out_decref;
    }
    struct shm_worker_info have;
    if (shm_registry_find(ctx->seg, add.id, &have) == 0) {
        adm_reply_error(reply, 409, "a worker with id '%s' already exists", add.id);
        goto out_decref;
    }
    struct shm_worker_info placed;
    int rc = cp_source_api_add(ctx->reg, &add, &placed);
    if (rc == -EEXIST) {
        adm_reply_error(reply, 409, "a worker with url '%s' already exists", add.url);
        goto out_decref;
    }
    if (rc == -ENOSPC) {
        adm_reply_error(reply, 507, "the registry is full (shm.max_workers = %u)",
                        ctx->seg->max_workers);
        goto out_decref;
    }
    if (rc != 0) {
        adm_reply_error(reply, 503, "adding the worker failed: %s", strerror(-rc));
        goto out_decref;
    }
    log_info("admin API: added worker %s (%s, model '%s', role %s) in slot %u generation %u",
             placed.id, placed.url, placed.model, cfg_role_name(placed.role), placed.slot,
             placed.generation);
    adm_reply_json(reply, 201, adm_worker_json(ctx, &placed));
out_decref:
    json_decref(root);
}

static void adm_drain(struct adm_ctx *ctx, const struct shm_worker_info *w, const char *body,
                      size_t len, struct adm_reply *reply)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    json_t *d = json_object_get(root, "draining");
    if (!json_is_object(root) || !json_is_boolean(d) || json_object_size(root) != 1) {
        adm_reply_error(reply, 400, "body must be {\"draining\": true|false}");
        json_decref(root);
        return;
    }
    bool draining = json_is_true(d);
    json_decref(root);
    if (cp_reset_is_running_on(ctx->reset, w->slot, w->generation)) {
        adm_reply_error(reply, 409,
                        "a reset_load of worker '%s' is running; it restores the worker's draining "
                        "state when it ends: retry then",
                        w->id);
        return;
    }
    int rc = shm_registry_set_draining(ctx->seg, w->slot, draining);
    if (rc != 0) {
        adm_reply_error(reply, 404, "worker '%s' is gone", w->id);
        return;
    }
    if (draining != w->draining)
        log_info("admin API: worker %s %s", w->id, draining ? "draining" : "no longer draining");
    struct shm_worker_info now;
    if (shm_registry_read_slot(ctx->seg, w->slot, &now) != 0)
        now = *w;
    adm_reply_json(reply, 200, adm_worker_json(ctx, &now));
}

static void adm_queue_depth_add(void *arg, const char *model, uint64_t depth)
{
    json_object_set_new(arg, model, json_integer((json_int_t)depth));
}

/* Requests waiting in the data planes' admission queues, per model, summed
 * over live leases: read from the object the data planes publish them in
 * (shm/buckets.h). {} when none was created (no keys, no admission limits). */
static json_t *adm_queue_depths(const struct shm_segment *seg, uint64_t live_mask)
{
    json_t *out = json_object();
    char name[CFG_PATH_MAX + 16], err[256];
    struct shm_buckets b;
    if (out == NULL || shm_buckets_name(seg->name, name, sizeof(name)) != 0 ||
        shm_buckets_attach(&b, name, err, sizeof(err)) != 0)
        return out;
    shm_buckets_depths(&b, live_mask, adm_queue_depth_add, out);
    shm_buckets_close(&b);
    return out;
}

static void adm_status(struct adm_ctx *ctx, struct adm_reply *reply)
{
    const struct shm_segment *seg = ctx->seg;
    json_t *dps = json_array();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_unix_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    for (uint32_t i = 0; i < seg->max_dataplanes; i++) {
        struct shm_lease_info l;
        shm_lease_snapshot(seg, i, &l);
        if (!l.active)
            continue;
        uint64_t claimed = l.claimed_unix_ms;
        json_array_append_new(
            dps, json_pack("{s:i, s:i, s:I, s:I, s:b, s:I}", "pid", (int)l.pid, "lease", (int)i,
                           "nonce", (json_int_t)l.nonce, "uptime_ms",
                           (json_int_t)(now_unix_ms > claimed ? now_unix_ms - claimed : 0),
                           "admin_channel",
                           ctx->chan != NULL && adm_chan_is_connected(ctx->chan, i, l.nonce),
                           "heartbeat", (json_int_t)l.heartbeat));
    }
    struct shm_segment_stats st;
    shm_segment_stats(seg, &st);
    json_t *segj = json_pack("{s:s, s:i, s:I, s:i, s:i, s:I}", "name", seg->name, "layout_version",
                             (int)st.layout_version, "size", (json_int_t)seg->size, "max_workers",
                             (int)seg->max_workers, "max_dataplanes", (int)seg->max_dataplanes,
                             "leases_reaped", (json_int_t)st.leases_reaped);
    json_t *status = json_pack(
        "{s:i, s:I, s:I, s:o, s:o, s:o}", "pid", (int)getpid(), "epoch", (json_int_t)st.epoch,
        "uptime_ms", (json_int_t)(proc_monotonic_ms() - ctx->started_ms), "segment", segj,
        "dataplanes", dps, "queue_depth", adm_queue_depths(seg, st.active_leases));
    if (ctx->kube != NULL)
        json_object_set_new(
            status, "discovery",
            json_pack("{s:o}", "kubernetes", cp_kube_status_json(ctx->kube, proc_monotonic_ms())));
    adm_reply_json(reply, 200, status);
}

/*
 * Bytes the /metrics page may take: the admin server's request counters
 * (a few KiB) plus at most 1 KiB per worker slot (five series of a 63-byte
 * id come to about 610). The cap only bounds growth; memory follows the page.
 */
static size_t adm_metrics_cap(const struct shm_segment *seg)
{
    return 64u * 1024u + (size_t)seg->max_workers * 1024u;
}

/* One gauge family with a sample per worker, in registry order. */
static void adm_metrics_per_worker(struct prom_writer *w, const char *name, const char *help,
                                   const struct shm_worker_info *all, size_t n,
                                   const uint64_t *values)
{
    prom_family(w, name, PROM_GAUGE, help);
    for (size_t i = 0; i < n; i++) {
        struct prom_label l = {"worker", all[i].id};
        prom_sample_u64(w, NULL, &l, 1, values[i]);
    }
}

static void adm_metrics(struct adm_ctx *ctx, struct adm_reply *reply)
{
    uint32_t max = ctx->seg->max_workers;
    struct shm_worker_info *all = calloc(max, sizeof(*all));
    struct wp_worker_stats *st = calloc(max, sizeof(*st));
    uint64_t *values = calloc(max, sizeof(*values));
    if (all == NULL || st == NULL || values == NULL) {
        free(all);
        free(st);
        free(values);
        adm_reply_error(reply, 503, "out of memory");
        return;
    }
    struct buf page;
    buf_init(&page, adm_metrics_cap(ctx->seg));
    struct prom_writer w;
    prom_init(&w, &page);
    size_t n = shm_registry_snapshot(ctx->seg, all, max);
    for (size_t i = 0; i < n; i++)
        values[i] = all[i].healthy;
    adm_metrics_per_worker(&w, "switchyard_worker_healthy",
                           "1 when the worker passes its health checks.", all, n, values);
    for (size_t i = 0; i < n; i++)
        values[i] = all[i].draining;
    adm_metrics_per_worker(&w, "switchyard_worker_draining", "1 while the worker is draining.", all,
                           n, values);
    for (size_t i = 0; i < n; i++)
        values[i] = all[i].sleeping;
    adm_metrics_per_worker(&w, "switchyard_worker_sleeping",
                           "1 while the worker's engine sleeps (vllm:engine_sleep_state): not "
                           "routed to.",
                           all, n, values);
    for (size_t i = 0; i < n; i++)
        values[i] = shm_load_of(ctx->seg, all[i].slot, all[i].generation);
    adm_metrics_per_worker(&w, "switchyard_worker_load",
                           "Requests in flight to the worker over live dataplanes.", all, n,
                           values);
    size_t ns = ctx->hc != NULL ? hc_stats(ctx->hc, st, max) : 0;
    prom_family(&w, "switchyard_health_checks_total", PROM_COUNTER,
                "Health probes by worker and result.");
    for (size_t i = 0; i < ns; i++) {
        struct prom_label ok[] = {{"worker", st[i].id}, {"result", "success"}};
        struct prom_label failed[] = {{"worker", st[i].id}, {"result", "failure"}};
        prom_sample_u64(&w, NULL, ok, 2, st[i].ok);
        prom_sample_u64(&w, NULL, failed, 2, st[i].failed);
    }
    struct wp_worker_stats *ls = calloc(max, sizeof(*ls));
    size_t nl = ctx->lr != NULL && ls != NULL ? lr_stats(ctx->lr, ls, max) : 0;
    prom_family(&w, "switchyard_load_report_scrapes_total", PROM_COUNTER,
                "Load-report scrapes of each worker's /metrics, by result.");
    for (size_t i = 0; i < nl; i++) {
        struct prom_label ok[] = {{"worker", ls[i].id}, {"result", "success"}};
        struct prom_label failed[] = {{"worker", ls[i].id}, {"result", "failure"}};
        prom_sample_u64(&w, NULL, ok, 2, ls[i].ok);
        prom_sample_u64(&w, NULL, failed, 2, ls[i].failed);
    }
    free(ls);
    prom_family(&w, "switchyard_kv_block_size_mismatches_total", PROM_COUNTER,
                "Workers found reporting a vllm:cache_config_info block_size other than "
                "policy.precise_cache_aware.block_size.");
    prom_sample_u64(&w, NULL, NULL, 0, lr_block_size_mismatches(ctx->lr));
    struct shm_segment_stats seg_stats;
    shm_segment_stats(ctx->seg, &seg_stats);
    prom_family(&w, "switchyard_dataplanes", PROM_GAUGE, "Dataplanes holding an active lease.");
    prom_sample_u64(&w, NULL, NULL, 0, (uint64_t)__builtin_popcountll(seg_stats.active_leases));
    prom_family(&w, "switchyard_leases_reaped_total", PROM_COUNTER,
                "Leases of dead dataplanes reaped.");
    prom_sample_u64(&w, NULL, NULL, 0, seg_stats.leases_reaped);
    prom_family(&w, "switchyard_load_underflows_total", PROM_COUNTER,
                "Load releases at zero (live leases).");
    prom_sample_u64(&w, NULL, NULL, 0, shm_load_underflows(ctx->seg));
    if (ctx->kube != NULL)
        cp_kube_metrics(ctx->kube, &w);
    kvs_metrics(ctx->kvs, &w);          /* nothing while no worker has kv_events */
    cp_fleet_metrics_write(&w, all, n); /* reorders all: after the per-worker families */
    if (ctx->kv_metrics != NULL)
        ctx->kv_metrics(ctx->kv_metrics_arg, &w);
    if (ctx->http_metrics != NULL)
        ctx->http_metrics(ctx->http_metrics_arg, &w);
    free(all);
    free(st);
    free(values);
    int rc = prom_error(&w);
    char *text = rc == 0 ? buf_detach(&page, NULL) : NULL;
    buf_fini(&page);
    if (text == NULL) {
        log_error("/metrics: %s", strerror(rc != 0 ? -rc : ENOMEM));
        if (rc == 0 || rc == -ENOMEM)
            adm_reply_error(reply, 503, "out of memory");
        else
            adm_reply_error(reply, 500, "cannot write the metrics page: %s", strerror(-rc));
        return;
    }
    adm_reply_fini(reply);
    reply->status = 200;
    reply->text = text;
}

static void adm_reload(struct adm_ctx *ctx, struct adm_reply *reply)
{
    char msg[2048];
    if (ctx->reload == NULL) {
        adm_reply_error(reply, 503, "reload is not available");
        return;
    }
    int rc = ctx->reload(ctx->reload_arg, msg, sizeof(msg));
    if (rc == 0)
        adm_reply_json(reply, 200,
                       json_pack("{s:s, s:s}", "config", ctx->cfg->path, "message", msg));
    else
        adm_reply_error(reply, rc == -ENOMEM ? 503 : rc == -EINVAL ? 400 : 409, "%s", msg);
}

static bool adm_method_is(const char *method, const char *want, struct adm_reply *reply,
                          const char *allow)
{
    if (strcmp(method, want) == 0)
        return true;
    if (reply->status == 0) {
        adm_reply_error(reply, 405, "method %s not allowed (allowed: %s)", method, allow);
        reply->allow = allow;
    }
    return false;
}

int adm_route_serve(struct adm_ctx *ctx, const char *method, const char *url, const char *body,
                    size_t body_len, const struct adm_reply_later *later, struct adm_reply *reply)
{
    char id[CFG_ID_MAX];
    enum adm_route_id route = adm_split(url, id, sizeof(id));
    struct shm_worker_info w;
    bool by_id =
        route == ADM_ROUTE_WORKER || route == ADM_ROUTE_DRAIN || route == ADM_ROUTE_RESET_LOAD;
    switch (route) {
    case ADM_ROUTE_WORKERS:
        if (strcmp(method, "GET") == 0)
            adm_list_workers(ctx, reply);
        else if (adm_method_is(method, "POST", reply, "GET, POST"))
            adm_add_worker(ctx, body, body_len, reply);
        return 1;
    case ADM_ROUTE_STATUS:
        if (adm_method_is(method, "GET", reply, "GET"))
            adm_status(ctx, reply);
        return 1;
    case ADM_ROUTE_METRICS:
        if (adm_method_is(method, "GET", reply, "GET"))
            adm_metrics(ctx, reply);
        return 1;
    case ADM_ROUTE_DECISIONS:
        if (!adm_method_is(method, "GET", reply, "GET"))
            return 1;
        if (ctx->decisions == NULL) {
            adm_reply_error(reply, 503, "not available");
            return 1;
        }
        return cp_decisions_start(ctx->decisions, ctx->cfg, later, reply) == 0 ? 0 : 1;
    case ADM_ROUTE_DECISIONS_HISTORY:
        if (!adm_method_is(method, "GET", reply, "GET"))
            return 1;
        if (ctx->decisions == NULL)
            adm_reply_error(reply, 503, "not available");
        else
            cp_decisions_history(ctx->decisions, proc_monotonic_ms(), reply);
        return 1;
    case ADM_ROUTE_RELOAD:
        if (adm_method_is(method, "POST", reply, "POST"))
            adm_reload(ctx, reply);
        return 1;
    case ADM_ROUTE_ADAPTERS:
    case ADM_ROUTE_ADAPTER:
        cp_adapters_serve(ctx, method, route == ADM_ROUTE_ADAPTER ? id : NULL, body, body_len,
                          reply);
        return 1;
    default:
        break;
    }
    if (!by_id) {
        adm_reply_error(reply, 404, "no such route: %.200s", url);
        return 1;
    }
    const char *allow = route == ADM_ROUTE_WORKER ? "GET, DELETE" : "POST";
    bool method_ok = route == ADM_ROUTE_WORKER
                         ? strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0
                         : strcmp(method, "POST") == 0;
    if (!method_ok) {
        adm_method_is(method, "", reply, allow);
        return 1;
    }
    if (shm_registry_find(ctx->seg, id, &w) != 0) {
        adm_reply_error(reply, 404, "no worker with id '%s'", id);
        return 1;
    }
    if (route == ADM_ROUTE_WORKER && strcmp(method, "GET") == 0) {
        adm_reply_json(reply, 200, adm_worker_json(ctx, &w));
    } else if (route == ADM_ROUTE_WORKER && w.source == CP_SOURCE_KUBERNETES) {
        /* Its pod would bring it back: the pod is the thing to remove. */
        adm_reply_error(reply, 409,
                        "worker '%s' was discovered from Kubernetes and is removed when its pod "
                        "goes (delete the pod, or change its labels); to stop routing to it now, "
                        "drain it: POST /workers/%s/drain {\"draining\": true}",
                        w.id, w.id);
    } else if (route == ADM_ROUTE_WORKER) {
        json_t *j = adm_worker_json(ctx, &w);
        cp_source_api_delete(ctx->reg, &w);
        log_info("admin API: removed worker %s (%s), slot %u generation %u", w.id, w.url, w.slot,
                 w.generation);
        adm_reply_json(reply, 200, j);
    } else if (route == ADM_ROUTE_DRAIN) {
        adm_drain(ctx, &w, body, body_len, reply);
    } else {
        return cp_reset_start(ctx->reset, &w, later, reply);
    }
    return 1;
}
