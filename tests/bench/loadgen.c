/*
 * HTTP engine of the load generator (see loadgen.h): curl multi in socket
 * mode on one epoll set, through common/curl_epoll. Each transfer keeps a fixed 1 KiB tail of its
 * body, enough to find the usage event and the closing [DONE] of an SSE
 * stream without buffering the whole stream.
 */
#include "tests/bench/loadgen.h"

#include "common/curl_epoll.h"
#include "common/list.h"
#include "common/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#define LG_TAIL   1024
#define LG_EVENTS 512

static double lg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One transfer; owned by the engine from lg_add until it completes. */
struct lg_xfer {
    CURL *easy;
    struct curl_slist *hdrs;
    double t0, t_first;
    double t_sent; /* curl is about to write the request (connected); 0: not yet */
    bool first;
    char tail[LG_TAIL];
    size_t tail_len;
    size_t idx;
    struct lg_engine *eng;
    struct list_node link; /* on the engine's list of live transfers */
};

struct lg_engine {
    struct cep cep; /* the multi handle and its glue to epfd */
    int epfd;
    size_t running;
    unsigned long long bytes;
    void (*on_first)(struct lg_engine *e, struct lg_xfer *x);
    void (*on_done)(struct lg_engine *e, struct lg_xfer *x, CURLcode rc);
    /* Optional: every piece of body as curl delivers it (lg_tokens). */
    void (*on_data)(struct lg_engine *e, struct lg_xfer *x, const char *data, size_t n);
    void *user;
    struct list_node live; /* struct lg_xfer.link */
};

static size_t lg_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct lg_xfer *x = userp;
    size_t n = size * nmemb;
    if (!x->first && n > 0) {
        x->first = true;
        x->t_first = lg_now();
        if (x->eng->on_first != NULL)
            x->eng->on_first(x->eng, x);
    }
    x->eng->bytes += n;
    if (x->eng->on_data != NULL)
        x->eng->on_data(x->eng, x, data, n);
    if (n >= LG_TAIL) {
        memcpy(x->tail, data + n - LG_TAIL, LG_TAIL);
        x->tail_len = LG_TAIL;
    } else {
        size_t keep = x->tail_len + n > LG_TAIL ? LG_TAIL - n : x->tail_len;
        memmove(x->tail, x->tail + x->tail_len - keep, keep);
        memcpy(x->tail + keep, data, n);
        x->tail_len = keep + n;
    }
    return n;
}

static void lg_xfer_free(struct lg_engine *e, struct lg_xfer *x);

/* Right before curl writes the request: the end of the client's own part
 * (its loop starting the transfer, connecting) on the engine's clock. */
static int lg_prereq_cb(void *userp, char *primary_ip, char *local_ip, int primary_port,
                        int local_port)
{
    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    struct lg_xfer *x = userp;
    x->t_sent = lg_now();
    return CURL_PREREQFUNC_OK;
}

/* A finished transfer (from cep_collect in lg_step): report it, then free it. */
static void lg_curl_done(void *user, CURL *easy, CURLcode rc)
{
    struct lg_engine *e = user;
    struct lg_xfer *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    if (e->on_done != NULL)
        e->on_done(e, x, rc);
    e->running--;
    lg_xfer_free(e, x);
}

static int lg_engine_init(struct lg_engine *e)
{
    memset(e, 0, sizeof(*e));
    list_init(&e->live);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0)
        return -errno;
    struct cep_opts o = {.epfd = e->epfd, .on_done = lg_curl_done, .user = e};
    int rc = cep_init(&e->cep, &o);
    if (rc != 0) {
        close(e->epfd);
        return rc;
    }
    curl_multi_setopt(cep_multi(&e->cep), CURLMOPT_MAXCONNECTS, 100000L);
    return 0;
}

static void lg_xfer_free(struct lg_engine *e, struct lg_xfer *x)
{
    list_remove(&x->link);
    cep_remove(&e->cep, x->easy);
    curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    free(x);
}

static void lg_engine_fini(struct lg_engine *e)
{
    /* Abort whatever is still running. */
    while (!list_is_empty(&e->live))
        lg_xfer_free(e, list_entry(list_first(&e->live), struct lg_xfer, link));
    cep_fini(&e->cep);
    close(e->epfd);
}

/* Starts a POST of body to url; body must outlive the transfer. */
static int lg_add(struct lg_engine *e, const char *url, const char *body, size_t len,
                  const char *session, const char *auth, size_t idx)
{
    struct lg_xfer *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return -ENOMEM;
    x->eng = e;
    x->idx = idx;
    x->easy = curl_easy_init();
    if (x->easy == NULL) {
        free(x);
        return -ENOMEM;
    }
    char hdr[64];
    x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    x->hdrs = curl_slist_append(x->hdrs, "Expect:");
    if (session != NULL) {
        snprintf(hdr, sizeof(hdr), "X-Session-Id: %s", session);
        x->hdrs = curl_slist_append(x->hdrs, hdr);
    }
    /* The router's access log then names the plan's request (the index
     * column of `run --csv`): where each request went can be joined. */
    snprintf(hdr, sizeof(hdr), "X-Request-Id: bench-%zu", idx);
    x->hdrs = curl_slist_append(x->hdrs, hdr);
    if (auth != NULL) {
        char line[300];
        snprintf(line, sizeof(line), "Authorization: Bearer %s", auth);
        x->hdrs = curl_slist_append(x->hdrs, line);
    }
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, lg_write_cb);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_PREREQFUNCTION, lg_prereq_cb);
    curl_easy_setopt(x->easy, CURLOPT_PREREQDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(x->easy, CURLOPT_TCP_NODELAY, 1L);
    x->t0 = lg_now();
    if (cep_add(&e->cep, x->easy) != 0) {
        curl_easy_cleanup(x->easy);
        curl_slist_free_all(x->hdrs);
        free(x);
        return -EIO;
    }
    e->running++;
    list_push_front(&e->live, &x->link);
    return 0;
}

/* Starts the transfers just added. Running curl's timers may also finish
 * transfers already under way (their answer was read there): collect them
 * now, or they would wait out the next epoll_wait (up to the next arrival,
 * 100 ms) and the client would count that against the server. */
static void lg_kick(struct lg_engine *e)
{
    int still = 0;
    curl_multi_socket_action(cep_multi(&e->cep), CURL_SOCKET_TIMEOUT, 0, &still);
    cep_collect(&e->cep);
}

/* One pass: waits up to max_wait_ms for socket events or curl's timer. */
static void lg_step(struct lg_engine *e, long max_wait_ms)
{
    long wait = max_wait_ms;
    int curl_wait = cep_timeout_ms(&e->cep, proc_monotonic_ms());
    if (curl_wait >= 0 && curl_wait < wait)
        wait = curl_wait;
    struct epoll_event ev[LG_EVENTS];
    int n = epoll_wait(e->epfd, ev, LG_EVENTS, (int)wait);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&e->cep, cep_fd_of(ev[i].data.u64), ev[i].events);
    cep_on_timer(&e->cep, proc_monotonic_ms());
    cep_collect(&e->cep);
}

/* ---- replay ---------------------------------------------------------------- */

struct lg_replay_ctx {
    struct lg_result *res;
    double t_start;
    const struct wl_plan *plan;
    /* Sequential plans: per conversation, when its next turn is due (< 0:
     * none is: not started, a turn in flight, or finished) and which turn
     * that is; conversations started and not finished. */
    double *ready_at;
    unsigned *next_turn;
    size_t active;
};

/* The last `"key":N` of the tail (the usage event's), 0 when absent. */
static unsigned lg_usage_field(const char *tail, size_t len, const char *key)
{
    size_t klen = strlen(key);
    unsigned v = 0;
    for (size_t i = len; i-- > 0;) {
        if (i + klen <= len && memcmp(tail + i, key, klen) == 0) {
            for (size_t j = i + klen; j < len && tail[j] >= '0' && tail[j] <= '9'; j++)
                v = v * 10 + (unsigned)(tail[j] - '0');
            break;
        }
    }
    return v;
}

static bool lg_has_done(const char *tail, size_t len)
{
    static const char key[] = "data: [DONE]";
    for (size_t i = len; i-- > 0;)
        if (i + sizeof(key) - 1 <= len && memcmp(tail + i, key, sizeof(key) - 1) == 0)
            return true;
    return false;
}

/* Sequential plans: request idx ended at now (run time); its conversation's
 * next turn is due after its think time, or the conversation is over. A
 * failed turn does not stop the conversation: the next prompt is planned. */
static void lg_turn_ended(struct lg_replay_ctx *c, size_t idx, double now)
{
    const struct wl_plan *p = c->plan;
    size_t conv = idx / p->turns;
    if (idx % p->turns + 1 < p->turns) {
        c->ready_at[conv] = now + p->req[idx + 1].think_s;
    } else {
        c->ready_at[conv] = -1;
        c->active--;
    }
}

/* curl's own clock for one transfer (struct lg_result). */
static void lg_curl_times(CURL *easy, struct lg_result *r)
{
    static const CURLINFO what[] = {CURLINFO_CONNECT_TIME_T, CURLINFO_TOTAL_TIME_T};
    double *to[] = {&r->connect_s, &r->curl_total_s};
    for (size_t i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
        curl_off_t us = -1;
        *to[i] =
            curl_easy_getinfo(easy, what[i], &us) == CURLE_OK && us >= 0 ? (double)us / 1e6 : -1;
    }
    r->new_conns = -1;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &r->new_conns);
}

static void lg_replay_done(struct lg_engine *e, struct lg_xfer *x, CURLcode rc)
{
    struct lg_replay_ctx *c = e->user;
    struct lg_result *r = &c->res[x->idx];
    double now = lg_now();
    r->start_s = x->t0 - c->t_start;
    r->ttft_s = x->first ? x->t_first - x->t0 : -1;
    r->e2e_s = now - x->t0;
    r->curl_rc = (int)rc;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &r->status);
    r->sent_s = x->t_sent > 0 ? x->t_sent - x->t0 : -1;
    lg_curl_times(x->easy, r);
    r->output_tokens = lg_usage_field(x->tail, x->tail_len, "\"completion_tokens\":");
    r->prompt_tokens = lg_usage_field(x->tail, x->tail_len, "\"prompt_tokens\":");
    r->cached_tokens = lg_usage_field(x->tail, x->tail_len, "\"cached_tokens\":");
    r->ok = rc == CURLE_OK && r->status == 200 && lg_has_done(x->tail, x->tail_len);
    if (c->plan->sequential)
        lg_turn_ended(c, x->idx, now - c->t_start);
}

/* The router URLs requests go to, round robin in the order they are sent
 * (a round-robin front over independent router nodes). */
#define LG_MAX_URLS 8

struct lg_urls {
    char chat[LG_MAX_URLS][256], cmpl[LG_MAX_URLS][256];
    size_t n, next;
};

/* Splits "http://A,http://B" into the routes of each. 0 or -EINVAL. */
static int lg_urls_parse(struct lg_urls *u, const char *base_urls)
{
    u->n = u->next = 0;
    const char *p = base_urls;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (len == 0 || len > 200 || u->n == LG_MAX_URLS)
            return -EINVAL;
        snprintf(u->chat[u->n], sizeof(u->chat[0]), "%.*s/v1/chat/completions", (int)len, p);
        snprintf(u->cmpl[u->n], sizeof(u->cmpl[0]), "%.*s/v1/completions", (int)len, p);
        u->n++;
        p += len;
        if (*p == ',')
            p++;
    }
    return u->n > 0 ? 0 : -EINVAL;
}

/* The URL of request r: a bypassing one's worker (direct, when given),
 * else the next router URL, round robin. */
static const char *lg_urls_for(struct lg_urls *u, const struct lg_urls *direct,
                               const struct wl_request *r);

/* The URL of the next request sent (chat or completions), round robin. */
static const char *lg_urls_take(struct lg_urls *u, bool chat)
{
    size_t i = u->next++ % u->n;
    return chat ? u->chat[i] : u->cmpl[i];
}

static const char *lg_urls_for(struct lg_urls *u, const struct lg_urls *direct,
                               const struct wl_request *r)
{
    if (r->bypass && direct != NULL && direct->n > 0) {
        size_t i = r->bypass_key % direct->n;
        return r->chat ? direct->chat[i] : direct->cmpl[i];
    }
    return lg_urls_take(u, r->chat);
}

/* Sends every request of an open-loop plan at its arrival time. */
static void lg_replay_open(struct lg_engine *e, struct lg_replay_ctx *c, struct lg_urls *urls,
                           const struct lg_urls *direct)
{
    const struct wl_plan *plan = c->plan;
    size_t next = 0;
    while (next < plan->n || e->running > 0) {
        double now = lg_now() - c->t_start;
        while (next < plan->n && plan->req[next].at_s <= now) {
            const struct wl_request *r = &plan->req[next];
            c->res[next].sent = true;
            if (lg_add(e, lg_urls_for(urls, direct, r), r->body, r->body_len, r->session, r->auth,
                       next) != 0)
                c->res[next].curl_rc = -1;
            next++;
        }
        /* Kick curl for the new handles; then wait for the next event or arrival. */
        lg_kick(e);
        long wait = 100;
        if (next < plan->n) {
            double dt = plan->req[next].at_s - (lg_now() - c->t_start);
            wait = dt <= 0 ? 0 : (long)(dt * 1000.0) + 1;
            if (wait > 100)
                wait = 100;
        }
        lg_step(e, wait);
    }
}

/* Milliseconds until run time `at` (now is run time), in 0..cap. */
static long lg_wait_ms(double at, double now, long cap)
{
    double dt = at - now;
    if (dt <= 0)
        return 0;
    return dt * 1000.0 + 1 < (double)cap ? (long)(dt * 1000.0) + 1 : cap;
}

/* Runs a sequential plan: conversations start open-loop (at most
 * max_concurrency at once), each turn after the previous one ended. */
static void lg_replay_sequential(struct lg_engine *e, struct lg_replay_ctx *c, struct lg_urls *urls,
                                 const struct lg_urls *direct)
{
    const struct wl_plan *plan = c->plan;
    size_t n_conv = plan->n / plan->turns, started = 0;
    for (;;) {
        double now = lg_now() - c->t_start;
        bool open = now < plan->stop_s;
        while (open && started < n_conv && plan->req[started * plan->turns].at_s <= now &&
               (plan->max_concurrency == 0 || c->active < plan->max_concurrency)) {
            c->ready_at[started++] = now;
            c->active++;
        }
        long wait = 100;
        for (size_t conv = 0; open && conv < started; conv++) {
            if (c->ready_at[conv] < 0)
                continue;
            if (c->ready_at[conv] > now) {
                wait = lg_wait_ms(c->ready_at[conv], now, wait);
                continue;
            }
            size_t idx = conv * plan->turns + c->next_turn[conv]++;
            const struct wl_request *r = &plan->req[idx];
            c->ready_at[conv] = -1;
            c->res[idx].sent = true;
            if (lg_add(e, lg_urls_for(urls, direct, r), r->body, r->body_len, r->session, r->auth,
                       idx) != 0) {
                c->res[idx].curl_rc = -1;
                lg_turn_ended(c, idx, now);
                wait = 0;
            }
        }
        bool done = started == n_conv && c->active == 0;
        if ((!open || done) && e->running == 0)
            break;
        if (open && started < n_conv &&
            (plan->max_concurrency == 0 || c->active < plan->max_concurrency))
            wait = lg_wait_ms(plan->req[started * plan->turns].at_s, now, wait);
        if (open)
            wait = lg_wait_ms(plan->stop_s, now, wait);
        lg_kick(e);
        lg_step(e, wait);
    }
}

int lg_replay(const struct wl_plan *plan, const char *base_url, const char *direct_urls,
              struct lg_result *results, double *wall_s)
{
    struct lg_engine e;
    int rc = lg_engine_init(&e);
    if (rc != 0)
        return rc;
    size_t n_conv = plan->sequential && plan->turns > 0 ? plan->n / plan->turns : 0;
    struct lg_replay_ctx c = {.res = results, .plan = plan};
    struct lg_urls *urls = NULL;
    if (plan->sequential) {
        c.ready_at = malloc((n_conv + 1) * sizeof(*c.ready_at));
        c.next_turn = calloc(n_conv + 1, sizeof(*c.next_turn));
        if (c.ready_at == NULL || c.next_turn == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n_conv; i++)
            c.ready_at[i] = -1;
    }
    e.user = &c;
    e.on_done = lg_replay_done;
    urls = malloc(2 * sizeof(*urls));
    if (urls == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    rc = lg_urls_parse(urls, base_url);
    if (rc == 0 && direct_urls != NULL && direct_urls[0] != '\0')
        rc = lg_urls_parse(&urls[1], direct_urls);
    else
        urls[1].n = urls[1].next = 0;
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < plan->n; i++)
        results[i] = (struct lg_result){.ttft_s = -1,
                                        .e2e_s = -1,
                                        .sent_s = -1,
                                        .connect_s = -1,
                                        .curl_total_s = -1,
                                        .new_conns = -1};
    c.t_start = lg_now();
    if (plan->sequential)
        lg_replay_sequential(&e, &c, urls, &urls[1]);
    else
        lg_replay_open(&e, &c, urls, &urls[1]);
    *wall_s = lg_now() - c.t_start;
out:
    free(urls);
    free(c.ready_at);
    free(c.next_turn);
    lg_engine_fini(&e);
    return rc;
}

/* ---- hold ------------------------------------------------------------------- */

long lg_proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long v = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            v = strtol(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

double lg_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command name (which may hold spaces): state is
     * field 3, utime 14, stime 15. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

struct lg_hold_ctx {
    size_t established, failed;
};

static void lg_hold_first(struct lg_engine *e, struct lg_xfer *x)
{
    (void)x;
    struct lg_hold_ctx *c = e->user;
    c->established++;
}

static void lg_hold_done(struct lg_engine *e, struct lg_xfer *x, CURLcode rc)
{
    (void)x;
    (void)rc;
    struct lg_hold_ctx *c = e->user;
    c->failed++;
}

int lg_hold(const char *base_url, size_t n, double ramp_per_s, double hold_s, double deadline_s,
            size_t prompt_bytes, pid_t pid, struct lg_hold_stats *st)
{
    static const char head[] =
        "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":\"hold this stream "
        "open";
    static const char tail[] = "\"}],\"max_tokens\":4,\"stream\":true}";
    /* One body for every stream (curl does not copy it): the prompt padded
     * to prompt_bytes with words. */
    size_t body_len = sizeof(head) - 1 + prompt_bytes + sizeof(tail) - 1;
    char *body = malloc(body_len + 1);
    if (body == NULL)
        return -ENOMEM;
    memcpy(body, head, sizeof(head) - 1);
    for (size_t i = 0; i < prompt_bytes; i++)
        body[sizeof(head) - 1 + i] = " abc"[i % 4];
    memcpy(body + sizeof(head) - 1 + prompt_bytes, tail, sizeof(tail));
    struct lg_engine e;
    int rc = lg_engine_init(&e);
    if (rc != 0) {
        free(body);
        return rc;
    }
    struct lg_hold_ctx c = {0};
    e.user = &c;
    e.on_first = lg_hold_first;
    e.on_done = lg_hold_done;
    memset(st, 0, sizeof(*st));
    st->rss_before_kb = lg_proc_kb(pid, "VmRSS");
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base_url);

    double t0 = lg_now();
    while (c.established + c.failed < n && lg_now() - t0 < deadline_s) {
        size_t due = (size_t)((lg_now() - t0) * ramp_per_s) + 1;
        while (st->opened < n && st->opened < due) {
            if (lg_add(&e, url, body, body_len, NULL, NULL, st->opened) != 0)
                c.failed++;
            st->opened++;
        }
        lg_kick(&e);
        lg_step(&e, 10);
    }
    st->ramp_s = lg_now() - t0;
    st->established = c.established;

    double w0 = lg_now(), cpu0 = lg_proc_cpu_s(pid);
    unsigned long long b0 = e.bytes;
    while (lg_now() - w0 < hold_s)
        lg_step(&e, 50);
    st->window_s = lg_now() - w0;
    st->cpu_window_s = lg_proc_cpu_s(pid) - cpu0;
    st->bytes_in_window = e.bytes - b0;
    st->rss_kb = lg_proc_kb(pid, "VmRSS");
    st->hwm_kb = lg_proc_kb(pid, "VmHWM");
    st->failed = c.failed;
    lg_engine_fini(&e);
    free(body);
    return 0;
}

/* ---- tokens ------------------------------------------------------------------ */

/* One stream slot of lg_tokens: the stream running in it, as its events arrive. */
struct lg_tok_slot {
    double t_last;   /* when the previous event ended */
    unsigned events; /* events completed in this stream */
    bool nl;         /* the last byte seen was a newline */
    bool busy;       /* a stream runs in the slot */
    size_t head_len; /* bytes of the current event seen, up to sizeof(head) */
    char head[12];   /* its first bytes: "data: [DONE]" is not a token */
};

struct lg_tok_ctx {
    struct lg_tok_slot *slots;
    double w0, w1; /* the measurement window, lg_now() times; w0 = 0: not open */
    unsigned long long tokens, streams_done, failed;
    float *gaps; /* inter-token gaps in the window, µs */
    size_t n_gaps, cap_gaps;
};

static void lg_tok_gap(struct lg_tok_ctx *c, double gap_s)
{
    if (c->n_gaps == c->cap_gaps) {
        size_t cap = c->cap_gaps ? c->cap_gaps * 2 : 65536;
        float *g = realloc(c->gaps, cap * sizeof(*g));
        if (g == NULL)
            return;
        c->gaps = g;
        c->cap_gaps = cap;
    }
    c->gaps[c->n_gaps++] = (float)(gap_s * 1e6);
}

/* An event ended at now. Event 0 is the role chunk, 1 the first token (its
 * gap is the time to first token's business, not the relay's), then one
 * token per event until "data: [DONE]". */
static void lg_tok_event(struct lg_tok_ctx *c, struct lg_tok_slot *s, double now)
{
    static const char done[] = "data: [DONE]";
    bool token = s->events >= 1 &&
                 !(s->head_len >= sizeof(done) - 1 && memcmp(s->head, done, sizeof(done) - 1) == 0);
    bool in_window = c->w0 > 0 && now >= c->w0 && now < c->w1;
    if (token && in_window) {
        c->tokens++;
        if (s->events >= 2)
            lg_tok_gap(c, now - s->t_last);
    }
    s->events++;
    s->t_last = now;
    s->head_len = 0;
}

/* Splits the body into SSE events (a blank line ends one) across pieces. */
static void lg_tok_data(struct lg_engine *e, struct lg_xfer *x, const char *data, size_t n)
{
    struct lg_tok_ctx *c = e->user;
    struct lg_tok_slot *s = &c->slots[x->idx];
    double now = lg_now();
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(data + i, '\n', n - i);
        size_t at = nl != NULL ? (size_t)(nl - data) : n;
        if (at > i) {
            size_t take = sizeof(s->head) - s->head_len;
            if (take > at - i)
                take = at - i;
            memcpy(s->head + s->head_len, data + i, take);
            s->head_len += take;
            s->nl = false;
        }
        if (nl == NULL)
            return;
        if (s->nl) {
            lg_tok_event(c, s, now); /* a blank line: the event ended */
            s->nl = false;
        } else {
            s->nl = true;
        }
        i = at + 1;
    }
}

static void lg_tok_done(struct lg_engine *e, struct lg_xfer *x, CURLcode rc)
{
    struct lg_tok_ctx *c = e->user;
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && status == 200 && lg_has_done(x->tail, x->tail_len))
        c->streams_done++;
    else
        c->failed++;
    c->slots[x->idx].busy = false;
}

static int lg_cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double lg_pct(const float *v, size_t n, double p)
{
    if (n == 0)
        return -1;
    size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

int lg_tokens(const struct lg_tokens_opts *o, struct lg_tokens_stats *st)
{
    struct lg_engine e;
    int rc = lg_engine_init(&e);
    if (rc != 0)
        return rc;
    struct lg_tok_ctx c = {0};
    struct lg_urls *urls = malloc(sizeof(*urls));
    char *bodies = NULL;
    size_t *body_len = NULL;
    const size_t body_max = 256;
    c.slots = calloc(o->streams, sizeof(*c.slots));
    bodies = malloc(o->streams * body_max);
    if (urls == NULL || c.slots == NULL || bodies == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    rc = lg_urls_parse(urls, o->base_url);
    if (rc != 0)
        goto out;
    e.user = &c;
    e.on_data = lg_tok_data;
    e.on_done = lg_tok_done;
    memset(st, 0, sizeof(*st));
    /* Each slot's own prompt, so a prefix-aware policy spreads the streams. */
    body_len = calloc(o->streams, sizeof(*body_len));
    if (body_len == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < o->streams; i++) {
        int len = snprintf(bodies + i * body_max, body_max,
                           "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"stream %zu: tell me a long story\"}],\"max_tokens\":%u,"
                           "\"stream\":true}",
                           i, o->tokens);
        body_len[i] = (size_t)len;
    }
    /* The first streams start spread over one stream's length, so their
     * tokens do not all fall due at the same instants. */
    double t0 = lg_now();
    double spread = o->spread_s > 0 ? o->spread_s : 0;
    double end = t0 + o->warmup_s + o->window_s;
    c.w0 = t0 + o->warmup_s;
    c.w1 = end;
    double cpu0 = -1;
    while (lg_now() < end) {
        double now = lg_now();
        for (size_t i = 0; i < o->streams; i++) {
            struct lg_tok_slot *s = &c.slots[i];
            if (s->busy || (c.streams_done + c.failed == 0 &&
                            now - t0 < spread * (double)i / (double)o->streams))
                continue;
            *s = (struct lg_tok_slot){.busy = true};
            if (lg_add(&e, lg_urls_take(urls, true), bodies + i * body_max, body_len[i], NULL, NULL,
                       i) != 0) {
                s->busy = false;
                c.failed++;
            }
        }
        if (cpu0 < 0 && now >= c.w0) {
            cpu0 = 0;
            for (size_t k = 0; k < o->n_pids; k++)
                cpu0 += lg_proc_cpu_s(o->pids[k]);
            st->streams_at_window = e.running;
        }
        lg_kick(&e);
        lg_step(&e, 5);
    }
    double cpu1 = 0;
    for (size_t k = 0; k < o->n_pids; k++)
        cpu1 += lg_proc_cpu_s(o->pids[k]);
    st->window_s = o->window_s;
    st->cpu_s = cpu0 >= 0 ? cpu1 - cpu0 : 0;
    st->tokens = c.tokens;
    st->streams_done = c.streams_done;
    st->failed = c.failed;
    st->gaps = c.n_gaps;
    if (c.n_gaps > 0)
        qsort(c.gaps, c.n_gaps, sizeof(*c.gaps), lg_cmp_float);
    st->gap_p50_us = lg_pct(c.gaps, c.n_gaps, 50);
    st->gap_p99_us = lg_pct(c.gaps, c.n_gaps, 99);
    st->gap_p999_us = lg_pct(c.gaps, c.n_gaps, 99.9);
out:
    free(body_len);
    lg_engine_fini(&e);
    free(c.gaps);
    free(c.slots);
    free(bodies);
    free(urls);
    return rc;
}
