/*
 * Mock worker counters for the routing benchmark (see mockstats.h).
 */
#include "tests/bench/mockstats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#define MS_BODY_MAX (64u * 1024u)

struct ms_body {
    char buf[MS_BODY_MAX];
    size_t len;
};

static size_t ms_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct ms_body *b = userp;
    size_t n = size * nmemb;
    if (b->len + n >= sizeof(b->buf))
        return 0;
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

/* GET (post = NULL) or POST url into b; returns the HTTP status or -EIO. */
static long ms_http(CURL *h, const char *url, const char *post, struct ms_body *b)
{
    b->len = 0;
    b->buf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ms_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    if (post != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, post);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (curl_easy_perform(h) != CURLE_OK)
        return -EIO;
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static long long ms_int(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

int ms_reset(struct ms_fleet *f)
{
    CURL *h = curl_easy_init();
    struct ms_body *b = malloc(sizeof(*b));
    int rc = 0;
    if (h == NULL || b == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) {
        char url[160];
        snprintf(url, sizeof(url), "%s/mock/reset", f->mock[i].url);
        if (ms_http(h, url, "{}", b) != 200)
            rc = -EIO;
        f->mock[i].inflight_sum = 0;
        f->mock[i].samples = 0;
    }
out:
    free(b);
    curl_easy_cleanup(h);
    return rc;
}

static void *ms_loop(void *arg)
{
    struct ms_fleet *f = arg;
    CURL *h[MS_MAX_MOCKS] = {0};
    struct ms_body *b = malloc(sizeof(*b));
    for (size_t i = 0; i < f->n; i++)
        h[i] = curl_easy_init();
    while (b != NULL && !atomic_load_explicit(&f->stop, memory_order_acquire)) {
        for (size_t i = 0; i < f->n; i++) {
            char url[160];
            snprintf(url, sizeof(url), "%s/mock/stats", f->mock[i].url);
            if (h[i] == NULL || ms_http(h[i], url, NULL, b) != 200)
                continue;
            json_t *o = json_loads(b->buf, 0, NULL);
            long long v = ms_int(o, "inflight");
            if (v >= 0) {
                f->mock[i].inflight_sum += (double)v;
                f->mock[i].samples++;
            }
            json_decref(o);
        }
        struct timespec ts = {f->period_ms / 1000, (long)(f->period_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (size_t i = 0; i < f->n; i++)
        curl_easy_cleanup(h[i]);
    free(b);
    return NULL;
}

int ms_start(struct ms_fleet *f, unsigned period_ms)
{
    f->period_ms = period_ms;
    atomic_store_explicit(&f->stop, false, memory_order_release);
    if (pthread_create(&f->thread, NULL, ms_loop, f) != 0)
        return -EAGAIN;
    f->running = true;
    return 0;
}

int ms_stop(struct ms_fleet *f)
{
    if (f->running) {
        atomic_store_explicit(&f->stop, true, memory_order_release);
        pthread_join(f->thread, NULL);
        f->running = false;
    }
    CURL *h = curl_easy_init();
    struct ms_body *b = malloc(sizeof(*b));
    int rc = 0;
    if (h == NULL || b == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) {
        char url[160];
        snprintf(url, sizeof(url), "%s/mock/stats", f->mock[i].url);
        json_t *o = NULL;
        if (ms_http(h, url, NULL, b) == 200)
            o = json_loads(b->buf, 0, NULL);
        if (o == NULL) {
            rc = -EIO;
            continue;
        }
        f->mock[i].hit_tokens = ms_int(o, "prefix_hit_tokens");
        f->mock[i].query_tokens = ms_int(o, "prefix_query_tokens");
        f->mock[i].requests = ms_int(o, "requests_total");
        json_decref(o);
    }
out:
    free(b);
    curl_easy_cleanup(h);
    return rc;
}
