/*
 * Control-plane lifecycle and main loop (see controlplane.h). The loop is a
 * single epoll set: the signalfd, the heartbeat timerfd, and one descriptor
 * per part (the health prober's curl sockets, the admin API's MHD epoll
 * set, the admin channel's sockets), each itself an epoll set. After every
 * wake-up each part runs its ready work; epoll_wait's timeout is the
 * nearest deadline any part reports. One thread: the registry has exactly
 * one writer and nothing needs a lock.
 */
#include "controlplane/controlplane.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/evfd.h"
#include "common/log.h"
#include "common/proc.h"
#include "controlplane/admin/admin_channel.h"
#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_http.h"
#include "controlplane/admin/decisions.h"
#include "controlplane/probes/health_prober.h"
#include "controlplane/kv/kv_apply.h"
#include "controlplane/kv/kv_subscriber.h"
#include "controlplane/lease_reaper.h"
#include "controlplane/probes/load_reports.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/admin/reload.h"
#include "controlplane/admin/reset_load.h"
#include "controlplane/sources/source_kubernetes.h"
#include "controlplane/sources/source_static.h"
#include "shm/kv_holders.h"
#include "shm/load_report.h"
#include "shm/prefix_index.h"
#include "shm/registry.h"
#include "shm/segment.h"

/*
 * Where the workers' KV-cache events go (kv_events.h): to the holder index
 * (kv_apply.h) when the node has one; without it (the .kvholders segment
 * could not be opened) they are only counted, so that the subscriber's
 * metrics still tell an operator what the workers publish. Called on the
 * subscriber's thread.
 */
struct cp_kv_count {
    _Atomic uint64_t batches;
    _Atomic uint64_t forgets;
};

static void cp_kv_count_batch(void *ctx, uint32_t slot, const char *worker_id,
                              const struct kv_event_batch *batch)
{
    struct cp_kv_count *c = ctx;
    (void)slot;
    (void)worker_id;
    (void)batch;
    atomic_fetch_add_explicit(&c->batches, 1, memory_order_relaxed);
}

static void cp_kv_count_forget(void *ctx, uint32_t slot, const char *worker_id)
{
    struct cp_kv_count *c = ctx;
    (void)slot;
    (void)worker_id;
    atomic_fetch_add_explicit(&c->forgets, 1, memory_order_relaxed);
}

static struct kv_event_sink cp_kv_events_sink(struct cp_kv_count *count)
{
    return (struct kv_event_sink){
        .ctx = count, .on_batch = cp_kv_count_batch, .on_forget = cp_kv_count_forget};
}

struct cp_daemon {
    const struct cfg *cfg; /* the config in force: borrowed at start, then reloaded */
    struct cfg *reloaded;  /* owned: the last reloaded config (cfg points to it), or NULL */
    /* The config the running data planes started with, as far as the
     * control plane can tell: cfg, or an older one still owned here
     * (dp_base_owned) while a data plane older than the reload runs. */
    const struct cfg *dp_base;
    struct cfg *dp_base_owned;
    uint64_t reload_ticks; /* boot ticks of the last reload (0: none) */
    struct shm_segment seg;
    struct cp_registry reg;       /* the registry's writer over seg (registry_sync.h) */
    struct pix_index *prefix;     /* the node's prefix index segment; NULL if none */
    struct kvh_index *kv_holders; /* the node's KV holder index segment; NULL if none */
    /* Applies the workers' KV-cache events to kv_holders (its sink is what
     * the event subscriber calls); NULL without kv_holders. */
    struct kv_apply *kv_apply;
    struct cp_lease_reaper reaper;
    struct adm_ctx ctx;
    int epfd;
    int sigfd;
    int tickfd;
    /* KV-cache events: the subscriber (made when a first worker has
     * kv_events) and what it was last told (see cp_kv_follow). */
    struct kv_subscriber *kvs;
    struct cp_kv_count kv_count;
    bool kvs_told;
    uint64_t kvs_registry_changes;
    uint64_t kvs_kv_version;
};

static const char *cp_outcome_name(enum shm_open_outcome o)
{
    switch (o) {
    case SHM_OPEN_CREATED:
        return "created";
    case SHM_OPEN_REATTACHED:
        return "re-attached";
    case SHM_OPEN_REPLACED:
        return "replaced a half-created";
    default:
        return "opened";
    }
}

/*
 * Creates (or keeps) the node's prefix index segment, "<shm.name>.prefix".
 * Here, holding the registry's owner lock, so no other control plane can
 * replace it under us; and before the registry is marked synced, which is
 * what data planes wait for before they attach it. It is a cache: a failure
 * to create it costs affinity, not service, so only a name squatted by
 * someone else (-EPERM, the registry's own rule) stops the start.
 */
static int cp_open_prefix_index(struct cp_daemon *d)
{
    char name[CFG_PATH_MAX + sizeof(PIX_NAME_SUFFIX)];
    char err[512] = "";
    enum pix_open_outcome outcome = PIX_OPEN_UNSET;
    int rc = pix_segment_name(d->cfg->shm.name, name, sizeof(name));
    if (rc != 0) {
        log_warn("shm.name %s is too long to add %s: no shared prefix index (data planes keep "
                 "their own)",
                 d->cfg->shm.name, PIX_NAME_SUFFIX);
        return 0;
    }
    rc = pix_open_owner(name, d->cfg->shm.prefix_index_blocks, &d->prefix, &outcome, err,
                        sizeof(err));
    if (rc == -EPERM) {
        log_error("%s: %s", d->cfg->path, err);
        return rc;
    }
    if (rc != 0) {
        log_warn("prefix index: %s; data planes keep their own", err);
        d->prefix = NULL;
        return 0;
    }
    if (outcome == PIX_OPEN_REPLACED)
        log_warn("%s", err);
    log_info("%s prefix index segment %s (layout version %u, %zu blocks, %zu bytes)",
             outcome == PIX_OPEN_REATTACHED ? "re-attached" : "created", name, PIX_LAYOUT_VERSION,
             pix_capacity(d->prefix), pix_memory_bytes(d->prefix));
    return 0;
}

/* kva_model_fn: a worker's registry model, read from its slot (any thread:
 * the slot is seqlocked). The id check keeps a reused slot's events from
 * being seeded with its new occupant's model. */
static int cp_worker_model(void *arg, uint32_t slot, const char *worker_id, char *out, size_t len)
{
    struct cp_daemon *d = arg;
    struct shm_worker_info w;
    int rc = shm_registry_read_slot(&d->seg, slot, &w);
    if (rc != 0)
        return rc;
    if (worker_id != NULL && strcmp(worker_id, w.id) != 0)
        return -ESTALE;
    if (w.model[0] == '\0')
        return -ENOENT; /* not known yet (discovered from /v1/models) */
    snprintf(out, len, "%s", w.model);
    return 0;
}

/*
 * Creates (or keeps, emptied) the node's KV holder index segment,
 * "<shm.name>.kvholders", under the same lock and rules as the prefix
 * index: the facts precise_cache_aware routes on, written from the
 * workers' KV-cache events. Without it that policy falls back to
 * cache_aware's guesses, so only -EPERM stops the start.
 */
static int cp_open_kv_holders(struct cp_daemon *d)
{
    char name[CFG_PATH_MAX + sizeof(KVH_NAME_SUFFIX)];
    char err[512] = "";
    bool replaced = false;
    if (kvh_segment_name(d->cfg->shm.name, name, sizeof(name)) != 0) {
        log_warn("shm.name %s is too long to add %s: no KV holder index (precise_cache_aware "
                 "routes by cache_aware's approximate match)",
                 d->cfg->shm.name, KVH_NAME_SUFFIX);
        return 0;
    }
    int rc = kvh_open_owner(name, d->cfg->shm.kv_index_blocks, &d->kv_holders, &replaced, err,
                            sizeof(err));
    if (rc == -EPERM) {
        log_error("%s: %s", d->cfg->path, err);
        return rc;
    }
    if (rc != 0) {
        log_warn("KV holder index: %s; precise_cache_aware routes by approximate match", err);
        d->kv_holders = NULL;
        return 0;
    }
    if (replaced)
        log_warn("%s", err);
    log_info("opened KV holder index segment %s (%zu facts, %zu bytes, starting empty)", name,
             kvh_capacity(d->kv_holders), kvh_memory_bytes(d->kv_holders));
    /* A worker's map needs no more entries than the index has facts. */
    d->kv_apply =
        kva_create(d->kv_holders, d->cfg->policy.precise_cache_aware.block_size,
                   d->cfg->shm.max_workers, kvh_capacity(d->kv_holders), cp_worker_model, d);
    if (d->kv_apply == NULL)
        log_warn("KV holder index: out of memory for the event maps; KV events are not applied");
    return 0;
}

static int cp_open_segment(struct cp_daemon *d)
{
    char err[512];
    enum shm_open_outcome outcome = SHM_OPEN_UNSET;
    int rc = shm_segment_open_owner(&d->seg, d->cfg->shm.name, d->cfg->shm.max_workers,
                                    d->cfg->shm.max_dataplanes, &outcome, err, sizeof(err));
    if (rc != 0) {
        log_error("%s: %s", d->cfg->path, err);
        return rc;
    }
    uint64_t epoch = shm_segment_epoch(&d->seg);
    log_info("%s segment %s (layout version %u, %zu bytes, epoch %llu)", cp_outcome_name(outcome),
             d->seg.name, SHM_LAYOUT_VERSION, d->seg.size, (unsigned long long)epoch);
    if (outcome == SHM_OPEN_REATTACHED) {
        int repaired = shm_registry_repair(&d->seg);
        if (repaired > 0)
            log_warn("repaired %d worker slot(s) left half-written by the previous control plane",
                     repaired);
        int ended = shm_registry_end_interrupted_resets(&d->seg);
        if (ended > 0)
            log_warn("ended the reset_load drain of %d worker(s): the previous control plane "
                     "stopped during a reset, which changed no load",
                     ended);
        int dropped = shm_load_report_repair(&d->seg);
        if (dropped > 0)
            log_warn("dropped %d load report(s) left half-written by the previous control plane",
                     dropped);
    }
    rc = cp_open_prefix_index(d);
    if (rc != 0)
        return rc;
    rc = cp_open_kv_holders(d);
    if (rc != 0)
        return rc;
    rc = cp_source_static_sync(&d->reg, d->cfg, err, sizeof(err));
    if (rc != 0)
        log_error("%s", err);
    else
        shm_registry_mark_synced(&d->seg);
    /* The config's workers start healthy; whatever comes later obeys health.initial. */
    cp_registry_set_start_healthy(&d->reg,
                                  strcmp(d->cfg->controlplane.health.initial, "healthy") == 0);
    return rc;
}

/* SIGHUP and POST /reload (adm_reload_fn). The config it replaces stays
 * alive until the next reload only if it was itself reloaded: the one from
 * the command line is daemon_main's and outlives the loop. */
static int cp_watch(struct cp_daemon *d, int fd);

/*
 * A reload changed discovery.*: the source is made anew from next (its
 * first list re-syncs its workers; those that still match keep their slots
 * and generations, as across a control-plane restart). When the new
 * settings do not work (a token file gone, say) discovery stops, its
 * workers stay as they are, and the log says why.
 */
static void cp_restart_discovery(struct cp_daemon *d, const struct cfg *next)
{
    if (d->ctx.kube != NULL) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, cp_kube_fd(d->ctx.kube), NULL);
        cp_kube_destroy(d->ctx.kube);
        d->ctx.kube = NULL;
    }
    if (!next->discovery.kubernetes.enabled)
        return;
    char err[512] = "";
    int rc = cp_kube_create(&d->reg, next, &d->ctx.kube, err, sizeof(err));
    if (rc == 0 && (rc = cp_watch(d, cp_kube_fd(d->ctx.kube))) != 0) {
        snprintf(err, sizeof(err), "watching its descriptor: %s", strerror(-rc));
        cp_kube_destroy(d->ctx.kube);
        d->ctx.kube = NULL;
    }
    if (rc != 0)
        log_error("reload: Kubernetes discovery stopped, its workers are kept as they are: %s",
                  err);
}

/* True when every live data plane started after the last reload: they all
 * read the config in force. One started in the reload's own clock tick
 * (10 ms) may have read the file before it: counted as older. */
static bool cp_dataplanes_run_current(const struct cp_daemon *d)
{
    for (uint32_t i = 0; i < d->seg.max_dataplanes; i++) {
        struct shm_lease_info l;
        shm_lease_snapshot(&d->seg, i, &l);
        if (l.active && l.start_time <= d->reload_ticks)
            return false;
    }
    return true;
}

static void cp_drop_dp_base(struct cp_daemon *d)
{
    if (d->dp_base_owned != NULL && d->dp_base_owned != d->reloaded) {
        cfg_fini(d->dp_base_owned);
        free(d->dp_base_owned);
    }
    d->dp_base_owned = NULL;
    d->dp_base = d->cfg;
}

static int cp_reload_now(void *arg, char *msg, size_t msg_len)
{
    struct cp_daemon *d = arg;
    struct cfg *next = NULL;
    bool discovery_changed = false;
    if (d->dp_base != d->cfg && cp_dataplanes_run_current(d))
        cp_drop_dp_base(d);
    int rc =
        cp_reload(d->cfg, d->dp_base, &d->reg, d->ctx.hc, &next, &discovery_changed, msg, msg_len);
    if (rc != 0) {
        log_warn("%s", msg);
        return rc;
    }
    /* Before the old config can be freed: nothing may point into it. */
    if (discovery_changed)
        cp_restart_discovery(d, next);
    else
        cp_kube_set_cfg(d->ctx.kube, next);
    struct cfg *old = d->reloaded;
    d->cfg = next;
    d->ctx.cfg = next;
    d->reloaded = next;
    d->reload_ticks = proc_boot_ticks_now();
    /* The old config stays while it is what the data planes run. */
    if (old != NULL && old == d->dp_base)
        d->dp_base_owned = old;
    else if (old != NULL) {
        cfg_fini(old);
        free(old);
    }
    log_info("%s", msg);
    return 0;
}

static int cp_watch(struct cp_daemon *d, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

static void cp_tick(struct cp_daemon *d)
{
    evfd_timer_read(d->tickfd);
    shm_segment_heartbeat(&d->seg);
    cp_lease_reaper_tick(&d->reaper, proc_monotonic_ms());
}

static bool cp_channel_lost(void *arg, uint32_t lease, uint64_t nonce)
{
    struct cp_daemon *d = arg;
    return d->ctx.chan != NULL && adm_chan_is_lost(d->ctx.chan, lease, nonce, NULL);
}

static int cp_min_timeout(int a, int b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return a < b ? a : b;
}

/*
 * Keeps the KV-event subscriber following the registry: every worker whose
 * source gave it kv_events (cp_registry_kv_events) is subscribed, with '*'
 * or an empty host resolved to the worker's url host; workers that left are
 * forgotten by the subscriber. Cheap when nothing changed.
 */
static void cp_kv_follow(struct cp_daemon *d)
{
    uint64_t changes = shm_registry_changes(&d->seg);
    uint64_t version = cp_registry_kv_version(&d->reg);
    if (d->kvs_told && changes == d->kvs_registry_changes && version == d->kvs_kv_version)
        return;
    if (d->kvs == NULL && version == 0)
        return; /* no worker ever had kv_events */
    struct shm_worker_info *all = calloc(d->seg.max_workers + 1, sizeof(*all));
    struct kvs_worker_spec *specs = calloc(d->seg.max_workers + 1, sizeof(*specs));
    if (all == NULL || specs == NULL)
        goto out_free;
    size_t n = shm_registry_snapshot(&d->seg, all, d->seg.max_workers), k = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cfg_kv_events *kv =
            cp_registry_kv_events(&d->reg, all[i].slot, all[i].generation);
        if (kv == NULL)
            continue;
        struct kvs_worker_spec *s = &specs[k];
        s->slot = all[i].slot;
        s->generation = all[i].generation;
        snprintf(s->id, sizeof(s->id), "%s", all[i].id);
        s->data_parallel_size = kv->data_parallel_size;
        if (kvs_resolve_endpoint(kv->endpoint, all[i].url, s->endpoint, sizeof(s->endpoint)) != 0 ||
            (kv->replay_endpoint[0] != '\0' &&
             kvs_resolve_endpoint(kv->replay_endpoint, all[i].url, s->replay_endpoint,
                                  sizeof(s->replay_endpoint)) != 0)) {
            log_warn("kv events: worker %s: endpoint %s cannot be used with url %s", s->id,
                     kv->endpoint, all[i].url);
            continue;
        }
        k++;
    }
    if (d->kvs == NULL) {
        struct kv_event_sink sink =
            d->kv_apply != NULL ? kva_sink(d->kv_apply) : cp_kv_events_sink(&d->kv_count);
        int rc = kvs_create(&sink, NULL, &d->kvs);
        if (rc != 0) {
            log_error("kv events: cannot start the subscriber: %s", strerror(-rc));
            d->kvs = NULL;
            goto out_free;
        }
        d->ctx.kvs = d->kvs;
    }
    if (kvs_set_workers(d->kvs, specs, k) == 0) {
        d->kvs_told = true;
        d->kvs_registry_changes = changes;
        d->kvs_kv_version = version;
    }
out_free:
    free(all);
    free(specs);
}

/* Runs every part's ready work; returns the epoll_wait timeout. */
static int cp_run_parts(struct cp_daemon *d)
{
    cp_kv_follow(d);
    uint64_t now = proc_monotonic_ms();
    adm_chan_run(d->ctx.chan, now);
    adm_http_run(d->ctx.http);
    hc_run(d->ctx.hc, now);
    lr_run(d->ctx.lr, proc_monotonic_ms());
    cp_reset_run(d->ctx.reset, proc_monotonic_ms());
    if (d->ctx.kube != NULL)
        cp_kube_run(d->ctx.kube, proc_monotonic_ms());
    cp_decisions_run(d->ctx.decisions, d->ctx.cfg, proc_monotonic_ms());
    now = proc_monotonic_ms();
    int t = hc_timeout_ms(d->ctx.hc, now);
    t = cp_min_timeout(t, lr_timeout_ms(d->ctx.lr, now));
    t = cp_min_timeout(t, adm_http_timeout_ms(d->ctx.http));
    t = cp_min_timeout(t, cp_reset_timeout_ms(d->ctx.reset, now));
    if (d->ctx.kube != NULL)
        t = cp_min_timeout(t, cp_kube_timeout_ms(d->ctx.kube, now));
    t = cp_min_timeout(t, cp_decisions_timeout_ms(d->ctx.decisions, now));
    return t;
}

static int cp_start_parts(struct cp_daemon *d)
{
    d->ctx.cfg = d->cfg;
    d->ctx.seg = &d->seg;
    d->ctx.reg = &d->reg;
    d->ctx.started_ms = proc_monotonic_ms();
    d->ctx.reload = cp_reload_now;
    d->ctx.reload_arg = d;
    if (d->kv_apply != NULL) {
        d->ctx.kv_metrics = kva_metrics_write;
        d->ctx.kv_metrics_arg = d->kv_apply;
    }
    int rc = cp_reset_create(&d->ctx, &d->ctx.reset);
    if (rc == 0)
        rc = cp_decisions_create(&d->ctx.decisions);
    if (rc == 0)
        rc = hc_create(&d->seg, &d->cfg->controlplane.health, &d->ctx.hc);
    if (rc == 0)
        hc_set_upstream_tls(d->ctx.hc, &d->cfg->dataplane.upstream_tls);
    if (rc == 0)
        rc = lr_create(&d->seg, &d->cfg->controlplane.load_reports, &d->ctx.lr);
    if (rc == 0)
        lr_set_upstream_tls(d->ctx.lr, &d->cfg->dataplane.upstream_tls);
    /* Under precise_cache_aware, each worker's block size must be the one
     * requests are hashed with: its /metrics page says which it uses. */
    const struct cfg_policy *pol = &d->cfg->policy;
    if (rc == 0 && (pol->name == CFG_POLICY_PRECISE_CACHE_AWARE ||
                    pol->prefill.name == CFG_POLICY_PRECISE_CACHE_AWARE ||
                    pol->decode.name == CFG_POLICY_PRECISE_CACHE_AWARE))
        lr_expect_block_size(d->ctx.lr, pol->precise_cache_aware.block_size);
    if (rc == 0)
        rc = adm_chan_create(d->cfg->controlplane.admin_socket, &d->seg, cp_reset_on_reply,
                             d->ctx.reset, &d->ctx.chan);
    if (rc == 0)
        rc = adm_http_create(&d->ctx, &d->ctx.http);
    if (rc == 0 && d->cfg->discovery.kubernetes.enabled) {
        char err[512] = "";
        rc = cp_kube_create(&d->reg, d->cfg, &d->ctx.kube, err, sizeof(err));
        if (rc != 0)
            log_error("%s: %s", d->cfg->path, err);
        else
            rc = cp_watch(d, cp_kube_fd(d->ctx.kube));
    }
    if (rc != 0)
        return rc;
    cp_lease_reaper_set_channel(&d->reaper, cp_channel_lost, d);
    if ((rc = cp_watch(d, hc_fd(d->ctx.hc))) != 0 || (rc = cp_watch(d, lr_fd(d->ctx.lr))) != 0 ||
        (rc = cp_watch(d, adm_chan_fd(d->ctx.chan))) != 0 ||
        (rc = cp_watch(d, adm_http_fd(d->ctx.http))) != 0 ||
        (rc = cp_watch(d, cp_decisions_fd(d->ctx.decisions))) != 0)
        log_error("setting up the event loop: %s", strerror(-rc));
    return rc;
}

static void cp_stop_parts(struct cp_daemon *d)
{
    /* The reset answers its suspended request before the HTTP server goes. */
    cp_reset_destroy(d->ctx.reset);
    d->ctx.reset = NULL;
    cp_decisions_destroy(d->ctx.decisions);
    d->ctx.decisions = NULL;
    adm_http_destroy(d->ctx.http);
    cp_kube_destroy(d->ctx.kube);
    adm_chan_destroy(d->ctx.chan);
    hc_destroy(d->ctx.hc);
    lr_destroy(d->ctx.lr);
    kvs_destroy(d->kvs);
    d->kvs = NULL;
    memset(&d->ctx, 0, sizeof(d->ctx));
}

static int cp_loop(struct cp_daemon *d)
{
    for (;;) {
        struct epoll_event evs[16];
        int timeout = cp_run_parts(d);
        int n = epoll_wait(d->epfd, evs, 16, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            log_error("epoll_wait: %s", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == d->tickfd) {
                cp_tick(d);
            } else if (fd == d->sigfd) {
                int sig = evfd_signals_read(d->sigfd);
                if (sig == SIGHUP) {
                    char msg[2048];
                    log_info("received SIGHUP: reloading %s", d->cfg->path);
                    cp_reload_now(d, msg, sizeof(msg));
                } else if (sig == SIGTERM || sig == SIGINT) {
                    log_info("received %s, shutting down (segment %s stays for the dataplanes)",
                             strsignal(sig), d->seg.name);
                    return 0;
                }
            }
        }
    }
}

int cp_run(const struct cfg *cfg)
{
    struct cp_daemon d = {.cfg = cfg, .dp_base = cfg, .epfd = -1, .sigfd = -1, .tickfd = -1};
    int code = 1;
    d.sigfd = evfd_signals_open();
    if (d.sigfd < 0) {
        log_error("signalfd: %s", strerror(-d.sigfd));
        return 1;
    }
    cp_registry_init(&d.reg, &d.seg);
    if (cp_open_segment(&d) != 0)
        goto out_close_signals;
    cp_lease_reaper_init(&d.reaper, &d.seg);
    d.tickfd = evfd_timer_open(shm_segment_heartbeat_interval_ms(&d.seg));
    d.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d.tickfd < 0 || d.epfd < 0 || cp_watch(&d, d.tickfd) != 0 || cp_watch(&d, d.sigfd) != 0) {
        log_error("setting up the event loop: %s", strerror(errno));
        goto out_close_loop;
    }
    if (cp_start_parts(&d) != 0)
        goto out_stop_parts;
    /* Reap what died while no control plane was watching before anything else. */
    cp_tick(&d);
    log_info("control plane ready (pid %d, segment %s, %zu configured workers)", (int)getpid(),
             d.seg.name, cfg->n_workers);
    code = cp_loop(&d);

out_stop_parts:
    cp_stop_parts(&d);
out_close_loop:
    if (d.epfd >= 0)
        close(d.epfd);
    if (d.tickfd >= 0)
        close(d.tickfd);
    shm_segment_close(&d.seg);
    if (d.dp_base_owned != NULL && d.dp_base_owned != d.reloaded) {
        cfg_fini(d.dp_base_owned);
        free(d.dp_base_owned);
    }
    if (d.reloaded != NULL) {
        cfg_fini(d.reloaded);
        free(d.reloaded);
    }
out_close_signals:
    cp_registry_fini(&d.reg);
    pix_destroy(d.prefix);
    kva_destroy(d.kv_apply);
    kvh_destroy(d.kv_holders);
    close(d.sigfd);
    return code;
}
