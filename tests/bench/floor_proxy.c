/*
 * switchyard-floor-proxy: the "library floor" contender of the proxy
 * benchmark (tests/bench/run.sh, proxy overhead). It forwards a POST to an
 * upstream and relays the answer, driving the mandated libraries the way the
 * dataplane does, with everything switchyard does beyond forwarding removed:
 * no JSON, no routing policy, no shared memory, no metrics, no per-request
 * logging, no retries, no timeouts, no client disconnect watch. What it
 * costs per request is, near enough, what libmicrohttpd, libcurl and the
 * kernel cost in this design; what switchyard costs beyond it is its own.
 *
 * Shape (the dataplane's): N shared-nothing threads, each with its own MHD
 * daemon in external epoll mode on a shared SO_REUSEPORT port, its own CURLM
 * driven by curl_multi_socket_action and its timer callback, and one
 * epoll_wait per pass over MHD's epoll fd and curl's sockets. A request
 * never leaves its thread. Per request: collect the body, pick an upstream
 * round robin (the request's path is sent to it, as a route's is), suspend the connection, run a
 * pooled easy handle (fixed options set once, keep-alive), buffer the answer, resume and queue it.
 *
 * A streamed answer (Content-Type text/event-stream) is relayed as the
 * dataplane relays one: the response is queued once its headers arrived,
 * as a chunked callback response; each piece curl delivers is appended to
 * a buffer of at most FL_STREAM_CAP bytes and the connection resumed;
 * MHD's content reader copies out what is pending and suspends the
 * connection when nothing is; a full buffer pauses the transfer until the
 * reader made room (backpressure). A client that leaves mid-stream ends
 * its transfer when MHD completes the request.
 *
 * The library-boundary tricks the dataplane measured are kept, so the floor
 * is not slower than switchyard for reasons that have nothing to do with
 * switchyard's logic: pooled handles are not reset, upstream URLs are parsed
 * once (CURLOPT_CURLU), and kept-alive upstream sockets stay in the epoll
 * set between transfers (no epoll_ctl pair per request for curl's socket;
 * MHD's suspend and resume still cost one for the client's).
 *
 * A benchmark tool, not product code: IPv4 only, bounded buffers, errors
 * answered 502/413 without detail. SIGTERM or SIGINT stops it.
 */
#include "common/list.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FL_MAX_UPSTREAMS 16
#define FL_MAX_THREADS   64
#define FL_POOL          256           /* idle easy handles kept per thread */
#define FL_BODY_MAX      (1u << 20)    /* request body; more is answered 413 */
#define FL_RESP_MAX      (1u << 20)    /* upstream answer; more fails the transfer (502) */
#define FL_STREAM_CAP    (64u * 1024u) /* a stream's relay buffer, at most (the dataplane's) */
#define FL_STREAM_BLOCK  512u          /* MHD's block of a callback response (the dataplane's) */
/* The dataplane's default MHD pool: max_header_size (6 KiB) + 2 KiB of room
 * for the response. MHD zeroes the pool on every request, so its size is
 * part of the per-request cost and must match to compare. */
#define FL_CONN_MEMORY (8u * 1024u)
#define FL_MAX_FDS     65536 /* curl sockets above this number are simply not parked */
#define FL_EVENTS      128
#define FL_PATHS       8   /* request paths whose upstream URLs are kept parsed, per upstream */
#define FL_PATH_MAX    256 /* a longer path is answered 502 */

/* epoll tags: a curl socket is tagged with its fd number (< 2^32). */
#define FL_TAG_MHD  (1ull << 32)
#define FL_TAG_STOP (2ull << 32)

/* Per-fd state of a curl socket in the loop's epoll set. */
#define FL_FD_REGISTERED 0x80u
#define FL_FD_PARKED     0x40u
#define FL_FD_EVENTS     (EPOLLIN | EPOLLOUT) /* the events it is registered for */

struct fl_options {
    struct sockaddr_in listen;
    const char *upstreams[FL_MAX_UPSTREAMS];
    unsigned n_upstreams;
    unsigned threads;
    bool turbo;
};

/* One event loop. Owned by main, touched only by its thread once started. */
struct fl_loop {
    pthread_t thread;
    int epfd;
    struct MHD_Daemon *mhd;
    CURLM *multi;
    CURLU *urls[FL_MAX_UPSTREAMS]; /* parsed once: curl would parse a string per transfer */
    /* The upstream URL of each request path seen (the request's path goes
     * upstream, as the dataplane's route does), parsed once too. */
    struct {
        char path[FL_PATH_MAX];
        CURLU *url;
    } paths[FL_MAX_UPSTREAMS][FL_PATHS];
    unsigned next_upstream;
    int64_t curl_deadline_ms; /* -1: curl wants no timeout */
    bool mhd_due;             /* a connection was resumed: MHD must run this pass */
    CURL *pool[FL_POOL];
    unsigned n_pool;
    struct list_node parked; /* suspended requests (fl_request.park_link), for shutdown */
    bool stopping;           /* answer 503 instead of suspending anything new */
    uint8_t fd_state[FL_MAX_FDS];
};

/* One request, from its headers to MHD's completion callback, on one loop.
 * While parked its connection is suspended and easy is running. */
struct fl_request {
    struct fl_loop *loop;
    struct MHD_Connection *conn;
    struct list_node park_link; /* in loop->parked while suspended */
    CURL *easy;
    char *body, *resp;
    size_t body_len, resp_len, resp_cap;
    char path[FL_PATH_MAX]; /* the request's, sent upstream */
    long status;            /* the answer's: the upstream's, or 502 when its transfer failed */
    char content_type[128];
    bool done; /* the transfer ended (status is set) */
    bool too_large;
    /* A streamed answer: resp[resp_off, resp_len) is pending for the reader. */
    bool streaming, suspended, paused, failed;
    size_t resp_off;
};

static struct fl_options opts;
static struct curl_slist *up_headers; /* read-only once threads run */
static int stop_fd = -1;              /* level-triggered eventfd: every loop sees it */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- curl side ------------------------------------------------------------ */

/* curl lets go of a kept-alive socket at the end of each transfer and asks
 * for it again at the start of the next one: instead of an epoll_ctl DEL and
 * ADD per request, the socket is parked (still registered) and the same wish
 * later costs nothing. An event on a parked socket (the upstream closed the
 * idle connection) unregisters it; curl notices the dead connection itself. */
static int fl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    (void)socketp;
    struct fl_loop *loop = userp;
    uint8_t *st = fd < FL_MAX_FDS ? &loop->fd_state[fd] : NULL;
    if (what == CURL_POLL_REMOVE) {
        if (st != NULL && (*st & FL_FD_REGISTERED)) {
            *st |= FL_FD_PARKED;
        } else {
            epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
        }
        return 0;
    }
    uint8_t want = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (st != NULL && (*st & FL_FD_REGISTERED) && (*st & FL_FD_EVENTS) == want) {
        *st &= (uint8_t)~FL_FD_PARKED;
        return 0;
    }
    struct epoll_event ev = {.events = want, .data.u64 = (uint64_t)(uint32_t)fd};
    int op = st != NULL && (*st & FL_FD_REGISTERED) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(loop->epfd, op, fd, &ev) != 0 && op == EPOLL_CTL_ADD)
        epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev); /* not tracked (fd above FL_MAX_FDS) */
    if (st != NULL)
        *st = FL_FD_REGISTERED | want;
    return 0;
}

/* A new socket is in no epoll set, whatever its number's state says. */
static curl_socket_t fl_open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)purpose;
    struct fl_loop *loop = clientp;
    curl_socket_t fd = socket(addr->family, addr->socktype, addr->protocol);
    if (fd < 0)
        return CURL_SOCKET_BAD;
    if (fd < FL_MAX_FDS)
        loop->fd_state[fd] = 0;
    return fd;
}

static int fl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct fl_loop *loop = userp;
    loop->curl_deadline_ms = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    return 0;
}

static void fl_resume(struct fl_request *req);

/* The end of the upstream's headers: a streamed answer is queued now. */
static size_t fl_header_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct fl_request *req = userp;
    size_t n = size * nmemb;
    long code = 0;
    char *ct = NULL;
    if (n > 2 || (data[0] != '\r' && data[0] != '\n'))
        return n;
    if (curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code < 200)
        return n;
    if (curl_easy_getinfo(req->easy, CURLINFO_CONTENT_TYPE, &ct) != CURLE_OK || ct == NULL ||
        strncmp(ct, "text/event-stream", 17) != 0)
        return n;
    req->status = code;
    snprintf(req->content_type, sizeof(req->content_type), "%s", ct);
    req->streaming = true;
    if (req->suspended)
        fl_resume(req);
    return n;
}

/* A piece of a streamed answer: appended (compacting first), or the
 * transfer paused while FL_STREAM_CAP bytes wait for the client. */
static size_t fl_stream_write(struct fl_request *req, const char *data, size_t n)
{
    size_t pending = req->resp_len - req->resp_off;
    if (pending + n > FL_STREAM_CAP) {
        req->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (req->resp_len + n > req->resp_cap && req->resp_off > 0) {
        memmove(req->resp, req->resp + req->resp_off, pending);
        req->resp_len = pending;
        req->resp_off = 0;
    }
    if (req->resp_len + n > req->resp_cap) {
        size_t cap = req->resp_cap != 0 ? req->resp_cap : 1024;
        while (cap < req->resp_len + n)
            cap *= 2;
        char *grown = realloc(req->resp, cap);
        if (grown == NULL) {
            req->paused = true;
            return CURL_WRITEFUNC_PAUSE;
        }
        req->resp = grown;
        req->resp_cap = cap;
    }
    memcpy(req->resp + req->resp_len, data, n);
    req->resp_len += n;
    if (req->suspended)
        fl_resume(req);
    return n;
}

static size_t fl_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct fl_request *req = userp;
    size_t n = size * nmemb;
    if (req->streaming)
        return fl_stream_write(req, data, n);
    if (req->resp_len + n > FL_RESP_MAX)
        return 0; /* fails the transfer */
    if (req->resp_len + n > req->resp_cap) {
        size_t cap = req->resp_cap != 0 ? req->resp_cap : 1024;
        while (cap < req->resp_len + n)
            cap *= 2;
        char *grown = realloc(req->resp, cap);
        if (grown == NULL)
            return 0;
        req->resp = grown;
        req->resp_cap = cap;
    }
    memcpy(req->resp + req->resp_len, data, n);
    req->resp_len += n;
    return n;
}

/* The options every transfer shares, set once per handle; a pooled handle
 * keeps them (curl_easy_reset between transfers costs measurably). */
static CURL *fl_easy_new(struct fl_loop *loop)
{
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* Never a proxy from the environment; an unset NOPROXY would cost two
     * getenv calls per transfer. */
    rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, up_headers);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, fl_write_cb);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, fl_header_cb);
    rc |= curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, fl_open_cb);
    rc |= curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, loop);
    if (rc != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    return e;
}

static void fl_easy_put(struct fl_loop *loop, CURL *e)
{
    if (loop->n_pool < FL_POOL)
        loop->pool[loop->n_pool++] = e;
    else
        curl_easy_cleanup(e);
}

/* Upstream i's URL for path: parsed on first use, NULL when the cache is full. */
static CURLU *fl_upstream_url(struct fl_loop *loop, unsigned i, const char *path)
{
    for (unsigned k = 0; k < FL_PATHS; k++) {
        if (loop->paths[i][k].url == NULL) {
            CURLU *u = curl_url_dup(loop->urls[i]);
            if (u == NULL || curl_url_set(u, CURLUPART_PATH, path, 0) != CURLUE_OK) {
                curl_url_cleanup(u);
                return NULL;
            }
            snprintf(loop->paths[i][k].path, sizeof(loop->paths[i][k].path), "%s", path);
            loop->paths[i][k].url = u;
            return u;
        }
        if (strcmp(loop->paths[i][k].path, path) == 0)
            return loop->paths[i][k].url;
    }
    return NULL;
}

static int fl_start_transfer(struct fl_request *req)
{
    struct fl_loop *loop = req->loop;
    CURL *e = loop->n_pool > 0 ? loop->pool[--loop->n_pool] : fl_easy_new(loop);
    if (e == NULL)
        return -ENOMEM;
    CURLU *url = fl_upstream_url(loop, loop->next_upstream++ % opts.n_upstreams, req->path);
    if (url == NULL) {
        fl_easy_put(loop, e);
        return -EINVAL;
    }
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_CURLU, url);
    /* Not copied by curl: req->body lives until the transfer is removed. */
    rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body != NULL ? req->body : "");
    rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, req);
    rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, req);
    if (rc != CURLE_OK || curl_multi_add_handle(loop->multi, e) != CURLM_OK) {
        fl_easy_put(loop, e);
        return -EINVAL;
    }
    req->easy = e;
    return 0;
}

/* Ends req's transfer (status 502 unless the upstream answered). */
static void fl_detach(struct fl_request *req, CURLcode result)
{
    CURL *e = req->easy;
    long code = 0;
    char *ct = NULL;
    if (req->streaming) {
        /* The status went out with the headers: a broken stream is cut. */
        req->failed = result != CURLE_OK;
    } else if (result == CURLE_OK &&
               curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code >= 100 &&
               code <= 999) {
        req->status = code;
        if (curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct != NULL)
            snprintf(req->content_type, sizeof(req->content_type), "%s", ct);
    } else {
        req->status = 502;
    }
    req->done = true;
    curl_multi_remove_handle(req->loop->multi, e);
    /* A handle removed while paused keeps its pause: not pooled. */
    if (req->paused)
        curl_easy_cleanup(e);
    else
        fl_easy_put(req->loop, e);
    req->paused = false;
    req->easy = NULL;
}

static void fl_park(struct fl_request *req)
{
    struct fl_loop *loop = req->loop;
    list_push_front(&loop->parked, &req->park_link);
    req->suspended = true;
    MHD_suspend_connection(req->conn);
}

static void fl_resume(struct fl_request *req)
{
    struct fl_loop *loop = req->loop;
    if (!req->suspended)
        return;
    req->suspended = false;
    list_remove(&req->park_link);
    /* MHD's epoll fd does not report our own resumes: run MHD this pass. */
    loop->mhd_due = true;
    MHD_resume_connection(req->conn);
}

static void fl_collect(struct fl_loop *loop)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(loop->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct fl_request *req = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req);
        CURLcode result = msg->data.result;
        fl_detach(req, result); /* msg is invalid from here */
        fl_resume(req);
    }
}

/* ---- MHD side --------------------------------------------------------------- */

/* MHD's content reader of a streamed answer. */
static ssize_t fl_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct fl_request *req = cls;
    size_t pending = req->resp_len - req->resp_off;
    if (pending > 0) {
        size_t n = pending < max ? pending : max;
        memcpy(buf, req->resp + req->resp_off, n);
        req->resp_off += n;
        if (req->resp_off == req->resp_len)
            req->resp_off = req->resp_len = 0;
        /* Room for a full curl chunk again: the transfer goes on (its
         * write callback may run right here). */
        if (req->paused && req->easy != NULL &&
            FL_STREAM_CAP - (req->resp_len - req->resp_off) >= CURL_MAX_WRITE_SIZE) {
            req->paused = false;
            curl_easy_pause(req->easy, CURLPAUSE_CONT);
        }
        return (ssize_t)n;
    }
    if (req->done)
        return req->failed ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    fl_park(req);
    return 0;
}

static enum MHD_Result fl_queue(struct fl_request *req)
{
    struct MHD_Response *resp;
    if (req->streaming) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, FL_STREAM_BLOCK, fl_reader, req,
                                                 NULL);
    } else if (req->resp != NULL) {
        resp = MHD_create_response_from_buffer(req->resp_len, req->resp, MHD_RESPMEM_MUST_FREE);
        if (resp != NULL)
            req->resp = NULL; /* MHD frees it */
    } else {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (resp == NULL)
        return MHD_NO;
    if (req->content_type[0] != '\0')
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, req->content_type);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)req->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result fl_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)method;
    (void)version;
    struct fl_loop *loop = cls;
    struct fl_request *req = *con_cls;
    if (req == NULL) {
        /* Headers only: answering in this first call would make MHD close
         * the keep-alive connection. */
        req = calloc(1, sizeof(*req));
        if (req == NULL)
            return MHD_NO;
        req->loop = loop;
        req->conn = conn;
        if (strlen(url) >= sizeof(req->path))
            req->too_large = true;
        else
            strcpy(req->path, url);
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->too_large || req->body_len + n > FL_BODY_MAX) {
            req->too_large = true;
            return MHD_YES;
        }
        char *grown = realloc(req->body, req->body_len + n);
        if (grown == NULL)
            return MHD_NO;
        memcpy(grown + req->body_len, upload_data, n);
        req->body = grown;
        req->body_len += n;
        return MHD_YES;
    }
    if (req->done || req->streaming)
        return fl_queue(req); /* resumed: the transfer ended, or a stream's headers came */
    if (req->too_large || loop->stopping || fl_start_transfer(req) != 0) {
        req->status = req->too_large ? 413 : loop->stopping ? 503 : 502;
        return fl_queue(req);
    }
    fl_park(req);
    return MHD_YES;
}

static void fl_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct fl_request *req = *con_cls;
    if (req == NULL)
        return;
    *con_cls = NULL;
    /* Only a resumed connection is completed; a stream whose client left
     * may still have its transfer. */
    if (req->easy != NULL)
        fl_detach(req, CURLE_ABORTED_BY_CALLBACK);
    free(req->body);
    free(req->resp);
    free(req);
}

/* ---- the loop ----------------------------------------------------------------- */

static int fl_timeout_ms(struct fl_loop *loop)
{
    if (loop->mhd_due)
        return 0;
    int64_t t = -1;
    if (loop->curl_deadline_ms >= 0) {
        t = loop->curl_deadline_ms - now_ms();
        if (t < 0)
            t = 0;
    }
    MHD_UNSIGNED_LONG_LONG mt;
    if (MHD_get_timeout(loop->mhd, &mt) == MHD_YES && (t < 0 || (int64_t)mt < t))
        t = (int64_t)mt;
    return t > 1000 ? 1000 : (int)t; /* MHD's timeout may not fit an int */
}

static void fl_socket_event(struct fl_loop *loop, int fd, uint32_t events)
{
    if (fd < FL_MAX_FDS && (loop->fd_state[fd] & FL_FD_PARKED)) {
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
        loop->fd_state[fd] = 0;
        return;
    }
    int mask = (events & (EPOLLIN | EPOLLHUP) ? CURL_CSELECT_IN : 0) |
               (events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
               (events & EPOLLERR ? CURL_CSELECT_ERR : 0);
    int running;
    curl_multi_socket_action(loop->multi, fd, mask, &running);
}

static void fl_curl_timer(struct fl_loop *loop)
{
    if (loop->curl_deadline_ms < 0 || loop->curl_deadline_ms > now_ms())
        return;
    int running;
    loop->curl_deadline_ms = -1;
    curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

/* Stop: fail every parked request (MHD refuses to stop with a suspended
 * connection), let MHD end them, then stop the daemon. */
static void fl_shutdown(struct fl_loop *loop)
{
    loop->stopping = true;
    while (!list_is_empty(&loop->parked)) {
        struct fl_request *req =
            list_entry(list_first(&loop->parked), struct fl_request, park_link);
        if (req->easy != NULL)
            fl_detach(req, CURLE_ABORTED_BY_CALLBACK);
        fl_resume(req);
    }
    for (int i = 0; i < 3; i++)
        MHD_run(loop->mhd);
    MHD_stop_daemon(loop->mhd);
}

static void *fl_loop_main(void *arg)
{
    struct fl_loop *loop = arg;
    struct epoll_event evs[FL_EVENTS];
    for (;;) {
        int n = epoll_wait(loop->epfd, evs, FL_EVENTS, fl_timeout_ms(loop));
        if (n < 0 && errno != EINTR)
            break;
        bool mhd_due = loop->mhd_due;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == FL_TAG_STOP) {
                fl_shutdown(loop);
                return NULL;
            }
            if (tag == FL_TAG_MHD)
                mhd_due = true;
            else
                fl_socket_event(loop, (int)tag, evs[i].events);
        }
        fl_curl_timer(loop);
        fl_collect(loop);
        MHD_UNSIGNED_LONG_LONG mt;
        if (mhd_due || loop->mhd_due || (MHD_get_timeout(loop->mhd, &mt) == MHD_YES && mt == 0)) {
            loop->mhd_due = false;
            MHD_run(loop->mhd);
            /* Transfers the handler just added are due at once: start them
             * now rather than after another epoll_wait. */
            fl_curl_timer(loop);
            fl_collect(loop);
        }
    }
    perror("floor-proxy: epoll_wait");
    fl_shutdown(loop);
    return NULL;
}

static int fl_loop_init(struct fl_loop *loop)
{
    list_init(&loop->parked);
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->curl_deadline_ms = -1;
    loop->multi = curl_multi_init();
    if (loop->epfd < 0 || loop->multi == NULL)
        return -1;
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, fl_socket_cb);
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, fl_timer_cb);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop);
    /* The default cache (4 x the handles in use) would close kept-alive
     * connections whenever few transfers run. */
    curl_multi_setopt(loop->multi, CURLMOPT_MAXCONNECTS, 1024L);
    for (unsigned i = 0; i < opts.n_upstreams; i++) {
        loop->urls[i] = curl_url();
        if (loop->urls[i] == NULL ||
            curl_url_set(loop->urls[i], CURLUPART_URL, opts.upstreams[i], 0) != CURLUE_OK) {
            fprintf(stderr, "floor-proxy: bad upstream URL %s\n", opts.upstreams[i]);
            return -1;
        }
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (opts.turbo)
        flags |= MHD_USE_TURBO;
    loop->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, fl_handler, loop, MHD_OPTION_SOCK_ADDR, &opts.listen,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1, MHD_OPTION_NOTIFY_COMPLETED,
        fl_completed, loop, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)16384,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)FL_CONN_MEMORY, MHD_OPTION_END);
    if (loop->mhd == NULL)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(loop->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    struct epoll_event mev = {.events = EPOLLIN, .data.u64 = FL_TAG_MHD};
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = FL_TAG_STOP};
    if (di == NULL || epoll_ctl(loop->epfd, EPOLL_CTL_ADD, di->epoll_fd, &mev) != 0 ||
        epoll_ctl(loop->epfd, EPOLL_CTL_ADD, stop_fd, &sev) != 0)
        return -1;
    return 0;
}

static void fl_loop_fini(struct fl_loop *loop)
{
    for (unsigned i = 0; i < loop->n_pool; i++)
        curl_easy_cleanup(loop->pool[i]);
    if (loop->multi != NULL)
        curl_multi_cleanup(loop->multi);
    for (unsigned i = 0; i < opts.n_upstreams; i++) {
        curl_url_cleanup(loop->urls[i]);
        for (unsigned k = 0; k < FL_PATHS; k++)
            curl_url_cleanup(loop->paths[i][k].url);
    }
    if (loop->epfd >= 0)
        close(loop->epfd);
}

/* ---- main ------------------------------------------------------------------------ */

static int fl_parse_listen(const char *arg)
{
    char host[64];
    const char *colon = strrchr(arg, ':');
    if (colon == NULL || (size_t)(colon - arg) >= sizeof(host))
        return -1;
    memcpy(host, arg, (size_t)(colon - arg));
    host[colon - arg] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        return -1;
    opts.listen.sin_family = AF_INET;
    opts.listen.sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &opts.listen.sin_addr) == 1 ? 0 : -1;
}

static int fl_parse_args(int argc, char **argv)
{
    opts.threads = 2;
    bool listen = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--turbo") == 0) {
            opts.turbo = true;
            continue;
        }
        if (v == NULL)
            return -1;
        i++;
        if (strcmp(a, "--listen") == 0) {
            if (fl_parse_listen(v) != 0)
                return -1;
            listen = true;
        } else if (strcmp(a, "--upstream") == 0 && opts.n_upstreams < FL_MAX_UPSTREAMS) {
            opts.upstreams[opts.n_upstreams++] = v;
        } else if (strcmp(a, "--threads") == 0) {
            opts.threads = (unsigned)atoi(v);
            if (opts.threads < 1 || opts.threads > FL_MAX_THREADS)
                return -1;
        } else {
            return -1;
        }
    }
    return listen && opts.n_upstreams > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (fl_parse_args(argc, argv) != 0) {
        fprintf(stderr,
                "usage: %s --listen IPV4:PORT --upstream URL [--upstream URL...] "
                "[--threads N] [--turbo]\n",
                argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Threads inherit the mask: only main's sigwait sees SIGTERM/SIGINT. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    /* Curl would send "Expect: 100-continue" for large bodies and wait. */
    up_headers = curl_slist_append(NULL, "Content-Type: application/json");
    up_headers = curl_slist_append(up_headers, "Expect:");
    stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct fl_loop *loops = calloc(opts.threads, sizeof(*loops));
    if (up_headers == NULL || stop_fd < 0 || loops == NULL)
        return 1;
    int rc = 0;
    unsigned started = 0;
    for (; started < opts.threads; started++) {
        loops[started].epfd = -1;
        if (fl_loop_init(&loops[started]) != 0 ||
            pthread_create(&loops[started].thread, NULL, fl_loop_main, &loops[started]) != 0) {
            fprintf(stderr, "floor-proxy: loop %u failed to start\n", started);
            rc = 1;
            break;
        }
    }
    if (rc == 0) {
        int sig;
        sigwait(&stop_sigs, &sig);
    }
    uint64_t one = 1;
    if (write(stop_fd, &one, sizeof(one)) < 0)
        perror("floor-proxy: eventfd");
    for (unsigned i = 0; i < started; i++)
        pthread_join(loops[i].thread, NULL);
    /* A loop that failed in init has a daemon no thread will stop. */
    if (started < opts.threads && loops[started].mhd != NULL)
        MHD_stop_daemon(loops[started].mhd);
    for (unsigned i = 0; i <= started && i < opts.threads; i++)
        fl_loop_fini(&loops[i]);
    free(loops);
    curl_slist_free_all(up_headers);
    close(stop_fd);
    curl_global_cleanup();
    return rc;
}
