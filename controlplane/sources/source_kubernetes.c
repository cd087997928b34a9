/*
 * The Kubernetes worker source's watch state machine (see
 * source_kubernetes.h). One table of what the source knows, one entry per
 * pod name (plus, after a restart, one per worker of ours the API server
 * has not listed yet; source_kubernetes_internal.h). Events and list pages
 * only update the table and set `dirty`; once per loop pass, on a view it
 * trusts (listed, not stale), the source then syncs
 * (source_kubernetes_sync.c: the table becomes one proposal for the
 * per-source registry sync, and draining follows it on the slots).
 * Batching the sync per loop pass keeps a burst of events to one registry
 * pass.
 *
 * States: idle (waiting for the next attempt, with backoff after a
 * failure), listing (pages of limit 500, or max_list_items when smaller,
 * until no continue token), watching.
 *
 * A hostile or broken API server is bounded: a list page is read item by
 * item (source_kubernetes_http.h) and refused, before it is read further,
 * at its max_list_items + 1st item, or when the list's items exceed
 * max_pods; the refusal is a failed list (stale: the registry keeps the
 * last good view) whose line names the key. A page's pods are staged and
 * only applied once the page is whole. Watch events adding pods beyond
 * max_pods are dropped and counted. Per-pod warnings go to a tally
 * (source_kubernetes_warn.c): one line per reason and list.
 * A failed request makes the source stale and the next attempt a list;
 * a watch that ended or was cut after it started resumes from the last
 * resourceVersion.
 */
#include "controlplane/sources/source_kubernetes.h"
#include "controlplane/sources/source_kubernetes_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/prom.h"
#include "common/rng.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_kubernetes_http.h"
#include "controlplane/sources/source_kubernetes_pod.h"
#include "shm/registry.h"

#define KUBE_SA_NAMESPACE   "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#define KUBE_TOKEN_REREAD   60000u
#define KUBE_BACKOFF_MIN_MS 250u
#define KUBE_BACKOFF_MAX_MS 5000u
#define KUBE_PAGE_LIMIT     500
#define KUBE_URL_MAX        2048
#define KUBE_TALLY_MS       1000u /* a watch's warnings: one line per reason per second */

static const char *const kube_ev_names[KUBE_EV_COUNT] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK",
                                                         "ERROR"};

static void kube_on_event(void *user, const json_t *ev);
static bool kube_on_item(void *user, const json_t *item);
static void kube_on_done(void *user, const struct kube_result *r);

/* ---- setup ------------------------------------------------------------------ */

static int kube_read_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    size_t n = fread(buf, 1, len - 1, f);
    int rc = ferror(f) ? -EIO : 0;
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return rc;
}

static void kube_read_token(struct cp_kube *k, uint64_t now_ms)
{
    bool first = k->token_read_ms == 0;
    k->token_read_ms = now_ms;
    char tok[KUBE_TOKEN_MAX];
    int rc = kube_read_file(k->kc->token_file, tok, sizeof(tok));
    if (rc != 0) {
        if (k->token[0] != '\0' || first)
            log_warn("discovery: cannot read the Kubernetes token %s: %s (going on with %s)",
                     k->kc->token_file, strerror(-rc),
                     k->token[0] != '\0' ? "the token read before" : "no token");
        return;
    }
    for (const char *c = tok; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            log_warn("discovery: the Kubernetes token in %s holds control characters; ignored",
                     k->kc->token_file);
            return;
        }
    }
    if (strcmp(tok, k->token) != 0 && k->token[0] != '\0')
        log_info("discovery: the Kubernetes token in %s changed; using the new one",
                 k->kc->token_file);
    snprintf(k->token, sizeof(k->token), "%s", tok);
}

static int kube_resolve(struct cp_kube *k, char *err, size_t err_len)
{
    const struct cfg_kubernetes *kc = k->kc;
    if (kc->api_server[0] != '\0') {
        snprintf(k->base, sizeof(k->base), "%s", kc->api_server);
    } else {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (host == NULL || host[0] == '\0') {
            snprintf(err, err_len,
                     "discovery.kubernetes.api_server is empty and KUBERNETES_SERVICE_HOST is not "
                     "set: give api_server, or run inside a pod");
            return -EINVAL;
        }
        bool v6 = strchr(host, ':') != NULL;
        snprintf(k->base, sizeof(k->base), "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                 port != NULL && port[0] != '\0' ? port : "443");
    }
    size_t bl = strlen(k->base);
    while (bl > 0 && k->base[bl - 1] == '/')
        k->base[--bl] = '\0';
    if (kc->namespace_name[0] != '\0') {
        snprintf(k->ns, sizeof(k->ns), "%s", kc->namespace_name);
    } else {
        int rc = kube_read_file(KUBE_SA_NAMESPACE, k->ns, sizeof(k->ns));
        if (rc != 0 || k->ns[0] == '\0') {
            snprintf(err, err_len,
                     "discovery.kubernetes.namespace is empty and %s cannot be read (%s): give "
                     "namespace",
                     KUBE_SA_NAMESPACE, rc != 0 ? strerror(-rc) : "empty");
            return -EINVAL;
        }
    }
    return 0;
}

void cp_kube_set_cfg(struct cp_kube *k, const struct cfg *cfg)
{
    if (k == NULL)
        return;
    k->cfg = cfg;
    k->kc = &cfg->discovery.kubernetes;
}

int cp_kube_create(struct cp_registry *reg, const struct cfg *cfg, struct cp_kube **out, char *err,
                   size_t err_len)
{
    struct shm_segment *seg = reg->seg;
    struct cp_kube *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    k->reg = reg;
    k->seg = seg;
    k->cfg = cfg;
    k->kc = &cfg->discovery.kubernetes;
    int rc = kube_resolve(k, err, err_len);
    if (rc != 0) {
        free(k);
        return rc;
    }
    rng_seed_random(&k->rng);
    k->snap = calloc(seg->max_workers, sizeof(*k->snap));
    k->snap_ix = calloc(seg->max_workers, sizeof(*k->snap_ix));
    k->selector_q = curl_easy_escape(NULL, k->kc->label_selector, 0);
    struct kube_api_opts o = {.ca_file = k->kc->ca_file,
                              .on_event = kube_on_event,
                              .on_item = kube_on_item,
                              .on_done = kube_on_done,
                              .user = k};
    if (k->snap == NULL || k->snap_ix == NULL || k->selector_q == NULL ||
        kube_api_create(&o, &k->api) != 0) {
        snprintf(err, err_len, "out of memory starting Kubernetes discovery");
        cp_kube_destroy(k);
        return -ENOMEM;
    }
    k->state = KUBE_IDLE;
    k->stale = true; /* until the first list answers */
    k->stale_since_ms = proc_monotonic_ms();
    kube_read_token(k, proc_monotonic_ms());
    log_info("discovery: Kubernetes pods of namespace %s%s%s from %s (resync %llu ms)", k->ns,
             k->kc->label_selector[0] != '\0' ? " matching " : "", k->kc->label_selector, k->base,
             (unsigned long long)k->kc->resync_ms);
    *out = k;
    return 0;
}

void cp_kube_destroy(struct cp_kube *k)
{
    if (k == NULL)
        return;
    kube_api_destroy(k->api);
    curl_free(k->selector_q);
    free(k->entries);
    free(k->page);
    free(k->snap);
    free(k->snap_ix);
    free(k->proposal);
    free(k->drain);
    free(k);
}

int cp_kube_fd(const struct cp_kube *k)
{
    return kube_api_fd(k->api);
}

bool cp_kube_is_stale(const struct cp_kube *k)
{
    return k->stale;
}

/* ---- the table -------------------------------------------------------------- */

static struct kube_entry *kube_find(struct cp_kube *k, const char *name)
{
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->entries[i].pod.name, name) == 0)
            return &k->entries[i];
    return NULL;
}

static struct kube_entry *kube_find_id(const struct cp_kube *k, const char *id)
{
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->entries[i].pod.id, id) == 0)
            return &k->entries[i];
    return NULL;
}

static struct kube_entry *kube_new_entry(struct cp_kube *k)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        struct kube_entry *e = realloc(k->entries, cap * sizeof(*e));
        if (e == NULL)
            return NULL;
        k->entries = e;
        k->cap = cap;
    }
    struct kube_entry *e = &k->entries[k->n++];
    memset(e, 0, sizeof(*e));
    return e;
}

static void kube_set_rv(struct cp_kube *k, const char *rv)
{
    if (rv != NULL && rv[0] != '\0' && strlen(rv) < sizeof(k->rv))
        snprintf(k->rv, sizeof(k->rv), "%s", rv);
}

/* A pod as listed or as an ADDED/MODIFIED event says it is now. A watch
 * event adding a pod beyond max_pods is dropped (a list is bounded before:
 * kube_on_item). */
static void kube_upsert_pod(struct cp_kube *k, const struct kube_pod *pp, bool from_watch)
{
    const struct kube_pod p = *pp;
    struct kube_entry *e = kube_find(k, p.name);
    if (e == NULL) {
        /* A worker adopted after a restart is known by its id only. */
        e = kube_find_id(k, p.id);
        if (e != NULL && e->pod.uid[0] != '\0')
            e = NULL;
    }
    if (e == NULL && from_watch && k->n >= k->kc->max_pods) {
        k->dropped_pods++;
        kube_tally_add(k, KUBE_SKIP_MAX_PODS, p.name);
        return;
    }
    if (e == NULL) {
        e = kube_new_entry(k);
        if (e == NULL) {
            log_error("discovery: out of memory recording pod %s", p.name);
            return;
        }
    } else if (e->pod.uid[0] != '\0' && strcmp(e->pod.uid, p.uid) != 0) {
        /* Same name, new pod: its worker is a new worker. */
        if (e->registered)
            e->replaced = true;
        e->drained_by_us = false;
        e->warned = false;
    }
    if (p.bad_kv_events && !e->warned) {
        kube_tally_add(k, KUBE_SKIP_BAD_KV, p.name);
        e->warned = true;
    }
    bool was_worker = e->exists && kube_pod_is_worker(&e->pod);
    if ((p.bad_role || p.bad_model || p.no_port) && !e->warned) {
        kube_tally_add(k,
                       p.no_port     ? KUBE_SKIP_NO_PORT
                       : p.bad_model ? KUBE_SKIP_BAD_MODEL
                                     : KUBE_SKIP_BAD_ROLE,
                       p.name);
        e->warned = true;
    }
    e->pod = p;
    e->exists = true;
    e->seen = true;
    e->gone_ms = 0;
    if (was_worker != kube_pod_is_worker(&p) && e->registered)
        log_info("discovery: pod %s is %s", p.name,
                 kube_pod_is_worker(&p) ? "Ready again: routing to it"
                 : p.terminating        ? "terminating: draining its worker"
                                        : "not Ready: no new requests for its worker");
    k->dirty = true;
}

static void kube_upsert(struct cp_kube *k, const json_t *obj)
{
    struct kube_pod p;
    if (kube_pod_parse(obj, k->kc, &p) != 0) {
        kube_tally_add(k, KUBE_SKIP_NO_NAME, "an event's object");
        return;
    }
    kube_upsert_pod(k, &p, true);
}

static void kube_gone(struct cp_kube *k, struct kube_entry *e, uint64_t now_ms)
{
    if (!e->exists)
        return;
    e->exists = false;
    e->gone_ms = now_ms;
    k->dirty = true;
    if (e->registered)
        log_info("discovery: pod %s (uid %s) is gone: its worker drains and is removed once idle",
                 e->pod.name, e->pod.uid);
}

/* ---- events ----------------------------------------------------------------- */

static void kube_on_event(void *user, const json_t *ev)
{
    struct cp_kube *k = user;
    if (k->tap != NULL)
        k->tap(k->tap_user, ev);
    const char *type = json_string_value(json_object_get(ev, "type"));
    const json_t *obj = json_object_get(ev, "object");
    int t = -1;
    for (int i = 0; type != NULL && i < KUBE_EV_COUNT; i++)
        if (strcmp(type, kube_ev_names[i]) == 0)
            t = i;
    if (t < 0)
        return;
    k->events[t]++;
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    switch (t) {
    case KUBE_EV_ADDED:
    case KUBE_EV_MODIFIED:
        kube_upsert(k, obj);
        kube_set_rv(k, rv);
        break;
    case KUBE_EV_DELETED: {
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        const char *uid =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
        struct kube_entry *e = name != NULL ? kube_find(k, name) : NULL;
        if (e != NULL && (e->pod.uid[0] == '\0' || uid == NULL || strcmp(e->pod.uid, uid) == 0))
            kube_gone(k, e, proc_monotonic_ms());
        kube_set_rv(k, rv);
        break;
    }
    case KUBE_EV_BOOKMARK:
        kube_set_rv(k, rv);
        break;
    default: {
        json_int_t code = json_integer_value(json_object_get(obj, "code"));
        const char *msg = json_string_value(json_object_get(obj, "message"));
        if (code == 410) {
            k->want_relist = true;
            log_info("discovery: the Kubernetes watch expired (%s); re-listing",
                     msg != NULL ? msg : "410 Gone");
        } else {
            k->watch_error = true;
            log_warn("discovery: the Kubernetes watch sent an error (%lld: %s)", (long long)code,
                     msg != NULL ? msg : "no message");
        }
        break;
    }
    }
}

/* ---- transfers -------------------------------------------------------------- */

static uint64_t kube_backoff_ms(struct cp_kube *k)
{
    uint32_t f = k->failures > 5 ? 5 : k->failures;
    uint64_t d = (uint64_t)KUBE_BACKOFF_MIN_MS << f;
    if (d > KUBE_BACKOFF_MAX_MS)
        d = KUBE_BACKOFF_MAX_MS;
    return d / 2 + rng_below(&k->rng, d / 2 + 1); /* jitter: many control planes, one server */
}

static void kube_schedule(struct cp_kube *k, bool watch, uint64_t delay_ms)
{
    k->state = KUBE_IDLE;
    k->next_is_watch = watch;
    k->next_attempt_ms = proc_monotonic_ms() + delay_ms;
}

static void kube_failed(struct cp_kube *k, const char *what, const struct kube_result *r)
{
    k->errors++;
    k->failures++;
    uint64_t delay = kube_backoff_ms(k);
    if (!k->stale) {
        size_t workers = 0;
        for (size_t i = 0; i < k->n; i++)
            workers += k->entries[i].registered;
        k->stale = true;
        k->stale_since_ms = proc_monotonic_ms();
        log_warn("discovery: Kubernetes %s failed (%s): the source is stale, keeping its %zu "
                 "workers as they are; retrying with backoff",
                 what, r->why, workers);
    } else if (k->failures <= 3 || k->failures % 20 == 0) {
        log_warn("discovery: Kubernetes %s failed again (%s, %u in a row); next try in %llu ms",
                 what, r->why, k->failures, (unsigned long long)delay);
    }
    kube_schedule(k, false, delay);
}

static int kube_start(struct cp_kube *k, bool watch)
{
    char url[KUBE_URL_MAX];
    uint64_t silence = 0;
    if (watch) {
        uint64_t t = k->kc->watch_timeout_ms / 1000;
        if (t == 0)
            t = 1;
        /* Opaque to clients, and it comes from the server: escaped. */
        char *rv = curl_easy_escape(NULL, k->rv, 0);
        snprintf(url, sizeof(url),
                 "%s/api/v1/namespaces/%s/pods?watch=true&resourceVersion=%s"
                 "&allowWatchBookmarks=true&timeoutSeconds=%llu%s%s",
                 k->base, k->ns, rv != NULL ? rv : "", (unsigned long long)t,
                 k->selector_q[0] != '\0' ? "&labelSelector=" : "", k->selector_q);
        curl_free(rv);
        /* The server ends a healthy watch at timeoutSeconds: silence well
         * past that means the connection died without telling us. */
        silence = t * 1000 + (t * 1000 / 4 > 1000 ? t * 1000 / 4 : 1000);
    } else {
        char *cont = k->cont[0] != '\0' ? curl_easy_escape(NULL, k->cont, 0) : NULL;
        uint32_t limit =
            k->kc->max_list_items < KUBE_PAGE_LIMIT ? k->kc->max_list_items : KUBE_PAGE_LIMIT;
        snprintf(url, sizeof(url), "%s/api/v1/namespaces/%s/pods?limit=%u%s%s%s%s", k->base, k->ns,
                 limit, k->selector_q[0] != '\0' ? "&labelSelector=" : "", k->selector_q,
                 cont != NULL ? "&continue=" : "", cont != NULL ? cont : "");
        curl_free(cont);
        k->page_n = 0;
        k->page_items = 0;
        k->refusal[0] = '\0';
    }
    int rc =
        kube_api_start(k->api, watch ? KUBE_XFER_WATCH : KUBE_XFER_LIST, url, k->token, silence);
    if (rc != 0) {
        log_error("discovery: cannot start a Kubernetes %s: %s", watch ? "watch" : "list",
                  strerror(-rc));
        k->failures++;
        kube_schedule(k, false, kube_backoff_ms(k));
        return rc;
    }
    k->state = watch ? KUBE_WATCHING : KUBE_LISTING;
    if (watch) {
        k->watches++;
        k->watch_started_ms = proc_monotonic_ms();
        k->want_relist = false;
        k->watch_error = false;
    }
    return 0;
}

static void kube_start_list(struct cp_kube *k)
{
    k->cont[0] = '\0';
    k->list_rv[0] = '\0';
    k->list_items = 0;
    for (size_t i = 0; i < k->n; i++)
        k->entries[i].seen = false;
    k->relists++;
    kube_start(k, false);
}

/*
 * 410 Gone: the version is compacted away; only a list helps. At once
 * after a watch that ran for a while; with backoff when the watch died
 * young, so a server that answers every watch with 410 is not hammered.
 */
static void kube_relist_after_410(struct cp_kube *k, bool lasted)
{
    if (lasted) {
        kube_start_list(k);
        return;
    }
    k->failures++;
    kube_schedule(k, false, kube_backoff_ms(k));
}

/* A whole list arrived: what it did not name is gone. */
static void kube_list_complete(struct cp_kube *k, uint64_t now_ms)
{
    for (size_t i = 0; i < k->n; i++)
        if (!k->entries[i].seen)
            kube_gone(k, &k->entries[i], now_ms);
    snprintf(k->rv, sizeof(k->rv), "%s", k->list_rv);
    k->last_list_ms = now_ms;
    k->failures = 0;
    k->token_retried = false;
    if (k->stale)
        log_info("discovery: Kubernetes API server answers: %zu pods listed%s", k->n,
                 k->listed_once ? " after an outage; syncing the registry" : "");
    k->stale = false;
    k->listed_once = true;
    k->dirty = true;
    kube_start(k, true);
}

/* An adopted worker: ours in the registry, not yet listed (after a restart). */
static void kube_adopt(struct cp_kube *k, uint64_t now_ms)
{
    kube_sync_snapshot(k);
    for (size_t i = 0; i < k->n_snap; i++) {
        const struct shm_worker_info *w = &k->snap[i];
        if (w->source != CP_SOURCE_KUBERNETES || kube_find_id(k, w->id) != NULL)
            continue;
        struct kube_entry *e = kube_new_entry(k);
        if (e == NULL)
            return;
        snprintf(e->pod.name, sizeof(e->pod.name), "%s", w->id);
        snprintf(e->pod.id, sizeof(e->pod.id), "%s", w->id);
        snprintf(e->pod.url, sizeof(e->pod.url), "%s", w->url);
        e->pod.role = w->role;
        e->exists = true; /* until a list says otherwise */
        e->registered = true;
        e->gone_ms = now_ms;
    }
}

static bool kube_retry_401(struct cp_kube *k, const struct kube_result *r)
{
    if (r->http_status != 401 || k->token_retried)
        return false;
    char before[KUBE_TOKEN_MAX];
    snprintf(before, sizeof(before), "%s", k->token);
    k->token_retried = true;
    kube_read_token(k, proc_monotonic_ms());
    log_info("discovery: Kubernetes answered 401; re-read the token (%s)",
             strcmp(before, k->token) != 0 ? "it changed, retrying" : "unchanged");
    return strcmp(before, k->token) != 0;
}

/*
 * One item of the list page being read, as it arrives. Refused, and with
 * it the page, at the max_list_items + 1st item of the page or when the
 * list's items exceed max_pods: before the rest is read. A pod is staged
 * until the page is whole (kube_list_done applies it).
 */
static bool kube_on_item(void *user, const json_t *item)
{
    struct cp_kube *k = user;
    k->page_items++;
    if (k->page_items > k->kc->max_list_items) {
        k->refused_pages[0]++;
        snprintf(k->refusal, sizeof(k->refusal),
                 "a list page of more than %u items, refused by "
                 "discovery.kubernetes.max_list_items",
                 k->kc->max_list_items);
        return false;
    }
    if (k->list_items + k->page_items > k->kc->max_pods) {
        k->refused_pages[1]++;
        snprintf(k->refusal, sizeof(k->refusal),
                 "a list of more than %u pods, refused by discovery.kubernetes.max_pods",
                 k->kc->max_pods);
        return false;
    }
    if (k->page_n == k->page_cap) {
        size_t cap = k->page_cap ? k->page_cap * 2 : 64;
        struct kube_pod *p = realloc(k->page, cap * sizeof(*p));
        if (p == NULL) {
            snprintf(k->refusal, sizeof(k->refusal), "out of memory reading a list page");
            return false;
        }
        k->page = p;
        k->page_cap = cap;
    }
    if (kube_pod_parse(item, k->kc, &k->page[k->page_n]) != 0) {
        char where[32];
        snprintf(where, sizeof(where), "item %zu", k->list_items + k->page_items);
        kube_tally_add(k, KUBE_SKIP_NO_NAME, where);
        return true;
    }
    k->page_n++;
    return true;
}

/* The page buffer is sized by the largest page: a big one is given back. */
static void kube_page_release(struct cp_kube *k)
{
    k->page_n = 0;
    if (k->page_cap > 1024) {
        free(k->page);
        k->page = NULL;
        k->page_cap = 0;
    }
}

static void kube_list_done(struct cp_kube *k, const struct kube_result *r)
{
    uint64_t now = proc_monotonic_ms();
    if (k->refusal[0] != '\0') {
        struct kube_result refused = *r;
        snprintf(refused.why, sizeof(refused.why), "%s", k->refusal);
        kube_page_release(k);
        kube_tally_flush(k, "list");
        kube_failed(k, "list", &refused);
        return;
    }
    if (r->http_status == 410) {
        log_info("discovery: the Kubernetes list's continue token expired; listing again");
        kube_page_release(k);
        k->failures++;
        kube_schedule(k, false, k->failures > 1 ? kube_backoff_ms(k) : 0);
        return;
    }
    if (kube_retry_401(k, r)) {
        kube_page_release(k);
        kube_start_list(k);
        return;
    }
    const json_t *items = json_object_get(r->body, "items");
    if (!r->transport_ok || r->http_status != 200 || !json_is_array(items)) {
        kube_page_release(k);
        kube_tally_flush(k, "list");
        kube_failed(k, "list", r);
        return;
    }
    if (!k->listed_once)
        kube_adopt(k, now);
    for (size_t i = 0; i < k->page_n; i++)
        kube_upsert_pod(k, &k->page[i], false);
    k->list_items += k->page_items;
    kube_page_release(k);
    const json_t *meta = json_object_get(r->body, "metadata");
    const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *cont = json_string_value(json_object_get(meta, "continue"));
    if (rv != NULL && strlen(rv) < sizeof(k->list_rv) && k->list_rv[0] == '\0')
        snprintf(k->list_rv, sizeof(k->list_rv), "%s", rv);
    if (cont != NULL && cont[0] != '\0' && strlen(cont) < sizeof(k->cont)) {
        snprintf(k->cont, sizeof(k->cont), "%s", cont);
        kube_start(k, false);
        return;
    }
    kube_tally_flush(k, "list");
    kube_list_complete(k, now);
}

static void kube_watch_done(struct cp_kube *k, const struct kube_result *r)
{
    uint64_t now = proc_monotonic_ms();
    kube_tally_flush(k, "watch");
    k->next_tally_ms = now + KUBE_TALLY_MS;
    bool lasted = now >= k->watch_started_ms + 1000;
    if (k->want_relist || r->http_status == 410) {
        kube_relist_after_410(k, lasted);
        return;
    }
    if (kube_retry_401(k, r)) {
        kube_start(k, true);
        return;
    }
    if (r->http_status != 200) {
        kube_failed(k, "watch", r);
        return;
    }
    k->token_retried = false;
    if (k->watch_error) {
        /* Another error inside the stream: a list heals whatever it was. */
        k->failures++;
        kube_schedule(k, false, kube_backoff_ms(k));
        return;
    }
    if (r->silent)
        log_warn("discovery: the Kubernetes watch went silent (%s); watching again from "
                 "resourceVersion %s",
                 r->why, k->rv);
    else if (!r->transport_ok)
        log_warn("discovery: the Kubernetes watch was cut (%s); watching again from "
                 "resourceVersion %s",
                 r->why, k->rv);
    if (!lasted || !r->transport_ok) {
        k->failures++;
        kube_schedule(k, true, lasted ? KUBE_BACKOFF_MIN_MS : kube_backoff_ms(k));
        return;
    }
    k->failures = 0;
    kube_start(k, true); /* ended at its timeoutSeconds: resume at once */
}

static void kube_on_done(void *user, const struct kube_result *r)
{
    struct cp_kube *k = user;
    if (r->kind == KUBE_XFER_LIST)
        kube_list_done(k, r);
    else
        kube_watch_done(k, r);
}

/* ---- the loop --------------------------------------------------------------- */

void cp_kube_run(struct cp_kube *k, uint64_t now_ms)
{
    kube_api_run(k->api, now_ms);
    now_ms = proc_monotonic_ms();
    if (now_ms >= k->token_read_ms + KUBE_TOKEN_REREAD)
        kube_read_token(k, now_ms);
    if (k->state == KUBE_WATCHING && k->want_relist) {
        kube_api_cancel(k->api);
        kube_relist_after_410(k, now_ms >= k->watch_started_ms + 1000);
    } else if (k->state == KUBE_WATCHING && now_ms >= k->last_list_ms + k->kc->resync_ms) {
        kube_api_cancel(k->api);
        kube_start_list(k);
    } else if (k->state == KUBE_IDLE && now_ms >= k->next_attempt_ms) {
        if (k->next_is_watch && k->listed_once)
            kube_start(k, true);
        else
            kube_start_list(k);
    }
    if (k->state == KUBE_WATCHING && k->tally.pending && now_ms >= k->next_tally_ms) {
        kube_tally_flush(k, "events"); /* a watch's, and the registry sync's */
        k->next_tally_ms = now_ms + KUBE_TALLY_MS;
    }
    /* Nothing is decided on a stale view, and nothing before the first list. */
    if (!k->listed_once || k->stale)
        return;
    /* Nor on a list half read: a later page may still refuse it. */
    if (k->state == KUBE_LISTING)
        return;
    if (k->dirty || (now_ms >= k->next_sweep_ms && kube_sync_has_leaving(k)))
        kube_sync(k, now_ms);
}

int cp_kube_timeout_ms(const struct cp_kube *k, uint64_t now_ms)
{
    int t = kube_api_timeout_ms(k->api, now_ms);
    uint64_t next = UINT64_MAX;
    if (k->state == KUBE_IDLE)
        next = k->next_attempt_ms;
    else if (k->state == KUBE_WATCHING)
        next = k->last_list_ms + k->kc->resync_ms;
    if (k->token_read_ms + KUBE_TOKEN_REREAD < next)
        next = k->token_read_ms + KUBE_TOKEN_REREAD;
    if (k->listed_once && !k->stale && k->state != KUBE_LISTING &&
        (k->dirty || kube_sync_has_leaving(k)) && k->next_sweep_ms < next)
        next = k->dirty ? now_ms : k->next_sweep_ms;
    if (k->state == KUBE_WATCHING && k->tally.pending && k->next_tally_ms < next)
        next = k->next_tally_ms;
    if (k->want_relist)
        next = now_ms;
    int u = next <= now_ms ? 0 : (next - now_ms > 60000 ? 60000 : (int)(next - now_ms));
    return t < 0 || u < t ? u : t;
}

/* ---- admin API -------------------------------------------------------------- */

bool cp_kube_pod_of(const struct cp_kube *k, const char *worker_id, const char **ns,
                    const char **name, const char **uid)
{
    const struct kube_entry *e = kube_find_id(k, worker_id);
    if (e == NULL)
        return false;
    *ns = k->ns;
    *name = e->pod.name;
    *uid = e->pod.uid;
    return true;
}

json_t *cp_kube_status_json(const struct cp_kube *k, uint64_t now_ms)
{
    size_t pods = 0, workers = 0;
    for (size_t i = 0; i < k->n; i++) {
        pods += k->entries[i].exists && k->entries[i].pod.uid[0] != '\0';
        workers += k->entries[i].registered;
    }
    return json_pack(
        "{s:b, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "stale", k->stale, "api_server",
        k->base, "namespace", k->ns, "label_selector", k->kc->label_selector, "resource_version",
        k->rv, "pods", (json_int_t)pods, "workers", (json_int_t)workers, "stale_for_ms",
        (json_int_t)(k->stale ? now_ms - k->stale_since_ms : 0), "relists", (json_int_t)k->relists,
        "watches", (json_int_t)k->watches, "errors", (json_int_t)k->errors);
}

void cp_kube_metrics(const struct cp_kube *k, struct prom_writer *w)
{
    struct prom_label src = {"source", "kubernetes"};
    prom_family(w, "switchyard_discovery_stale", PROM_GAUGE,
                "1 while a discovery source cannot see its API server (its workers are kept).");
    prom_sample_u64(w, NULL, &src, 1, k->stale ? 1 : 0);
    prom_family(w, "switchyard_discovery_events_total", PROM_COUNTER,
                "Watch events received, by source and type.");
    for (int i = 0; i < KUBE_EV_COUNT; i++) {
        struct prom_label l[] = {src, {"type", kube_ev_names[i]}};
        prom_sample_u64(w, NULL, l, 2, k->events[i]);
    }
    prom_family(w, "switchyard_discovery_relists_total", PROM_COUNTER,
                "Full lists (first, periodic resync, after 410 Gone or an outage).");
    prom_sample_u64(w, NULL, &src, 1, k->relists);
    prom_family(w, "switchyard_discovery_errors_total", PROM_COUNTER,
                "Failed requests to the discovery API server.");
    prom_sample_u64(w, NULL, &src, 1, k->errors);
    prom_family(w, "switchyard_discovery_lists_refused_total", PROM_COUNTER,
                "Lists refused for a bound: a page beyond discovery.kubernetes.max_list_items "
                "items, or more pods than discovery.kubernetes.max_pods.");
    static const char *const keys[2] = {"max_list_items", "max_pods"};
    for (int i = 0; i < 2; i++) {
        struct prom_label l[] = {src, {"limit", keys[i]}};
        prom_sample_u64(w, NULL, l, 2, k->refused_pages[i]);
    }
    prom_family(w, "switchyard_discovery_pods_dropped_total", PROM_COUNTER,
                "Watch events adding a pod beyond discovery.kubernetes.max_pods, dropped.");
    prom_sample_u64(w, NULL, &src, 1, k->dropped_pods);
}

/* ---- fuzzing ---------------------------------------------------------------- */

void cp_kube_reset(struct cp_kube *k)
{
    kube_api_cancel(k->api);
    /* Everything is cleared but what cp_kube_create made: a field added
     * later starts over too unless it is named here, as in a new source. */
    const struct cp_kube was = *k;
    const struct cp_kube *keep = &was;
    memset(k, 0, sizeof(*k));
    k->reg = keep->reg;
    k->seg = keep->seg;
    k->cfg = keep->cfg;
    k->kc = keep->kc;
    k->api = keep->api;
    memcpy(k->base, keep->base, sizeof(k->base));
    memcpy(k->ns, keep->ns, sizeof(k->ns));
    k->selector_q = keep->selector_q;
    memcpy(k->token, keep->token, sizeof(k->token));
    k->token_read_ms = keep->token_read_ms;
    k->rng = keep->rng;
    k->entries = keep->entries; /* the table's storage, emptied */
    k->cap = keep->cap;
    k->page = keep->page;
    k->page_cap = keep->page_cap;
    k->snap = keep->snap;
    k->snap_ix = keep->snap_ix;
    k->proposal = keep->proposal;
    k->proposal_cap = keep->proposal_cap;
    k->drain = keep->drain;
    k->tap = keep->tap;
    k->tap_user = keep->tap_user;
    k->state = KUBE_IDLE;
    k->stale = true;
    k->stale_since_ms = proc_monotonic_ms();
}

bool cp_kube_feed_watch(struct cp_kube *k, const char *bytes, size_t len, uint64_t now_ms)
{
    bool ok = kube_api_feed_watch(k->api, bytes, len);
    if (k->dirty)
        kube_sync(k, now_ms);
    return ok;
}

void cp_kube_set_event_tap(struct cp_kube *k, void (*fn)(void *user, const json_t *event),
                           void *user)
{
    k->tap = fn;
    k->tap_user = user;
}
