/*
 * The load-report scraper (see load_reports.h). Built like the health
 * prober: one target per registry slot keyed by (slot, generation), one
 * easy handle per target re-added for every scrape so keep-alive
 * connections are reused, curl's sockets in an inner epoll set
 * (common/curl_epoll.h), callbacks that only record. Scrapes of all
 * workers start together each interval: they run in parallel and the
 * whole round is bounded by one timeout.
 */
#include "controlplane/load_reports.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/buf.h"
#include "common/curl_epoll.h"
#include "common/log.h"
#include "common/tls_client.h"
#include "common/proc.h"
#include "controlplane/load_report_parse.h"
#include "shm/load.h"
#include "shm/load_report.h"
#include "shm/registry.h"

#define LR_BODY_MAX    LRP_INPUT_MAX
#define LR_NO_DEADLINE UINT64_MAX

struct lr_target {
    bool active;
    bool scraping;
    bool truncated; /* the page passed LR_BODY_MAX: parse what arrived */
    bool failing;   /* the last scrape failed (log the first failure only) */
    uint32_t slot;
    uint32_t generation;
    uint64_t next_ms;
    uint64_t started_unix_ms;
    uint64_t own_at_start; /* this node's in-flight to the worker when the scrape began */
    uint64_t scrapes_ok;
    uint64_t scrapes_failed;
    char id[CFG_ID_MAX];
    char url[CFG_URL_MAX];
    char scrape_url[CFG_URL_MAX + CFG_PATH_MAX];
    CURL *easy;
    struct buf body; /* capped at LR_BODY_MAX */
};

/* Owned by the control plane loop; dies with lr_destroy. */
struct lr_scraper {
    struct shm_segment *seg;            /* borrowed */
    const struct cfg_load_reports *cfg; /* borrowed */
    const struct cfg_upstream_tls *tls; /* borrowed; NULL = curl's defaults */
    struct cep cep;
    int epfd;
    uint64_t registry_seen;
    bool registry_loaded;
    struct lr_target *targets;        /* seg->max_workers, indexed by slot */
    struct shm_worker_info *snapshot; /* scratch for registry rescans */
};

static void lr_on_done(void *user, CURL *e, CURLcode res);

static size_t lr_collect(char *data, size_t size, size_t n, void *arg)
{
    struct lr_target *t = arg;
    size_t len = size * n;
    if (buf_append(&t->body, data, len) != 0) {
        t->truncated = true;
        return 0; /* stop the transfer; what arrived is parsed */
    }
    return len;
}

void lr_set_upstream_tls(struct lr_scraper *s, const struct cfg_upstream_tls *tls)
{
    if (s != NULL)
        s->tls = tls;
}

int lr_create(struct shm_segment *seg, const struct cfg_load_reports *cfg, struct lr_scraper **out)
{
    struct lr_scraper *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->seg = seg;
    s->cfg = cfg;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->targets = calloc(seg->max_workers, sizeof(*s->targets));
    s->snapshot = calloc(seg->max_workers, sizeof(*s->snapshot));
    if (s->epfd < 0 || s->targets == NULL || s->snapshot == NULL ||
        cep_init(&s->cep, &(struct cep_opts){.epfd = s->epfd, .on_done = lr_on_done, .user = s}) !=
            0) {
        lr_destroy(s);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < seg->max_workers; i++)
        buf_init(&s->targets[i].body, LR_BODY_MAX);
    *out = s;
    return 0;
}

static void lr_target_stop(struct lr_scraper *s, struct lr_target *t)
{
    if (t->scraping)
        cep_remove(&s->cep, t->easy);
    t->scraping = false;
}

void lr_destroy(struct lr_scraper *s)
{
    if (s == NULL)
        return;
    if (s->targets != NULL)
        for (uint32_t i = 0; i < s->seg->max_workers; i++) {
            struct lr_target *t = &s->targets[i];
            lr_target_stop(s, t);
            if (t->easy != NULL)
                curl_easy_cleanup(t->easy);
            buf_fini(&t->body);
        }
    cep_fini(&s->cep);
    if (s->epfd >= 0)
        close(s->epfd);
    free(s->targets);
    free(s->snapshot);
    free(s);
}

int lr_fd(const struct lr_scraper *s)
{
    return s->epfd;
}

static void lr_target_reset(struct lr_scraper *s, struct lr_target *t,
                            const struct shm_worker_info *w, uint64_t now_ms)
{
    lr_target_stop(s, t);
    t->active = true;
    t->failing = false;
    t->slot = w->slot;
    t->generation = w->generation;
    t->next_ms = now_ms;
    t->scrapes_ok = 0;
    t->scrapes_failed = 0;
    snprintf(t->id, sizeof(t->id), "%s", w->id);
    snprintf(t->url, sizeof(t->url), "%s", w->url);
    snprintf(t->scrape_url, sizeof(t->scrape_url), "%s%s", w->url, s->cfg->path);
}

static void lr_follow_registry(struct lr_scraper *s, uint64_t now_ms)
{
    uint64_t changes = shm_registry_changes(s->seg);
    if (s->registry_loaded && changes == s->registry_seen)
        return;
    size_t n = shm_registry_snapshot(s->seg, s->snapshot, s->seg->max_workers);
    bool *seen = calloc(s->seg->max_workers, sizeof(*seen));
    if (seen == NULL)
        return; /* try again next pass */
    s->registry_loaded = true;
    s->registry_seen = changes;
    for (size_t i = 0; i < n; i++) {
        const struct shm_worker_info *w = &s->snapshot[i];
        struct lr_target *t = &s->targets[w->slot];
        seen[w->slot] = true;
        if (!t->active || t->generation != w->generation || strcmp(t->url, w->url) != 0)
            lr_target_reset(s, t, w, now_ms);
    }
    for (uint32_t i = 0; i < s->seg->max_workers; i++)
        if (!seen[i] && s->targets[i].active) {
            lr_target_stop(s, &s->targets[i]);
            s->targets[i].active = false;
        }
    free(seen);
}

static CURL *lr_easy(struct lr_scraper *s, struct lr_target *t)
{
    if (t->easy == NULL) {
        t->easy = curl_easy_init();
        /* A scrape reaches a worker as traffic does (tls_client.h). */
        if (t->easy != NULL && s->tls != NULL && tls_client_apply(t->easy, s->tls) != 0) {
            curl_easy_cleanup(t->easy);
            t->easy = NULL;
        }
    }
    CURL *e = t->easy;
    if (e == NULL)
        return NULL;
    long timeout = (long)s->cfg->timeout_ms;
    curl_easy_setopt(e, CURLOPT_URL, t->scrape_url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, lr_collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* The path traffic takes (the data plane ignores proxy variables). */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    return e;
}

static uint64_t lr_own_inflight(const struct lr_scraper *s, const struct lr_target *t)
{
    return shm_load_of(s->seg, t->slot, t->generation);
}

static void lr_start_due(struct lr_scraper *s, uint64_t now_ms)
{
    for (uint32_t i = 0; i < s->seg->max_workers; i++) {
        struct lr_target *t = &s->targets[i];
        if (!t->active || t->scraping || now_ms < t->next_ms)
            continue;
        t->next_ms = now_ms + s->cfg->interval_ms;
        buf_reset(&t->body);
        t->truncated = false;
        CURL *e = lr_easy(s, t);
        if (e == NULL || cep_add(&s->cep, e) != 0)
            continue;
        t->scraping = true;
        t->started_unix_ms = proc_wall_ms();
        t->own_at_start = lr_own_inflight(s, t);
    }
}

static uint32_t lr_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void lr_failed(struct lr_target *t, const char *why)
{
    t->scrapes_failed++;
    if (!t->failing)
        log_warn("worker %s (%s): load report scrape failed: %s; its last report ages out", t->id,
                 t->url, why);
    t->failing = true;
}

/* A finished scrape (from cep_collect in lr_run). */
static void lr_on_done(void *user, CURL *e, CURLcode res)
{
    struct lr_scraper *s = user;
    struct lr_target *t = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&t);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    cep_remove(&s->cep, e);
    if (t == NULL)
        return;
    t->scraping = false;
    char why[128];
    bool transfer_ok = res == CURLE_OK || (res == CURLE_WRITE_ERROR && t->truncated);
    if (!transfer_ok || code < 200 || code >= 300) {
        if (!transfer_ok)
            snprintf(why, sizeof(why), "%s", curl_easy_strerror(res));
        else
            snprintf(why, sizeof(why), "HTTP %ld", code);
        lr_failed(t, why);
        return;
    }
    struct lrp_report page;
    if (lrp_parse(t->body.data, t->body.len, NULL, &page) != 0) {
        lr_failed(t, "the page has no vllm:num_requests_running or vllm:num_requests_waiting");
        return;
    }
    /* What this node had in flight when the worker counted: the smaller of
     * the two ends of the scrape, so a request that finished meanwhile is
     * never taken for one of this node's (that would hide another node's). */
    uint64_t own = lr_own_inflight(s, t);
    if (t->own_at_start < own)
        own = t->own_at_start;
    struct shm_load_report r = {
        .running = lr_u32(page.running),
        .waiting = lr_u32(page.waiting),
        .kv_cache_usage = page.has_kv ? page.kv_cache_usage : 0,
        .own_inflight = lr_u32(own),
        .unix_ms = t->started_unix_ms != 0 ? t->started_unix_ms : 1,
        .running_adapters = page.lora_running,
    };
    if (shm_load_report_write(s->seg, t->slot, t->generation, &r) != 0)
        return; /* the worker was replaced while it was scraped */
    t->scrapes_ok++;
    if (t->failing)
        log_info("worker %s (%s): load reports are back", t->id, t->url);
    t->failing = false;
}

void lr_run(struct lr_scraper *s, uint64_t now_ms)
{
    if (s->cfg->interval_ms == 0)
        return;
    struct epoll_event evs[64];
    int n = epoll_wait(s->epfd, evs, 64, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&s->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&s->cep, proc_monotonic_ms());
    /* Registry first: a replaced worker's scrape is dropped before its page
     * could be published for the slot's next occupant. */
    lr_follow_registry(s, now_ms);
    cep_collect(&s->cep);
    lr_start_due(s, now_ms);
}

int lr_timeout_ms(const struct lr_scraper *s, uint64_t now_ms)
{
    if (s->cfg->interval_ms == 0)
        return -1;
    if (!s->registry_loaded || shm_registry_changes(s->seg) != s->registry_seen)
        return 0;
    int64_t curl_deadline = cep_deadline_ms(&s->cep);
    uint64_t next = curl_deadline < 0 ? LR_NO_DEADLINE : (uint64_t)curl_deadline;
    for (uint32_t i = 0; i < s->seg->max_workers; i++) {
        const struct lr_target *t = &s->targets[i];
        if (t->active && !t->scraping && t->next_ms < next)
            next = t->next_ms;
    }
    if (next == LR_NO_DEADLINE)
        return -1;
    if (next <= now_ms)
        return 0;
    uint64_t d = next - now_ms;
    return d > 60000 ? 60000 : (int)d;
}

size_t lr_stats(const struct lr_scraper *s, struct lr_worker_stats *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < s->seg->max_workers && n < cap; i++) {
        const struct lr_target *t = &s->targets[i];
        if (!t->active)
            continue;
        snprintf(out[n].id, sizeof(out[n].id), "%s", t->id);
        out[n].scrapes_ok = t->scrapes_ok;
        out[n].scrapes_failed = t->scrapes_failed;
        n++;
    }
    return n;
}
