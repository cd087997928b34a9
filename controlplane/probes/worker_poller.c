/*
 * The per-worker poller (see worker_poller.h). A target per registry slot,
 * each with WP_JOBS_MAX job records (easy handle, in-flight flag, due
 * time, body buffer). A job record is the easy handle's CURLOPT_PRIVATE,
 * and names its target and job, so a finished transfer finds its way back
 * without a search. Order of a pass (wp_run): curl's socket events and
 * timer, then the registry (a replaced worker's transfer is removed before
 * its result could be collected), then the finished transfers, then the
 * due jobs.
 */
#include "controlplane/probes/worker_poller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/curl_epoll.h"
#include "common/proc.h"
#include "common/tls_client.h"

#define WP_NO_DEADLINE UINT64_MAX
#define WP_TIMEOUT_CAP 60000

struct wp_job {
    struct wp_poller *p;
    uint32_t slot;
    unsigned job;
    bool in_flight;
    bool truncated;
    uint64_t next_ms;
    CURL *easy;
    CURLSH *dns;     /* the easy handle's own host cache (see wp_easy) */
    struct buf body; /* capped at the job's body_max */
};

struct wp_slot {
    struct wp_target t;
    uint64_t ok;
    uint64_t failed;
    struct wp_job jobs[WP_JOBS_MAX];
};

/* Owned by the control plane loop; dies with wp_destroy. */
struct wp_poller {
    struct shm_segment *seg; /* borrowed */
    struct wp_ops ops;
    const struct cfg_upstream_tls *tls; /* borrowed; NULL = curl's defaults */
    uint64_t timeout_ms;
    struct cep cep;
    int epfd;
    uint64_t registry_seen;
    bool registry_loaded;
    bool scanned;
    struct wp_slot *slots;            /* seg->max_workers, indexed by slot */
    unsigned char *states;            /* the users' state: max_workers x ops.state_size */
    struct shm_worker_info *snapshot; /* scratch for registry rescans */
    bool *seen;                       /* scratch for registry rescans */
};

static void wp_on_done(void *user, CURL *e, CURLcode res);

static size_t wp_collect(char *data, size_t size, size_t n, void *arg)
{
    struct wp_job *j = arg;
    size_t len = size * n;
    if (j->p->ops.body_max[j->job] == 0)
        return len; /* discarded */
    if (buf_append(&j->body, data, len) != 0) {
        j->truncated = true;
        return 0; /* stop the transfer: the user decides what arrived is worth */
    }
    return len;
}

int wp_create(struct shm_segment *seg, const struct wp_ops *ops, uint64_t timeout_ms,
              struct wp_poller **out)
{
    if (ops->n_jobs == 0 || ops->n_jobs > WP_JOBS_MAX || ops->on_done == NULL ||
        ops->on_start == NULL)
        return -EINVAL;
    struct wp_poller *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->seg = seg;
    p->ops = *ops;
    p->timeout_ms = timeout_ms;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->slots = calloc(seg->max_workers, sizeof(*p->slots));
    p->snapshot = calloc(seg->max_workers, sizeof(*p->snapshot));
    p->seen = calloc(seg->max_workers, sizeof(*p->seen));
    p->states = ops->state_size > 0 ? calloc(seg->max_workers, ops->state_size) : NULL;
    if (p->epfd < 0 || p->slots == NULL || p->snapshot == NULL || p->seen == NULL ||
        (ops->state_size > 0 && p->states == NULL) ||
        cep_init(&p->cep, &(struct cep_opts){.epfd = p->epfd, .on_done = wp_on_done, .user = p}) !=
            0) {
        wp_destroy(p);
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < seg->max_workers; s++)
        for (unsigned k = 0; k < WP_JOBS_MAX; k++) {
            struct wp_job *j = &p->slots[s].jobs[k];
            j->p = p;
            j->slot = s;
            j->job = k;
            buf_init(&j->body, ops->body_max[k]);
        }
    *out = p;
    return 0;
}

static void wp_stop(struct wp_poller *p, struct wp_slot *s)
{
    for (unsigned k = 0; k < WP_JOBS_MAX; k++) {
        struct wp_job *j = &s->jobs[k];
        if (j->in_flight)
            cep_remove(&p->cep, j->easy);
        j->in_flight = false;
    }
}

void wp_destroy(struct wp_poller *p)
{
    if (p == NULL)
        return;
    if (p->slots != NULL)
        for (uint32_t i = 0; i < p->seg->max_workers; i++) {
            wp_stop(p, &p->slots[i]);
            for (unsigned k = 0; k < WP_JOBS_MAX; k++) {
                if (p->slots[i].jobs[k].easy != NULL)
                    curl_easy_cleanup(p->slots[i].jobs[k].easy);
                if (p->slots[i].jobs[k].dns != NULL)
                    curl_share_cleanup(p->slots[i].jobs[k].dns);
                buf_fini(&p->slots[i].jobs[k].body);
            }
        }
    cep_fini(&p->cep);
    if (p->epfd >= 0)
        close(p->epfd);
    free(p->slots);
    free(p->snapshot);
    free(p->seen);
    free(p->states);
    free(p);
}

void wp_set_upstream_tls(struct wp_poller *p, const struct cfg_upstream_tls *tls)
{
    p->tls = tls;
}

void wp_set_timeout(struct wp_poller *p, uint64_t timeout_ms)
{
    p->timeout_ms = timeout_ms;
}

void wp_set_path(struct wp_poller *p, unsigned job, const char *path)
{
    if (job < WP_JOBS_MAX)
        p->ops.path[job] = path;
}

int wp_fd(const struct wp_poller *p)
{
    return p->epfd;
}

/* A fresh target for the worker now in w->slot. Keeps the easy handles. */
static void wp_reset(struct wp_poller *p, struct wp_slot *s, const struct shm_worker_info *w,
                     uint64_t now_ms)
{
    wp_stop(p, s);
    s->t.active = true;
    s->ok = 0;
    s->failed = 0;
    s->t.slot = w->slot;
    s->t.generation = w->generation;
    snprintf(s->t.id, sizeof(s->t.id), "%s", w->id);
    snprintf(s->t.url, sizeof(s->t.url), "%s", w->url);
    for (unsigned k = 0; k < WP_JOBS_MAX; k++)
        s->jobs[k].next_ms = now_ms;
    if (p->states != NULL)
        memset(wp_state(p, w->slot), 0, p->ops.state_size);
}

static void wp_follow_registry(struct wp_poller *p, uint64_t now_ms)
{
    uint64_t changes = shm_registry_changes(p->seg);
    if (p->registry_loaded && changes == p->registry_seen)
        return;
    p->registry_loaded = true;
    p->registry_seen = changes;
    size_t n = shm_registry_snapshot(p->seg, p->snapshot, p->seg->max_workers);
    memset(p->seen, 0, p->seg->max_workers * sizeof(*p->seen));
    for (size_t i = 0; i < n; i++) {
        const struct shm_worker_info *w = &p->snapshot[i];
        struct wp_slot *s = &p->slots[w->slot];
        p->seen[w->slot] = true;
        bool fresh =
            !s->t.active || s->t.generation != w->generation || strcmp(s->t.url, w->url) != 0;
        if (fresh)
            wp_reset(p, s, w, now_ms);
        if (p->ops.on_seen != NULL)
            p->ops.on_seen(p->ops.user, &s->t, w, fresh, now_ms);
    }
    for (uint32_t i = 0; i < p->seg->max_workers; i++)
        if (!p->seen[i] && p->slots[i].t.active) {
            wp_stop(p, &p->slots[i]);
            p->slots[i].t.active = false;
        }
    p->scanned = true;
}

static CURL *wp_easy(struct wp_poller *p, struct wp_slot *s, struct wp_job *j)
{
    if (j->easy == NULL) {
        j->easy = curl_easy_init();
        /* libcurl 7.88 walks its whole host cache at the end of every
         * transfer (multi_done -> Curl_hostcache_prune), and a multi
         * handle's cache holds an entry per host:port: a round over N
         * workers cost O(N^2), and at 4,096 workers the control plane
         * could not finish its scrapes and probes in time. Each handle
         * talks to one worker, so each gets a cache of its own (a share
         * of DNS only, used by this thread alone: no lock callbacks). */
        if (j->easy != NULL && j->dns == NULL) {
            j->dns = curl_share_init();
            if (j->dns != NULL &&
                curl_share_setopt(j->dns, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
                curl_share_cleanup(j->dns);
                j->dns = NULL;
            }
        }
        if (j->easy != NULL && j->dns != NULL)
            curl_easy_setopt(j->easy, CURLOPT_SHARE, j->dns);
        /* A check reaches a worker as traffic does: same CA, same client
         * certificate, same verification (tls_client.h). */
        if (j->easy != NULL && p->tls != NULL && tls_client_apply(j->easy, p->tls) != 0) {
            curl_easy_cleanup(j->easy);
            j->easy = NULL;
        }
    }
    CURL *e = j->easy;
    if (e == NULL)
        return NULL;
    char url[CFG_URL_MAX + CFG_PATH_MAX];
    const char *path = p->ops.path[j->job] != NULL ? p->ops.path[j->job] : "";
    snprintf(url, sizeof(url), "%s%s", s->t.url, path);
    long timeout = (long)p->timeout_ms;
    curl_easy_setopt(e, CURLOPT_URL, url); /* curl copies it */
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, wp_collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(e, CURLOPT_PRIVATE, j);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Checks take the path traffic takes: the data plane ignores proxy
     * variables, so a check through http_proxy would judge another path
     * (or send the worker's address to whoever the variable names). */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    return e;
}

static void wp_start_due(struct wp_poller *p, uint64_t now_ms)
{
    for (uint32_t i = 0; i < p->seg->max_workers; i++) {
        struct wp_slot *s = &p->slots[i];
        if (!s->t.active)
            continue;
        for (unsigned k = 0; k < p->ops.n_jobs; k++) {
            struct wp_job *j = &s->jobs[k];
            if (j->in_flight || now_ms < j->next_ms)
                continue;
            j->next_ms = p->ops.on_start(p->ops.user, &s->t, k, now_ms);
            buf_reset(&j->body);
            j->truncated = false;
            CURL *e = wp_easy(p, s, j);
            if (e != NULL && cep_add(&p->cep, e) == 0)
                j->in_flight = true;
        }
    }
}

/* A finished transfer (from cep_collect in wp_run). */
static void wp_on_done(void *user, CURL *e, CURLcode res)
{
    struct wp_poller *p = user;
    struct wp_job *j = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&j);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    cep_remove(&p->cep, e);
    if (j == NULL)
        return;
    j->in_flight = false;
    struct wp_result r = {
        .curl = res,
        .status = code,
        .truncated = j->truncated,
        .body = j->body.data,
        .len = j->body.len,
    };
    struct wp_slot *s = &p->slots[j->slot];
    enum wp_outcome o = p->ops.on_done(p->ops.user, &s->t, j->job, &r);
    s->ok += o == WP_OK;
    s->failed += o == WP_FAILED;
}

void wp_run(struct wp_poller *p, uint64_t now_ms)
{
    struct epoll_event evs[64];
    int n = epoll_wait(p->epfd, evs, 64, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&p->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&p->cep, proc_monotonic_ms());
    /* Registry first: a removed or replaced worker's transfers are dropped
     * before their results could be applied to the slot's next occupant. */
    wp_follow_registry(p, now_ms);
    cep_collect(&p->cep);
    wp_start_due(p, now_ms);
}

bool wp_registry_pending(const struct wp_poller *p)
{
    return !p->registry_loaded || shm_registry_changes(p->seg) != p->registry_seen;
}

int wp_timeout_ms(const struct wp_poller *p, uint64_t now_ms)
{
    if (wp_registry_pending(p))
        return 0;
    int64_t curl_deadline = cep_deadline_ms(&p->cep);
    uint64_t next = curl_deadline < 0 ? WP_NO_DEADLINE : (uint64_t)curl_deadline;
    for (uint32_t i = 0; i < p->seg->max_workers; i++) {
        const struct wp_slot *s = &p->slots[i];
        if (!s->t.active)
            continue;
        for (unsigned k = 0; k < p->ops.n_jobs; k++)
            if (!s->jobs[k].in_flight && s->jobs[k].next_ms < next)
                next = s->jobs[k].next_ms;
    }
    if (next == WP_NO_DEADLINE)
        return -1;
    if (next <= now_ms)
        return 0;
    uint64_t d = next - now_ms;
    return d > WP_TIMEOUT_CAP ? WP_TIMEOUT_CAP : (int)d;
}

uint64_t wp_next(const struct wp_poller *p, uint32_t slot, unsigned job)
{
    if (slot >= p->seg->max_workers || job >= WP_JOBS_MAX)
        return WP_NO_DEADLINE;
    return p->slots[slot].jobs[job].next_ms;
}

void wp_schedule(struct wp_poller *p, uint32_t slot, unsigned job, uint64_t at_ms)
{
    if (slot < p->seg->max_workers && job < WP_JOBS_MAX)
        p->slots[slot].jobs[job].next_ms = at_ms;
}

void *wp_state(const struct wp_poller *p, uint32_t slot)
{
    if (p->states == NULL || slot >= p->seg->max_workers)
        return NULL;
    return p->states + (size_t)slot * p->ops.state_size;
}

const struct wp_target *wp_target(const struct wp_poller *p, uint32_t slot)
{
    return slot < p->seg->max_workers ? &p->slots[slot].t : NULL;
}

bool wp_scanned(const struct wp_poller *p)
{
    return p->scanned;
}

size_t wp_stats(const struct wp_poller *p, struct wp_worker_stats *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < p->seg->max_workers && n < cap; i++) {
        const struct wp_slot *s = &p->slots[i];
        if (!s->t.active)
            continue;
        snprintf(out[n].id, sizeof(out[n].id), "%s", s->t.id);
        out[n].ok = s->ok;
        out[n].failed = s->failed;
        n++;
    }
    return n;
}

uint32_t wp_slots(const struct wp_poller *p)
{
    return p->seg->max_workers;
}
