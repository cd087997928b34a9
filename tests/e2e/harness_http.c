/*
 * The e2e harness's HTTP side (contract in harness.h): blocking requests,
 * Server-Sent Event streams, background requests that close their
 * connection at a chosen moment, and the mock worker's control endpoints.
 *
 * Every request uses a fresh curl handle with connection reuse forbidden, so
 * "the request is over" always means "its connection is closed": that is
 * what lets a test simulate a client disconnect precisely. Proxies are
 * disabled (CURLOPT_NOPROXY "*") so nothing leaves loopback whatever the
 * environment says. Buffers grow up to H_BODY_MAX and the transfer fails
 * beyond it.
 *
 * Threads: blocking helpers run on the caller's thread and may be called
 * from any thread. A background request (struct h_async) runs its own
 * thread with its own curl multi handle; the test thread talks to it only
 * through the struct's mutex, an atomic abort flag and curl_multi_wakeup().
 * A registry of live background requests lets teardown abort and free the
 * ones a failed test left behind.
 */
#include "tests/e2e/harness_tls.h"
#include "tests/e2e/harness.h"

#include "common/buf.h"
#include "common/list.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define H_CONNECT_TIMEOUT_MS 5000
#define H_MAX_EVENTS         (1u << 20)
#define H_ASYNC_TICK_MS      50
#define H_MAX_ARGS           64

static pthread_once_t h_curl_once = PTHREAD_ONCE_INIT;

static void h_curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- bounded buffers ---------------------------------------------------- */

/* Every response buffer: H_BODY_MAX including the terminating NUL. */
#define H_BUF_MAX (H_BODY_MAX - 1)

/* Hands the bytes over to *out (an empty string when nothing arrived). */
static int h_buf_move(struct buf *b, char **out, size_t *out_len)
{
    *out = buf_detach(b, out_len);
    return *out != NULL ? 0 : -ENOMEM;
}

/* ---- responses ---------------------------------------------------------- */

void h_resp_fini(struct h_resp *resp)
{
    if (resp == NULL)
        return;
    free(resp->body);
    free(resp->headers);
    memset(resp, 0, sizeof(*resp));
}

int h_resp_header(const struct h_resp *resp, const char *name, char *value, size_t len)
{
    size_t name_len = strlen(name);
    const char *line = resp->headers;
    while (line != NULL && *line != '\0') {
        const char *end = strchr(line, '\n');
        size_t line_len = end != NULL ? (size_t)(end - line) : strlen(line);
        if (line_len > name_len && line[name_len] == ':' &&
            strncasecmp(line, name, name_len) == 0) {
            const char *v = line + name_len + 1;
            const char *v_end = line + line_len;
            while (v < v_end && (*v == ' ' || *v == '\t'))
                v++;
            while (v_end > v && (v_end[-1] == '\r' || v_end[-1] == ' ' || v_end[-1] == '\t'))
                v_end--;
            snprintf(value, len, "%.*s", (int)(v_end - v), v);
            return 0;
        }
        line = end != NULL ? end + 1 : NULL;
    }
    return -ENOENT;
}

json_t *h_resp_json(const struct h_resp *resp)
{
    if (resp->body == NULL)
        return NULL;
    return json_loadb(resp->body, resp->body_len, 0, NULL);
}

/* ---- one transfer ------------------------------------------------------- */

/* State shared by the callbacks of one blocking transfer. */
struct h_xfer {
    struct buf body;
    struct buf headers;
    int64_t t0;
    struct h_sse *sse;  /* NULL unless streaming */
    struct buf pending; /* SSE bytes not yet split into events */
};

static bool h_headers_have(const char *const *headers, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (strncasecmp(headers[i], name, n) == 0 && headers[i][n] == ':')
            return true;
    }
    return false;
}

/* Builds the header list: the caller's, plus JSON content type and no Expect. */
static int h_header_list(const char *const *headers, bool has_body, struct curl_slist **out)
{
    struct curl_slist *list = NULL;
    struct curl_slist *next;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        next = curl_slist_append(list, headers[i]);
        if (next == NULL)
            goto out_free;
        list = next;
    }
    if (has_body && !h_headers_have(headers, "Content-Type")) {
        next = curl_slist_append(list, "Content-Type: application/json");
        if (next == NULL)
            goto out_free;
        list = next;
    }
    /* curl would wait up to 1 s for a 100-continue on large bodies. */
    next = curl_slist_append(list, "Expect:");
    if (next == NULL)
        goto out_free;
    *out = next;
    return 0;
out_free:
    curl_slist_free_all(list);
    return -ENOMEM;
}

static size_t h_on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct buf *b = userdata;
    size_t n = size * nmemb;
    /* Keep only the last response's headers (after 1xx or redirects). */
    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
        buf_reset(b);
    return buf_append(b, ptr, n) == 0 ? n : 0;
}

/* Records one complete SSE event (text without the blank line ending it). */
static int h_sse_add_event(struct h_sse *sse, const char *text, size_t len, int64_t t_ms)
{
    if (len > 0 && text[0] == ':')
        return 0; /* a comment (keep-alive): not an event */
    const char *data = text;
    size_t data_len = len;
    if (len >= 6 && memcmp(text, "data: ", 6) == 0 && memchr(text, '\n', len) == NULL) {
        data += 6;
        data_len -= 6;
    } else {
        sse->malformed = true;
    }
    if (sse->saw_done)
        sse->malformed = true; /* nothing may follow [DONE] */
    if (sse->n_events == H_MAX_EVENTS)
        return -E2BIG;
    if ((sse->n_events & (sse->n_events - 1)) == 0) {
        size_t cap = sse->n_events != 0 ? sse->n_events * 2 : 16;
        struct h_sse_event *ev = realloc(sse->events, cap * sizeof(*ev));
        if (ev == NULL)
            return -ENOMEM;
        sse->events = ev;
    }
    char *copy = malloc(data_len + 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, data, data_len);
    copy[data_len] = '\0';
    sse->events[sse->n_events++] =
        (struct h_sse_event){.data = copy, .len = data_len, .t_ms = t_ms};
    if (data_len == 6 && memcmp(data, "[DONE]", 6) == 0)
        sse->saw_done = true;
    return 0;
}

/* Splits every complete "...\n\n" event off the pending bytes. */
static int h_sse_split(struct h_xfer *x)
{
    int64_t t = h_now_ms() - x->t0;
    char *start = x->pending.data;
    char *end = x->pending.data + x->pending.len;
    int rc = 0;
    for (;;) {
        char *sep = memmem(start, (size_t)(end - start), "\n\n", 2);
        if (sep == NULL)
            break;
        rc = h_sse_add_event(x->sse, start, (size_t)(sep - start), t);
        if (rc != 0)
            return rc;
        start = sep + 2;
    }
    buf_consume(&x->pending, (size_t)(start - x->pending.data));
    return 0;
}

static size_t h_on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct h_xfer *x = userdata;
    size_t n = size * nmemb;
    if (buf_append(&x->body, ptr, n) != 0)
        return 0;
    if (x->sse != NULL) {
        if (buf_append(&x->pending, ptr, n) != 0 || h_sse_split(x) != 0)
            return 0;
    }
    return n;
}

/* Sets up what every request shares: URL, method, body, headers, limits. */
static int h_easy_setup(CURL *easy, const char *method, const char *url, const char *body,
                        size_t body_len, struct curl_slist *headers, int timeout_ms)
{
    CURLcode c = CURLE_OK;
    c |= curl_easy_setopt(easy, CURLOPT_URL, url);
    c |= curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    c |= curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
    c |= curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    h_tls_client_setup(easy);
    c |= curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, 1L);
    c |= curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)H_CONNECT_TIMEOUT_MS);
    c |= curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                          (long)(timeout_ms > 0 ? timeout_ms : H_HTTP_TIMEOUT_MS));
    c |= curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    if (body != NULL) {
        c |= curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
        c |= curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    if (method != NULL && strcmp(method, body != NULL ? "POST" : "GET") != 0)
        c |= curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    return c == CURLE_OK ? 0 : -EINVAL;
}

/* Runs one blocking transfer; resp is filled whatever happens. */
static int h_perform(const struct h_req *req, struct h_sse *sse, struct h_resp *resp)
{
    pthread_once(&h_curl_once, h_curl_init);
    memset(resp, 0, sizeof(*resp));
    struct h_xfer x = {.body = BUF_INIT(H_BUF_MAX),
                       .headers = BUF_INIT(H_BUF_MAX),
                       .t0 = h_now_ms(),
                       .sse = sse,
                       .pending = BUF_INIT(H_BUF_MAX)};
    size_t body_len = req->body == NULL    ? 0
                      : req->body_len != 0 ? req->body_len
                                           : strlen(req->body);
    struct curl_slist *headers = NULL;
    /* A bodyless POST says JSON too, as switchyard-ctl does: the admin API
     * refuses a state-changing request without it. */
    bool says_json = req->body != NULL ||
                     (req->method != NULL &&
                      (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0));
    int rc = h_header_list(req->headers, says_json, &headers);
    if (rc != 0)
        return rc;
    CURL *easy = curl_easy_init();
    if (easy == NULL) {
        rc = -ENOMEM;
        goto out_free_headers;
    }
    rc = h_easy_setup(easy, req->method, req->url, req->body, body_len, headers, req->timeout_ms);
    if (rc != 0)
        goto out_cleanup;
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, h_on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &x.headers);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, h_on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &x);

    CURLcode cc = curl_easy_perform(easy);
    resp->curl_code = (int)cc;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp->status);
    resp->elapsed_ms = h_now_ms() - x.t0;
    if (cc != CURLE_OK)
        rc = -EIO;
    if (sse != NULL && x.pending.len > 0)
        sse->malformed = true; /* the stream ended inside an event */
out_cleanup:
    curl_easy_cleanup(easy);
out_free_headers:
    curl_slist_free_all(headers);
    if (h_buf_move(&x.body, &resp->body, &resp->body_len) != 0 ||
        h_buf_move(&x.headers, &resp->headers, &resp->headers_len) != 0)
        rc = -ENOMEM;
    buf_fini(&x.pending);
    return rc;
}

int h_http(const struct h_req *req, struct h_resp *resp)
{
    return h_perform(req, NULL, resp);
}

int h_http_get(const char *url, struct h_resp *resp)
{
    const struct h_req req = {.method = "GET", .url = url};
    return h_perform(&req, NULL, resp);
}

int h_http_post_json(const char *url, const char *json, struct h_resp *resp)
{
    const struct h_req req = {.method = "POST", .url = url, .body = json};
    return h_perform(&req, NULL, resp);
}

void h_sse_fini(struct h_sse *sse)
{
    if (sse == NULL)
        return;
    for (size_t i = 0; i < sse->n_events; i++)
        free(sse->events[i].data);
    free(sse->events);
    h_resp_fini(&sse->resp);
    memset(sse, 0, sizeof(*sse));
}

int h_http_stream_req(const struct h_req *req, struct h_sse *sse)
{
    memset(sse, 0, sizeof(*sse));
    return h_perform(req, sse, &sse->resp);
}

int h_http_stream(const char *url, const char *json, struct h_sse *sse)
{
    const char *const headers[] = {"Accept: text/event-stream", NULL};
    const struct h_req req = {.method = "POST", .url = url, .body = json, .headers = headers};
    return h_http_stream_req(&req, sse);
}

/* ---- background requests ------------------------------------------------ */

/*
 * One background request. Created and destroyed by the test thread; its
 * thread owns easy (and drives multi); fields marked "mu" are shared and
 * read under mu. multi lives until destroy so h_async_abort can always wake
 * it. Lives in the registry from start to destroy.
 */
struct h_async {
    pthread_t thread;
    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers;
    char *url;
    char *body;
    size_t body_len;
    struct h_async_opts opts;
    int64_t t0;
    atomic_bool abort_requested;
    bool cb_abort; /* thread only: a callback decided to close */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct h_async_state st;   /* mu */
    struct buf body_buf;       /* mu */
    struct buf hdr_buf;        /* mu */
    struct list_node reg_link; /* on h_async_reg, under h_async_reg_mu */
};

static pthread_mutex_t h_async_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct list_node h_async_reg = LIST_STATIC_INIT(h_async_reg);

static size_t h_async_on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct h_async *a = userdata;
    size_t n = size * nmemb;
    pthread_mutex_lock(&a->mu);
    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
        buf_reset(&a->hdr_buf);
    int rc = buf_append(&a->hdr_buf, ptr, n);
    bool end_of_headers = (n == 2 && ptr[0] == '\r') || (n == 1 && ptr[0] == '\n');
    long status = 0;
    if (end_of_headers) {
        curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
        end_of_headers = status >= 200; /* 1xx: more headers follow */
    }
    if (end_of_headers) {
        a->st.got_headers = true;
        a->st.status = status;
        a->st.headers_ms = h_now_ms() - a->t0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    if (rc != 0)
        return 0;
    if (end_of_headers && a->opts.abort_at == H_ABORT_AFTER_HEADERS) {
        a->cb_abort = true;
        return 0;
    }
    return n;
}

static size_t h_async_on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct h_async *a = userdata;
    size_t n = size * nmemb;
    pthread_mutex_lock(&a->mu);
    int rc = buf_append(&a->body_buf, ptr, n);
    if (a->st.body_bytes == 0)
        a->st.body_ms = h_now_ms() - a->t0;
    a->st.body_bytes += n;
    size_t got = a->st.body_bytes;
    pthread_mutex_unlock(&a->mu);
    if (rc != 0)
        return 0;
    if (a->opts.abort_at == H_ABORT_AFTER_BYTES && got >= a->opts.bytes) {
        a->cb_abort = true;
        return 0;
    }
    return n;
}

static bool h_async_should_abort(const struct h_async *a)
{
    if (atomic_load_explicit(&a->abort_requested, memory_order_acquire))
        return true;
    return a->opts.abort_at == H_ABORT_AFTER_MS && h_now_ms() - a->t0 >= a->opts.ms;
}

static void *h_async_main(void *arg)
{
    struct h_async *a = arg;
    CURLcode result = CURLE_OK;
    bool finished = false;
    bool aborted = false;
    while (!finished) {
        int running = 0;
        curl_multi_perform(a->multi, &running);
        int queued = 0;
        for (CURLMsg *msg = curl_multi_info_read(a->multi, &queued); msg != NULL;
             msg = curl_multi_info_read(a->multi, &queued)) {
            if (msg->msg == CURLMSG_DONE) {
                result = msg->data.result;
                finished = true;
            }
        }
        if (finished)
            break;
        if (h_async_should_abort(a)) {
            aborted = true;
            result = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        int wait_ms = H_ASYNC_TICK_MS;
        if (a->opts.abort_at == H_ABORT_AFTER_MS) {
            int64_t left = a->t0 + a->opts.ms - h_now_ms();
            if (left < wait_ms)
                wait_ms = left > 0 ? (int)left : 0;
        }
        curl_multi_poll(a->multi, NULL, 0, wait_ms, NULL);
    }
    if (a->cb_abort)
        aborted = true;
    /* Removing a transfer mid-body closes its connection: the server sees the
     * client go away now, not at destroy. */
    curl_multi_remove_handle(a->multi, a->easy);
    curl_easy_cleanup(a->easy);
    a->easy = NULL;

    pthread_mutex_lock(&a->mu);
    a->st.done = true;
    a->st.aborted = aborted;
    a->st.curl_code = (int)result;
    a->st.done_ms = h_now_ms() - a->t0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void h_async_free(struct h_async *a)
{
    if (a->easy != NULL)
        curl_easy_cleanup(a->easy);
    if (a->multi != NULL)
        curl_multi_cleanup(a->multi);
    curl_slist_free_all(a->headers);
    free(a->url);
    free(a->body);
    buf_fini(&a->body_buf);
    buf_fini(&a->hdr_buf);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static char *h_strdup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int h_async_start(const char *url, const char *body, const struct h_async_opts *opts,
                  struct h_async **out)
{
    pthread_once(&h_curl_once, h_curl_init);
    struct h_async *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    buf_init(&a->body_buf, H_BUF_MAX);
    buf_init(&a->hdr_buf, H_BUF_MAX);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&a->mu, NULL);
    if (opts != NULL)
        a->opts = *opts;
    a->opts.headers = NULL; /* copied into a->headers; the caller's may go away */
    a->st.headers_ms = -1;
    a->st.body_ms = -1;
    a->st.done_ms = -1;
    atomic_init(&a->abort_requested, false);

    int rc = -ENOMEM;
    a->url = h_strdup_n(url, strlen(url));
    if (body != NULL) {
        a->body_len = strlen(body);
        a->body = h_strdup_n(body, a->body_len);
    }
    a->multi = curl_multi_init();
    a->easy = curl_easy_init();
    if (a->url == NULL || (body != NULL && a->body == NULL) || a->multi == NULL || a->easy == NULL)
        goto out_free;
    const char *method = opts != NULL ? opts->method : NULL;
    rc =
        h_header_list(opts != NULL ? opts->headers : NULL,
                      body != NULL || (method != NULL && strcmp(method, "POST") == 0), &a->headers);
    if (rc != 0)
        goto out_free;
    rc =
        h_easy_setup(a->easy, method, a->url, a->body, a->body_len, a->headers, a->opts.timeout_ms);
    if (rc != 0)
        goto out_free;
    curl_easy_setopt(a->easy, CURLOPT_HEADERFUNCTION, h_async_on_header);
    curl_easy_setopt(a->easy, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(a->easy, CURLOPT_WRITEFUNCTION, h_async_on_body);
    curl_easy_setopt(a->easy, CURLOPT_WRITEDATA, a);
    if (curl_multi_add_handle(a->multi, a->easy) != CURLM_OK) {
        rc = -EINVAL;
        goto out_free;
    }
    a->t0 = h_now_ms();
    rc = -pthread_create(&a->thread, NULL, h_async_main, a);
    if (rc != 0) {
        curl_multi_remove_handle(a->multi, a->easy);
        goto out_free;
    }

    pthread_mutex_lock(&h_async_reg_mu);
    list_push_front(&h_async_reg, &a->reg_link);
    pthread_mutex_unlock(&h_async_reg_mu);
    *out = a;
    return 0;
out_free:
    h_async_free(a);
    return rc;
}

int h_async_abort(struct h_async *a)
{
    pthread_mutex_lock(&a->mu);
    bool done = a->st.done;
    pthread_mutex_unlock(&a->mu);
    if (done)
        return -EALREADY;
    atomic_store_explicit(&a->abort_requested, true, memory_order_release);
    curl_multi_wakeup(a->multi);
    return 0;
}

void h_async_get_state(struct h_async *a, struct h_async_state *st)
{
    pthread_mutex_lock(&a->mu);
    *st = a->st;
    pthread_mutex_unlock(&a->mu);
}

/* Waits under a->mu until done, or got_headers too when headers is set. */
static int h_async_wait_for(struct h_async *a, bool headers, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&a->mu);
    while (!a->st.done && !(headers && a->st.got_headers)) {
        if (pthread_cond_timedwait(&a->cv, &a->mu, &deadline) == ETIMEDOUT) {
            rc = (a->st.done || (headers && a->st.got_headers)) ? 0 : -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int h_async_wait(struct h_async *a, int timeout_ms)
{
    return h_async_wait_for(a, false, timeout_ms);
}

int h_async_wait_headers(struct h_async *a, int timeout_ms)
{
    return h_async_wait_for(a, true, timeout_ms);
}

struct h_body_wait {
    struct h_async *a;
    size_t bytes;
};

static bool h_async_has_body(void *arg)
{
    struct h_body_wait *w = arg;
    struct h_async_state st;
    h_async_get_state(w->a, &st);
    return st.body_bytes >= w->bytes || st.done;
}

int h_async_wait_body(struct h_async *a, size_t bytes, int timeout_ms)
{
    struct h_body_wait w = {.a = a, .bytes = bytes};
    return h_wait_until(h_async_has_body, &w, timeout_ms);
}

int h_async_take_resp(struct h_async *a, struct h_resp *resp)
{
    memset(resp, 0, sizeof(*resp));
    pthread_mutex_lock(&a->mu);
    int rc = -EBUSY;
    if (a->st.done) {
        resp->status = a->st.status;
        resp->curl_code = a->st.curl_code;
        resp->elapsed_ms = a->st.done_ms;
        rc = h_buf_move(&a->body_buf, &resp->body, &resp->body_len);
        if (rc == 0)
            rc = h_buf_move(&a->hdr_buf, &resp->headers, &resp->headers_len);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void h_async_destroy(struct h_async *a)
{
    if (a == NULL)
        return;
    h_async_abort(a);
    pthread_join(a->thread, NULL);
    pthread_mutex_lock(&h_async_reg_mu);
    list_remove(&a->reg_link);
    pthread_mutex_unlock(&h_async_reg_mu);
    h_async_free(a);
}

void h_async_destroy_all(void)
{
    for (;;) {
        pthread_mutex_lock(&h_async_reg_mu);
        struct list_node *first = list_first(&h_async_reg);
        pthread_mutex_unlock(&h_async_reg_mu);
        if (first == NULL)
            return;
        struct h_async *a = list_entry(first, struct h_async, reg_link);
        h_async_destroy(a);
    }
}

/* ---- waiting on HTTP ---------------------------------------------------- */

static bool h_http_ok_cond(void *arg)
{
    struct h_resp resp;
    const struct h_req req = {.url = arg, .timeout_ms = 1000};
    bool ok = h_perform(&req, NULL, &resp) == 0 && resp.status == 200;
    h_resp_fini(&resp);
    return ok;
}

int h_wait_http_ok(const char *url, int timeout_ms)
{
    return h_wait_until(h_http_ok_cond, (void *)url, timeout_ms);
}

/* ---- the mock worker ---------------------------------------------------- */

struct h_mock_ready {
    struct h_proc *proc;
    char health_url[H_URL_MAX];
    bool died;
};

static bool h_mock_ready_cond(void *arg)
{
    struct h_mock_ready *r = arg;
    if (!h_proc_is_running(r->proc)) {
        r->died = true;
        return true;
    }
    return h_http_ok_cond(r->health_url);
}

int h_mock_startv(struct h_mock *m, const char *const extra[])
{
    memset(m, 0, sizeof(*m));
    int rc = h_free_port(&m->port);
    if (rc == 0)
        rc = h_url(m->url, sizeof(m->url), m->port, NULL);
    if (rc == 0 && h_tls_args_https(extra))
        rc = h_tls_https_url(m->url, sizeof(m->url));
    if (rc == 0)
        rc = h_start_mockworker(m->port, extra, &m->proc);
    if (rc != 0)
        return rc;
    struct h_mock_ready ready = {.proc = m->proc};
    if (snprintf(ready.health_url, sizeof(ready.health_url), "%s/health", m->url) >=
        (int)sizeof(ready.health_url))
        rc = -ENOSPC;
    if (rc == 0)
        rc = h_wait_until(h_mock_ready_cond, &ready, H_READY_TIMEOUT_MS);
    if (rc == 0 && ready.died) {
        fprintf(stderr, "harness: mockworker on port %u exited during startup\n",
                (unsigned)m->port);
        rc = -ECHILD;
    }
    return rc;
}

int h_mock_start(struct h_mock *m, ...)
{
    const char *args[H_MAX_ARGS + 1];
    size_t n = 0;
    va_list ap;
    va_start(ap, m);
    for (const char *arg = va_arg(ap, const char *); arg != NULL; arg = va_arg(ap, const char *)) {
        if (n == H_MAX_ARGS) {
            va_end(ap);
            return -E2BIG;
        }
        args[n++] = arg;
    }
    va_end(ap);
    args[n] = NULL;
    return h_mock_startv(m, args);
}

/* "<base><path>" into buf. */
static int h_join_url(char *buf, size_t len, const char *base, const char *path)
{
    int n = snprintf(buf, len, "%s%s", base, path);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

json_t *h_mock_stats(const char *base_url)
{
    char url[H_URL_MAX];
    if (h_join_url(url, sizeof(url), base_url, "/mock/stats") != 0)
        return NULL;
    struct h_resp resp;
    json_t *j = NULL;
    if (h_http_get(url, &resp) == 0 && resp.status == 200)
        j = h_resp_json(&resp);
    h_resp_fini(&resp);
    return j;
}

int h_mock_stat_int(const char *base_url, const char *key, long long *value)
{
    json_t *stats = h_mock_stats(base_url);
    if (stats == NULL)
        return -EIO;
    json_t *v = json_object_get(stats, key);
    int rc = -ENOENT;
    if (json_is_integer(v)) {
        *value = (long long)json_integer_value(v);
        rc = 0;
    }
    json_decref(stats);
    return rc;
}

struct h_stat_wait {
    const char *base_url;
    const char *key;
    long long want;
};

static bool h_stat_equals_cond(void *arg)
{
    const struct h_stat_wait *w = arg;
    long long v = 0;
    return h_mock_stat_int(w->base_url, w->key, &v) == 0 && v == w->want;
}

int h_wait_mock_stat(const char *base_url, const char *key, long long want, int timeout_ms)
{
    struct h_stat_wait w = {.base_url = base_url, .key = key, .want = want};
    return h_wait_until(h_stat_equals_cond, &w, timeout_ms);
}

static int h_mock_post(const char *base_url, const char *path, const char *json)
{
    char url[H_URL_MAX];
    int rc = h_join_url(url, sizeof(url), base_url, path);
    if (rc != 0)
        return rc;
    struct h_resp resp;
    rc = h_http_post_json(url, json, &resp);
    if (rc == 0 && (resp.status < 200 || resp.status > 299)) {
        fprintf(stderr, "harness: POST %s -> %ld %s\n", url, resp.status, resp.body);
        rc = -EIO;
    }
    h_resp_fini(&resp);
    return rc;
}

int h_mock_faults(const char *base_url, const char *json)
{
    return h_mock_post(base_url, "/mock/faults", json);
}

int h_mock_reset(const char *base_url)
{
    return h_mock_post(base_url, "/mock/reset", "{}");
}
