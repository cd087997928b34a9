/*
 * The span exporter (see trace_export.h). Rings, wake-up and sleeping flag
 * work as the access log's (access_log.c): a loop writes the eventfd only
 * when the exporter said it sleeps and the ring passed half full, so a
 * steady trickle of spans waits for the batch interval and a burst leaves
 * early. A batch is built by copying whole span lines out of the rings
 * (consumed at once, freeing room for the loops) into one request body.
 */
#include "dataplane/obs/trace_export.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/version.h"
#include "dataplane/core/json_writer.h"
#include "dataplane/obs/metrics.h"
#include "dataplane/core/spsc_ring.h"
#include "dataplane/obs/trace_spans.h"

#define DP_TRACER_MAX_LOOPS 256u
#define DP_OTLP_PATH        "/v1/traces"

struct dp_tracer {
    char url[CFG_URL_MAX + sizeof(DP_OTLP_PATH)];
    char head[512]; /* the request body up to the spans array */
    size_t head_len;
    size_t ring_cap;
    uint32_t batch_size;
    uint64_t interval_ms;
    uint64_t timeout_ms;
    struct dp_ring *_Atomic rings[DP_TRACER_MAX_LOOPS];
    struct dp_metrics *m;
    pthread_t thread;
    int evfd;
    _Atomic bool sleeping;
    _Atomic bool stop;
    uint64_t give_up_ms; /* stopping: batches not sent by then are dropped (0 = running) */
    CURL *easy;
    struct curl_slist *headers;
    struct buf body;
    uint32_t in_body; /* spans in body */
    bool warned;
};

static void tr_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static size_t tr_discard(char *data, size_t size, size_t nmemb, void *userp)
{
    (void)data;
    (void)userp;
    return size * nmemb;
}

/* POSTs the spans in t->body (closing the envelope), then empties it. */
static void tr_post(struct dp_tracer *t)
{
    if (t->in_body == 0)
        return;
    (void)buf_append_str(&t->body, "]}]}]}");
    long status = 0;
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    uint64_t now = proc_monotonic_ms();
    if (t->give_up_ms != 0) {
        /* Stopping: one export_timeout in all, not one per batch left. */
        if (now >= t->give_up_ms) {
            tr_count(&t->m->trace_spans_dropped, t->in_body);
            buf_reset(&t->body);
            t->in_body = 0;
            return;
        }
        curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, (long)(t->give_up_ms - now));
    }
    if (buf_error(&t->body) == 0) {
        curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body.data);
        curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->body.len);
        rc = curl_easy_perform(t->easy);
        if (rc == CURLE_OK)
            curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    }
    if (rc == CURLE_OK && status >= 200 && status < 300) {
        tr_count(&t->m->trace_spans_exported, t->in_body);
        t->warned = false;
    } else {
        tr_count(&t->m->trace_spans_dropped, t->in_body);
        tr_count(&t->m->trace_export_failures, 1);
        if (!t->warned)
            log_warn("tracing: export of %u spans to %s failed: %s; spans are dropped until "
                     "it works again",
                     t->in_body, t->url,
                     rc != CURLE_OK ? curl_easy_strerror(rc) : "the collector answered an error");
        t->warned = true;
    }
    buf_reset(&t->body);
    t->in_body = 0;
}

/* Appends one span line (without its '\n') to the batch, sending first
 * when the batch is full. */
static void tr_add_span(struct dp_tracer *t, const char *span, size_t len)
{
    if (t->in_body == 0)
        (void)buf_append(&t->body, t->head, t->head_len);
    else
        (void)buf_append(&t->body, ",", 1);
    (void)buf_append(&t->body, span, len);
    t->in_body++;
    if (t->in_body >= t->batch_size)
        tr_post(t);
}

/* Moves every whole span line of r into batches. */
static void tr_drain_ring(struct dp_tracer *t, struct dp_ring *r)
{
    char span[DP_SPAN_MAX];
    for (;;) {
        struct iovec iov[2];
        size_t have = dp_ring_peek(r, iov);
        if (have == 0)
            return;
        /* One line at a time: copy up to its '\n' (it may wrap). */
        size_t n = 0;
        bool whole = false;
        for (int k = 0; k < 2 && !whole; k++) {
            const char *p = iov[k].iov_base;
            const char *nl = memchr(p, '\n', iov[k].iov_len);
            size_t take = nl != NULL ? (size_t)(nl - p) : iov[k].iov_len;
            if (n + take > sizeof(span))
                take = sizeof(span) - n; /* cannot happen: spans are shorter */
            memcpy(span + n, p, take);
            n += take;
            whole = nl != NULL;
        }
        dp_ring_consume(r, whole ? n + 1 : have);
        if (whole)
            tr_add_span(t, span, n);
    }
}

static bool tr_drain(struct dp_tracer *t)
{
    bool any = false;
    for (unsigned i = 0; i < DP_TRACER_MAX_LOOPS; i++) {
        struct dp_ring *r = atomic_load_explicit(&t->rings[i], memory_order_acquire);
        struct iovec iov[2];
        if (r != NULL && dp_ring_peek(r, iov) > 0) {
            any = true;
            tr_drain_ring(t, r);
        }
    }
    tr_post(t); /* what is left: a partial batch leaves each interval */
    return any;
}

static void *tr_main(void *arg)
{
    struct dp_tracer *t = arg;
    for (;;) {
        bool stop = atomic_load_explicit(&t->stop, memory_order_acquire);
        if (stop && t->give_up_ms == 0)
            t->give_up_ms = proc_monotonic_ms() + t->timeout_ms;
        tr_drain(t);
        if (stop)
            return NULL;
        atomic_store_explicit(&t->sleeping, true, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load_explicit(&t->stop, memory_order_seq_cst)) {
            struct pollfd p = {.fd = t->evfd, .events = POLLIN};
            if (poll(&p, 1, (int)t->interval_ms) > 0) {
                uint64_t v;
                (void)read(t->evfd, &v, sizeof(v));
            }
        }
        atomic_store_explicit(&t->sleeping, false, memory_order_relaxed);
    }
}

static void tr_wake(struct dp_tracer *t)
{
    uint64_t one = 1;
    if (write(t->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("tracing: waking the exporter: %s", strerror(errno));
}

/* The envelope up to the spans array: resource and scope. */
static int tr_build_head(struct dp_tracer *t, const struct cfg *cfg)
{
    char host[64] = "";
    (void)gethostname(host, sizeof(host) - 1);
    char instance[96];
    snprintf(instance, sizeof(instance), "%s:%d", host, (int)getpid());
    struct dp_jw w;
    dp_jw_init(&w, t->head, sizeof(t->head));
    dp_jw_lit(&w, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
                  "{\"key\":\"service.name\",\"value\":{\"stringValue\":");
    dp_jw_str(&w, cfg->tracing.service_name);
    dp_jw_lit(&w, "}},{\"key\":\"service.instance.id\",\"value\":{\"stringValue\":");
    dp_jw_str(&w, instance);
    dp_jw_lit(&w, "}},{\"key\":\"service.version\",\"value\":{\"stringValue\":\"" SY_VERSION
                  "\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"switchyard-dataplane\","
                  "\"version\":\"" SY_VERSION "\"},\"spans\":[");
    t->head_len = w.len;
    return dp_jw_ok(&w) ? 0 : -ENAMETOOLONG;
}

static int tr_setup_curl(struct dp_tracer *t)
{
    t->easy = curl_easy_init();
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h = t->headers != NULL ? curl_slist_append(t->headers, "Expect:") : NULL;
    if (t->easy == NULL || h == NULL)
        return -ENOMEM;
    t->headers = h;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(t->easy, CURLOPT_URL, t->url);
    rc |= curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(t->easy, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(t->easy, CURLOPT_NOPROXY, "");
    rc |= curl_easy_setopt(t->easy, CURLOPT_POST, 1L);
    rc |= curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
    rc |= curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, (long)t->timeout_ms);
    rc |= curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)t->timeout_ms);
    rc |= curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, tr_discard);
    return rc == CURLE_OK ? 0 : -EINVAL;
}

static void tr_free(struct dp_tracer *t)
{
    for (unsigned i = 0; i < DP_TRACER_MAX_LOOPS; i++) {
        struct dp_ring *r = atomic_load_explicit(&t->rings[i], memory_order_acquire);
        if (r != NULL) {
            dp_ring_fini(r);
            free(r);
        }
    }
    if (t->easy != NULL)
        curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->headers);
    buf_fini(&t->body);
    if (t->evfd >= 0)
        close(t->evfd);
    free(t);
}

int dp_tracer_open(const struct cfg *cfg, struct dp_metrics *m, struct dp_tracer **out)
{
    *out = NULL;
    const struct cfg_tracing *tc = &cfg->tracing;
    if (tc->otlp_endpoint[0] == '\0')
        return 0;
    struct dp_tracer *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->evfd = -1;
    size_t n = strlen(tc->otlp_endpoint);
    while (n > 0 && tc->otlp_endpoint[n - 1] == '/')
        n--;
    bool has_path =
        n >= strlen(DP_OTLP_PATH) && memcmp(tc->otlp_endpoint + n - strlen(DP_OTLP_PATH),
                                            DP_OTLP_PATH, strlen(DP_OTLP_PATH)) == 0;
    snprintf(t->url, sizeof(t->url), "%.*s%s", (int)n, tc->otlp_endpoint,
             has_path ? "" : DP_OTLP_PATH);
    t->m = m;
    t->ring_cap = (size_t)tc->queue_size;
    t->batch_size = tc->batch_size;
    t->interval_ms = tc->batch_interval_ms;
    t->timeout_ms = tc->export_timeout_ms;
    /* A batch holds batch_size spans of DP_SPAN_MAX bytes at most. */
    buf_init(&t->body, sizeof(t->head) + (size_t)t->batch_size * (DP_SPAN_MAX + 1) + 16);
    int rc = tr_build_head(t, cfg);
    if (rc == 0)
        rc = tr_setup_curl(t);
    if (rc == 0) {
        t->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        rc = t->evfd < 0 ? -errno : -pthread_create(&t->thread, NULL, tr_main, t);
    }
    if (rc != 0) {
        log_error("tracing: cannot start the span exporter: %s", strerror(-rc));
        tr_free(t);
        return rc;
    }
    log_info("tracing: exporting spans to %s (batches of %u, every %llu ms)", t->url, t->batch_size,
             (unsigned long long)t->interval_ms);
    *out = t;
    return 0;
}

void dp_tracer_close(struct dp_tracer *t)
{
    if (t == NULL)
        return;
    atomic_store_explicit(&t->stop, true, memory_order_seq_cst);
    tr_wake(t);
    pthread_join(t->thread, NULL);
    tr_free(t);
}

static struct dp_ring *tr_ring(struct dp_tracer *t, unsigned index)
{
    struct dp_ring *r = atomic_load_explicit(&t->rings[index], memory_order_relaxed);
    if (r != NULL)
        return r;
    r = malloc(sizeof(*r));
    if (r == NULL)
        return NULL;
    if (dp_ring_init(r, t->ring_cap) != 0) {
        free(r);
        return NULL;
    }
    atomic_store_explicit(&t->rings[index], r, memory_order_release);
    return r;
}

void dp_tracer_push(struct dp_tracer *t, unsigned index, const char *span, size_t len)
{
    struct dp_ring *r = index < DP_TRACER_MAX_LOOPS ? tr_ring(t, index) : NULL;
    if (r == NULL || !dp_ring_push(r, span, len)) {
        tr_count(&t->m->trace_spans_dropped, 1);
        return;
    }
    if (dp_ring_used(r) < r->cap / 2)
        return; /* the interval will take it */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&t->sleeping, memory_order_seq_cst) &&
        atomic_exchange_explicit(&t->sleeping, false, memory_order_seq_cst))
        tr_wake(t);
}
