/*
 * The rest of vLLM's /metrics page (--metrics-page vllm): the families a
 * real server shows beyond the few routers read, so a scraper pays for a
 * page of vLLM's real size (about 30 kB for one engine) and reads past
 * what it does not need, as it must against vLLM. Families and buckets are
 * vLLM's (vllm/v1/metrics/loggers.py: PrometheusStatLogger), the Python
 * client's default collectors (python_gc_*, python_info, process_*) and the
 * HTTP instrumentator of vLLM's API server (http_*). Values are this
 * worker's where the mock knows them (requests, tokens), else those of an
 * idle server.
 *
 * handlers.c writes the head before the families routers read and the tail
 * after them, the order of vLLM's registry (default collectors, the HTTP
 * instrumentator, then the engine's families).
 *
 * Threading: any loop thread; reads the server's stats under their locks.
 */
#ifndef SY_TESTS_MOCKWORKER_VLLM_METRICS_H
#define SY_TESTS_MOCKWORKER_VLLM_METRICS_H

#include "common/prom.h"
#include "tests/mockworker/request.h"

/* The families before vLLM's engine ones. Errors stay in w (prom_error). */
void mw_vllm_metrics_head(struct prom_writer *w, struct mw_server *s);

/* The engine families the small page leaves out. */
void mw_vllm_metrics_tail(struct prom_writer *w, struct mw_server *s,
                          const struct mw_engine_snapshot *snap);

#endif
