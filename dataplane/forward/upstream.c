/*
 * The loop's upstream side (see upstream.h). The multi_socket glue is
 * common/curl_epoll's: curl's sockets go into the loop's epoll set tagged
 * DP_TAG_CURL | fd, kept registered while their connection is idle
 * (park_idle), and curl's timer becomes a deadline the loop turns into its
 * epoll_wait timeout. What a transfer delivers goes to the handlers
 * registered at dp_up_init: this module never names the forwarder. Easy
 * handles are pooled with their fixed options set: building or resetting
 * one is a measurable part of a request's cost.
 */
#include "dataplane/forward/upstream.h"
#include "dataplane/core/routes.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/tls_client.h"
#include "dataplane/obs/journal.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/upstream_url.h"
#include "common/curl_epoll.h"

#define DP_MAXCONNECTS      1024L
#define DP_UP_UPLOAD_BUFFER 65536L /* curl's upload buffer: its default size */

/* CURLOPT_PRIVATE of a side transfer (struct dp_up_side) carries this low
 * bit, which no attempt's pointer has (both structs are pointer-aligned). */
#define UP_SIDE_TAG ((uintptr_t)1)

/* A finished transfer (from cep_collect): to the registered on_done, or a
 * side transfer's own. */
static void up_on_done(void *user, CURL *easy, CURLcode result)
{
    struct dp_loop *loop = user;
    char *p = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
    if (p == NULL)
        return;
    if ((uintptr_t)p & UP_SIDE_TAG) {
        struct dp_up_side *side = (struct dp_up_side *)(void *)(p - UP_SIDE_TAG);
        side->on_done(side, result);
        return;
    }
    loop->up.handlers->on_done((struct dp_attempt *)(void *)p, result);
}

int dp_up_init(struct dp_loop *loop, const struct dp_up_handlers *handlers)
{
    loop->up.handlers = handlers;
    /* A kept-alive upstream connection stays in the epoll set between
     * transfers (park_idle): curl lets go of a transfer's socket when it
     * ends and asks for it again when the next one starts on the same
     * connection, which cost an epoll_ctl pair per request. */
    const struct cep_opts opts = {
        .epfd = loop->epfd,
        .tag = DP_TAG_CURL,
        .park_idle = true,
        .on_done = up_on_done,
        .user = loop,
        .log_name = "upstream",
    };
    int rc = cep_init(&loop->up.cep, &opts);
    if (rc != 0)
        return rc;
    curl_multi_setopt(cep_multi(&loop->up.cep), CURLMOPT_MAXCONNECTS, DP_MAXCONNECTS);
    loop->up.tls_share = tls_client_share_create();
    return 0;
}

void dp_up_fini(struct dp_loop *loop)
{
    for (size_t i = 0; i < loop->up.n_pool; i++)
        curl_easy_cleanup(loop->up.pool[i]);
    loop->up.n_pool = 0;
    cep_fini(&loop->up.cep);
    dp_up_urls_fini(&loop->up.urls);
    tls_client_share_destroy(loop->up.tls_share);
    loop->up.tls_share = NULL;
}

static size_t up_header_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct dp_attempt *a = userp;
    return a->loop->up.handlers->on_header(a, data, size * nmemb);
}

static size_t up_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct dp_attempt *a = userp;
    return a->loop->up.handlers->on_body(a, data, size * nmemb);
}

/* The options every transfer shares, set once per handle: a pooled handle
 * keeps them (no curl_easy_reset between transfers, which was a measurable
 * part of a small request's cost), and dp_up_start sets everything that
 * varies on every transfer. */
static CURL *up_easy_new(struct dp_loop *loop)
{
    const struct cfg_dataplane *dc = &loop->sh->cfg->dataplane;
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* Workers are reached directly, never through an http_proxy from the
     * environment; with both strings empty curl reads none of the proxy
     * variables (no_proxy included) on each transfer. */
    rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)dc->connect_timeout_ms);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, up_header_cb);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, up_write_cb);
    /* https:// workers: one setup for every curl user (tls_client.h); the
     * share lets a new connection resume a session another handle made. */
    if (tls_client_apply(e, &dc->upstream_tls) != 0)
        rc |= CURLE_FAILED_INIT;
    if (loop->up.tls_share != NULL)
        rc |= curl_easy_setopt(e, CURLOPT_SHARE, loop->up.tls_share);
    if (rc != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    /* Parking's open/close socket callbacks. */
    cep_easy_setup(&loop->up.cep, e);
    return e;
}

static CURL *up_easy_get(struct dp_loop *loop)
{
    if (loop->up.n_pool > 0)
        return loop->up.pool[--loop->up.n_pool];
    return up_easy_new(loop);
}

static void up_easy_put(struct dp_loop *loop, CURL *e)
{
    if (loop->up.n_pool < DP_EASY_POOL)
        loop->up.pool[loop->up.n_pool++] = e;
    else
        curl_easy_cleanup(e);
}

int dp_up_start(struct dp_attempt *a, const char *url)
{
    struct dp_loop *loop = a->loop;
    const struct dp_request *req = a->req;
    CURL *e = up_easy_get(loop);
    if (e == NULL)
        return -ENOMEM;
    CURLcode rc = CURLE_OK;
    CURLU *parsed = dp_up_url_parsed(&loop->up.urls, url);
    /* A pooled handle keeps its options: the one not used is cleared. */
    if (parsed != NULL)
        rc |= curl_easy_setopt(e, CURLOPT_CURLU, parsed);
    else
        rc |= curl_easy_setopt(e, CURLOPT_CURLU, NULL) | curl_easy_setopt(e, CURLOPT_URL, url);
    /* curl's receive buffer lives as long as the transfer: for a stream,
     * whose SSE events are a few hundred bytes, 1 KiB (curl's least) keeps
     * a held stream small; a whole answer is read in 4 KiB pieces. */
    rc |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, req->stream ? 1024L : 4096L);
    if ((dp_route_row(req->route)->methods & DP_METHOD_POST) == 0) {
        /* A GET route (GET /v1/responses/{id}): no body. A pooled handle
         * set back to POST below on its next POST. */
        rc |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
        rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->body != NULL ? a->body : "");
        rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->body_len);
    }
    rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->up_headers);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, a);
    if (rc != CURLE_OK) {
        up_easy_put(loop, e);
        return -EINVAL;
    }
    if (cep_add(&loop->up.cep, e) != 0) {
        up_easy_put(loop, e);
        return -ENOMEM;
    }
    a->easy = e;
    return 0;
}

void dp_up_request_sent(struct dp_attempt *a)
{
    /* Setting the size frees the buffer (the handle's next transfer takes
     * a new one); the size is curl's default. */
    if (a->easy != NULL) {
        (void)curl_easy_setopt(a->easy, CURLOPT_UPLOAD_BUFFERSIZE, DP_UP_UPLOAD_BUFFER);
        /* curl reads the header list only to write a request: with a
         * response begun it writes none on this transfer (it re-sends only
         * on a reused connection that died before any byte came back), and
         * dp_up_start sets the next transfer's. A held stream keeps about
         * 0.3 kB less: the list's nodes and their strings. */
        (void)curl_easy_setopt(a->easy, CURLOPT_HTTPHEADER, NULL);
    }
    struct dp_request *req = a->req;
    dp_journal_trace_header_gone(req);
    curl_slist_free_all(req->up_headers);
    req->up_headers = NULL;
}

void dp_up_detach(struct dp_attempt *a)
{
    if (a->easy == NULL)
        return;
    cep_remove(&a->loop->up.cep, a->easy);
    /* A handle removed while paused may keep its pause with its options:
     * not worth pooling (rare: a slow client that left). */
    if (a->paused)
        curl_easy_cleanup(a->easy);
    else
        up_easy_put(a->loop, a->easy);
    a->easy = NULL;
    a->paused = false;
}

void dp_up_unpause(struct dp_attempt *a)
{
    if (a->easy == NULL || !a->paused)
        return;
    a->paused = false;
    curl_easy_pause(a->easy, CURLPAUSE_CONT);
}

void dp_up_socket_event(struct dp_loop *loop, int fd, uint32_t events)
{
    /* Finished transfers are collected once a pass (dp_up_collect), not
     * after each socket's event: a relayed token is a socket event. */
    cep_on_fd_event(&loop->up.cep, fd, events);
}

int64_t dp_up_deadline_ms(const struct dp_loop *loop)
{
    return cep_deadline_ms(&loop->up.cep);
}

void dp_up_timer_due(struct dp_loop *loop, uint64_t now_ms)
{
    int64_t due = cep_deadline_ms(&loop->up.cep);
    if (due < 0 || (uint64_t)due > now_ms)
        return;
    cep_on_timer(&loop->up.cep, now_ms);
    dp_up_collect(loop);
}

void dp_up_collect(struct dp_loop *loop)
{
    cep_collect(&loop->up.cep);
}

CURL *dp_up_side_easy(struct dp_loop *loop)
{
    const struct cfg_dataplane *dc = &loop->sh->cfg->dataplane;
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)dc->connect_timeout_ms);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (tls_client_apply(e, &dc->upstream_tls) != 0)
        rc |= CURLE_FAILED_INIT;
    if (loop->up.tls_share != NULL)
        rc |= curl_easy_setopt(e, CURLOPT_SHARE, loop->up.tls_share);
    if (rc != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    cep_easy_setup(&loop->up.cep, e);
    return e;
}

int dp_up_side_start(struct dp_loop *loop, struct dp_up_side *s)
{
    if (curl_easy_setopt(s->easy, CURLOPT_PRIVATE, (char *)s + UP_SIDE_TAG) != CURLE_OK)
        return -EINVAL;
    return cep_add(&loop->up.cep, s->easy) != 0 ? -ENOMEM : 0;
}

void dp_up_side_detach(struct dp_loop *loop, struct dp_up_side *s)
{
    if (s->easy != NULL)
        cep_remove(&loop->up.cep, s->easy);
}
