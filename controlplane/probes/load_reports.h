/*
 * The load-report scraper: GETs every registered worker's
 * controlplane.load_reports.path (vLLM's /metrics) every
 * load_reports.interval, all workers in parallel on one libcurl multi
 * handle driven from the control plane's epoll loop (common/curl_epoll.h,
 * as the health prober), each scrape bounded by load_reports.timeout. A
 * page that parses (controlplane/probes/load_report_parse.h) becomes the worker's
 * report in its slot (shm/load_report.h), stamped with the scrape's wall
 * clock and with this node's in-flight count to the worker at that moment,
 * so the data plane can tell what the worker counts of this node's own
 * requests from what other nodes send it. The LoRA adapters the page says
 * are running (vllm:lora_requests_info) ride in the same report, so they
 * age and go stale with it.
 *
 * A scrape that fails (connection refused, timeout, non-2xx, a page without
 * the gauges) publishes nothing: the worker keeps its last report, which
 * ages and is ignored by routing once older than load_reports.stale_after.
 * A worker still being scraped is not scraped again (a hung /metrics costs
 * one transfer, not one per interval). interval 0 turns scraping off.
 *
 * The polling itself (registry following, handles, schedules, timeouts)
 * is controlplane/probes/worker_poller.h's; this module says what a page means.
 *
 * Invariant 10: the scraper reads load counters (the in-flight snapshot)
 * and never writes one; it writes only the report fields of a slot.
 *
 * Threading: owned by the control plane's loop thread; every function runs
 * there. One descriptor (an inner epoll set) for the loop's epoll set.
 */
#ifndef SY_CONTROLPLANE_LOAD_REPORTS_H
#define SY_CONTROLPLANE_LOAD_REPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "controlplane/probes/worker_poller.h"
#include "shm/segment.h"

struct lr_scraper;

/* Creates the scraper. seg and cfg are borrowed and must outlive it. */
int lr_create(struct shm_segment *seg, const struct cfg_load_reports *cfg, struct lr_scraper **out);

/* Scrapes of https:// workers use tls (dataplane.upstream_tls, borrowed; it
 * must outlive s) from the next handle made on. */
struct cfg_upstream_tls;
void lr_set_upstream_tls(struct lr_scraper *s, const struct cfg_upstream_tls *tls);
void lr_destroy(struct lr_scraper *s);

/* The descriptor to watch for EPOLLIN in the loop's epoll set. */
int lr_fd(const struct lr_scraper *s);

/* Milliseconds until lr_run has work at now_ms (0 = now, -1 = none). */
int lr_timeout_ms(const struct lr_scraper *s, uint64_t now_ms);

/* Follows registry changes, drives transfers, starts due scrapes and
 * publishes results. Call on every loop pass. */
void lr_run(struct lr_scraper *s, uint64_t now_ms);

/* Copies per-worker scrape counters (up to cap); returns how many. */
size_t lr_stats(const struct lr_scraper *s, struct wp_worker_stats *out, size_t cap);

/* Checks every scraped page's vllm:cache_config_info block_size against
 * block_size (precise_cache_aware's; 0: no check, the default): a worker
 * that starts to differ is logged and counted. Call before the first
 * lr_run. */
void lr_expect_block_size(struct lr_scraper *s, uint32_t block_size);
/* Workers found differing so far (switchyard_kv_block_size_mismatches_total);
 * any thread. */
uint64_t lr_block_size_mismatches(const struct lr_scraper *s);

#endif
