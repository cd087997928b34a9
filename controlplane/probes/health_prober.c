/*
 * Health prober (see health_prober.h). The per-worker polling (registry
 * following, easy handles, schedules, timeouts, in-flight bookkeeping) is
 * controlplane/worker_poller's; this file is what a probe and a model
 * lookup mean: two jobs per worker (HC_JOB_HEALTH on its jittered
 * interval, HC_JOB_MODELS on models_interval), and per slot the state the
 * thresholds need, reset whenever the slot changes hands, so counts of
 * consecutive results never leak from a removed worker to the next one.
 */
#include "controlplane/probes/health_prober.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/rng.h"
#include "controlplane/probes/worker_poller.h"
#include "shm/registry.h"

#define HC_MODELS_BODY_MAX (64u * 1024u)
#define HC_MODELS_RETRY_MS 1000u

enum { HC_JOB_HEALTH = 0, HC_JOB_MODELS = 1 };

/* What the prober knows of the worker in one slot (the poller's target). */
struct hc_state {
    bool healthy; /* as last written to (or read from) the registry */
    bool has_model;
    bool unknown;      /* added at run time, not routed, no probe answered yet */
    uint32_t ok_run;   /* consecutive successes */
    uint32_t fail_run; /* consecutive failures */
    /* Bumped when the admin API changes the worker's names; a /v1/models
     * answer whose request left before the change may predate it (an
     * adapter just loaded missing from the list) and is dropped. */
    uint32_t names_epoch;
    uint32_t models_probe_epoch; /* names_epoch when the last lookup left */
};

/* Owned by the control plane loop; dies with hc_destroy. */
struct hc_prober {
    struct shm_segment *seg;         /* borrowed */
    const struct cfg_health *health; /* borrowed */
    struct wp_poller *poller;        /* holds a struct hc_state per slot */
    uint64_t rng;                    /* a struct rng's state (common/rng.h), kept as its integer */
};

static struct hc_state *hc_state_of(const struct hc_prober *p, uint32_t slot)
{
    return wp_state(p->poller, slot);
}

static uint64_t hc_rand(struct hc_prober *p)
{
    struct rng r;
    rng_seed(&r, p->rng);
    uint64_t v = rng_next(&r);
    p->rng = r.state;
    return v;
}

/* interval +- 10%. */
static uint64_t hc_jittered_interval(struct hc_prober *p)
{
    uint64_t iv = p->health->interval_ms;
    uint64_t span = iv / 5;
    if (span == 0)
        return iv;
    return iv - iv / 10 + hc_rand(p) % (span + 1);
}

/* A fresh state for the worker now in info->slot. */
static void hc_state_reset(struct hc_state *st, const struct shm_worker_info *info, bool scanned)
{
    *st = (struct hc_state){
        .healthy = info->healthy,
        /* Not healthy on arrival while the control plane runs: health.initial
         * unknown. (A worker found unhealthy at start was judged before.) */
        .unknown = scanned && !info->healthy,
        .has_model = info->model[0] != '\0',
    };
}

static void hc_on_seen(void *user, const struct wp_target *t, const struct shm_worker_info *w,
                       bool fresh, uint64_t now_ms)
{
    struct hc_prober *p = user;
    struct hc_state *st = hc_state_of(p, t->slot);
    if (fresh) {
        hc_state_reset(st, w, wp_scanned(p->poller));
        /* Spread first probes over a tenth of the interval. */
        wp_schedule(p->poller, t->slot, HC_JOB_HEALTH,
                    now_ms + hc_rand(p) % (p->health->interval_ms / 10 + 1));
    }
    st->has_model = w->model[0] != '\0';
}

/* A /v1/models lookup leaves: what it answers is as new as this. */
static void hc_models_lookup_started(struct hc_state *st)
{
    st->models_probe_epoch = st->names_epoch;
}

/* The names changed outside the prober: a lookup already under way is stale. */
static void hc_names_changed(struct hc_state *st)
{
    st->names_epoch++;
}

static uint64_t hc_on_start(void *user, const struct wp_target *t, unsigned job, uint64_t now_ms)
{
    struct hc_prober *p = user;
    if (job == HC_JOB_HEALTH)
        return now_ms + hc_jittered_interval(p);
    hc_models_lookup_started(hc_state_of(p, t->slot));
    /* Every worker's names are read again each models_interval (LoRA
     * adapters come and go); one without a model retries sooner. */
    return now_ms + (hc_state_of(p, t->slot)->has_model ? p->health->models_interval_ms
                                                        : HC_MODELS_RETRY_MS);
}

/* Returns what the probe counts as (nothing for a replaced worker). */
static enum wp_outcome hc_apply_probe(struct hc_prober *p, const struct wp_target *t,
                                      struct hc_state *st, bool ok, const char *why)
{
    const struct cfg_health *h = p->health;
    if (shm_registry_generation(p->seg, t->slot) != t->generation)
        return WP_UNCOUNTED;
    if (ok) {
        st->fail_run = 0;
        if (st->ok_run < UINT32_MAX)
            st->ok_run++;
        /* An unknown worker has nothing to prove yet: one answer will do. */
        if (st->unknown) {
            st->unknown = false;
            if (shm_registry_set_healthy(p->seg, t->slot, true) == 0) {
                st->healthy = true;
                log_info("worker %s (%s) is healthy: its first probe succeeded", t->id, t->url);
            }
            return WP_OK;
        }
        if (!st->healthy && st->ok_run >= h->success_threshold) {
            if (shm_registry_set_healthy(p->seg, t->slot, true) == 0) {
                st->healthy = true;
                log_info("worker %s (%s) is healthy again after %u successful probes", t->id,
                         t->url, st->ok_run);
            }
        }
        return WP_OK;
    }
    st->ok_run = 0;
    if (st->unknown) {
        st->unknown = false; /* judged now: unhealthy, success_threshold to recover */
        log_warn("worker %s (%s) is unhealthy: its first probe failed (%s)", t->id, t->url, why);
    }
    if (st->fail_run < UINT32_MAX)
        st->fail_run++;
    if (st->healthy && st->fail_run >= h->failure_threshold) {
        if (shm_registry_set_healthy(p->seg, t->slot, false) == 0) {
            st->healthy = false;
            log_warn("worker %s (%s) is unhealthy after %u failed probes (last: %s)", t->id, t->url,
                     st->fail_run, why);
        }
    }
    return WP_FAILED;
}

/* A model name the registry can hold and every reader can print. */
static bool hc_name_is_usable(const char *model)
{
    bool usable = model != NULL && model[0] != '\0' && strlen(model) < CFG_MODEL_MAX;
    for (const char *c = model; usable && *c != '\0'; c++)
        usable = (unsigned char)*c >= 0x20 && *c != 0x7f;
    return usable;
}

/*
 * The worker's names from its /v1/models: its model is the registry's (a
 * configured one, or learned before), else the first entry; every other
 * entry (vLLM lists each --served-model-name and each LoRA adapter) is an
 * alias, so a request for any of them routes, and only to workers listing
 * it. Aliases that do not fit the slot's SHM_ALIASES_MAX bytes are left
 * out, with a warning. The registry is written only when the names changed.
 */
static void hc_apply_models(struct hc_prober *p, const struct wp_target *t, struct hc_state *st,
                            bool ok, const char *body, size_t body_len)
{
    /* Stale: the lookup hc_refresh_models scheduled reads the names again. */
    if (!ok || st->models_probe_epoch != st->names_epoch)
        return;
    json_error_t jerr;
    json_t *root = json_loadb(body != NULL ? body : "", body_len, 0, &jerr);
    json_t *data = json_object_get(root, "data");
    struct shm_worker_info now;
    if (shm_registry_read_slot(p->seg, t->slot, &now) != 0 || now.generation != t->generation) {
        json_decref(root);
        return;
    }
    const char *model = now.model[0] != '\0'
                            ? now.model
                            : json_string_value(json_object_get(json_array_get(data, 0), "id"));
    if (!hc_name_is_usable(model) || !json_is_array(data)) {
        json_decref(root);
        return;
    }
    char aliases[SHM_ALIASES_MAX] = "";
    size_t len = 0;
    size_t dropped = 0;
    for (size_t i = 0; i < json_array_size(data); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(data, i), "id"));
        if (!hc_name_is_usable(name) || strcmp(name, model) == 0)
            continue;
        size_t n = strlen(name);
        if (len + (len > 0) + n >= sizeof(aliases)) {
            dropped++;
            continue;
        }
        if (len > 0)
            aliases[len++] = '\n';
        memcpy(aliases + len, name, n + 1);
        len += n;
    }
    bool same = strcmp(now.model, model) == 0 && strcmp(now.aliases, aliases) == 0;
    if (same) {
        st->has_model = true;
    } else if (shm_registry_generation(p->seg, t->slot) == t->generation &&
               shm_registry_set_names(p->seg, t->slot, model, aliases) == 0) {
        st->has_model = true;
        log_info("worker %s (%s) serves model '%s'%s%s (learned from /v1/models)", t->id, t->url,
                 model, len > 0 ? ", also as " : "", len > 0 ? aliases : "");
        if (dropped > 0)
            log_warn("worker %s: %zu more model names do not fit the registry's %d bytes", t->id,
                     dropped, SHM_ALIASES_MAX);
    }
    json_decref(root);
}

/* A finished probe or model lookup. */
static enum wp_outcome hc_on_done(void *user, const struct wp_target *t, unsigned job,
                                  const struct wp_result *r)
{
    struct hc_prober *p = user;
    struct hc_state *st = hc_state_of(p, t->slot);
    bool ok = r->curl == CURLE_OK && r->status >= 200 && r->status < 300;
    if (job == HC_JOB_HEALTH) {
        char why[96];
        if (r->curl != CURLE_OK)
            snprintf(why, sizeof(why), "%s", curl_easy_strerror(r->curl));
        else
            snprintf(why, sizeof(why), "HTTP %ld", r->status);
        return hc_apply_probe(p, t, st, ok, why);
    }
    hc_apply_models(p, t, st, ok, r->body, r->len);
    return WP_UNCOUNTED; /* the counters are the health probes' */
}

int hc_create(struct shm_segment *seg, const struct cfg_health *health, struct hc_prober **out)
{
    struct hc_prober *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->seg = seg;
    p->health = health;
    struct rng seeded;
    rng_seed_random(&seeded);
    p->rng = seeded.state;
    /* Two jobs a worker: its health path, and its names. */
    const struct wp_ops ops = {
        .user = p,
        .n_jobs = 2,
        .body_max = {[HC_JOB_MODELS] = HC_MODELS_BODY_MAX},
        .path = {[HC_JOB_HEALTH] = health->path, [HC_JOB_MODELS] = "/v1/models"},
        .state_size = sizeof(struct hc_state),
        .on_seen = hc_on_seen,
        .on_start = hc_on_start,
        .on_done = hc_on_done,
    };
    int rc = wp_create(seg, &ops, health->timeout_ms, &p->poller);
    if (rc != 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void hc_destroy(struct hc_prober *p)
{
    if (p == NULL)
        return;
    wp_destroy(p->poller);
    free(p);
}

void hc_set_health(struct hc_prober *p, const struct cfg_health *health)
{
    p->health = health;
    wp_set_path(p->poller, HC_JOB_HEALTH, health->path);
    wp_set_timeout(p->poller, health->timeout_ms);
    uint64_t now = proc_monotonic_ms();
    for (uint32_t s = 0; s < p->seg->max_workers; s++) {
        if (!wp_target(p->poller, s)->active)
            continue;
        uint64_t soon = now + hc_jittered_interval(p);
        if (wp_next(p->poller, s, HC_JOB_HEALTH) > soon)
            wp_schedule(p->poller, s, HC_JOB_HEALTH, soon);
    }
}

void hc_set_upstream_tls(struct hc_prober *p, const struct cfg_upstream_tls *tls)
{
    wp_set_upstream_tls(p->poller, tls);
}

int hc_fd(const struct hc_prober *p)
{
    return wp_fd(p->poller);
}

void hc_run(struct hc_prober *p, uint64_t now_ms)
{
    wp_run(p->poller, now_ms);
}

int hc_timeout_ms(const struct hc_prober *p, uint64_t now_ms)
{
    return wp_timeout_ms(p->poller, now_ms);
}

bool hc_is_unknown(const struct hc_prober *p, uint32_t slot, uint32_t generation)
{
    if (p == NULL || slot >= p->seg->max_workers)
        return false;
    const struct wp_target *t = wp_target(p->poller, slot);
    if (!t->active || t->generation != generation)
        return true; /* placed since the prober last looked: nothing probed yet */
    return hc_state_of(p, slot)->unknown;
}

size_t hc_stats(const struct hc_prober *p, struct wp_worker_stats *out, size_t cap)
{
    return wp_stats(p->poller, out, cap);
}

void hc_refresh_models(struct hc_prober *p, uint32_t slot)
{
    const struct wp_target *t = wp_target(p->poller, slot);
    if (t != NULL && t->active) {
        hc_names_changed(hc_state_of(p, slot));
        wp_schedule(p->poller, slot, HC_JOB_MODELS, 0);
    }
}
