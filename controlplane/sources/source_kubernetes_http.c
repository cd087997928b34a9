/*
 * The Kubernetes API client (see source_kubernetes_http.h). One easy
 * handle, reused. A finished transfer is recorded by the curl-epoll glue's
 * completion callback and reported after cep_collect() returns, so the
 * source may start the next transfer from its on_done.
 */
#include "controlplane/sources/source_kubernetes_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/buf.h"
#include "common/curl_epoll.h"
#include "common/log.h"
#include "common/proc.h"
#include "controlplane/sources/source_kubernetes_list.h"

#define KUBE_CONNECT_TIMEOUT_MS 5000L
#define KUBE_LIST_TIMEOUT_MS    60000L

/* Owned by the Kubernetes source; dies with kube_api_destroy. Loop thread only. */
struct kube_api {
    struct kube_api_opts opts;
    struct cep cep;
    int epfd;
    CURL *easy;
    struct curl_slist *headers;
    enum kube_xfer kind; /* running transfer, NONE when idle */
    uint64_t silence_ms;
    uint64_t last_rx_ms;
    bool got_body;
    bool failed_line;         /* the write callback refused a line */
    struct kube_list_scan ls; /* a list answered 200 */
    /* A watch: the unfinished line; an error status: its body. Capped at
     * the larger bound; kube_append applies the one of the answer. */
    struct buf data;
    size_t scanned; /* watch: data.data[0..scanned) holds no newline (searched already) */
    bool done;
    CURLcode done_res;
};

static void kube_api_on_done(void *user, CURL *e, CURLcode res)
{
    struct kube_api *a = user;
    cep_remove(&a->cep, e);
    a->done = true;
    a->done_res = res;
}

int kube_api_create(const struct kube_api_opts *opts, struct kube_api **out)
{
    struct kube_api *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->opts = *opts;
    buf_init(&a->data, KUBE_LINE_MAX > KUBE_STATUS_BODY_MAX ? KUBE_LINE_MAX : KUBE_STATUS_BODY_MAX);
    kube_ls_init(&a->ls, KUBE_LINE_MAX, opts->on_item, opts->user);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->easy = curl_easy_init();
    if (a->epfd < 0 || a->easy == NULL ||
        cep_init(&a->cep, &(struct cep_opts){.epfd = a->epfd,
                                             .on_done = kube_api_on_done,
                                             .user = a,
                                             .log_name = "Kubernetes API"}) != 0) {
        kube_api_destroy(a);
        return -ENOMEM;
    }
    *out = a;
    return 0;
}

/* Empties the body or unfinished line (the memory is kept for the next). */
static void kube_clear_data(struct kube_api *a)
{
    buf_reset(&a->data);
    a->scanned = 0;
}

void kube_api_cancel(struct kube_api *a)
{
    if (a->kind != KUBE_XFER_NONE && !a->done)
        cep_remove(&a->cep, a->easy);
    a->kind = KUBE_XFER_NONE;
    a->done = false;
    kube_clear_data(a);
}

void kube_api_destroy(struct kube_api *a)
{
    if (a == NULL)
        return;
    if (a->easy != NULL) {
        kube_api_cancel(a);
        curl_easy_cleanup(a->easy);
    }
    cep_fini(&a->cep);
    curl_slist_free_all(a->headers);
    if (a->epfd >= 0)
        close(a->epfd);
    buf_fini(&a->data);
    kube_ls_fini(&a->ls);
    free(a);
}

int kube_api_fd(const struct kube_api *a)
{
    return a->epfd;
}

bool kube_api_busy(const struct kube_api *a)
{
    return a->kind != KUBE_XFER_NONE;
}

/* Appends n bytes, the whole held at most max - 1 bytes (max counts the
 * NUL). 0, -E2BIG or -ENOMEM; the caller drops the transfer on failure. */
static int kube_append(struct kube_api *a, const char *bytes, size_t n, size_t max)
{
    if (a->data.len + n + 1 > max)
        return -E2BIG;
    return buf_append(&a->data, bytes, n);
}

/*
 * Hands every complete line of a watch up; keeps the unfinished rest.
 * Linear in the bytes received however they are cut into reads: the
 * search for a newline resumes where the last one gave up (a line of a
 * megabyte arriving a byte at a time is not searched a million times),
 * and only what follows the last newline of this read is moved down,
 * which is at most this read's bytes.
 */
static bool kube_take_lines(struct kube_api *a)
{
    size_t start = 0;
    for (;;) {
        size_t from = start > a->scanned ? start : a->scanned;
        char *nl = memchr(a->data.data + from, '\n', a->data.len - from);
        if (nl == NULL)
            break;
        size_t end = (size_t)(nl - a->data.data);
        if (end > start) {
            json_error_t jerr;
            json_t *ev = json_loadb(a->data.data + start, end - start, 0, &jerr);
            if (!json_is_object(ev)) {
                log_warn("discovery: Kubernetes watch sent a line that is no JSON object (%s); "
                         "dropping the watch",
                         ev == NULL ? jerr.text : "another JSON type");
                json_decref(ev);
                return false;
            }
            a->opts.on_event(a->opts.user, ev);
            json_decref(ev);
        }
        start = end + 1;
    }
    buf_consume(&a->data, start);
    a->scanned = a->data.len;
    return true;
}

static size_t kube_write(char *ptr, size_t size, size_t n, void *arg)
{
    struct kube_api *a = arg;
    size_t len = size * n;
    a->last_rx_ms = proc_monotonic_ms();
    a->got_body = true;
    long code = 0;
    curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &code);
    if (a->kind == KUBE_XFER_LIST && code == 200) {
        /* Read as it comes: never more than one item held. */
        if (!kube_ls_feed(&a->ls, ptr, len)) {
            a->failed_line = true;
            return 0;
        }
        return len;
    }
    /* A non-200 answer is a Status body: keep it whole for on_done. */
    size_t max = a->kind == KUBE_XFER_WATCH && code == 200 ? KUBE_LINE_MAX : KUBE_STATUS_BODY_MAX;
    if (kube_append(a, ptr, len, max) != 0) {
        a->failed_line = true;
        return 0;
    }
    if (a->kind == KUBE_XFER_WATCH) {
        if (code == 200 && !kube_take_lines(a)) {
            a->failed_line = true;
            return 0;
        }
    }
    return len;
}

bool kube_api_feed_watch(struct kube_api *a, const char *bytes, size_t len)
{
    if (kube_append(a, bytes, len, KUBE_LINE_MAX) != 0) {
        kube_clear_data(a);
        return false;
    }
    if (!kube_take_lines(a)) {
        kube_clear_data(a);
        return false;
    }
    return true;
}

int kube_api_start(struct kube_api *a, enum kube_xfer kind, const char *url, const char *token,
                   uint64_t silence_ms)
{
    if (a->kind != KUBE_XFER_NONE)
        return -EBUSY;
    curl_slist_free_all(a->headers);
    a->headers = curl_slist_append(NULL, "Accept: application/json");
    if (a->headers != NULL && token != NULL && token[0] != '\0') {
        size_t hl = strlen(token) + 32;
        char *h = malloc(hl);
        if (h == NULL)
            return -ENOMEM;
        snprintf(h, hl, "Authorization: Bearer %s", token);
        struct curl_slist *nh = curl_slist_append(a->headers, h);
        free(h);
        if (nh == NULL)
            return -ENOMEM;
        a->headers = nh;
    }
    if (a->headers == NULL)
        return -ENOMEM;
    CURL *e = a->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, kube_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, KUBE_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (kind == KUBE_XFER_LIST)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, KUBE_LIST_TIMEOUT_MS);
    if (a->opts.ca_file != NULL && a->opts.ca_file[0] != '\0')
        curl_easy_setopt(e, CURLOPT_CAINFO, a->opts.ca_file);
    a->kind = kind;
    a->silence_ms = silence_ms;
    a->last_rx_ms = proc_monotonic_ms();
    a->got_body = false;
    a->failed_line = false;
    a->done = false;
    kube_clear_data(a);
    kube_ls_reset(&a->ls);
    if (cep_add(&a->cep, e) != 0) {
        a->kind = KUBE_XFER_NONE;
        return -EIO;
    }
    return 0;
}

static void kube_report(struct kube_api *a, bool silent)
{
    struct kube_result r = {.kind = a->kind, .silent = silent, .got_body = a->got_body};
    curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &r.http_status);
    r.transport_ok = !silent && a->done_res == CURLE_OK;
    json_t *body = NULL;
    bool scanned = a->kind == KUBE_XFER_LIST && r.http_status == 200;
    if (!silent && scanned && !a->failed_line && a->done_res == CURLE_OK) {
        body = kube_ls_finish(&a->ls);
    } else if (!silent && !scanned && a->data.len > 0 &&
               (a->kind == KUBE_XFER_LIST || r.http_status != 200)) {
        json_error_t jerr;
        body = json_loadb(a->data.data, a->data.len, 0, &jerr);
    }
    r.body = body;
    if (silent)
        snprintf(r.why, sizeof(r.why), "no data for %llu ms", (unsigned long long)a->silence_ms);
    else if (scanned && a->ls.failed)
        snprintf(r.why, sizeof(r.why), "%s", a->ls.why);
    else if (a->failed_line)
        snprintf(r.why, sizeof(r.why), "the answer exceeded its bounds or was malformed");
    else if (a->done_res != CURLE_OK)
        snprintf(r.why, sizeof(r.why), "%s", curl_easy_strerror(a->done_res));
    else
        snprintf(r.why, sizeof(r.why), "HTTP %ld", r.http_status);
    a->kind = KUBE_XFER_NONE;
    a->done = false;
    kube_clear_data(a);
    a->opts.on_done(a->opts.user, &r);
    json_decref(body);
}

void kube_api_run(struct kube_api *a, uint64_t now_ms)
{
    struct epoll_event evs[16];
    int n = epoll_wait(a->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&a->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&a->cep, proc_monotonic_ms());
    cep_collect(&a->cep);
    if (a->done) {
        kube_report(a, false);
        return;
    }
    if (a->kind == KUBE_XFER_WATCH && now_ms >= a->last_rx_ms + a->silence_ms) {
        cep_remove(&a->cep, a->easy);
        a->done_res = CURLE_OK;
        kube_report(a, true);
    }
}

int kube_api_timeout_ms(const struct kube_api *a, uint64_t now_ms)
{
    if (a->done)
        return 0;
    int t = cep_timeout_ms(&a->cep, now_ms);
    if (a->kind == KUBE_XFER_WATCH) {
        uint64_t due = a->last_rx_ms + a->silence_ms;
        int s = due <= now_ms ? 0 : (int)(due - now_ms > 60000 ? 60000 : due - now_ms);
        if (t < 0 || s < t)
            t = s;
    }
    return t;
}
