/*
 * GET /decisions: the data plane's routing decisions, for the status page's
 * chart. They are counted in the data plane's memory and exported only on
 * its /metrics (switchyard_routing_decisions_total{policy,decision},
 * switchyard_pd_routing_decisions_total{phase,policy,decision}), which a
 * browser showing the admin listener's page cannot read (another origin).
 * So the control plane fetches that page itself — from
 * dataplane.metrics_listen, else dataplane.listen, of the config in force,
 * a wildcard address reached on loopback — and answers the counters as
 * JSON:
 *
 *   {"source": "http://127.0.0.1:8080/metrics",
 *    "decisions": [{"policy": "cache_aware", "decision": "affinity", "count": 12}],
 *    "pd_decisions": [{"phase": "prefill", "policy": "...", "decision": "...", "count": 3}]}
 *
 * or 502 when the data plane does not answer. Counters are per data-plane
 * process (a hot restart starts them from zero; during its overlap either
 * process may answer): the page charts rates and treats a drop as a restart.
 *
 * The fetch runs on the control plane's loop through libcurl's multi
 * interface (its own inner epoll set, as the health prober's), bounded by a
 * 2 s timeout; requests arriving meanwhile share it (at most
 * CP_DECISIONS_WAITERS, then 503). Control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_DECISIONS_H
#define SY_CONTROLPLANE_DECISIONS_H

#include <stdint.h>

#include <jansson.h>

#include "common/config.h"
#include "controlplane/admin/admin_reply.h"

#define CP_DECISIONS_WAITERS 8

struct cp_decisions;

int cp_decisions_create(struct cp_decisions **out);
/* Answers waiting requests 503 first. NULL is a no-op. */
void cp_decisions_destroy(struct cp_decisions *d);

/* The descriptor to watch for EPOLLIN, and the epoll_wait timeout (-1 none). */
int cp_decisions_fd(const struct cp_decisions *d);
int cp_decisions_timeout_ms(const struct cp_decisions *d, uint64_t now_ms);

/* Drives the fetch and answers the waiters when it ends. Every loop pass. */
void cp_decisions_run(struct cp_decisions *d, uint64_t now_ms);

/*
 * Serves one GET /decisions for cfg (borrowed for the call). Returns 0 when
 * the answer will come through *later (copied), or 1 with reply filled (an
 * error at once).
 */
int cp_decisions_start(struct cp_decisions *d, const struct cfg *cfg,
                       const struct adm_reply_later *later, struct adm_reply *reply);

/*
 * The answer's JSON made of a data plane's /metrics page (text, NUL-
 * terminated; url names it in "source"): one entry per sample of the two
 * decision families, other lines ignored. New reference; NULL only when
 * out of memory. Exported for the fuzz target.
 */
json_t *cp_decisions_parse(const char *text, const char *url);

#endif
