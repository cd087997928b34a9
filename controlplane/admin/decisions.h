/*
 * GET /decisions: the data plane's routing decisions, for the status page's
 * chart. They are counted in the data plane's memory and exported only on
 * its /metrics (switchyard_routing_decisions_total{policy,decision},
 * switchyard_pd_routing_decisions_total{phase,policy,decision}), which a
 * browser showing the admin listener's page cannot read (another origin).
 * So the control plane fetches that page itself, where the config in force
 * serves it (a wildcard address reached on loopback):
 *
 *   1. dataplane.metrics_listen, plain HTTP, when set (listen and
 *      plain_listen then answer 404 for /metrics);
 *   2. else dataplane.plain_listen, plain HTTP, when set;
 *   3. else dataplane.listen: plain HTTP, or HTTPS when dataplane.tls is on.
 *      No configured CA covers the data plane's own certificate
 *      (upstream_tls.ca_file is for workers, tls.client_ca_file for
 *      clients), so the one trust anchor is the first certificate of
 *      dataplane.tls.cert_file, the leaf the data plane serves: only the
 *      holder of its key can complete that handshake, which is also why
 *      the host name is not checked (the leaf may name a public name while
 *      the fetch goes to loopback). With tls.client_ca_file set the data
 *      plane wants a client certificate the control plane does not have:
 *      nothing is tried and the answer says so.
 *
 * It answers the counters as JSON:
 *
 *   {"source": "http://127.0.0.1:8080/metrics",
 *    "decisions": [{"policy": "cache_aware", "decision": "affinity", "count": 12}],
 *    "pd_decisions": [{"phase": "prefill", "policy": "...", "decision": "...", "count": 3}]}
 *
 * or 502 with {"error": why} when they cannot be read (no answer, a
 * certificate that does not verify, a config that gives no way in): the
 * status page shows that sentence in the section. Counters are per
 * data-plane process (a hot restart starts them from zero; during its
 * overlap either process may answer): the page charts rates and treats a
 * drop as a restart.
 *
 * GET /decisions/history: so that the chart does not start empty when the
 * page opens, the control plane samples the same answer every
 * CP_DECISIONS_SAMPLE_MS whether or not anyone asks (a fetch made for a
 * request counts as the sample when one is due), and keeps the last
 * CP_DECISIONS_HISTORY samples, failures included, oldest first:
 *
 *   {"interval_ms": 10000, "samples": [{"age_ms": 9800, "source": ...,
 *    "decisions": [...], "pd_decisions": [...]}, {"age_ms": 0, "error": "..."}]}
 *
 * Ages, not times: the browser's clock need not agree with the host's.
 *
 * The fetch runs on the control plane's loop through libcurl's multi
 * interface (its own inner epoll set, as the health prober's), bounded by a
 * 2 s timeout, on a connection of its own (never kept: it would count
 * against the data plane's per-client limits); requests arriving meanwhile
 * share it (at most CP_DECISIONS_WAITERS, then 503). Control plane's loop
 * thread only.
 */
#ifndef SY_CONTROLPLANE_DECISIONS_H
#define SY_CONTROLPLANE_DECISIONS_H

#include <stdint.h>

#include <jansson.h>

#include "common/config.h"
#include "controlplane/admin/admin_reply.h"

#define CP_DECISIONS_WAITERS   8
#define CP_DECISIONS_SAMPLE_MS 10000
#define CP_DECISIONS_HISTORY   32 /* samples: 5 min at CP_DECISIONS_SAMPLE_MS, and some */

struct cp_decisions;

int cp_decisions_create(struct cp_decisions **out);
/* Answers waiting requests 503 first. NULL is a no-op. */
void cp_decisions_destroy(struct cp_decisions *d);

/* The descriptor to watch for EPOLLIN, and the epoll_wait timeout (-1 none). */
int cp_decisions_fd(const struct cp_decisions *d);
int cp_decisions_timeout_ms(const struct cp_decisions *d, uint64_t now_ms);

/* Drives the fetch, answers the waiters when it ends, and starts the next
 * sample when one is due, for cfg (the config in force, borrowed for the
 * call). Every loop pass. */
void cp_decisions_run(struct cp_decisions *d, const struct cfg *cfg, uint64_t now_ms);

/*
 * Serves one GET /decisions for cfg (borrowed for the call). Returns 0 when
 * the answer will come through *later (copied), or 1 with reply filled (an
 * error at once).
 */
int cp_decisions_start(struct cp_decisions *d, const struct cfg *cfg,
                       const struct adm_reply_later *later, struct adm_reply *reply);

/* Serves one GET /decisions/history at once: 200 and the samples kept. */
void cp_decisions_history(const struct cp_decisions *d, uint64_t now_ms, struct adm_reply *reply);

/*
 * The answer's JSON made of a data plane's /metrics page (text, NUL-
 * terminated; url names it in "source"): one entry per sample of the two
 * decision families, other lines ignored. New reference; NULL only when
 * out of memory. Exported for the fuzz target.
 */
json_t *cp_decisions_parse(const char *text, const char *url);

#endif
