/*
 * MHD glue of one loop (see listener.h).
 *
 * The access handler is called once when a request's headers arrive (we
 * only create our request then: answering in that first call would make
 * MHD close a keep-alive connection), once per upload chunk, and once more
 * when the upload is complete, which is where we answer locally or hand the
 * request to the forwarder and suspend the connection. Each resume while
 * forwarding calls the handler again: it queues our reply or the worker's
 * response, or suspends again.
 *
 * A suspended connection is invisible to MHD, so the client fd is watched
 * with EPOLLRDHUP from the first suspension until MHD completes the
 * request, and unwatched before MHD can close it. MHD's completion
 * callback treats every termination other than COMPLETED_OK as a cancel.
 */
#include "dataplane/http/listener.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mhd_log.h"
#include "common/proc.h"
#include "dataplane/http/cors.h"
#include "dataplane/http/errors.h"
#include "dataplane/http/header_rules.h"
#include "dataplane/obs/journal.h"
#include "dataplane/http/local_answer.h"
#include "dataplane/core/loop.h"
#include "dataplane/obs/obs.h"
#include "dataplane/core/relay.h"
#include "dataplane/http/request.h"
#include "dataplane/core/routes.h"
#include "dataplane/http/tls_server.h"
#include "common/list.h"

/* libmicrohttpd's own per-loop cap, above the listener's (conn_cap_per_loop):
 * a backstop that refuses at accept should shedding ever fall behind. */
#define DP_MHD_CONNECTION_SLACK 64u
/* Each connection's libmicrohttpd pool holds its request line and headers
 * plus the response's headers and write buffer. MHD zeroes the pool after
 * every request, so its size is paid per request (the 32 KiB default was a
 * quarter of a small request's instructions) and, in touched pages, per held
 * stream: dataplane.max_header_size plus this much.
 * The handler answers 431 itself above max_header_size, while the pool
 * still has room for the answer. */
#define DP_CONN_RESPONSE_ROOM (2u * 1024u)
#define DP_CONN_TIMEOUT_S     300u
#define DP_LST_SWEEP_MS       100u /* slow-client deadlines are checked this often */
/* An incomplete upload this old is checked for a client that closed its side. */
#define DP_LST_UPLOAD_EOF_MS 1000u
/* The block MHD allocates (zeroed) with each relayed response and keeps
 * for the response's life. A chunked response (every HTTP/1.1 client) is
 * read straight into the connection's pool, so the block only paces
 * HTTP/1.0 clients (an SSE event then goes out in two or three reads);
 * 512 bytes were 2% of a held stream's memory. */
#define DP_RELAY_BLOCK 128u

static void lst_watch(struct dp_request *req)
{
    if (req->watching || req->conn == NULL)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return;
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = req};
    if (epoll_ctl(req->loop->epfd, EPOLL_CTL_ADD, ci->connect_fd, &ev) != 0) {
        log_warn("watching client fd %d: %s", (int)ci->connect_fd, strerror(errno));
        return;
    }
    req->client_fd = ci->connect_fd;
    req->watching = true;
}

static void lst_dequeue_watch(struct dp_request *req)
{
    if (!req->watch_queued)
        return;
    list_remove(&req->watch_link);
    req->watch_queued = false;
}

void dp_listener_watch_soon(struct dp_request *req)
{
    if (req->watching || req->watch_queued || req->conn == NULL)
        return;
    list_push_front(&req->loop->lst.watch_queue, &req->watch_link);
    req->watch_queued = true;
}

void dp_listener_watch_queued(struct dp_loop *loop)
{
    while (!list_is_empty(&loop->lst.watch_queue)) {
        struct dp_request *req =
            list_entry(list_first(&loop->lst.watch_queue), struct dp_request, watch_link);
        lst_dequeue_watch(req);
        if (req->suspended && !req->client_gone)
            lst_watch(req);
    }
}

static void lst_unwatch(struct dp_request *req)
{
    lst_dequeue_watch(req);
    if (!req->watching)
        return;
    epoll_ctl(req->loop->epfd, EPOLL_CTL_DEL, req->client_fd, NULL);
    req->watching = false;
    req->client_fd = -1;
}

void dp_listener_wake(struct dp_request *req)
{
    if (!req->suspended || req->conn == NULL)
        return;
    req->suspended = false;
    req->loop->lst.due = true;
    MHD_resume_connection(req->conn);
}

/* MHD holds the whole response: the worker's body ended and every byte of
 * it was handed over. A client that then goes away (typically: it read the
 * answer and closed before MHD's next pass completed the request) cancels
 * nothing: no attempt works for it, and a failed attempt still draining goes
 * on to its own end, as after a clean completion. */
static bool lst_delivered(const struct dp_request *req)
{
    return req->relay_ready && req->up_done && dp_relay_pending(&req->relay) == 0;
}

void dp_listener_client_event(struct dp_request *req, uint32_t events)
{
    (void)events;
    if (!req->watching || req->conn == NULL)
        return;
    lst_unwatch(req);
    if (!lst_delivered(req))
        req->loop->lst.handlers->cancel(req, true);
}

static void lst_common_headers(const struct dp_request *req, struct MHD_Response *resp)
{
    if (req->request_id[0] != '\0')
        MHD_add_response_header(resp, "X-Request-Id", req->request_id);
    /* Draining: this is the connection's last response, so the client
     * reconnects (to the successor, after a hot restart) for its next one. */
    if (req->loop->draining)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (!req->preflight)
        dp_cors_add_headers(&req->loop->sh->cfg->dataplane.cors, req->conn, resp);
}

/* An idle keep-alive connection of a draining loop: a short timeout lets
 * MHD close it (FIN) once quiet, so its client reconnects elsewhere instead
 * of sending its next request to a process about to exit. A connection in
 * the middle of a request is left alone (its response says close). */
static void lst_close_when_idle(struct dp_conn *dc)
{
    if (dc->closing || dc->req != NULL)
        return;
    dc->closing = true;
    MHD_set_connection_option(dc->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)1);
}

static struct dp_conn *lst_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

static enum MHD_Result lst_queue_buffer(struct dp_request *req, int status, const char *body,
                                        size_t len, const char *content_type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    lst_common_headers(req, resp);
    if (req->retry_after_s != 0) {
        char v[16];
        snprintf(v, sizeof(v), "%u", req->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (req->adm.rejected != NULL)
        MHD_add_response_header(resp, "x-switchyard-rejected", req->adm.rejected);
    if (req->close_after_reply)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    /* Which worker failed and how: the operator's, never in the body. */
    if (status >= 500 && req->last_cause[0] != '\0' && req->loop->sh->cfg->dataplane.debug_headers)
        MHD_add_response_header(resp, "x-switchyard-error-cause", req->last_cause);
    const char *allow = dp_route_row(req->route)->allow;
    if (status == 405 && allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    dp_journal_sent(req, len);
    req->phase = DP_REQ_REPLIED;
    req->final_status = status;
    return ret;
}

static enum MHD_Result lst_queue_error(struct dp_request *req, int status, const char *code,
                                       const char *msg)
{
    char *body =
        dp_error_body_shaped(dp_route_row(req->route)->anthropic_errors, status, code, msg);
    static const char fallback[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                   "\"api_error\",\"code\":\"out_of_memory\"}}";
    enum MHD_Result ret =
        body != NULL
            ? lst_queue_buffer(req, status, body, strlen(body), "application/json")
            : lst_queue_buffer(req, 500, fallback, sizeof(fallback) - 1, "application/json");
    free(body);
    return ret;
}

static ssize_t lst_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct dp_request *req = cls;
    return req->loop->lst.handlers->read(req, buf, max);
}

static void lst_add_relayed_headers(struct dp_request *req, struct MHD_Response *resp)
{
    char *line = req->resp_hdrs;
    if (line == NULL)
        return;
    while (*line != '\0') {
        char *eol = strchr(line, '\n');
        if (eol == NULL)
            break;
        *eol = '\0';
        char *colon = strchr(line, ':');
        if (colon != NULL) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            MHD_add_response_header(resp, line, v);
            *colon = ':';
        }
        *eol = '\n';
        line = eol + 1;
    }
}

static enum MHD_Result lst_queue_relay(struct dp_request *req)
{
    struct MHD_Response *resp;
    if (dp_relay_is_whole(&req->relay)) {
        /* The whole answer: one write of headers and body. MHD frees it. */
        size_t len = 0;
        unsigned char *whole = dp_relay_release(&req->relay, &len);
        resp = MHD_create_response_from_buffer_with_free_callback(len, whole, free);
        if (resp == NULL)
            free(whole);
        else
            dp_journal_sent(req, len);
    } else {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, DP_RELAY_BLOCK, lst_reader, req,
                                                 NULL);
    }
    if (resp == NULL) {
        req->loop->lst.handlers->cancel(req, false);
        return MHD_NO;
    }
    lst_add_relayed_headers(req, resp);
    free(req->resp_hdrs);
    req->resp_hdrs = NULL;
    req->resp_hdrs_len = 0;
    lst_common_headers(req, resp);
    /* From the request, not the attempt: a non-streamed body may have ended
     * (and its attempt with it) before the response is queued. */
    if (req->loop->sh->cfg->dataplane.debug_headers && req->worker_id[0] != '\0') {
        MHD_add_response_header(resp, "x-switchyard-worker", req->worker_id);
        if (req->decision != POL_DECISION_UNSET)
            MHD_add_response_header(resp, "x-switchyard-decision",
                                    pol_decision_name(req->decision));
        if (req->pd.prefill_worker[0] != '\0')
            MHD_add_response_header(resp, "x-switchyard-prefill-worker", req->pd.prefill_worker);
    }
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)req->relay_status, resp);
    MHD_destroy_response(resp);
    req->phase = DP_REQ_REPLIED;
    req->final_status = (int)req->relay_status;
    return ret;
}

static enum MHD_Result lst_answer_local(struct dp_request *req)
{
    struct dp_local_reply r;
    dp_local_answer(req->loop, req, &r);
    enum MHD_Result ret;
    if (r.body == NULL)
        ret = lst_queue_error(req, 500, "internal_error", "the router could not answer");
    else
        ret = lst_queue_buffer(req, r.status, r.body, r.len, r.content_type);
    free(r.body);
    return ret;
}

/* A CORS preflight, answered by the router (cors.h). */
static enum MHD_Result lst_answer_preflight(struct dp_request *req)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    const char *reason = NULL;
    int status = dp_cors_preflight(&req->loop->sh->cfg->dataplane.cors, req->conn,
                                   dp_route_row(req->route)->allow, resp, &reason);
    if (reason != NULL) {
        MHD_destroy_response(resp);
        resp =
            MHD_create_response_from_buffer(strlen(reason), (void *)reason, MHD_RESPMEM_PERSISTENT);
        if (resp == NULL)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
        const char *ignored;
        (void)dp_cors_preflight(&req->loop->sh->cfg->dataplane.cors, req->conn,
                                dp_route_row(req->route)->allow, resp, &ignored);
    }
    lst_common_headers(req, resp);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    req->phase = DP_REQ_REPLIED;
    req->final_status = status;
    return ret;
}

/* One walk over a request's headers: their size as sent, near enough, and
 * whether any is malformed (header_rules.h). One walk, not one per
 * question: each walk cost about 200 instructions of a small request. */
struct lst_hdr_scan {
    size_t bytes;
    bool bad;
    struct dp_hdr_framing framing;
};

static enum MHD_Result lst_scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                       size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct lst_hdr_scan *sc = cls;
    sc->bytes += key_size + value_size + 4; /* ": " CRLF */
    if (key == NULL || !dp_hdr_name_is_token(key, key_size) ||
        (value != NULL && !dp_hdr_value_is_clean(value, value_size)))
        sc->bad = true; /* the walk goes on: the size is asked first */
    dp_hdr_framing_note(&sc->framing, key, key_size, value, value_size);
    return MHD_YES;
}

/* How the request is served on this listener. */
static enum dp_serve lst_serve_of(const struct dp_request *req)
{
    /* With dataplane.metrics_listen set, /metrics lives only there
     * (metrics_listener.h): the client-facing port does not show it. */
    if (req->route == DP_ROUTE_METRICS && req->loop->sh->cfg->dataplane.metrics_listen[0] != '\0')
        return DP_SERVE_NOT_FOUND;
    return dp_route_row(req->route)->serve;
}

/* The answer the handlers left in reply_status and reply_body. */
static enum MHD_Result lst_queue_reply(struct dp_request *req)
{
    lst_unwatch(req);
    const char *body = req->reply_body;
    static const char fallback[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                   "\"api_error\",\"code\":\"out_of_memory\"}}";
    if (body == NULL)
        body = fallback;
    return lst_queue_buffer(req, req->reply_status, body, strlen(body), "application/json");
}

static enum MHD_Result lst_begin(struct dp_request *req)
{
    enum dp_serve serve = lst_serve_of(req);
    if (serve == DP_SERVE_NOT_FOUND)
        return lst_queue_error(req, 404, "not_found", "no such route");
    if (req->preflight)
        return lst_answer_preflight(req);
    if (!req->method_ok)
        return lst_queue_error(req, 405, "method_not_allowed", "method not allowed on this route");
    if (serve == DP_SERVE_LOCAL)
        return lst_answer_local(req);
    /* A draining loop still serves requests on connections it holds (their
     * responses close the connection); only once the drain deadline cut
     * everything does it refuse. */
    if (req->loop->cutting)
        return lst_queue_error(req, 503, "shutting_down", "the router is shutting down");
    req->loop->lst.handlers->begin(req);
    return MHD_YES;
}

/* A request's last reference went: what forwarding hung on it goes, and
 * the loop frees it at the end of its pass. */
static void lst_release(struct dp_request *req)
{
    req->loop->lst.handlers->release(req);
    dp_loop_bury(req->loop, req);
}

static enum MHD_Result lst_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls)
{
    struct dp_loop *loop = cls;
    struct dp_request *req = *con_cls;
    if (req == NULL) {
        req = dp_request_create(loop, conn, url, method, loop->sh->cfg->dataplane.max_body,
                                lst_release);
        if (req == NULL)
            return MHD_NO; /* out of memory: MHD closes this connection only */
        list_push_front(&loop->requests, &req->req_link);
        *con_cls = req;
        req->preflight = dp_cors_is_preflight(&loop->sh->cfg->dataplane.cors, conn, method);
        struct dp_conn *dc = lst_conn_of(conn);
        if (dc != NULL)
            dc->req = req;
        /* Answered at once (the connection then closes, its body unread):
         * MHD's own limit is the pool, and just below it there is no room
         * left for any answer. */
        uint64_t limit = loop->sh->cfg->dataplane.max_header_size;
        struct lst_hdr_scan sc = {
            .bytes = strlen(method) + 1 + strlen(url) + 1 + strlen(version) + 2,
        };
        MHD_get_connection_values_n(conn, MHD_HEADER_KIND, lst_scan_header, &sc);
        if (sc.bytes > limit) {
            char msg[128];
            snprintf(msg, sizeof(msg),
                     "request line and headers exceed dataplane.max_header_size (%llu bytes)",
                     (unsigned long long)limit);
            return lst_queue_error(req, 431, "request_header_fields_too_large", msg);
        }
        /* MHD accepts malformed headers that would reach a worker verbatim
         * (header_rules.h): refuse them before reading the body. */
        if (sc.bad)
            return lst_queue_error(req, 400, "invalid_header",
                                   "a header name is not an HTTP token or a header value holds a "
                                   "control character");
        /* Ambiguous framing: where this body ends is unknown, so nothing
         * after the headers can be trusted as a next request either. */
        const char *framing = dp_hdr_framing_problem(&sc.framing);
        if (framing != NULL) {
            char msg[128];
            snprintf(msg, sizeof(msg), "ambiguous request framing: %s", framing);
            req->close_after_reply = true;
            return lst_queue_error(req, 400, "invalid_framing", msg);
        }
        /* Refuse an announced body over max_body now, before reading it
         * (the connection then closes): reading it to count it cost 3.2 GB
         * for a Content-Length of 10^12. */
        uint64_t max_body = loop->sh->cfg->dataplane.max_body;
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > max_body) {
            char msg[96];
            snprintf(msg, sizeof(msg), "request body exceeds the limit of %llu bytes",
                     (unsigned long long)max_body);
            return lst_queue_error(req, 413, "request_too_large", msg);
        }
        /* A wrong key costs the client its headers, not our memory: 20
         * such uploads of 31 MiB each once held 650 MB until the 401. */
        if (lst_serve_of(req) == DP_SERVE_PROXY && req->method_ok && !req->preflight &&
            !loop->cutting && !loop->lst.handlers->screen(req)) {
            req->close_after_reply = true;
            return lst_queue_reply(req);
        }
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        req->received_bytes += *upload_data_size;
        if (req->phase == DP_REQ_RECEIVING &&
            dp_request_append_body(req, upload_data, *upload_data_size) != 0) {
            *upload_data_size = 0;
            return MHD_NO;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->client_gone)
        return MHD_NO;
    if (req->phase == DP_REQ_REPLIED)
        return MHD_YES;
    if (req->phase == DP_REQ_RECEIVING) {
        enum MHD_Result ret = lst_begin(req);
        if (req->phase == DP_REQ_REPLIED || ret == MHD_NO)
            return ret;
    }
    if (req->reply_status != 0)
        return lst_queue_reply(req);
    if (req->relay_ready)
        return lst_queue_relay(req);
    /* Still waiting on a worker (or a backoff): park until something happens. */
    dp_listener_watch_soon(req);
    MHD_suspend_connection(conn);
    req->suspended = true;
    return MHD_YES;
}

static void lst_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    struct dp_loop *loop = cls;
    struct dp_request *req = *con_cls;
    if (req == NULL)
        return;
    *con_cls = NULL;
    struct dp_conn *dc = conn != NULL ? lst_conn_of(conn) : NULL;
    if (dc != NULL && dc->req == req) {
        dc->req = NULL;
        dc->idle_since_ms = proc_monotonic_ms();
    }
    lst_unwatch(req);
    req->suspended = false;
    /* A request whose whole response MHD already holds is not cancelled when
     * MHD then ends it with an error (lst_delivered). */
    bool delivered = lst_delivered(req);
    /* A relayed response is queued (phase REPLIED) while the worker's body
     * still streams through it: MHD ends such a request itself when a write
     * to a client that left fails before our watch of its socket begins
     * (the next tick), and that must cancel the stream like the watch does. */
    bool relaying = req->phase == DP_REQ_REPLIED && req->relay_ready;
    bool working = (req->phase == DP_REQ_FORWARDING || relaying) && !delivered;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && (working || req->phase == DP_REQ_RECEIVING))
        loop->lst.handlers->cancel(req, working && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN);
    req->conn = NULL;
    /* 499 (nginx's "client closed request") when the client left before any answer. */
    int status = req->final_status != 0 ? req->final_status : 499;
    dp_metrics_request(&loop->sh->metrics, req->route, req->model, status,
                       (proc_monotonic_ms() - req->start_ms) * 1000);
    dp_obs_request_done(req, status,
                        toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
                            toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN);
    list_remove(&req->req_link);
    dp_request_unref(req);
}

/* The client socket of a connection, or -1. */
static int lst_conn_fd(const struct dp_conn *dc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(dc->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci != NULL ? (int)ci->connect_fd : -1;
}

/* Shuts a connection down under MHD (which then sees the end on its next
 * read and closes it the ordinary way). Whatever counts the cut must have
 * counted it before: the client sees the end at once and may read the
 * metrics next. */
static void lst_shutdown_fd(struct dp_conn *dc, int fd)
{
    dc->cut = true;
    shutdown(fd, SHUT_RDWR);
}

/* lst_shutdown_fd on dc's socket; false when it has none. */
static bool lst_shutdown(struct dp_conn *dc)
{
    int fd = lst_conn_fd(dc);
    if (fd < 0)
        return false;
    lst_shutdown_fd(dc, fd);
    return true;
}

/*
 * A new connection took the loop over its cap: make room by closing the
 * longest-held connection that has no request in progress (idle between
 * keep-alive requests, or still sending its headers), as nginx reuses its
 * idle connections when it runs out. Idle connections cost a client
 * nothing to open, so without this a flood of them would lock every
 * legitimate client out until header_timeout swept them. When every
 * connection is busy, the new one is refused instead.
 */
static void lst_make_room(struct dp_loop *loop, struct dp_conn *fresh)
{
    if (loop->lst.n_conns <= loop->sh->conn_cap_per_loop)
        return;
    struct list_node *head = &loop->lst.conns;
    for (struct list_node *it = head->prev; it != head; it = it->prev) {
        struct dp_conn *dc = list_entry(it, struct dp_conn, link);
        if (dc == fresh || dc->req != NULL || dc->cut)
            continue;
        int fd = lst_conn_fd(dc);
        if (fd >= 0) {
            dp_metrics_connection_shed(&loop->sh->metrics, false);
            lst_shutdown_fd(dc, fd);
            loop->lst.due = true;
            return;
        }
    }
    int fd = lst_conn_fd(fresh);
    if (fd >= 0) {
        dp_metrics_connection_shed(&loop->sh->metrics, true);
        lst_shutdown_fd(fresh, fd);
        loop->lst.due = true;
    }
}

static void lst_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                  enum MHD_ConnectionNotificationCode toe)
{
    struct dp_loop *loop = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        /* Before the handshake: the current certificate (tls_server.h). */
        void *tls = dp_tls_conn_start(loop->sh->tls, conn);
        struct dp_conn *dc = calloc(1, sizeof(*dc));
        *socket_context = dc;
        if (dc == NULL)
            return; /* untracked: closed when the daemon stops, not earlier */
        dc->tls = tls;
        dc->conn = conn;
        dc->idle_since_ms = proc_monotonic_ms();
        list_push_front(&loop->lst.conns, &dc->link);
        loop->lst.n_conns++;
        if (loop->draining)
            lst_close_when_idle(dc);
        lst_make_room(loop, dc);
        return;
    }
    struct dp_conn *dc = *socket_context;
    if (dc == NULL)
        return;
    *socket_context = NULL;
    list_remove(&dc->link);
    loop->lst.n_conns--;
    dp_tls_conn_end(loop->sh->tls, dc->tls);
    free(dc);
}

/* The daemon's epoll fd in the loop's set: its events run both daemons. */
static int lst_watch_daemon(struct dp_loop *loop, struct MHD_Daemon *mhd)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (di == NULL)
        return -EINVAL;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = DP_TAG_MHD};
    return epoll_ctl(loop->epfd, EPOLL_CTL_ADD, di->epoll_fd, &ev) == 0 ? 0 : -errno;
}

/* dataplane.plain_listen: the same handlers without TLS. Its socket is
 * bound anew by each process (SO_REUSEPORT), not handed over by a hot
 * restart: it serves local clients and probes. */
static int lst_start_plain(struct dp_loop *loop, unsigned flags, size_t pool)
{
    const struct dp_shared *sh = loop->sh;
    flags &= ~(unsigned)MHD_USE_IPv6;
    if (sh->plain_addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    loop->lst.plain = MHD_start_daemon(
        flags, 0, NULL, NULL, lst_handler, loop, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message, NULL,
        MHD_OPTION_SOCK_ADDR, &sh->plain_addr, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1,
        MHD_OPTION_NOTIFY_COMPLETED, lst_completed, loop, MHD_OPTION_NOTIFY_CONNECTION,
        lst_notify_connection, loop, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)(sh->conn_cap_per_loop + DP_MHD_CONNECTION_SLACK),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)DP_CONN_TIMEOUT_S,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned int)sh->cfg->dataplane.per_ip_connection_limit,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool, MHD_OPTION_END);
    if (loop->lst.plain == NULL)
        return -EADDRINUSE;
    return lst_watch_daemon(loop, loop->lst.plain);
}

int dp_listener_start(struct dp_loop *loop, const struct dp_lst_handlers *handlers)
{
    loop->lst.handlers = handlers;
    const struct dp_shared *sh = loop->sh;
    /* TURBO: MHD reads and writes before asking epoll whether it may, which
     * saves some of the epoll_ctl and EAGAIN reads of each request (strace:
     * 10.1 -> 9.96 syscalls per small request). */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    size_t pool = (size_t)sh->cfg->dataplane.max_header_size + DP_CONN_RESPONSE_ROOM;
    if (sh->listen_addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    flags |= dp_tls_daemon_flag(sh->tls);
    struct MHD_OptionItem tls_opts[DP_TLS_OPTIONS_MAX];
    dp_tls_mhd_options(sh->tls, tls_opts);
    /* Loop i serves the predecessor's socket i after a hot restart, so the
     * connections waiting in its accept queue are not lost. */
    int inherited = loop->index < sh->n_inherited ? sh->inherited[loop->index] : -1;
    if (inherited >= 0)
        loop->lst.mhd = MHD_start_daemon(
            flags, 0, NULL, NULL, lst_handler, loop, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message,
            NULL, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)inherited,
            MHD_OPTION_NOTIFY_COMPLETED, lst_completed, loop, MHD_OPTION_NOTIFY_CONNECTION,
            lst_notify_connection, loop, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)(sh->conn_cap_per_loop + DP_MHD_CONNECTION_SLACK),
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)DP_CONN_TIMEOUT_S,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)sh->cfg->dataplane.per_ip_connection_limit,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool, MHD_OPTION_END);
    else
        loop->lst.mhd = MHD_start_daemon(
            flags, 0, NULL, NULL, lst_handler, loop, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message,
            NULL, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_SOCK_ADDR, &sh->listen_addr,
            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1, MHD_OPTION_NOTIFY_COMPLETED,
            lst_completed, loop, MHD_OPTION_NOTIFY_CONNECTION, lst_notify_connection, loop,
            MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)(sh->conn_cap_per_loop + DP_MHD_CONNECTION_SLACK),
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)DP_CONN_TIMEOUT_S,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)sh->cfg->dataplane.per_ip_connection_limit,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool, MHD_OPTION_END);
    if (loop->lst.mhd == NULL)
        return -EADDRINUSE;
    const union MHD_DaemonInfo *li = MHD_get_daemon_info(loop->lst.mhd, MHD_DAEMON_INFO_LISTEN_FD);
    loop->lst.listen_fd = li != NULL ? (int)li->listen_fd : -1;
    int rc = lst_watch_daemon(loop, loop->lst.mhd);
    if (rc == 0 && sh->plain_addr_len > 0)
        rc = lst_start_plain(loop, flags & ~dp_tls_daemon_flag(sh->tls), pool);
    if (rc != 0)
        dp_listener_stop(loop);
    return rc;
}

void dp_listener_quiesce(struct dp_loop *loop)
{
    /* Once only (drain, then stop, both quiesce): closing what a second
     * MHD_quiesce_daemon returns could close a fd number another loop's
     * new connection reused meanwhile (seen under ASan: MHD aborts). */
    if (loop->lst.mhd == NULL || loop->lst.quiesced)
        return;
    loop->lst.quiesced = true;
    MHD_socket s = MHD_quiesce_daemon(loop->lst.mhd);
    /* After a hot restart the successor holds the same socket: closing our
     * copy leaves its accept queue to the successor. */
    if (s != MHD_INVALID_SOCKET)
        close(s);
    loop->lst.listen_fd = -1;
    if (loop->lst.plain != NULL) {
        s = MHD_quiesce_daemon(loop->lst.plain);
        if (s != MHD_INVALID_SOCKET)
            close(s);
    }
    struct list_node *it;
    list_foreach(it, &loop->lst.conns) lst_close_when_idle(list_entry(it, struct dp_conn, link));
}

void dp_listener_close_idle(struct dp_loop *loop)
{
    struct list_node *it;
    list_foreach(it, &loop->lst.conns) lst_close_when_idle(list_entry(it, struct dp_conn, link));
}

/* Shuts the client's socket down under MHD, which then sees the end on its
 * next read and closes the connection the ordinary way. */
static void lst_cut(struct dp_loop *loop, struct dp_conn *dc, bool in_body)
{
    int fd = lst_conn_fd(dc);
    if (fd < 0)
        return;
    dp_metrics_slow_client(&loop->sh->metrics, in_body);
    lst_shutdown_fd(dc, fd);
    loop->lst.due = true;
}

/*
 * True when the client has closed its side of a connection whose request
 * body is still incomplete. libmicrohttpd (0.9.75, epoll, edge-triggered)
 * can read the last body bytes and the end of stream in one go and then
 * wait for an event that never comes: the request would sit until
 * header_timeout cut it as a slow upload. One peek per such connection and
 * sweep finds it; an upload in progress answers EAGAIN or has data.
 */
static bool lst_peer_closed(const struct dp_conn *dc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(dc->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return false;
    char c;
    return recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void dp_listener_enforce_deadlines(struct dp_loop *loop, uint64_t now_ms)
{
    if (now_ms < loop->lst.next_sweep_ms)
        return;
    loop->lst.next_sweep_ms = now_ms + DP_LST_SWEEP_MS;
    const struct cfg_dataplane *dp = &loop->sh->cfg->dataplane;
    struct list_node *it;
    list_foreach(it, &loop->lst.conns)
    {
        struct dp_conn *dc = list_entry(it, struct dp_conn, link);
        if (dc->cut)
            continue;
        const struct dp_request *req = dc->req;
        if (req == NULL) {
            if (now_ms - dc->idle_since_ms > dp->header_timeout_ms)
                lst_cut(loop, dc, false);
            continue;
        }
        uint64_t elapsed = now_ms - req->start_ms;
        if (req->phase == DP_REQ_RECEIVING && dp->upload_min_rate > 0 &&
            elapsed > dp->header_timeout_ms &&
            req->received_bytes * 1000u < dp->upload_min_rate * elapsed)
            lst_cut(loop, dc, true);
        else if (req->phase == DP_REQ_RECEIVING && elapsed > DP_LST_UPLOAD_EOF_MS &&
                 lst_peer_closed(dc) && lst_shutdown(dc))
            loop->lst.due = true; /* MHD sees it now, and ends it as a client gone */
    }
}

bool dp_listener_is_running(const struct dp_loop *loop)
{
    return loop->lst.mhd != NULL;
}

int dp_listener_socket(const struct dp_loop *loop)
{
    return loop->lst.listen_fd;
}

int64_t dp_listener_timeout_ms(const struct dp_loop *loop)
{
    if (loop->lst.due)
        return 0;
    MHD_UNSIGNED_LONG_LONG mt;
    int64_t t = -1;
    if (loop->lst.mhd != NULL && MHD_get_timeout(loop->lst.mhd, &mt) == MHD_YES)
        t = (int64_t)mt;
    if (loop->lst.plain != NULL && MHD_get_timeout(loop->lst.plain, &mt) == MHD_YES &&
        (t < 0 || (int64_t)mt < t))
        t = (int64_t)mt;
    return t;
}

void dp_listener_run(struct dp_loop *loop, bool events)
{
    if (loop->lst.mhd == NULL)
        return;
    MHD_UNSIGNED_LONG_LONG mt;
    /* MHD's epoll fd does not report our own resumes: track them. */
    bool due = loop->lst.due;
    if (events || due || (MHD_get_timeout(loop->lst.mhd, &mt) == MHD_YES && mt == 0)) {
        loop->lst.due = false;
        MHD_run(loop->lst.mhd);
    }
    if (loop->lst.plain != NULL &&
        (events || due || (MHD_get_timeout(loop->lst.plain, &mt) == MHD_YES && mt == 0)))
        MHD_run(loop->lst.plain);
}

void dp_listener_stop(struct dp_loop *loop)
{
    if (loop->lst.plain != NULL)
        MHD_stop_daemon(loop->lst.plain);
    loop->lst.plain = NULL;
    if (loop->lst.mhd == NULL)
        return;
    MHD_stop_daemon(loop->lst.mhd);
    loop->lst.mhd = NULL;
}
