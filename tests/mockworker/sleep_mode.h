/*
 * vLLM's sleep mode in the mock worker (vllm/entrypoints/serve/dev/sleep/
 * api_router.py, served by vLLM with VLLM_SERVER_DEV_MODE=1; the mock
 * always serves it):
 *   - POST /sleep?level=1&mode=abort (level defaults to 1, mode to
 *     "abort"): 200, empty body. The engine drops its prefix cache and
 *     admits nothing until woken (cost_model.h, mw_engine_sleep); /health
 *     still answers 200, so a router learns it from /metrics only.
 *   - POST /wake_up[?tags=weights&tags=kv_cache] (no tags: all): 200,
 *     empty body; the engine is awake once every tag is.
 *   - GET /is_sleeping: {"is_sleeping": bool}.
 *   - /metrics: vllm:engine_sleep_state{model_name, engine, sleep_state=
 *     "awake"|"weights_offloaded"|"discard_all"} per engine, as vLLM's
 *     PrometheusStatLogger writes it: awake 1 while awake, else 0 with
 *     weights_offloaded 1 at level 1 or discard_all 1 at level 2.
 * Where the mock differs: a level other than 1 or 2 is answered 400 (vLLM
 * fails it in the engine), and requests running at /sleep finish.
 *
 * Threading: any loop thread.
 */
#ifndef SY_TESTS_MOCKWORKER_SLEEP_MODE_H
#define SY_TESTS_MOCKWORKER_SLEEP_MODE_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"

struct mw_server;

enum mw_sleep_op {
    MW_SLEEP_SLEEP,
    MW_SLEEP_WAKE_UP,
    MW_SLEEP_IS_SLEEPING,
};

/* Runs op (query arguments read from conn); returns the HTTP status and
 * sets *body (malloc'd JSON, NULL for an empty body) and *len. */
int mw_sleep_handle(struct mw_server *s, struct MHD_Connection *conn, enum mw_sleep_op op,
                    char **body, size_t *len);

/* The vllm:engine_sleep_state family for engines engines at level (0 awake). */
void mw_sleep_metrics(struct prom_writer *w, const char *model, uint32_t engines, uint32_t level);

#endif
