/*
 * Counters of the mock worker (see stats.h). The last request is kept as raw
 * bytes handed over by the request (no copy, no JSON on the hot path) and
 * turned into JSON only when /mock/stats asks.
 */
#include "tests/mockworker/stats.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mw_stats_init(struct mw_stats *s)
{
    memset(s, 0, sizeof(*s));
    atomic_init(&s->inflight, 0);
    int rc = pthread_mutex_init(&s->lock, NULL);
    return rc == 0 ? 0 : -rc;
}

void mw_stats_fini(struct mw_stats *s)
{
    free(s->last_body);
    free(s->last_headers);
    pthread_mutex_destroy(&s->lock);
}

void mw_stats_accept(struct mw_stats *s)
{
    atomic_fetch_add_explicit(&s->inflight, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->lock);
    s->requests_total++;
    pthread_mutex_unlock(&s->lock);
}

void mw_stats_release(struct mw_stats *s)
{
    int64_t before = atomic_fetch_sub_explicit(&s->inflight, 1, memory_order_relaxed);
    if (before <= 0) {
        /* A double release would be a bug in the caller: keep the count sane. */
        atomic_fetch_add_explicit(&s->inflight, 1, memory_order_relaxed);
        log_warn("mock stats: inflight released at zero");
    }
}

void mw_stats_status(struct mw_stats *s, int status)
{
    if (status < MW_STATUS_MIN || status > MW_STATUS_MAX)
        return;
    pthread_mutex_lock(&s->lock);
    s->by_status[status - MW_STATUS_MIN]++;
    pthread_mutex_unlock(&s->lock);
}

void mw_stats_client_abort(struct mw_stats *s)
{
    pthread_mutex_lock(&s->lock);
    s->client_aborts++;
    pthread_mutex_unlock(&s->lock);
}

void mw_stats_prefill_kind(struct mw_stats *s, int remote_used)
{
    pthread_mutex_lock(&s->lock);
    if (remote_used)
        s->remote_prefill_used++;
    else
        s->local_prefill++;
    pthread_mutex_unlock(&s->lock);
}

void mw_stats_last_request(struct mw_stats *s, char *body, size_t body_len, char *headers,
                           size_t headers_len)
{
    /* The last traceparent is kept across requests that carry none. */
    for (size_t pos = 0; headers != NULL && pos < headers_len;) {
        const char *name = headers + pos;
        pos += strlen(name) + 1;
        if (pos >= headers_len)
            break;
        const char *value = headers + pos;
        pos += strlen(value) + 1;
        if (strcmp(name, "traceparent") == 0) {
            pthread_mutex_lock(&s->lock);
            snprintf(s->last_traceparent, sizeof(s->last_traceparent), "%s", value);
            pthread_mutex_unlock(&s->lock);
        }
    }
    pthread_mutex_lock(&s->lock);
    char *old_body = s->last_body;
    char *old_headers = s->last_headers;
    s->last_body = body;
    s->last_body_len = body_len;
    s->last_headers = headers;
    s->last_headers_len = headers_len;
    pthread_mutex_unlock(&s->lock);
    free(old_body);
    free(old_headers);
}

static json_t *headers_to_json(const char *buf, size_t len)
{
    json_t *obj = json_object();
    size_t pos = 0;
    while (obj != NULL && pos < len) {
        const char *name = buf + pos;
        pos += strlen(name) + 1;
        if (pos >= len)
            break;
        const char *value = buf + pos;
        pos += strlen(value) + 1;
        /* A repeated header keeps its values joined, as HTTP allows. */
        json_t *prev = json_object_get(obj, name);
        if (json_is_string(prev)) {
            size_t n = json_string_length(prev) + 2 + strlen(value) + 1;
            char *joined = malloc(n);
            if (joined != NULL) {
                snprintf(joined, n, "%s, %s", json_string_value(prev), value);
                json_object_set_new(obj, name, json_string(joined));
                free(joined);
            }
        } else {
            json_object_set_new(obj, name, json_stringn(value, strlen(value)));
        }
    }
    return obj;
}

void mw_stats_to_json(struct mw_stats *s, json_t *obj)
{
    json_object_set_new(obj, "inflight",
                        json_integer(atomic_load_explicit(&s->inflight, memory_order_relaxed)));
    json_t *by_status = json_object();
    pthread_mutex_lock(&s->lock);
    json_object_set_new(obj, "requests_total", json_integer((json_int_t)s->requests_total));
    json_object_set_new(obj, "client_aborts", json_integer((json_int_t)s->client_aborts));
    json_object_set_new(obj, "remote_prefill_used",
                        json_integer((json_int_t)s->remote_prefill_used));
    json_object_set_new(obj, "local_prefill", json_integer((json_int_t)s->local_prefill));
    for (int i = 0; i <= MW_STATUS_MAX - MW_STATUS_MIN; i++) {
        if (s->by_status[i] == 0)
            continue;
        char code[16];
        snprintf(code, sizeof(code), "%d", i + MW_STATUS_MIN);
        json_object_set_new(by_status, code, json_integer((json_int_t)s->by_status[i]));
    }
    json_t *last = json_null();
    if (s->last_body != NULL) {
        last = json_loadb(s->last_body, s->last_body_len, JSON_DECODE_ANY, NULL);
        if (last == NULL)
            last = json_stringn(s->last_body, s->last_body_len);
    }
    json_t *headers = s->last_headers != NULL
                          ? headers_to_json(s->last_headers, s->last_headers_len)
                          : json_null();
    json_t *traceparent =
        s->last_traceparent[0] != '\0' ? json_string(s->last_traceparent) : json_null();
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(obj, "last_traceparent", traceparent != NULL ? traceparent : json_null());
    json_object_set_new(obj, "by_status", by_status);
    json_object_set_new(obj, "last_request", last != NULL ? last : json_null());
    json_object_set_new(obj, "last_request_headers", headers != NULL ? headers : json_null());
}

void mw_stats_reset(struct mw_stats *s)
{
    pthread_mutex_lock(&s->lock);
    s->requests_total = 0;
    s->client_aborts = 0;
    s->remote_prefill_used = 0;
    s->local_prefill = 0;
    memset(s->by_status, 0, sizeof(s->by_status));
    s->last_traceparent[0] = '\0';
    char *old_body = s->last_body;
    char *old_headers = s->last_headers;
    s->last_body = NULL;
    s->last_body_len = 0;
    s->last_headers = NULL;
    s->last_headers_len = 0;
    pthread_mutex_unlock(&s->lock);
    free(old_body);
    free(old_headers);
}
