/*
 * Client traffic generator for e2e tests (see harness_load.h). One thread,
 * one curl multi handle, a fixed array of transfer slots. A request closed
 * on purpose is removed from the multi handle mid-transfer, which makes
 * libcurl close its connection: the router sees a client disconnect.
 */
#include "tests/e2e/harness_load.h"

#include "common/buf.h"
#include "common/rng.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/e2e/harness.h"

#define H_LOAD_MAX_CONC 256
#define H_LOAD_TAIL     16
#define H_LOAD_BODY_CAP (64u * 1024u) /* a non-streamed answer kept to be checked */

struct h_load_xfer {
    CURL *easy;
    struct curl_slist *headers;
    char body[512];
    bool stream;
    bool done_marker; /* "[DONE]" seen (streams) */
    bool error_event; /* an "error" object seen (streams) */
    struct buf resp;  /* a non-streamed answer, up to H_LOAD_BODY_CAP */
    bool resp_overflow;
    char tail[H_LOAD_TAIL];
    size_t tail_len;
    size_t bytes;
    int64_t abort_at_ms; /* -1: never */
};

struct h_load {
    struct h_load *next; /* h_load_all, under h_load_all_mu */
    struct h_load_opts o;
    pthread_t thread;
    pthread_mutex_t mu;
    struct h_load_result r; /* under mu */
    long finished;          /* under mu */
    atomic_bool stop;
    atomic_bool abort_rest;
    struct rng rng; /* seeded from opts.seed: a run's mix repeats */
    CURLM *multi;
    struct h_load_xfer *slot[H_LOAD_MAX_CONC];
};

static pthread_mutex_t h_load_all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct h_load *h_load_all;

static uint32_t h_load_rand(struct h_load *l)
{
    return (uint32_t)(rng_next(&l->rng) >> 32);
}

/* Whether needle occurs in tail (the previous chunk's last bytes) + data. */
static bool h_load_seen(const struct h_load_xfer *x, const char *data, size_t len,
                        const char *needle)
{
    size_t nlen = strlen(needle);
    char buf[2 * H_LOAD_TAIL];
    size_t head = len < H_LOAD_TAIL ? len : H_LOAD_TAIL;
    memcpy(buf, x->tail, x->tail_len);
    memcpy(buf + x->tail_len, data, head);
    return memmem(buf, x->tail_len + head, needle, nlen) != NULL ||
           memmem(data, len, needle, nlen) != NULL;
}

static size_t h_load_on_body(char *data, size_t size, size_t n, void *arg)
{
    struct h_load_xfer *x = arg;
    size_t len = size * n;
    x->bytes += len;
    if (x->stream) {
        x->done_marker = x->done_marker || h_load_seen(x, data, len, "[DONE]");
        x->error_event = x->error_event || h_load_seen(x, data, len, "\"error\"");
        size_t keep = len < H_LOAD_TAIL ? len : H_LOAD_TAIL;
        memcpy(x->tail, data + len - keep, keep);
        x->tail_len = keep;
        return len;
    }
    if (buf_append(&x->resp, data, len) != 0)
        x->resp_overflow = true;
    return len;
}

/* A non-streamed 200 is whole: a JSON object with one choice. */
static bool h_load_plain_is_whole(const struct h_load_xfer *x)
{
    if (x->resp.data == NULL || x->resp_overflow)
        return false;
    json_error_t jerr;
    json_t *j = json_loadb(x->resp.data, x->resp.len, 0, &jerr);
    bool whole = j != NULL && json_array_size(json_object_get(j, "choices")) == 1;
    json_decref(j);
    return whole;
}

static void h_load_fail(struct h_load *l, const char *what)
{
    if (l->r.first_failure[0] == '\0')
        snprintf(l->r.first_failure, sizeof(l->r.first_failure), "%s", what);
}

static int h_load_start_one(struct h_load *l, int i)
{
    struct h_load_xfer *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return -ENOMEM;
    buf_init(&x->resp, H_LOAD_BODY_CAP);
    x->stream = (int)(h_load_rand(l) % 100) < l->o.stream_percent;
    int max_tokens =
        1 + (int)(h_load_rand(l) % (uint32_t)(l->o.max_tokens > 0 ? l->o.max_tokens : 1));
    bool chat = h_load_rand(l) % 2 == 0;
    const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
    unsigned topic = h_load_rand(l) % 1000;
    if (chat)
        snprintf(x->body, sizeof(x->body),
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"question number %u about routing\"}]}",
                 l->o.model, max_tokens, x->stream ? "true" : "false", topic);
    else
        snprintf(x->body, sizeof(x->body),
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"prompt\":\"prompt %u\"}",
                 l->o.model, max_tokens, x->stream ? "true" : "false", topic);
    x->abort_at_ms = -1;
    if ((int)(h_load_rand(l) % 100) < l->o.abort_percent)
        x->abort_at_ms =
            h_now_ms() +
            (int64_t)(h_load_rand(l) % (uint32_t)(l->o.abort_max_ms > 0 ? l->o.abort_max_ms : 1));
    char url[256];
    snprintf(url, sizeof(url), "%s%s", l->o.base, path);
    x->easy = curl_easy_init();
    if (x->easy == NULL) {
        free(x);
        return -ENOMEM;
    }
    x->headers = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, h_load_on_body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS,
                     (long)(l->o.request_timeout_ms > 0 ? l->o.request_timeout_ms : 30000));
    curl_multi_add_handle(l->multi, x->easy);
    l->slot[i] = x;
    pthread_mutex_lock(&l->mu);
    l->r.started++;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

static void h_load_free_xfer(struct h_load *l, int i)
{
    struct h_load_xfer *x = l->slot[i];
    curl_multi_remove_handle(l->multi, x->easy);
    curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    buf_fini(&x->resp);
    free(x);
    l->slot[i] = NULL;
}

static void h_load_finish(struct h_load *l, int i, CURLcode code)
{
    struct h_load_xfer *x = l->slot[i];
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    char what[400];
    pthread_mutex_lock(&l->mu);
    if (code != CURLE_OK) {
        l->r.transport++;
        if (code == CURLE_OPERATION_TIMEDOUT)
            l->r.timeouts++;
        snprintf(what, sizeof(what), "curl error %d (%s) after %zu bytes, status %ld: %.120s",
                 (int)code, curl_easy_strerror(code), x->bytes, status, x->body);
        h_load_fail(l, what);
    } else if (status != 200) {
        l->r.http_error++;
        if (status >= 500 && status <= 505)
            l->r.status_5xx[status - 500]++;
        snprintf(what, sizeof(what), "status %ld: %.120s", status, x->body);
        h_load_fail(l, what);
    } else if (x->stream && (!x->done_marker || x->error_event)) {
        l->r.truncated++;
        snprintf(what, sizeof(what), "stream %s after %zu bytes: %.120s",
                 x->error_event ? "with an error event" : "without [DONE]", x->bytes, x->body);
        h_load_fail(l, what);
    } else if (!x->stream && !h_load_plain_is_whole(x)) {
        l->r.truncated++;
        snprintf(what, sizeof(what), "answer truncated or not JSON: %.120s",
                 x->resp.data != NULL ? x->resp.data : "");
        h_load_fail(l, what);
    } else {
        l->r.ok++;
    }
    l->finished++;
    pthread_mutex_unlock(&l->mu);
    h_load_free_xfer(l, i);
}

static void h_load_abort(struct h_load *l, int i)
{
    pthread_mutex_lock(&l->mu);
    l->r.aborted++;
    l->finished++;
    pthread_mutex_unlock(&l->mu);
    h_load_free_xfer(l, i);
}

static void *h_load_main(void *arg)
{
    struct h_load *l = arg;
    for (;;) {
        bool stopping = atomic_load(&l->stop);
        int active = 0;
        for (int i = 0; i < l->o.concurrency; i++) {
            if (l->slot[i] == NULL && !stopping) {
                pthread_mutex_lock(&l->mu);
                bool more = l->o.total == 0 || l->r.started < l->o.total;
                pthread_mutex_unlock(&l->mu);
                if (more)
                    h_load_start_one(l, i);
            }
            if (l->slot[i] != NULL)
                active++;
        }
        if (active == 0 && (stopping || h_load_is_done(l)))
            break;
        int running = 0;
        curl_multi_perform(l->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(l->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct h_load_xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode code = m->data.result;
            for (int i = 0; i < l->o.concurrency; i++)
                if (l->slot[i] == x) {
                    h_load_finish(l, i, code);
                    break;
                }
        }
        int64_t now = h_now_ms();
        bool abort_all = stopping && atomic_load(&l->abort_rest);
        for (int i = 0; i < l->o.concurrency; i++) {
            struct h_load_xfer *x = l->slot[i];
            if (x != NULL && (abort_all || (x->abort_at_ms >= 0 && now >= x->abort_at_ms)))
                h_load_abort(l, i);
        }
        curl_multi_poll(l->multi, NULL, 0, 2, NULL);
    }
    return NULL;
}

int h_load_start(const struct h_load_opts *opts, struct h_load **out)
{
    if (opts->concurrency <= 0 || opts->concurrency > H_LOAD_MAX_CONC)
        return -EINVAL;
    struct h_load *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->o = *opts;
    rng_seed(&l->rng, opts->seed ? opts->seed : 1);
    pthread_mutex_init(&l->mu, NULL);
    l->multi = curl_multi_init();
    if (l->multi == NULL || pthread_create(&l->thread, NULL, h_load_main, l) != 0) {
        if (l->multi != NULL)
            curl_multi_cleanup(l->multi);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return -ENOMEM;
    }
    pthread_mutex_lock(&h_load_all_mu);
    l->next = h_load_all;
    h_load_all = l;
    pthread_mutex_unlock(&h_load_all_mu);
    *out = l;
    return 0;
}

void h_load_peek(struct h_load *l, struct h_load_result *r)
{
    pthread_mutex_lock(&l->mu);
    *r = l->r;
    pthread_mutex_unlock(&l->mu);
}

bool h_load_is_done(struct h_load *l)
{
    pthread_mutex_lock(&l->mu);
    bool done = l->o.total > 0 && l->finished >= l->o.total;
    pthread_mutex_unlock(&l->mu);
    return done;
}

void h_load_stop(struct h_load *l, bool abort_rest, struct h_load_result *r)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&h_load_all_mu);
    for (struct h_load **p = &h_load_all; *p != NULL; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    pthread_mutex_unlock(&h_load_all_mu);
    atomic_store(&l->abort_rest, abort_rest);
    atomic_store(&l->stop, true);
    pthread_join(l->thread, NULL);
    if (r != NULL)
        *r = l->r;
    curl_multi_cleanup(l->multi);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void h_load_stop_all(void)
{
    for (;;) {
        pthread_mutex_lock(&h_load_all_mu);
        struct h_load *l = h_load_all;
        pthread_mutex_unlock(&h_load_all_mu);
        if (l == NULL)
            return;
        h_load_stop(l, true, NULL);
    }
}
