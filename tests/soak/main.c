/*
 * switchyard-soak: the chaos soak. One router node (a control plane and two
 * data planes on their own ports, sharing the segment) in front of four
 * mock workers plus two spares, under open-loop client traffic
 * (traffic.h), while a scheduler injects faults at random: SIGKILL of a
 * data plane (restarted by a supervisor, as systemd would), hot restarts,
 * SIGKILL and restart of the control plane, worker faults through the
 * mock's /mock/faults (5xx, stalls before and after headers, resets,
 * health flaps), spares added, drained and removed through the admin API,
 * and reset_load requests. Faults overlap: each lasts a while and the next
 * may start before it ends.
 *
 * What must hold (any breach fails the run, exit status 1):
 *  - every failed request is explained by a fault that touched it
 *    (timeline.h); aborts by the client are not failures;
 *  - at every quiescent checkpoint (traffic and faults paused, in-flight
 *    requests finished) each registered worker's load equals its mock's
 *    in-flight count, i.e. 0, and no underflow was ever counted;
 *  - the long-lived data plane (dp0: it takes every fault but kills and
 *    hot restarts, which replace the process and so its RSS and fds) and
 *    the control plane between its restarts do not leak fds, and dp0's
 *    private memory (RssAnon) grows by at most 10% from the first
 *    checkpoint (the warm-up) to the last; its shared-memory pages are
 *    reported (they grow until the fixed-size tables are touched whole).
 * dp1 takes the kills and hot restarts; its figures are reported per
 * process. The report goes to stdout and to --report (markdown).
 *
 * Usage: switchyard-soak [--seconds N] [--checkpoint-every N] [--rate R]
 *                        [--seed S] [--report PATH]
 * The binaries are found in $SWITCHYARD_BUILD_DIR (default build/).
 */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/rng.h"
#include "shm/load.h"
#include "shm/registry.h"
#include "shm/segment.h"
#include "tests/e2e/harness.h"
#include "tests/soak/timeline.h"
#include "tests/soak/traffic.h"

#define SK_MODEL        "mock-model"
#define SK_STATIC       4 /* w1..w4, in the config */
#define SK_SPARES       2 /* s1, s2: added and removed through the API */
#define SK_MOCKS        (SK_STATIC + SK_SPARES)
#define SK_MAX_CKPT     64
#define SK_RESTART_MS   300   /* a supervisor's restart delay (RestartSec) */
#define SK_QUIESCE_MS   30000 /* a checkpoint's deadline for in-flight work */
#define SK_RSS_GROWTH   1.10
#define SK_FD_SLACK     2  /* see sk_check_growth */
#define SK_UPSTREAM_MAX 64 /* idle upstream connections a process may pool */
#define SK_MAX_FAULTED  2  /* static workers faulted at once: two stay routable */

enum sk_spare_state { SK_ABSENT, SK_ADDED, SK_DRAINED };

struct sk_dp {
    struct h_config cfg;
    char base[64];
    struct h_proc *cur, *old; /* old: draining after a hot restart */
    bool down;                /* killed, the supervisor restarts it at restart_at */
    int64_t restart_at;
    long kill_fault, hot_fault;
};

struct sk_worker {
    struct h_mock mock;
    char id[32];
    bool spare;
    enum sk_spare_state state; /* spares only */
    long fault;                /* the active mock fault, or -1 */
    int64_t fault_end;
};

struct sk_ckpt {
    int64_t t_s;
    pid_t dp0_pid, dp1_pid, cp_pid;
    long dp0_rss_kb, dp1_rss_kb, cp_rss_kb;
    /* dp0's RSS split: its private memory (heap, stacks: where a leak
     * shows) and the shared-memory objects it maps (the segment, the
     * response table, the prefix index: fixed sizes whose pages are
     * touched as entries are first written, so they grow until full). */
    long dp0_private_kb, dp0_shared_kb;
    int dp0_fds, cp_fds;           /* all open fds ... */
    int dp0_upstream, cp_upstream; /* ... of which connections to the workers */
    long long max_load;            /* the largest |load - mock in-flight| seen; 0 when it held */
    bool loads_ok;
    unsigned long long underflows;
};

struct sk {
    /* options */
    int seconds, ckpt_every;
    double rate;
    uint64_t seed;
    const char *report_path;
    /* the node */
    struct sk_dp dp[SK_MAX_DP];
    struct h_proc *cp;
    bool cp_down;
    int64_t cp_restart_at;
    long cp_fault;
    struct sk_worker w[SK_MOCKS];
    struct shm_segment seg;
    /* the run */
    struct rng rng;
    struct sk_timeline tl;
    struct sk_traffic *traffic;
    struct sk_failure *fail;
    size_t n_fail;
    struct sk_ckpt ck[SK_MAX_CKPT];
    size_t n_ck;
    char problems[4096]; /* the broken invariants, one per line */
    int64_t t_start;
    unsigned long long gone_underflows; /* counted by data planes since replaced */
};

static void sk_problem(struct sk *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sk_problem(struct sk *s, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "soak: PROBLEM: %s\n", line);
    size_t len = strlen(s->problems);
    snprintf(s->problems + len, sizeof(s->problems) - len, "%s\n", line);
}

static double sk_elapsed_s(const struct sk *s)
{
    return (double)(h_now_ms() - s->t_start) / 1000.0;
}

static void sk_log(const struct sk *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sk_log(const struct sk *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soak %7.1fs: ", sk_elapsed_s(s));
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void sk_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- /proc readings ------------------------------------------------------ */

/* One "Name: N kB" field of /proc/PID/status (VmRSS, RssAnon, RssShmem);
 * -1 when absent. */
static long sk_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (f == NULL)
        return -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, flen) == 0 && line[flen] == ':' &&
            sscanf(line + flen + 1, "%ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* The inodes of pid's TCP sockets connected to one of ports (the mock
 * workers): its upstream connections. Returns how many were found. */
static size_t sk_upstream_inodes(pid_t pid, const uint16_t *ports, size_t n_ports,
                                 unsigned long *inodes, size_t cap)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL && n < cap) {
        unsigned rport = 0;
        unsigned long inode = 0;
        if (sscanf(line, " %*d: %*x:%*x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &rport,
                   &inode) != 2)
            continue;
        for (size_t i = 0; i < n_ports; i++)
            if (ports[i] == rport && inode != 0)
                inodes[n++] = inode;
    }
    fclose(f);
    return n;
}

/* pid's open fds, and of them (in *upstream) its connections to the
 * workers, which libcurl keeps alive in its pool for reuse. */
static int sk_fd_count(const struct sk *s, pid_t pid, int *upstream)
{
    uint16_t ports[SK_MOCKS];
    for (size_t i = 0; i < SK_MOCKS; i++)
        ports[i] = s->w[i].mock.port;
    unsigned long inodes[1024];
    size_t n_inodes = sk_upstream_inodes(pid, ports, SK_MOCKS, inodes, 1024);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    *upstream = 0;
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        char link[320], target[64];
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        unsigned long inode = 0;
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &inode) != 1)
            continue;
        for (size_t i = 0; i < n_inodes; i++)
            if (inodes[i] == inode) {
                (*upstream)++;
                break;
            }
    }
    closedir(d);
    return n;
}

/* ---- admin API and mocks --------------------------------------------------- */

static int sk_admin(struct sk *s, const char *method, const char *path, const char *body,
                    long *status)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)s->dp[0].cfg.admin_port, path);
    struct h_resp r = {0};
    int rc =
        h_http(&(struct h_req){.method = method, .url = url, .body = body, .timeout_ms = 5000}, &r);
    *status = r.status;
    h_resp_fini(&r);
    return rc;
}

/* A data plane's own underflow count (its /metrics, read from its lease).
 * Read before the scheduler kills or replaces it: its lease, and the
 * count in it, go with it. */
static unsigned long long sk_dp_underflows(const struct sk *s, int i)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/metrics", s->dp[i].base);
    struct h_resp r = {0};
    unsigned long long v = 0;
    if (h_http(&(struct h_req){.url = url, .timeout_ms = 2000}, &r) == 0 && r.status == 200) {
        const char *line = strstr(r.body, "\nswitchyard_load_underflows_total ");
        if (line != NULL)
            v = strtoull(line + strlen("\nswitchyard_load_underflows_total "), NULL, 10);
    }
    h_resp_fini(&r);
    return v;
}

static bool sk_admin_up(void *arg)
{
    long st = 0;
    return sk_admin(arg, "GET", "/workers", NULL, &st) == 0 && st == 200;
}

static const char *const SK_CLEAR =
    "{\"fail_status\":0,\"fail_body_hold_ms\":0,\"reset_after_chunks\":0,"
    "\"stall_after_chunks\":0,\"stall_ms\":0,\"stall_before_headers_ms\":0,"
    "\"health_status\":200}";

/* ---- processes ------------------------------------------------------------- */

static int sk_start_dp(struct sk *s, int i)
{
    char bin[H_PATH_MAX];
    int rc = h_bin_path("switchyard-dataplane", bin, sizeof(bin));
    if (rc != 0)
        return rc;
    /* --hot-restart as a service manager would: beside a running data plane
     * it takes over, alone it starts normally. */
    const char *argv[] = {bin, "--config", s->dp[i].cfg.path, "--hot-restart", NULL};
    char name[16];
    snprintf(name, sizeof(name), "dataplane%d", i);
    return h_spawn(name, argv, &s->dp[i].cur);
}

static int sk_wait_dp_ready(struct sk *s, int i)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/health", s->dp[i].base);
    return h_wait_http_ok(url, H_READY_TIMEOUT_MS);
}

static bool sk_attach(void *arg)
{
    struct sk *s = arg;
    char err[256];
    return shm_segment_attach(&s->seg, s->dp[0].cfg.shm_name, err, sizeof(err)) == 0;
}

static int sk_start_node(struct sk *s)
{
    static const char *const mock_args[] = {
        "--model", SK_MODEL, "--seed", "7", "--tpot-ms", "3", "--prefill-base-us", "2000", NULL};
    struct h_config *c0 = &s->dp[0].cfg;
    for (size_t i = 0; i < SK_MOCKS; i++) {
        struct sk_worker *w = &s->w[i];
        w->fault = -1;
        w->spare = i >= SK_STATIC;
        if (w->spare)
            snprintf(w->id, sizeof(w->id), "s%zu", i - SK_STATIC + 1);
        else
            snprintf(w->id, sizeof(w->id), "w%zu", i + 1);
        int rc = h_mock_startv(&w->mock, mock_args);
        if (rc != 0)
            return rc;
        if (!w->spare && (rc = h_config_add_worker(c0, w->mock.url, w->id, SK_MODEL, NULL)) != 0)
            return rc;
    }
    c0->policy = "least_load";
    c0->health_interval = "200ms";
    c0->shm_extra = "max_dataplanes: 16\n";
    c0->dataplane_extra = "debug_headers: true\nfirst_byte_timeout: 20s\nidle_timeout: 20s\n"
                          "drain_timeout: 15s\n"
                          "retry: {max_attempts: 3, backoff: 5ms, backoff_max: 20ms}\n";
    int rc = h_config_write(c0, "dp0.yaml");
    if (rc != 0)
        return rc;
    /* dp1: the same node (segment, admin socket), its own port. */
    s->dp[1].cfg = *c0;
    s->dp[1].cfg.dataplane_port = 0;
    s->dp[1].cfg.path[0] = '\0';
    if ((rc = h_config_write(&s->dp[1].cfg, "dp1.yaml")) != 0)
        return rc;
    if ((rc = h_start_controlplane(c0->path, &s->cp)) != 0)
        return rc;
    if ((rc = h_wait_until(sk_attach, s, H_READY_TIMEOUT_MS)) != 0)
        return rc;
    if ((rc = h_wait_until(sk_admin_up, s, H_READY_TIMEOUT_MS)) != 0)
        return rc;
    for (int i = 0; i < SK_MAX_DP; i++) {
        s->dp[i].kill_fault = s->dp[i].hot_fault = -1;
        h_url(s->dp[i].base, sizeof(s->dp[i].base), s->dp[i].cfg.dataplane_port, NULL);
        if ((rc = sk_start_dp(s, i)) != 0 || (rc = sk_wait_dp_ready(s, i)) != 0)
            return rc;
    }
    s->cp_fault = -1;
    return 0;
}

/* ---- the supervisor: restarts what the scheduler killed, notices what died
 * on its own (a crash is a problem, never a fault) ---------------------------- */

static void sk_supervise(struct sk *s)
{
    int64_t now = h_now_ms();
    for (int i = 0; i < SK_MAX_DP; i++) {
        struct sk_dp *d = &s->dp[i];
        if (d->old != NULL && !h_proc_is_running(d->old)) {
            if (!WIFEXITED(d->old->wait_status) || WEXITSTATUS(d->old->wait_status) != 0)
                sk_problem(s, "dp%d pid %d ended its drain with status 0x%x", i, (int)d->old->pid,
                           d->old->wait_status);
            d->old = NULL;
            sk_timeline_end(&s->tl, d->hot_fault, now);
            d->hot_fault = -1;
        }
        if (!d->down && !h_proc_is_running(d->cur)) {
            sk_problem(s, "dp%d pid %d died on its own (status 0x%x)", i, (int)d->cur->pid,
                       d->cur->wait_status);
            h_proc_print_log(d->cur, 30);
            d->down = true;
            d->restart_at = now;
        }
        if (d->down && now >= d->restart_at) {
            if (sk_start_dp(s, i) != 0 || sk_wait_dp_ready(s, i) != 0) {
                sk_problem(s, "dp%d did not come back after a restart", i);
                d->restart_at = h_now_ms() + 1000;
                continue;
            }
            d->down = false;
            sk_timeline_end(&s->tl, d->kill_fault, h_now_ms());
            d->kill_fault = -1;
        }
    }
    if (!s->cp_down && !h_proc_is_running(s->cp)) {
        sk_problem(s, "the control plane died on its own (status 0x%x)", s->cp->wait_status);
        h_proc_print_log(s->cp, 30);
        s->cp_down = true;
        s->cp_restart_at = now;
    }
    if (s->cp_down && now >= s->cp_restart_at) {
        if (h_start_controlplane(s->dp[0].cfg.path, &s->cp) != 0 ||
            h_wait_until(sk_admin_up, s, H_READY_TIMEOUT_MS) != 0) {
            sk_problem(s, "the control plane did not come back after a restart");
            s->cp_restart_at = h_now_ms() + 1000;
            return;
        }
        s->cp_down = false;
        sk_timeline_end(&s->tl, s->cp_fault, h_now_ms());
        s->cp_fault = -1;
    }
}

/* ---- the fault scheduler ------------------------------------------------------ */

static uint64_t sk_rand(struct sk *s, uint64_t n)
{
    return rng_below(&s->rng, n);
}

/* A registered worker without a fault, or NULL. Static workers only while
 * fewer than SK_MAX_FAULTED of them are faulted (two stay routable). */
static struct sk_worker *sk_pick_worker(struct sk *s)
{
    int faulted = 0;
    for (size_t i = 0; i < SK_STATIC; i++)
        faulted += s->w[i].fault >= 0;
    for (int tries = 0; tries < 8; tries++) {
        struct sk_worker *w = &s->w[sk_rand(s, SK_MOCKS)];
        if (w->fault >= 0 || (w->spare && w->state == SK_ABSENT))
            continue;
        if (!w->spare && faulted >= SK_MAX_FAULTED)
            continue;
        return w;
    }
    return NULL;
}

static void sk_worker_fault(struct sk *s, enum sk_fault_kind kind)
{
    struct sk_worker *w = sk_pick_worker(s);
    if (w == NULL)
        return;
    char json[160];
    int ms = 200 + (int)sk_rand(s, 1300);
    switch (kind) {
    case SK_F_WORKER_5XX:
        snprintf(json, sizeof(json), "{\"fail_status\":%d,\"fail_count\":%d}",
                 sk_rand(s, 2) ? 503 : 500, 1 + (int)sk_rand(s, 4));
        break;
    case SK_F_STALL_HEADERS:
        snprintf(json, sizeof(json), "{\"stall_before_headers_ms\":%d}", ms);
        break;
    case SK_F_STALL_CHUNKS:
        snprintf(json, sizeof(json), "{\"stall_after_chunks\":%d,\"stall_ms\":%d}",
                 1 + (int)sk_rand(s, 4), ms);
        break;
    case SK_F_RESET:
        snprintf(json, sizeof(json), "{\"reset_after_chunks\":%d}", 1 + (int)sk_rand(s, 5));
        break;
    default: /* SK_F_HEALTH_FLAP */
        snprintf(json, sizeof(json), "{\"health_status\":503}");
        break;
    }
    int64_t now = h_now_ms();
    w->fault = sk_timeline_add(&s->tl, kind, -1, w->id, now);
    w->fault_end = now + 500 + (int64_t)sk_rand(s, 2500);
    if (h_mock_faults(w->mock.url, json) != 0) {
        sk_timeline_skip(&s->tl, w->fault);
        sk_problem(s, "mock %s refused the fault %s", w->id, json);
    }
}

static void sk_clear_worker(struct sk *s, struct sk_worker *w)
{
    if (w->fault < 0)
        return;
    if (h_mock_faults(w->mock.url, SK_CLEAR) != 0)
        sk_problem(s, "mock %s refused to clear its faults", w->id);
    sk_timeline_end(&s->tl, w->fault, h_now_ms());
    w->fault = -1;
}

/* Add, drain or remove a spare, or reset_load a worker, through the admin
 * API. While the control plane is down the call fails: the fault is then
 * counted as skipped (nothing was changed). */
static void sk_admin_fault(struct sk *s, enum sk_fault_kind kind)
{
    struct sk_worker *w = &s->w[SK_STATIC + sk_rand(s, SK_SPARES)];
    if (kind == SK_F_RESET_LOAD)
        w = &s->w[sk_rand(s, SK_MOCKS)];
    else if (kind == SK_F_ADD && w->state != SK_ABSENT)
        kind = w->state == SK_ADDED ? SK_F_DRAIN : SK_F_REMOVE;
    else if (kind == SK_F_DRAIN && w->state != SK_ADDED)
        return;
    else if (kind == SK_F_REMOVE && w->state == SK_ABSENT)
        return;
    if (w->spare && w->state == SK_ABSENT && kind == SK_F_RESET_LOAD)
        return;
    char path[96], body[256];
    const char *method = "POST", *b = NULL;
    switch (kind) {
    case SK_F_ADD:
        snprintf(path, sizeof(path), "/workers");
        snprintf(body, sizeof(body), "{\"url\":\"%s\",\"id\":\"%s\",\"model\":\"%s\"}", w->mock.url,
                 w->id, SK_MODEL);
        b = body;
        break;
    case SK_F_DRAIN:
        snprintf(path, sizeof(path), "/workers/%s/drain", w->id);
        b = "{\"draining\": true}";
        break;
    case SK_F_REMOVE:
        snprintf(path, sizeof(path), "/workers/%s", w->id);
        method = "DELETE";
        break;
    default: /* SK_F_RESET_LOAD */
        snprintf(path, sizeof(path), "/workers/%s/reset_load", w->id);
        break;
    }
    long idx = sk_timeline_add(&s->tl, kind, -1, w->id, h_now_ms());
    long st = 0;
    int rc = sk_admin(s, method, path, b, &st);
    /* A removal ends at once; requests in flight on the worker may still
     * fail afterwards, which the slack of the timeline covers. */
    sk_timeline_end(&s->tl, idx, h_now_ms());
    if (rc != 0 || st == 0) {
        sk_timeline_skip(&s->tl, idx);
        return;
    }
    /* reset_load answers 409 while requests are in flight: that is its
     * contract, not a failure. Anything else must succeed. */
    bool ok = kind == SK_F_ADD          ? st == 201
              : kind == SK_F_RESET_LOAD ? st == 200 || st == 409
                                        : st == 200;
    if (!ok) {
        sk_timeline_skip(&s->tl, idx);
        sk_problem(s, "admin %s %s answered %ld", method, path, st);
        return;
    }
    if (kind == SK_F_ADD)
        w->state = SK_ADDED;
    else if (kind == SK_F_DRAIN)
        w->state = SK_DRAINED;
    else if (kind == SK_F_REMOVE) {
        w->state = SK_ABSENT;
        sk_clear_worker(s, w);
    }
}

static void sk_inject(struct sk *s)
{
    static const enum sk_fault_kind mix[] = {
        SK_F_DP_KILL,      SK_F_DP_KILL,       SK_F_HOT_RESTART,   SK_F_HOT_RESTART,
        SK_F_CP_KILL,      SK_F_CP_KILL,       SK_F_WORKER_5XX,    SK_F_WORKER_5XX,
        SK_F_WORKER_5XX,   SK_F_STALL_HEADERS, SK_F_STALL_HEADERS, SK_F_STALL_CHUNKS,
        SK_F_STALL_CHUNKS, SK_F_RESET,         SK_F_RESET,         SK_F_HEALTH_FLAP,
        SK_F_HEALTH_FLAP,  SK_F_ADD,           SK_F_ADD,           SK_F_DRAIN,
        SK_F_REMOVE,       SK_F_RESET_LOAD,    SK_F_RESET_LOAD,
    };
    enum sk_fault_kind kind = mix[sk_rand(s, sizeof(mix) / sizeof(mix[0]))];
    struct sk_dp *d = &s->dp[1];
    int64_t now = h_now_ms();
    switch (kind) {
    case SK_F_DP_KILL:
        if (d->down)
            return;
        s->gone_underflows += sk_dp_underflows(s, 1);
        d->kill_fault = sk_timeline_add(&s->tl, kind, 1, NULL, now);
        h_proc_signal(d->cur, SIGKILL);
        if (d->old != NULL) { /* the whole unit goes, as systemd kills the cgroup */
            h_proc_signal(d->old, SIGKILL);
            h_proc_wait(d->old, 2000, NULL);
            d->old = NULL;
            sk_timeline_end(&s->tl, d->hot_fault, now);
            d->hot_fault = -1;
        }
        h_proc_wait(d->cur, 2000, NULL);
        d->down = true;
        d->restart_at = now + SK_RESTART_MS;
        break;
    case SK_F_HOT_RESTART:
        if (d->down || d->old != NULL)
            return; /* one at a time, as the docs require */
        s->gone_underflows += sk_dp_underflows(s, 1);
        d->hot_fault = sk_timeline_add(&s->tl, kind, 1, NULL, now);
        d->old = d->cur;
        d->old->expected = true; /* it exits 0 by itself once drained */
        if (sk_start_dp(s, 1) != 0) {
            sk_problem(s, "dp1: could not start a hot restart");
            d->cur = d->old;
            d->old = NULL;
        }
        break;
    case SK_F_CP_KILL:
        if (s->cp_down)
            return;
        s->cp_fault = sk_timeline_add(&s->tl, kind, -1, NULL, now);
        h_proc_signal(s->cp, SIGKILL);
        h_proc_wait(s->cp, 2000, NULL);
        s->cp_down = true;
        s->cp_restart_at = now + SK_RESTART_MS;
        break;
    case SK_F_ADD:
    case SK_F_DRAIN:
    case SK_F_REMOVE:
    case SK_F_RESET_LOAD:
        sk_admin_fault(s, kind);
        break;
    default:
        sk_worker_fault(s, kind);
        break;
    }
}

static void sk_expire_worker_faults(struct sk *s, bool all)
{
    int64_t now = h_now_ms();
    for (size_t i = 0; i < SK_MOCKS; i++)
        if (s->w[i].fault >= 0 && (all || now >= s->w[i].fault_end))
            sk_clear_worker(s, &s->w[i]);
}

/* ---- checkpoints ------------------------------------------------------------- */

static void sk_collect_failures(struct sk *s)
{
    struct sk_failure *f = NULL;
    size_t n = sk_traffic_take_failures(s->traffic, &f);
    if (n == 0) {
        free(f);
        return;
    }
    struct sk_failure *all = realloc(s->fail, (s->n_fail + n) * sizeof(*all));
    if (all != NULL) {
        memcpy(all + s->n_fail, f, n * sizeof(*f));
        s->fail = all;
        s->n_fail += n;
    }
    free(f);
}

struct sk_quiet {
    struct sk *s;
    long long worst;
};

/* Every registered worker's load equals its mock's in-flight count (both
 * 0 once traffic stopped). */
static bool sk_loads_match(void *arg)
{
    struct sk_quiet *q = arg;
    struct shm_worker_info info[32];
    size_t n = shm_registry_snapshot(&q->s->seg, info, 32);
    q->worst = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        long long load = (long long)shm_load_of(&q->s->seg, info[i].slot, info[i].generation);
        long long inflight = -1;
        for (size_t k = 0; k < SK_MOCKS; k++)
            if (strcmp(q->s->w[k].id, info[i].id) == 0)
                h_mock_stat_int(q->s->w[k].mock.url, "inflight", &inflight);
        long long diff = load > inflight ? load - inflight : inflight - load;
        if (diff > q->worst)
            q->worst = diff;
    }
    return q->worst == 0;
}

static bool sk_traffic_idle(void *arg)
{
    return sk_traffic_inflight(arg) == 0;
}

static bool sk_node_settled(void *arg)
{
    struct sk *s = arg;
    sk_supervise(s);
    return !s->cp_down && !s->dp[0].down && !s->dp[1].down && s->dp[1].old == NULL;
}

static void sk_checkpoint(struct sk *s)
{
    sk_traffic_pause(s->traffic, true);
    sk_expire_worker_faults(s, true);
    if (h_wait_until(sk_node_settled, s, SK_QUIESCE_MS) != 0)
        sk_problem(s, "checkpoint: the node did not settle (a restart or drain hung)");
    if (h_wait_until(sk_traffic_idle, s->traffic, SK_QUIESCE_MS) != 0)
        sk_problem(s, "checkpoint: %ld requests still in flight after %d ms",
                   sk_traffic_inflight(s->traffic), SK_QUIESCE_MS);
    struct sk_quiet q = {.s = s};
    struct sk_ckpt *c = &s->ck[s->n_ck < SK_MAX_CKPT ? s->n_ck++ : SK_MAX_CKPT - 1];
    c->t_s = (int64_t)sk_elapsed_s(s);
    c->loads_ok = h_wait_until(sk_loads_match, &q, 10000) == 0;
    c->max_load = q.worst;
    c->underflows = shm_load_underflows(&s->seg) + s->gone_underflows;
    c->dp0_pid = s->dp[0].cur->pid;
    c->dp1_pid = s->dp[1].cur->pid;
    c->cp_pid = s->cp->pid;
    c->dp0_rss_kb = sk_status_kb(c->dp0_pid, "VmRSS");
    c->dp0_private_kb = sk_status_kb(c->dp0_pid, "RssAnon");
    c->dp0_shared_kb = sk_status_kb(c->dp0_pid, "RssShmem");
    c->dp1_rss_kb = sk_status_kb(c->dp1_pid, "VmRSS");
    c->cp_rss_kb = sk_status_kb(c->cp_pid, "VmRSS");
    /* The least over a few samples: a connection being opened or closed
     * at that instant (a health probe, our own admin call) passes, a
     * leaked descriptor stays. */
    c->dp0_fds = c->cp_fds = -1;
    for (int k = 0; k < 10; k++) {
        int up0 = 0, upc = 0;
        int fd0 = sk_fd_count(s, c->dp0_pid, &up0), fdc = sk_fd_count(s, c->cp_pid, &upc);
        if (c->dp0_fds < 0 || fd0 - up0 < c->dp0_fds - c->dp0_upstream)
            c->dp0_fds = fd0, c->dp0_upstream = up0;
        if (c->cp_fds < 0 || fdc - upc < c->cp_fds - c->cp_upstream)
            c->cp_fds = fdc, c->cp_upstream = upc;
        sk_sleep_ms(200);
    }
    if (!c->loads_ok)
        sk_problem(s, "checkpoint at %llds: a load differs from its mock's in-flight by %lld",
                   (long long)c->t_s, q.worst);
    if (c->underflows != 0)
        sk_problem(s, "checkpoint at %llds: %llu load underflows counted", (long long)c->t_s,
                   c->underflows);
    sk_log(s,
           "checkpoint: loads %s, underflows %llu, dp0 pid %d rss %ld kB (private %ld, shared "
           "%ld) fds %d (%d upstream), cp pid %d fds %d (%d upstream)",
           c->loads_ok ? "match" : "DIFFER", c->underflows, (int)c->dp0_pid, c->dp0_rss_kb,
           c->dp0_private_kb, c->dp0_shared_kb, c->dp0_fds, c->dp0_upstream, (int)c->cp_pid,
           c->cp_fds, c->cp_upstream);
    sk_collect_failures(s);
    sk_traffic_pause(s->traffic, false);
}

/* dp0 lives the whole run; the control plane is compared between
 * checkpoints of the same pid. Connections to the workers are left out of
 * the comparison: libcurl keeps idle ones in its pool and closes them on
 * its own schedule, and spares come and go, so their number at a
 * checkpoint varies; they are bounded instead (SK_UPSTREAM_MAX). Every
 * other fd (listening and client sockets, the admin channel, epoll, eventfd,
 * files) must be back to its warm-up count, give or take SK_FD_SLACK. */
static void sk_check_growth(struct sk *s)
{
    if (s->n_ck < 2)
        return;
    const struct sk_ckpt *first = &s->ck[0], *last = &s->ck[s->n_ck - 1];
    /* Private memory: the shared objects' pages grow towards their
     * configured sizes as entries are written (reported, not checked). */
    if (last->dp0_private_kb > (long)((double)first->dp0_private_kb * SK_RSS_GROWTH))
        sk_problem(s, "dp0 private memory (RssAnon) grew from %ld kB to %ld kB (> 10%%)",
                   first->dp0_private_kb, last->dp0_private_kb);
    for (size_t i = 0; i < s->n_ck; i++) {
        const struct sk_ckpt *k = &s->ck[i];
        if (k->dp0_fds - k->dp0_upstream > first->dp0_fds - first->dp0_upstream + SK_FD_SLACK)
            sk_problem(s, "dp0 fds other than upstream grew from %d to %d at %llds",
                       first->dp0_fds - first->dp0_upstream, k->dp0_fds - k->dp0_upstream,
                       (long long)k->t_s);
        if (k->dp0_upstream > SK_UPSTREAM_MAX || k->cp_upstream > SK_UPSTREAM_MAX)
            sk_problem(s, "%d / %d upstream connections at %llds (> %d)", k->dp0_upstream,
                       k->cp_upstream, (long long)k->t_s, SK_UPSTREAM_MAX);
        for (size_t j = 0; j < i; j++)
            if (s->ck[j].cp_pid == k->cp_pid &&
                k->cp_fds - k->cp_upstream > s->ck[j].cp_fds - s->ck[j].cp_upstream + SK_FD_SLACK)
                sk_problem(s, "control plane pid %d: fds other than upstream grew from %d to %d",
                           (int)k->cp_pid, s->ck[j].cp_fds - s->ck[j].cp_upstream,
                           k->cp_fds - k->cp_upstream);
    }
}

/* ---- the report ---------------------------------------------------------------- */

static void sk_report(struct sk *s, FILE *out, const struct sk_counts *c, size_t unexplained)
{
    fprintf(out, "# Chaos soak report\n\n");
    fprintf(out, "Duration %d s, seed %llu, arrival rate %.0f/s, %zu checkpoints.\n\n", s->seconds,
            (unsigned long long)s->seed, s->rate, s->n_ck);
    fprintf(out, "## Requests\n\n| started | ok | aborted by the client | failed | "
                 "of which explained | unexplained | streaming | late "
                 "starts |\n|---|---|---|---|---|---|---|---|\n");
    fprintf(out, "| %ld | %ld | %ld | %ld | %zu | %zu | %ld | %ld |\n\n", c->started, c->ok,
            c->aborted, c->failed, s->n_fail - unexplained, unexplained, c->streamed, c->late);
    fprintf(out, "| route | started | ok |\n|---|---|---|\n");
    for (int r = 0; r < SK_R_N; r++)
        fprintf(out, "| %s | %ld | %ld |\n", sk_route_name((enum sk_route)r), c->by_route[r],
                c->ok_by_route[r]);
    fputc('\n', out);
    fprintf(out, "## Faults injected\n\n| kind | injected | skipped (control plane down) | "
                 "may fail requests |\n|---|---|---|---|\n");
    long total = 0;
    for (int k = 0; k < SK_F_N; k++) {
        fprintf(out, "| %s | %ld | %ld | %s |\n", sk_fault_name((enum sk_fault_kind)k),
                s->tl.count[k], s->tl.skipped[k],
                sk_fault_may_fail((enum sk_fault_kind)k) ? "yes" : "no");
        total += s->tl.count[k];
    }
    fprintf(out, "| total | %ld | | |\n\n", total);
    fprintf(out, "## Failed requests and their explanation\n\n");
    long by_kind[SK_F_N] = {0};
    for (size_t i = 0; i < s->n_fail; i++)
        if (s->fail[i].explained_by >= 0)
            by_kind[s->tl.f[s->fail[i].explained_by].kind]++;
    fprintf(out, "| explained by | requests |\n|---|---|\n");
    for (int k = 0; k < SK_F_N; k++)
        if (by_kind[k] != 0)
            fprintf(out, "| %s | %ld |\n", sk_fault_name((enum sk_fault_kind)k), by_kind[k]);
    fprintf(out, "| (unexplained) | %zu |\n\n", unexplained);
    fprintf(out,
            "Each failure (time since start, data plane, route, worker, outcome, fault):\n\n```\n");
    for (size_t i = 0; i < s->n_fail; i++) {
        const struct sk_failure *f = &s->fail[i];
        const struct sk_fault *by = f->explained_by >= 0 ? &s->tl.f[f->explained_by] : NULL;
        fprintf(out, "%8.2fs dp%d %-14s %-6s %-3s %-50s %s", (double)(f->t0 - s->t_start) / 1000.0,
                f->dp, f->route, f->stream ? "stream" : "plain",
                f->worker[0] ? f->worker : (f->pinned[0] ? f->pinned : "-"), f->what,
                by != NULL ? sk_fault_name(by->kind) : "UNEXPLAINED");
        if (by != NULL && by->dp >= 0)
            fprintf(out, " (dp%d at %.2fs)", by->dp, (double)(by->t0 - s->t_start) / 1000.0);
        else if (by != NULL)
            fprintf(out, " (%s at %.2fs)", by->worker, (double)(by->t0 - s->t_start) / 1000.0);
        fputc('\n', out);
    }
    fprintf(out,
            "```\n\n## Checkpoints (quiescent)\n\n| t (s) | loads = mock in-flight | "
            "underflows | dp0 pid | dp0 RSS kB (private, shared) | dp0 fds (upstream) | dp1 pid | "
            "dp1 RSS kB | cp pid | cp RSS kB | cp fds (upstream) "
            "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < s->n_ck; i++) {
        const struct sk_ckpt *k = &s->ck[i];
        fprintf(
            out,
            "| %lld | %s | %llu | %d | %ld (%ld, %ld) | %d (%d) | %d | %ld | %d | %ld | %d (%d) "
            "|\n",
            (long long)k->t_s, k->loads_ok ? "yes (all 0)" : "NO", k->underflows, (int)k->dp0_pid,
            k->dp0_rss_kb, k->dp0_private_kb, k->dp0_shared_kb, k->dp0_fds, k->dp0_upstream,
            (int)k->dp1_pid, k->dp1_rss_kb, (int)k->cp_pid, k->cp_rss_kb, k->cp_fds,
            k->cp_upstream);
    }
    fprintf(out, "\n## Final loads\n\n| worker | load | mock in-flight |\n|---|---|---|\n");
    struct shm_worker_info info[32];
    size_t n = shm_registry_snapshot(&s->seg, info, 32);
    for (size_t i = 0; i < n && i < 32; i++) {
        long long inflight = -1;
        for (size_t k = 0; k < SK_MOCKS; k++)
            if (strcmp(s->w[k].id, info[i].id) == 0)
                h_mock_stat_int(s->w[k].mock.url, "inflight", &inflight);
        fprintf(out, "| %s | %llu | %lld |\n", info[i].id,
                (unsigned long long)shm_load_of(&s->seg, info[i].slot, info[i].generation),
                inflight);
    }
    fprintf(out, "\n## Fault timeline\n\n(start and end, seconds since the start; what it "
                 "touched)\n\n```\n");
    for (size_t i = 0; i < s->tl.n; i++) {
        const struct sk_fault *f = &s->tl.f[i];
        fprintf(out, "%8.2f %8.2f %-21s %s%s\n", (double)(f->t0 - s->t_start) / 1000.0,
                f->t1 >= 0 ? (double)(f->t1 - s->t_start) / 1000.0 : -1.0, sk_fault_name(f->kind),
                f->dp >= 0     ? (f->dp == 1 ? "dp1" : "dp0")
                : f->worker[0] ? f->worker
                               : "cp",
                f->skipped ? " (skipped)" : "");
    }
    fprintf(out, "```\n");
    fprintf(out, "\n## Verdict\n\n%s\n",
            s->problems[0] == '\0' ? "PASS: every invariant held." : "FAIL:");
    if (s->problems[0] != '\0')
        fprintf(out, "\n```\n%s```\n", s->problems);
}

/* ---- main ------------------------------------------------------------------------- */

static void sk_usage(void)
{
    fprintf(stderr, "usage: switchyard-soak [--seconds N] [--checkpoint-every N] [--rate R] "
                    "[--seed S] [--report PATH]\n");
}

static int sk_parse(struct sk *s, int argc, char **argv)
{
    s->seconds = 60;
    s->ckpt_every = 0;
    s->rate = 25;
    s->seed = 2026;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            sk_usage();
            return -1;
        }
        if (strcmp(argv[i], "--seconds") == 0)
            s->seconds = atoi(v);
        else if (strcmp(argv[i], "--checkpoint-every") == 0)
            s->ckpt_every = atoi(v);
        else if (strcmp(argv[i], "--rate") == 0)
            s->rate = atof(v);
        else if (strcmp(argv[i], "--seed") == 0)
            s->seed = strtoull(v, NULL, 10);
        else if (strcmp(argv[i], "--report") == 0)
            s->report_path = v;
        else {
            sk_usage();
            return -1;
        }
    }
    if (s->seconds < 10 || s->rate <= 0) {
        sk_usage();
        return -1;
    }
    /* Checkpoints every quarter of the run, every 2 minutes from 10
     * minutes up; the first, after the warm-up, is the baseline. */
    if (s->ckpt_every <= 0)
        s->ckpt_every = s->seconds >= 600 ? 120 : s->seconds / 4;
    return 0;
}

int main(int argc, char **argv)
{
    static struct sk s;
    if (sk_parse(&s, argc, argv) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rng_seed(&s.rng, s.seed);
    int rc = sk_start_node(&s);
    if (rc != 0) {
        fprintf(stderr, "soak: the node did not start: %s\n", strerror(-rc));
        h_teardown(NULL);
        return 1;
    }
    struct sk_traffic_opts to = {.n_dp = SK_MAX_DP,
                                 .model = SK_MODEL,
                                 .rate = s.rate,
                                 .threads = 64,
                                 .stream_percent = 50,
                                 .abort_percent = 15,
                                 .abort_max_ms = 300,
                                 .max_tokens = 32,
                                 .timeout_ms = 30000,
                                 .seed = s.seed};
    for (int i = 0; i < SK_MAX_DP; i++)
        snprintf(to.base[i], sizeof(to.base[i]), "%s", s.dp[i].base);
    s.t_start = h_now_ms();
    if (sk_traffic_start(&to, &s.traffic) != 0) {
        fprintf(stderr, "soak: could not start the client threads\n");
        h_teardown(NULL);
        return 1;
    }
    sk_log(&s, "node up: dp0 %s, dp1 %s, %d s, checkpoint every %d s", s.dp[0].base, s.dp[1].base,
           s.seconds, s.ckpt_every);

    /* Warm-up: traffic without faults, then the baseline checkpoint. */
    int64_t warm_end = s.t_start + (int64_t)(s.ckpt_every < 15 ? s.ckpt_every : 15) * 1000;
    while (h_now_ms() < warm_end)
        sk_sleep_ms(100);
    sk_checkpoint(&s);

    int64_t end = s.t_start + (int64_t)s.seconds * 1000;
    int64_t next_ckpt = h_now_ms() + (int64_t)s.ckpt_every * 1000;
    int64_t next_fault = h_now_ms();
    while (h_now_ms() < end) {
        sk_supervise(&s);
        sk_expire_worker_faults(&s, false);
        int64_t now = h_now_ms();
        if (now >= next_fault) {
            sk_inject(&s);
            /* Exponential gaps, mean 1 s: faults overlap one another. */
            double u = rng_unit(&s.rng);
            next_fault = now + (int64_t)(-log(1.0 - u) * 1000.0);
        }
        if (now >= next_ckpt && end - now > 5000) {
            sk_checkpoint(&s);
            next_ckpt = h_now_ms() + (int64_t)s.ckpt_every * 1000;
            next_fault = h_now_ms();
        }
        sk_sleep_ms(20);
    }
    sk_checkpoint(&s);
    /* The checkpoint resumed traffic: stop it and let what started finish,
     * so every started request has its outcome in the counts. */
    sk_traffic_pause(s.traffic, true);
    if (h_wait_until(sk_traffic_idle, s.traffic, SK_QUIESCE_MS) != 0)
        sk_problem(&s, "%ld requests still in flight at the end", sk_traffic_inflight(s.traffic));
    struct sk_counts counts;
    sk_traffic_counts(s.traffic, &counts);
    sk_traffic_stop(s.traffic);
    sk_collect_failures(&s);
    sk_check_growth(&s);

    size_t unexplained = 0;
    int64_t now = h_now_ms();
    for (size_t i = 0; i < s.n_fail; i++)
        unexplained += !sk_timeline_explain(&s.tl, &s.fail[i], now);
    if (unexplained != 0)
        sk_problem(&s, "%zu failed requests are not explained by any fault", unexplained);
    if (counts.ok + counts.aborted + counts.failed != counts.started)
        sk_problem(&s, "%ld requests started but %ld ended", counts.started,
                   counts.ok + counts.aborted + counts.failed);
    if (counts.ok < counts.started / 2)
        sk_problem(&s, "only %ld of %ld requests succeeded", counts.ok, counts.started);

    sk_report(&s, stdout, &counts, unexplained);
    if (s.report_path != NULL) {
        FILE *f = fopen(s.report_path, "w");
        if (f != NULL) {
            sk_report(&s, f, &counts, unexplained);
            fclose(f);
        }
    }
    shm_segment_close(&s.seg);
    int td = h_teardown(NULL);
    if (td != 0)
        sk_problem(&s, "a process misbehaved at teardown (see above)");
    sk_timeline_free(&s.tl);
    free(s.fail);
    curl_global_cleanup();
    return s.problems[0] == '\0' ? 0 : 1;
}
