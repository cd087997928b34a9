/*
 * Health prober (see health_prober.h). One target per registry slot, keyed
 * by (slot, generation): a slot that changes hands gets a fresh target, so
 * counts of consecutive results never leak from a removed worker to the
 * next one. Each target owns two easy handles (health, models) created
 * lazily and re-added for every probe so keep-alive connections are reused.
 *
 * The multi handle's sockets live in an inner epoll set whose descriptor
 * the loop watches; curl's timer is a deadline the loop folds into its
 * epoll_wait timeout. Both are common/curl_epoll's job (tag 0 in the inner
 * set); curl callbacks only record things, and handles are added and
 * removed outside callbacks.
 */
#include "controlplane/health_prober.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/curl_epoll.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/rng.h"
#include "common/tls_client.h"
#include "shm/registry.h"

#define HC_MODELS_BODY_MAX (64u * 1024u)
#define HC_MODELS_RETRY_MS 1000u
#define HC_NO_DEADLINE     UINT64_MAX

struct hc_target {
    bool active;
    bool healthy; /* as last written to (or read from) the registry */
    bool has_model;
    bool probing;
    bool learning;
    bool unknown; /* added at run time, not routed, no probe answered yet */
    uint32_t slot;
    uint32_t generation;
    uint32_t ok_run;   /* consecutive successes */
    uint32_t fail_run; /* consecutive failures */
    uint64_t next_probe_ms;
    uint64_t next_models_ms;
    uint64_t checks_ok;
    uint64_t checks_failed;
    char id[CFG_ID_MAX];
    char url[CFG_URL_MAX];
    CURL *health_easy;
    CURL *models_easy;
    char health_url[CFG_URL_MAX + CFG_PATH_MAX];
    char models_url[CFG_URL_MAX + 16];
    struct buf models_body; /* capped at HC_MODELS_BODY_MAX; kept across learnings */
};

/* Owned by the control plane loop; dies with hc_destroy. */
struct hc_prober {
    struct shm_segment *seg;            /* borrowed */
    const struct cfg_health *health;    /* borrowed */
    const struct cfg_upstream_tls *tls; /* borrowed; NULL = curl's defaults */
    struct cep cep;                     /* curl multi handle and its glue to epfd */
    int epfd;
    uint64_t registry_seen;
    bool registry_loaded;
    bool first_load_done;             /* targets found later were added at run time */
    uint64_t rng;                     /* a struct rng's state (common/rng.h), kept as its integer */
    struct hc_target *targets;        /* seg->max_workers, indexed by slot */
    struct shm_worker_info *snapshot; /* scratch for registry rescans */
};

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

static void hc_on_done(void *user, CURL *e, CURLcode res);

static size_t hc_discard(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static size_t hc_collect_models(char *data, size_t size, size_t n, void *arg)
{
    struct hc_target *t = arg;
    size_t len = size * n;
    if (buf_append(&t->models_body, data, len) != 0)
        return 0; /* too big (or no memory): fail the transfer */
    return len;
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
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->targets = calloc(seg->max_workers, sizeof(*p->targets));
    p->snapshot = calloc(seg->max_workers, sizeof(*p->snapshot));
    if (p->epfd < 0 || p->targets == NULL || p->snapshot == NULL ||
        cep_init(&p->cep, &(struct cep_opts){.epfd = p->epfd, .on_done = hc_on_done, .user = p}) !=
            0) {
        hc_destroy(p);
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < seg->max_workers; s++)
        buf_init(&p->targets[s].models_body, HC_MODELS_BODY_MAX);
    *out = p;
    return 0;
}

static void hc_target_stop(struct hc_prober *p, struct hc_target *t)
{
    if (t->probing)
        cep_remove(&p->cep, t->health_easy);
    if (t->learning)
        cep_remove(&p->cep, t->models_easy);
    t->probing = false;
    t->learning = false;
}

static void hc_target_free(struct hc_prober *p, struct hc_target *t)
{
    hc_target_stop(p, t);
    if (t->health_easy != NULL)
        curl_easy_cleanup(t->health_easy);
    if (t->models_easy != NULL)
        curl_easy_cleanup(t->models_easy);
    buf_fini(&t->models_body);
    memset(t, 0, sizeof(*t));
    buf_init(&t->models_body, HC_MODELS_BODY_MAX);
}

void hc_destroy(struct hc_prober *p)
{
    if (p == NULL)
        return;
    if (p->targets != NULL)
        for (uint32_t i = 0; i < p->seg->max_workers; i++)
            hc_target_free(p, &p->targets[i]);
    cep_fini(&p->cep);
    if (p->epfd >= 0)
        close(p->epfd);
    free(p->targets);
    free(p->snapshot);
    free(p);
}

void hc_set_health(struct hc_prober *p, const struct cfg_health *health)
{
    p->health = health;
    uint64_t now = proc_monotonic_ms();
    for (uint32_t s = 0; s < p->seg->max_workers; s++) {
        struct hc_target *t = &p->targets[s];
        if (!t->active)
            continue;
        snprintf(t->health_url, sizeof(t->health_url), "%s%s", t->url, health->path);
        uint64_t soon = now + hc_jittered_interval(p);
        if (t->next_probe_ms > soon)
            t->next_probe_ms = soon;
    }
}

int hc_fd(const struct hc_prober *p)
{
    return p->epfd;
}

/* A fresh target for the worker now in info->slot. Keeps the easy handles. */
static void hc_target_reset(struct hc_prober *p, struct hc_target *t,
                            const struct shm_worker_info *info, uint64_t now_ms)
{
    hc_target_stop(p, t);
    t->active = true;
    t->slot = info->slot;
    t->generation = info->generation;
    t->healthy = info->healthy;
    /* Not healthy on arrival while the control plane runs: health.initial
     * unknown. (A worker found unhealthy at start was judged before.) */
    t->unknown = p->first_load_done && !info->healthy;
    t->has_model = info->model[0] != '\0';
    t->ok_run = 0;
    t->fail_run = 0;
    t->checks_ok = 0;
    t->checks_failed = 0;
    /* Spread first probes over a tenth of the interval. */
    t->next_probe_ms = now_ms + hc_rand(p) % (p->health->interval_ms / 10 + 1);
    t->next_models_ms = now_ms;
    snprintf(t->id, sizeof(t->id), "%s", info->id);
    snprintf(t->url, sizeof(t->url), "%s", info->url);
    snprintf(t->health_url, sizeof(t->health_url), "%s%s", info->url, p->health->path);
    snprintf(t->models_url, sizeof(t->models_url), "%s/v1/models", info->url);
}

static void hc_follow_registry(struct hc_prober *p, uint64_t now_ms)
{
    uint64_t changes = shm_registry_changes(p->seg);
    if (p->registry_loaded && changes == p->registry_seen)
        return;
    p->registry_loaded = true;
    p->registry_seen = changes;
    size_t n = shm_registry_snapshot(p->seg, p->snapshot, p->seg->max_workers);
    bool *seen = calloc(p->seg->max_workers, sizeof(*seen));
    if (seen == NULL) {
        p->registry_loaded = false; /* try again next pass */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const struct shm_worker_info *w = &p->snapshot[i];
        struct hc_target *t = &p->targets[w->slot];
        seen[w->slot] = true;
        if (!t->active || t->generation != w->generation || strcmp(t->url, w->url) != 0)
            hc_target_reset(p, t, w, now_ms);
        t->has_model = w->model[0] != '\0';
    }
    for (uint32_t s = 0; s < p->seg->max_workers; s++) {
        if (!seen[s] && p->targets[s].active) {
            hc_target_stop(p, &p->targets[s]);
            p->targets[s].active = false;
        }
    }
    free(seen);
    p->first_load_done = true;
}

void hc_set_upstream_tls(struct hc_prober *p, const struct cfg_upstream_tls *tls)
{
    p->tls = tls;
}

static CURL *hc_easy(const struct hc_prober *p, struct hc_target *t, CURL **slot, const char *url,
                     long timeout_ms, curl_write_callback write_fn)
{
    if (*slot == NULL) {
        *slot = curl_easy_init();
        /* A probe reaches a worker as traffic does: same CA, same client
         * certificate, same verification (tls_client.h). */
        if (*slot != NULL && p->tls != NULL && tls_client_apply(*slot, p->tls) != 0) {
            curl_easy_cleanup(*slot);
            *slot = NULL;
        }
    }
    CURL *e = *slot;
    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_fn);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Probes take the path traffic takes: the data plane ignores proxy
     * variables, so a probe through http_proxy would judge another path
     * (or send the worker's address to whoever the variable names). */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    return e;
}

static void hc_start_due(struct hc_prober *p, uint64_t now_ms)
{
    long timeout = (long)p->health->timeout_ms;
    for (uint32_t s = 0; s < p->seg->max_workers; s++) {
        struct hc_target *t = &p->targets[s];
        if (!t->active)
            continue;
        if (!t->probing && now_ms >= t->next_probe_ms) {
            CURL *e = hc_easy(p, t, &t->health_easy, t->health_url, timeout, hc_discard);
            if (e != NULL && cep_add(&p->cep, e) == 0)
                t->probing = true;
            t->next_probe_ms = now_ms + hc_jittered_interval(p);
        }
        /* Every worker's names are read again each models_interval (LoRA
         * adapters come and go); one without a model retries sooner. */
        if (!t->learning && now_ms >= t->next_models_ms) {
            buf_reset(&t->models_body);
            CURL *e = hc_easy(p, t, &t->models_easy, t->models_url, timeout, hc_collect_models);
            if (e != NULL && cep_add(&p->cep, e) == 0)
                t->learning = true;
            t->next_models_ms =
                now_ms + (t->has_model ? p->health->models_interval_ms : HC_MODELS_RETRY_MS);
        }
    }
}

static void hc_apply_probe(struct hc_prober *p, struct hc_target *t, bool ok, const char *why)
{
    const struct cfg_health *h = p->health;
    if (shm_registry_generation(p->seg, t->slot) != t->generation)
        return;
    if (ok) {
        t->checks_ok++;
        t->fail_run = 0;
        if (t->ok_run < UINT32_MAX)
            t->ok_run++;
        /* An unknown worker has nothing to prove yet: one answer will do. */
        if (t->unknown) {
            t->unknown = false;
            if (shm_registry_set_healthy(p->seg, t->slot, true) == 0) {
                t->healthy = true;
                log_info("worker %s (%s) is healthy: its first probe succeeded", t->id, t->url);
            }
            return;
        }
        if (!t->healthy && t->ok_run >= h->success_threshold) {
            if (shm_registry_set_healthy(p->seg, t->slot, true) == 0) {
                t->healthy = true;
                log_info("worker %s (%s) is healthy again after %u successful probes", t->id,
                         t->url, t->ok_run);
            }
        }
        return;
    }
    t->checks_failed++;
    t->ok_run = 0;
    if (t->unknown) {
        t->unknown = false; /* judged now: unhealthy, success_threshold to recover */
        log_warn("worker %s (%s) is unhealthy: its first probe failed (%s)", t->id, t->url, why);
    }
    if (t->fail_run < UINT32_MAX)
        t->fail_run++;
    if (t->healthy && t->fail_run >= h->failure_threshold) {
        if (shm_registry_set_healthy(p->seg, t->slot, false) == 0) {
            t->healthy = false;
            log_warn("worker %s (%s) is unhealthy after %u failed probes (last: %s)", t->id, t->url,
                     t->fail_run, why);
        }
    }
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
static void hc_apply_models(struct hc_prober *p, struct hc_target *t, bool ok)
{
    if (!ok)
        return;
    json_error_t jerr;
    const struct buf *b = &t->models_body;
    json_t *root = json_loadb(b->data != NULL ? b->data : "", b->len, 0, &jerr);
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
        t->has_model = true;
    } else if (shm_registry_generation(p->seg, t->slot) == t->generation &&
               shm_registry_set_names(p->seg, t->slot, model, aliases) == 0) {
        t->has_model = true;
        log_info("worker %s (%s) serves model '%s'%s%s (learned from /v1/models)", t->id, t->url,
                 model, len > 0 ? ", also as " : "", len > 0 ? aliases : "");
        if (dropped > 0)
            log_warn("worker %s: %zu more model names do not fit the registry's %d bytes", t->id,
                     dropped, SHM_ALIASES_MAX);
    }
    json_decref(root);
}

/* A finished probe or model lookup (from cep_collect in hc_run). */
static void hc_on_done(void *user, CURL *e, CURLcode res)
{
    struct hc_prober *p = user;
    struct hc_target *t = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&t);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    cep_remove(&p->cep, e);
    if (t == NULL)
        return;
    bool ok = res == CURLE_OK && code >= 200 && code < 300;
    if (e == t->health_easy) {
        t->probing = false;
        char why[96];
        if (res != CURLE_OK)
            snprintf(why, sizeof(why), "%s", curl_easy_strerror(res));
        else
            snprintf(why, sizeof(why), "HTTP %ld", code);
        hc_apply_probe(p, t, ok, why);
    } else if (e == t->models_easy) {
        t->learning = false;
        hc_apply_models(p, t, ok);
    }
}

void hc_run(struct hc_prober *p, uint64_t now_ms)
{
    struct epoll_event evs[64];
    int n = epoll_wait(p->epfd, evs, 64, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&p->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&p->cep, proc_monotonic_ms());
    /* Registry first: a removed or replaced worker's transfers are dropped
     * before their results could be applied to the slot's next occupant. */
    hc_follow_registry(p, now_ms);
    cep_collect(&p->cep);
    hc_start_due(p, now_ms);
}

int hc_timeout_ms(const struct hc_prober *p, uint64_t now_ms)
{
    int64_t curl_deadline = cep_deadline_ms(&p->cep);
    uint64_t next = curl_deadline < 0 ? HC_NO_DEADLINE : (uint64_t)curl_deadline;
    for (uint32_t s = 0; s < p->seg->max_workers; s++) {
        const struct hc_target *t = &p->targets[s];
        if (!t->active)
            continue;
        if (!t->probing && t->next_probe_ms < next)
            next = t->next_probe_ms;
        if (!t->learning && t->next_models_ms < next)
            next = t->next_models_ms;
    }
    if (!p->registry_loaded || shm_registry_changes(p->seg) != p->registry_seen)
        return 0;
    if (next == HC_NO_DEADLINE)
        return -1;
    if (next <= now_ms)
        return 0;
    uint64_t d = next - now_ms;
    return d > 60000 ? 60000 : (int)d;
}

bool hc_is_unknown(const struct hc_prober *p, uint32_t slot, uint32_t generation)
{
    if (p == NULL || slot >= p->seg->max_workers)
        return false;
    const struct hc_target *t = &p->targets[slot];
    if (!t->active || t->generation != generation)
        return true; /* placed since the prober last looked: nothing probed yet */
    return t->unknown;
}

size_t hc_stats(const struct hc_prober *p, struct hc_worker_stats *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t s = 0; s < p->seg->max_workers && n < cap; s++) {
        const struct hc_target *t = &p->targets[s];
        if (!t->active)
            continue;
        snprintf(out[n].id, sizeof(out[n].id), "%s", t->id);
        out[n].checks_ok = t->checks_ok;
        out[n].checks_failed = t->checks_failed;
        n++;
    }
    return n;
}

void hc_refresh_models(struct hc_prober *p, uint32_t slot)
{
    if (slot < p->seg->max_workers && p->targets[slot].active)
        p->targets[slot].next_models_ms = 0;
}
