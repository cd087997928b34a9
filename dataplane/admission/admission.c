/*
 * Admission control (see admission.h): keys, rate limits, saturation.
 *
 * Why max_inflight_per_worker is exact on a node. A worker's load is the
 * sum of one counter per data plane (its lease's), and several loops of
 * several processes take guards at once, so "read the sum, then add"
 * would let two of them both see max - 1 and both add. Instead a guard is
 * taken first (the counter is incremented), then, after a sequentially
 * consistent fence, the sum is read again: over the limit, the guard is
 * released and the worker counts as saturated. Of two racing takers, the
 * fences guarantee at least one sees the other's increment (the same
 * argument as reset_load's, guard.c), so they cannot both pass; they may
 * both back off, and the queue tries again at the next freed slot or
 * tick. The shared counter can hold max + k for the few nanoseconds
 * between an increment and its release, but no request is ever sent past
 * the limit: a transfer starts only after the check passed.
 */
#include "dataplane/admission/admission.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/proc.h"
#include "dataplane/admission/adm_hub.h"
#include "dataplane/admission/adm_metrics.h"
#include "dataplane/admission/adm_queue.h"
#include "dataplane/core/loop.h"
#include "shm/effective_load.h"
#include "shm/load.h"
#include "shm/load_report.h"
#include "shm/registry.h"
#include "shm/buckets.h"
#include "common/list.h"

#define DP_ADM_CHECK_EVERY_MS 1000u
#define DP_ADM_ANONYMOUS      "anonymous"

int dp_adm_shared_init(struct dp_adm_shared *s, const struct cfg *cfg, uint32_t lease)
{
    atomic_init(&s->reload_gen, 0);
    s->buckets_ok = false;
    s->metrics = dp_adm_metrics_create();
    s->hub = dp_adm_hub_create();
    if (s->metrics == NULL || s->hub == NULL)
        return -ENOMEM;
    dp_adm_metrics_hide_tenants(s->metrics, !cfg->dataplane.metrics_tenant_labels);
    const struct cfg_admission *a = &cfg->admission;
    if (cfg->dataplane.api_keys_file[0] == '\0' && a->max_inflight_per_worker == 0 &&
        a->max_waiting_per_worker == 0 && a->max_kv_usage <= 0)
        return 0; /* no tenants, no limits, no queue: nothing to share */
    char name[CFG_PATH_MAX + 16], err[512];
    int rc = shm_buckets_name(cfg->shm.name, name, sizeof(name));
    if (rc == 0)
        rc = shm_buckets_open(&s->buckets, name, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "shm.name '%s' is too long for the rate-limit buckets' name",
                 cfg->shm.name);
    if (rc != 0) {
        log_error("rate-limit buckets: %s", err);
        return rc;
    }
    s->buckets_ok = true;
    /* Whatever a crashed holder of this lease had queued died with it. */
    shm_buckets_lease_reset(&s->buckets, lease);
    dp_adm_metrics_set_buckets(s->metrics, &s->buckets, lease);
    return 0;
}

void dp_adm_shared_fini(struct dp_adm_shared *s)
{
    if (s->buckets_ok)
        shm_buckets_close(&s->buckets);
    s->buckets_ok = false;
    dp_adm_metrics_destroy(s->metrics);
    s->metrics = NULL;
    dp_adm_hub_destroy(s->hub);
    s->hub = NULL;
}

void dp_adm_request_reload(struct dp_adm_shared *s)
{
    atomic_fetch_add_explicit(&s->reload_gen, 1, memory_order_release);
}

/* ---- the key files ---------------------------------------------------------- */

static void adm_file_id(const char *path, struct dp_adm_file_id *out)
{
    struct stat st;
    memset(out, 0, sizeof(*out));
    if (stat(path, &st) != 0)
        return;
    out->present = true;
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->size = st.st_size;
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

static bool adm_file_id_equal(const struct dp_adm_file_id *a, const struct dp_adm_file_id *b)
{
    return a->present == b->present && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns;
}

/* (Re)reads the keys file; at start (first) a failure is an error, later
 * the old keys stay. Only loop 0 logs, so one change gives one line. */
static int adm_load_keys(struct dp_loop *loop, bool first)
{
    struct dp_adm_loop *a = &loop->adm;
    const char *path = loop->sh->cfg->dataplane.api_keys_file;
    struct dp_adm_file_id id;
    adm_file_id(path, &id);
    struct dp_keys k;
    char err[512];
    int rc = dp_keys_load_file(&k, path, err, sizeof(err));
    if (rc == 0) {
        bool salt_key = loop->sh->cfg->dataplane.cache_salt_key_file[0] != '\0';
        rc = dp_keys_check_isolation(&k, path, salt_key, err, sizeof(err));
        if (rc != 0)
            dp_keys_fini(&k);
    }
    if (rc != 0) {
        if (first)
            log_error("dataplane.api_keys_file: %s", err);
        else if (loop->index == 0)
            log_error("dataplane.api_keys_file: refusing the new file, keeping the %zu tenants "
                      "loaded before: %s",
                      a->keys.n, err);
        a->keys_id = id; /* not retried until it changes again */
        return rc;
    }
    dp_keys_fini(&a->keys);
    a->keys = k;
    a->keys_id = id;
    if (loop->index == 0)
        log_info("dataplane.api_keys_file %s: %zu tenants", path, k.n);
    return 0;
}

static int adm_load_upstream_key(struct dp_loop *loop, bool first)
{
    struct dp_adm_loop *a = &loop->adm;
    const char *path = loop->sh->cfg->dataplane.upstream_api_key_file;
    struct dp_adm_file_id id;
    adm_file_id(path, &id);
    char key[DP_UPSTREAM_KEY_MAX];
    int rc = dp_keys_read_secret(path, key, sizeof(key));
    a->upstream_id = id;
    if (rc != 0) {
        if (first || loop->index == 0)
            log_error("dataplane.upstream_api_key_file %s: %s%s", path,
                      rc == -EINVAL  ? "empty, several lines, or longer than 511 bytes"
                      : rc == -EPERM ? "other users may read it (chmod o-rwx)"
                                     : strerror(-rc),
                      first ? "" : "; keeping the key read before");
        explicit_bzero(key, sizeof(key));
        return rc;
    }
    memcpy(a->upstream_key, key, sizeof(key));
    explicit_bzero(key, sizeof(key));
    if (loop->index == 0 && !first)
        log_info("dataplane.upstream_api_key_file %s: re-read", path);
    return 0;
}

static void adm_check_files(struct dp_loop *loop, bool forced)
{
    struct dp_adm_loop *a = &loop->adm;
    const struct cfg_dataplane *dc = &loop->sh->cfg->dataplane;
    struct dp_adm_file_id id;
    if (a->keys_on) {
        adm_file_id(dc->api_keys_file, &id);
        if (forced || !adm_file_id_equal(&id, &a->keys_id))
            (void)adm_load_keys(loop, false);
    }
    if (dc->upstream_api_key_file[0] != '\0') {
        adm_file_id(dc->upstream_api_key_file, &id);
        if (forced || !adm_file_id_equal(&id, &a->upstream_id))
            (void)adm_load_upstream_key(loop, false);
    }
}

int dp_adm_loop_init(struct dp_loop *loop, const struct dp_adm_ops *ops)
{
    struct dp_adm_loop *a = &loop->adm;
    a->ops = ops;
    list_init(&a->models);
    list_init(&a->by_age);
    if (loop->sh->adm.hub != NULL)
        dp_adm_hub_attach(loop->sh->adm.hub, loop->index, loop);
    a->reload_seen = atomic_load_explicit(&loop->sh->adm.reload_gen, memory_order_acquire);
    a->next_check_ms = proc_monotonic_ms() + DP_ADM_CHECK_EVERY_MS;
    const struct cfg_dataplane *dc = &loop->sh->cfg->dataplane;
    a->keys_on = dc->api_keys_file[0] != '\0';
    if (a->keys_on && adm_load_keys(loop, true) != 0)
        return -EINVAL;
    if (dc->upstream_api_key_file[0] != '\0' && adm_load_upstream_key(loop, true) != 0)
        return -EINVAL;
    return 0;
}

void dp_adm_loop_fini(struct dp_loop *loop)
{
    dp_adm_queue_fini(loop);
    if (loop->sh->adm.hub != NULL)
        dp_adm_hub_attach(loop->sh->adm.hub, loop->index, NULL);
    dp_keys_fini(&loop->adm.keys);
    explicit_bzero(loop->adm.upstream_key, sizeof(loop->adm.upstream_key));
}

void dp_adm_tick(struct dp_loop *loop, uint64_t now_ms)
{
    struct dp_adm_loop *a = &loop->adm;
    unsigned gen = atomic_load_explicit(&loop->sh->adm.reload_gen, memory_order_acquire);
    if (gen != a->reload_seen) {
        a->reload_seen = gen;
        adm_check_files(loop, true);
    } else if (now_ms >= a->next_check_ms) {
        a->next_check_ms = now_ms + DP_ADM_CHECK_EVERY_MS;
        adm_check_files(loop, false);
    }
    if (loop->draining) {
        if (a->queued > 0)
            dp_adm_queue_flush(loop);
        return;
    }
    /* Also with nothing queued here: idle tenant queues are let go (and
     * with them their hold on the hub's entries). */
    if (!list_is_empty(&a->models))
        dp_adm_queue_expire(loop, now_ms);
    /* Slots freed by other data planes (and any wake-up missed) are seen
     * here; it returns at once while nothing waits on any loop. */
    dp_adm_queue_dispatch(loop);
}

void dp_adm_after_pass(struct dp_loop *loop)
{
    if (!loop->adm.kick)
        return;
    loop->adm.kick = false;
    /* Requests queued on other loops count too: the slot freed here may be
     * one of theirs to take (the dispatch wakes that loop then). */
    if (!loop->draining)
        dp_adm_queue_dispatch(loop);
}

void dp_adm_slot_freed(struct dp_loop *loop)
{
    loop->adm.kick = true;
}

void dp_adm_woken(struct dp_loop *loop)
{
    loop->adm.kick = true;
}

/* ---- keys and limits -------------------------------------------------------- */

static void adm_reject(struct dp_request *req, int status, enum dp_adm_reason why,
                       uint32_t retry_after_s, const char *code, const char *msg)
{
    req->adm.rejected = dp_adm_reason_name(why);
    req->retry_after_s = retry_after_s;
    dp_adm_metrics_rejected(req->loop->sh->adm.metrics, req->adm.tenant, why);
    req->loop->adm.ops->reply(req, status, code, msg);
}

/* The client's key: Authorization: Bearer (OpenAI's convention) or, when
 * that header is absent, x-api-key (Anthropic's, which its SDKs send). */
static const struct dp_tenant *adm_match_client_key(const struct dp_request *req,
                                                    const struct dp_keys *keys, bool *sent)
{
    const char *auth = NULL, *api_key = NULL;
    if (req->conn != NULL) {
        auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Authorization");
        if (auth == NULL)
            api_key = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "x-api-key");
    }
    *sent = auth != NULL || api_key != NULL;
    return auth != NULL ? dp_keys_match(keys, auth) : dp_keys_match_key(keys, api_key);
}

bool dp_adm_authenticate(struct dp_request *req)
{
    if (req->adm.authenticated)
        return true;
    struct dp_adm_loop *a = &req->loop->adm;
    req->adm.max_tokens = -1;
    req->adm.choices = 1;
    req->adm.prio = DP_PRIO_NORMAL;
    if (!a->keys_on) {
        snprintf(req->adm.tenant, sizeof(req->adm.tenant), "%s", DP_ADM_ANONYMOUS);
        req->adm.authenticated = true;
        return true;
    }
    bool sent = false;
    const struct dp_tenant *t = adm_match_client_key(req, &a->keys, &sent);
    if (t == NULL) {
        snprintf(req->adm.tenant, sizeof(req->adm.tenant), "%s", "unknown");
        /* No Retry-After: waiting does not make a key valid. */
        adm_reject(req, 401, DP_ADM_REASON_UNAUTHORIZED, 0, "invalid_api_key",
                   !sent ? "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: "
                           "<key>'"
                         : "incorrect API key provided");
        return false;
    }
    snprintf(req->adm.tenant, sizeof(req->adm.tenant), "%s", t->name);
    req->adm.tenant_hash = shm_buckets_key(t->name);
    req->adm.prio = t->priority;
    req->adm.requests_per_s = t->requests_per_s;
    req->adm.burst = t->burst;
    req->adm.tokens_per_min = t->tokens_per_min;
    req->adm.cache_isolation = t->cache_isolation;
    req->adm.authenticated = true;
    return true;
}

/* The token estimate of a request: prompt bytes / 4 plus the output cap
 * of every choice. */
static uint64_t adm_token_cost(const struct dp_request *req)
{
    uint64_t c = req->routing_text.len / 4;
    uint64_t choices = req->adm.choices > 0 ? req->adm.choices : 1;
    if (req->adm.max_tokens > 0) {
        uint64_t out = (uint64_t)req->adm.max_tokens;
        /* Saturating: the take clamps a cost to the bucket's capacity. */
        c = out > (UINT64_MAX - c) / choices ? UINT64_MAX : c + out * choices;
    }
    return c > 0 ? c : 1;
}

/* The tenant's bucket limits (capacity 0 = that limit is off). */
static void adm_limits_of(const struct dp_request *req, struct shm_bucket_limit *lim)
{
    struct shm_bucket_limit *tok = &lim[SHM_BUCKET_TOKENS], *rq = &lim[SHM_BUCKET_REQUESTS];
    if (req->adm.tokens_per_min > 0) {
        /* One token every 60e6 / tokens_per_min us, rounded up (at least 1 us). */
        tok->interval_us = (60000000 + req->adm.tokens_per_min - 1) / req->adm.tokens_per_min;
        tok->capacity = req->adm.tokens_per_min;
    }
    if (req->adm.requests_per_s > 0) {
        rq->interval_us = (uint64_t)ceil(1e6 / req->adm.requests_per_s);
        rq->capacity = req->adm.burst;
    }
}

static bool adm_has_limits(const struct dp_request *req)
{
    return req->loop->sh->adm.buckets_ok &&
           (req->adm.requests_per_s > 0 || req->adm.tokens_per_min > 0);
}

static void adm_reject_rate(struct dp_request *req, uint64_t wait_us)
{
    uint32_t secs = (uint32_t)((wait_us + 999999) / 1000000);
    char msg[160];
    snprintf(msg, sizeof(msg), "rate limit of tenant '%s' reached: retry in %u s", req->adm.tenant,
             secs);
    adm_reject(req, 429, DP_ADM_REASON_RATE_LIMIT, secs, "rate_limit_exceeded", msg);
}

static bool adm_rate_limit(struct dp_request *req)
{
    struct dp_adm_shared *s = &req->loop->sh->adm;
    if (!adm_has_limits(req))
        return true;
    uint64_t now = proc_monotonic_ms() * 1000;
    struct shm_bucket_limit lim[SHM_BUCKET_KINDS] = {{0}};
    adm_limits_of(req, lim);
    struct shm_bucket_limit *tok = &lim[SHM_BUCKET_TOKENS], *rq = &lim[SHM_BUCKET_REQUESTS];
    dp_adm_metrics_limits(s->metrics, req->adm.tenant, req->adm.tenant_hash, lim);
    uint64_t cost = adm_token_cost(req), wait_us = 0;
    if (tok->capacity > 0)
        wait_us =
            shm_buckets_take(&s->buckets, req->adm.tenant_hash, SHM_BUCKET_TOKENS, tok, cost, now);
    if (wait_us == 0 && rq->capacity > 0) {
        wait_us =
            shm_buckets_take(&s->buckets, req->adm.tenant_hash, SHM_BUCKET_REQUESTS, rq, 1, now);
        if (wait_us != 0 && tok->capacity > 0)
            shm_buckets_refund(&s->buckets, req->adm.tenant_hash, SHM_BUCKET_TOKENS, tok, cost);
    }
    if (wait_us == 0)
        return true;
    adm_reject_rate(req, wait_us);
    return false;
}

/* At the headers the cost is unknown: a bucket holding not even one unit
 * refuses now, before the body is read; the take comes with the body. */
static bool adm_rate_peek(struct dp_request *req)
{
    if (!adm_has_limits(req))
        return true;
    const struct shm_buckets *b = &req->loop->sh->adm.buckets;
    uint64_t now = proc_monotonic_ms() * 1000;
    struct shm_bucket_limit lim[SHM_BUCKET_KINDS] = {{0}};
    adm_limits_of(req, lim);
    for (int kind = 0; kind < SHM_BUCKET_KINDS; kind++) {
        if (lim[kind].capacity == 0)
            continue;
        if (shm_buckets_available(b, req->adm.tenant_hash, (enum shm_bucket_kind)kind, &lim[kind],
                                  now) == 0) {
            adm_reject_rate(req, lim[kind].interval_us);
            return false;
        }
    }
    return true;
}

bool dp_adm_screen(struct dp_request *req)
{
    return dp_adm_authenticate(req) && adm_rate_peek(req);
}

/* A client credential header line ("authorization:" or "x-api-key:"). */
static bool adm_is_client_key_line(const char *line)
{
    return strncasecmp(line, "authorization:", 14) == 0 || strncasecmp(line, "x-api-key:", 10) == 0;
}

/* The upstream headers: no client key toward workers when keys are ours
 * (neither OpenAI's Authorization nor Anthropic's x-api-key);
 * the worker key when one is configured. Edited in place: other modules
 * keep pointers to their own lines of the list (the trace context's
 * traceparent, rewritten for every attempt), so it must not be rebuilt. */
static int adm_rewrite_auth(struct dp_request *req)
{
    const struct dp_adm_loop *a = &req->loop->adm;
    bool set_key = a->upstream_key[0] != '\0';
    if (!a->keys_on && !set_key)
        return 0;
    struct curl_slist **link = &req->up_headers;
    while (*link != NULL) {
        struct curl_slist *it = *link;
        /* Without a keys file a client's own Authorization is the
         * workers' business (vLLM's --api-key) and only the worker key
         * replaces it. */
        bool strip = a->keys_on ? adm_is_client_key_line(it->data)
                                : strncasecmp(it->data, "authorization:", 14) == 0;
        if (!strip) {
            link = &it->next;
            continue;
        }
        *link = it->next;
        it->next = NULL;
        explicit_bzero(it->data, strlen(it->data)); /* the client's key */
        curl_slist_free_all(it);
    }
    if (set_key) {
        char line[DP_UPSTREAM_KEY_MAX + 32];
        snprintf(line, sizeof(line), "Authorization: Bearer %s", a->upstream_key);
        struct curl_slist *nl = curl_slist_append(req->up_headers, line);
        explicit_bzero(line, sizeof(line));
        if (nl == NULL)
            return -ENOMEM;
        req->up_headers = nl;
    }
    return 0;
}

bool dp_adm_limit(struct dp_request *req)
{
    if (adm_rewrite_auth(req) != 0) {
        req->loop->adm.ops->reply(req, 500, "out_of_memory", "the router is out of memory");
        return false;
    }
    if (!adm_rate_limit(req))
        return false;
    dp_adm_metrics_admitted(req->loop->sh->adm.metrics, req->adm.tenant);
    return true;
}

/* ---- saturation ------------------------------------------------------------- */

bool dp_adm_checks_saturation(const struct dp_loop *loop)
{
    const struct cfg_admission *a = &loop->sh->cfg->admission;
    return a->max_inflight_per_worker != 0 || a->max_waiting_per_worker != 0 || a->max_kv_usage > 0;
}

bool dp_adm_worker_is_saturated(const struct cfg_admission *a, uint64_t load,
                                const struct shm_load_report *fresh)
{
    if (a->max_inflight_per_worker != 0 && load >= a->max_inflight_per_worker)
        return true;
    /* A stale or absent report saturates nothing: routing falls back to
     * this node's own count, and so does admission (never fail closed). */
    if (fresh == NULL)
        return false;
    if (a->max_waiting_per_worker != 0 && fresh->waiting >= a->max_waiting_per_worker)
        return true;
    return a->max_kv_usage > 0 && fresh->kv_cache_usage >= a->max_kv_usage;
}

size_t dp_adm_filter_saturated(const struct dp_loop *loop, struct pol_candidate *cands, size_t n)
{
    const struct cfg *cfg = loop->sh->cfg;
    const struct cfg_admission *a = &cfg->admission;
    bool by_report = a->max_waiting_per_worker != 0 || a->max_kv_usage > 0;
    const struct shm_el_params *elp = &loop->sh->metrics.load; /* set once at start */
    uint64_t now = by_report ? proc_wall_ms() : 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct shm_load_report r;
        const struct shm_load_report *fresh = NULL;
        if (by_report && elp->reports_on &&
            shm_load_report_read(loop->sh->seg, cands[i].worker->slot, cands[i].worker->generation,
                                 &r) == 0 &&
            now <= r.unix_ms + elp->stale_after_ms)
            fresh = &r;
        if (!dp_adm_worker_is_saturated(a, cands[i].load, fresh))
            cands[k++] = cands[i];
    }
    return k;
}

bool dp_adm_confirm(const struct dp_loop *loop, uint32_t slot, uint32_t generation)
{
    uint32_t max = loop->sh->cfg->admission.max_inflight_per_worker;
    if (max == 0)
        return true;
    atomic_thread_fence(memory_order_seq_cst);
    return shm_load_of(loop->sh->seg, slot, generation) <= max;
}
