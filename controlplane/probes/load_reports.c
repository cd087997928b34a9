/*
 * The load-report scraper (see load_reports.h). The per-worker polling
 * (registry following, easy handles, schedules, timeouts, in-flight
 * bookkeeping) is controlplane/worker_poller's, as for the health prober;
 * this file is what a scrape means: one job per worker, due every
 * interval (all workers start together: they run in parallel and the
 * round is bounded by one timeout), and per slot what the scrape needs
 * (when it began, this node's in-flight then, counters for /metrics).
 */
#include "controlplane/probes/load_reports.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/proc.h"
#include "controlplane/probes/load_report_parse.h"
#include "controlplane/probes/worker_poller.h"
#include "shm/load.h"
#include "shm/load_report.h"

#define LR_BODY_MAX LRP_INPUT_MAX

/* The scrape state of the worker in one slot (the poller's target). */
struct lr_state {
    bool failing; /* the last scrape failed (log the first failure only) */
    uint64_t started_unix_ms;
    uint64_t own_at_start; /* this node's in-flight to the worker when the scrape began */
    uint32_t block_size;   /* the last vllm:cache_config_info block_size read; 0 none */
    bool sleeping;         /* the last page said the engine sleeps */
};

/* Owned by the control plane loop; dies with lr_destroy. */
struct lr_scraper {
    struct shm_segment *seg;            /* borrowed */
    const struct cfg_load_reports *cfg; /* borrowed */
    struct wp_poller *poller;           /* holds a struct lr_state per slot */
    uint32_t block_size;                /* lr_expect_block_size; 0: no check */
    _Atomic uint64_t block_size_mismatches;
};

static uint64_t lr_own_inflight(const struct lr_scraper *s, const struct wp_target *t)
{
    return shm_load_of(s->seg, t->slot, t->generation);
}

static uint64_t lr_on_start(void *user, const struct wp_target *t, unsigned job, uint64_t now_ms)
{
    struct lr_scraper *s = user;
    (void)job;
    struct lr_state *st = wp_state(s->poller, t->slot);
    st->started_unix_ms = proc_wall_ms();
    st->own_at_start = lr_own_inflight(s, t);
    return now_ms + s->cfg->interval_ms;
}

static uint32_t lr_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static enum wp_outcome lr_failed(const struct wp_target *t, struct lr_state *st, const char *why)
{
    if (!st->failing)
        log_warn("worker %s (%s): load report scrape failed: %s; its last report ages out", t->id,
                 t->url, why);
    st->failing = true;
    return WP_FAILED;
}

/* The worker's KV block size against the one precise_cache_aware hashes
 * with: a worker of another size stores blocks the router can never match
 * (the control plane skips their events). Logged and counted when a worker
 * starts to differ (a page without the gauge changes nothing). */
static void lr_check_block_size(struct lr_scraper *s, const struct wp_target *t,
                                struct lr_state *st, uint32_t reported)
{
    if (s->block_size == 0 || reported == 0 || reported == st->block_size)
        return;
    if (reported != s->block_size) {
        atomic_fetch_add_explicit(&s->block_size_mismatches, 1, memory_order_relaxed);
        log_warn("worker %s (%s): vllm:cache_config_info says block_size %u, but "
                 "policy.precise_cache_aware.block_size is %u: its KV-cache events cannot be "
                 "matched to requests",
                 t->id, t->url, reported, s->block_size);
    } else if (st->block_size != 0) {
        log_info("worker %s (%s): block_size %u now matches policy.precise_cache_aware.block_size",
                 t->id, t->url, reported);
    }
    st->block_size = reported;
}

/* The worker's sleep state into its slot (routing leaves a sleeping worker
 * out: it answers /health but queues everything). Same loop as every
 * registry write, right after the report's generation checked out. */
static void lr_note_sleep(struct lr_scraper *s, const struct wp_target *t, struct lr_state *st,
                          const struct lrp_report *page)
{
    bool sleeping = page->has_sleep_state && page->sleeping;
    if (shm_registry_set_sleeping(s->seg, t->slot, sleeping) != 0 || sleeping == st->sleeping)
        return;
    if (sleeping)
        log_info("worker %s (%s): its engine sleeps (level %u): not routed to until it wakes",
                 t->id, t->url, page->sleep_level);
    else
        log_info("worker %s (%s): its engine is awake: routed to again", t->id, t->url);
    st->sleeping = sleeping;
}

/* A finished scrape. */
static enum wp_outcome lr_on_done(void *user, const struct wp_target *t, unsigned job,
                                  const struct wp_result *res)
{
    struct lr_scraper *s = user;
    (void)job;
    struct lr_state *st = wp_state(s->poller, t->slot);
    char why[128];
    bool transfer_ok = res->curl == CURLE_OK || (res->curl == CURLE_WRITE_ERROR && res->truncated);
    if (!transfer_ok || res->status < 200 || res->status >= 300) {
        if (!transfer_ok)
            snprintf(why, sizeof(why), "%s", curl_easy_strerror(res->curl));
        else
            snprintf(why, sizeof(why), "HTTP %ld", res->status);
        return lr_failed(t, st, why);
    }
    struct lrp_report page;
    if (lrp_parse(res->body, res->len, NULL, &page) != 0) {
        return lr_failed(t, st,
                         "the page has no vllm:num_requests_running or vllm:num_requests_waiting");
    }
    /* What this node had in flight when the worker counted: the smaller of
     * the two ends of the scrape, so a request that finished meanwhile is
     * never taken for one of this node's (that would hide another node's). */
    uint64_t own = lr_own_inflight(s, t);
    if (st->own_at_start < own)
        own = st->own_at_start;
    struct shm_load_report r = {
        .running = lr_u32(page.running),
        .waiting = lr_u32(page.waiting),
        .kv_cache_usage = page.has_kv ? page.kv_cache_usage : 0,
        .own_inflight = lr_u32(own),
        .unix_ms = st->started_unix_ms != 0 ? st->started_unix_ms : 1,
        .running_adapters = page.lora_running,
    };
    if (shm_load_report_write(s->seg, t->slot, t->generation, &r) != 0)
        return WP_UNCOUNTED; /* the worker was replaced while it was scraped */
    lr_check_block_size(s, t, st, page.block_size);
    lr_note_sleep(s, t, st, &page);
    if (st->failing)
        log_info("worker %s (%s): load reports are back", t->id, t->url);
    st->failing = false;
    return WP_OK;
}

int lr_create(struct shm_segment *seg, const struct cfg_load_reports *cfg, struct lr_scraper **out)
{
    struct lr_scraper *s = malloc(sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    *s = (struct lr_scraper){.seg = seg, .cfg = cfg};
    const struct wp_ops ops = {.user = s,
                               .n_jobs = 1,
                               .body_max = {LR_BODY_MAX},
                               .path = {cfg->path},
                               .state_size = sizeof(struct lr_state),
                               .on_start = lr_on_start,
                               .on_done = lr_on_done};
    int rc = wp_create(seg, &ops, cfg->timeout_ms, &s->poller);
    if (rc == 0)
        *out = s;
    else
        free(s);
    return rc;
}

void lr_set_upstream_tls(struct lr_scraper *s, const struct cfg_upstream_tls *tls)
{
    if (s != NULL)
        wp_set_upstream_tls(s->poller, tls);
}

void lr_destroy(struct lr_scraper *s)
{
    if (s == NULL)
        return;
    wp_destroy(s->poller);
    free(s);
}

int lr_fd(const struct lr_scraper *s)
{
    return wp_fd(s->poller);
}

void lr_run(struct lr_scraper *s, uint64_t now_ms)
{
    if (s->cfg->interval_ms == 0)
        return;
    wp_run(s->poller, now_ms);
}

int lr_timeout_ms(const struct lr_scraper *s, uint64_t now_ms)
{
    if (s->cfg->interval_ms == 0)
        return -1;
    return wp_timeout_ms(s->poller, now_ms);
}

size_t lr_stats(const struct lr_scraper *s, struct wp_worker_stats *out, size_t cap)
{
    return wp_stats(s->poller, out, cap);
}

void lr_expect_block_size(struct lr_scraper *s, uint32_t block_size)
{
    if (s != NULL)
        s->block_size = block_size;
}

uint64_t lr_block_size_mismatches(const struct lr_scraper *s)
{
    return s != NULL ? atomic_load_explicit(&s->block_size_mismatches, memory_order_relaxed) : 0;
}
