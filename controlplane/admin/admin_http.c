/*
 * Admin REST server (see admin_http.h). Why external epoll mode rather than
 * MHD's own thread: the routes write the registry, whose seqlock allows one
 * writer, and the health prober writes it too; running both on the loop
 * thread makes them one writer without a mutex, and reset_load's wait for
 * the dataplanes becomes a suspended connection instead of a blocked
 * thread. MHD's epoll descriptor is level-readable whenever MHD has work.
 *
 * Per request, an adm_pending (the "connection class") accumulates the body
 * in a struct buf capped at ADM_HTTP_BODY_MAX (a body that passes the cap is
 * read to its end and answered 413) and carries the answer of a suspended
 * route, which arrives through adm_http_finish, the completion handed to the
 * route.
 */
#include "controlplane/admin/admin_http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "common/mhd_log.h"
#include "common/proc.h"
#include "common/prom.h"
#include "common/secret_file.h"
#include "controlplane/admin/admin_guard.h"
#include "controlplane/admin/admin_reply.h"
#include "controlplane/admin/admin_routes.h"
#include "controlplane/admin/status_page.h"

#define ADM_TOKEN_MAX 4096u
/* An admin client has this long to complete its request headers (docs/security.md). */
#define ADM_HEADER_DEADLINE_MS 10000u
#define ADM_CODES_PER_ROUTE    24u

struct adm_code_count {
    unsigned code;
    uint64_t n;
};

/* Owned by controlplane.c; loop thread only. */
/*
 * One open admin connection, tracked so that one which does not complete
 * its request headers within ADM_HEADER_DEADLINE_MS (of its accept or of
 * its previous request's end) is shut down: MHD's own timeout is for
 * inactivity only, and a byte now and then would hold a slot forever.
 * Created and freed by MHD's connection notifications.
 */
struct adm_conn {
    struct list_node link; /* adm_http.conns */
    struct MHD_Connection *conn;
    uint64_t idle_since_ms;
    bool in_request;
    bool cut;
};

struct adm_http {
    struct adm_ctx *ctx; /* borrowed */
    struct MHD_Daemon *daemon;
    struct list_node conns; /* struct adm_conn */
    uint64_t next_sweep_ms;
    char *token; /* NULL = no auth */
    size_t token_len;
    struct adm_guard guard; /* Host, Origin, Content-Type: before the token */
    struct adm_code_count counts[ADM_ROUTE_COUNT][ADM_CODES_PER_ROUTE];
};

/* One request; created at its first handler call, freed when MHD completes it. */
struct adm_pending {
    struct adm_http *h;
    struct MHD_Connection *conn;
    struct buf body; /* capped at ADM_HTTP_BODY_MAX */
    bool too_big;
    bool suspended;
    bool done; /* reply holds the answer of an asynchronous route */
    struct adm_reply reply;
};

/* Constant-time in the length of the configured token. */
static bool adm_token_matches(const struct adm_http *h, const char *given)
{
    size_t n = strlen(given);
    unsigned diff = n != h->token_len;
    for (size_t i = 0; i < h->token_len; i++) {
        unsigned char g = i < n ? (unsigned char)given[i] : 0;
        diff |= g ^ (unsigned char)h->token[i];
    }
    return diff == 0;
}

static bool adm_authorized(const struct adm_http *h, struct MHD_Connection *conn)
{
    if (h->token == NULL)
        return true;
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    return adm_token_matches(h, v + 7);
}

static void adm_count(struct adm_http *h, enum adm_route_id route, unsigned code)
{
    struct adm_code_count *c = h->counts[route];
    for (size_t i = 0; i < ADM_CODES_PER_ROUTE; i++) {
        if (c[i].code == code || c[i].code == 0) {
            c[i].code = code;
            c[i].n++;
            return;
        }
    }
}

/* Writes switchyard_admin_requests_total: routes in adm_route_labels order,
 * codes in the order they were first answered. */
static void adm_http_write_metrics(const struct adm_http *h, struct prom_writer *w)
{
    prom_family(w, "switchyard_admin_requests_total", PROM_COUNTER,
                "Admin API requests by route and status.");
    for (size_t r = 1; r < ADM_ROUTE_COUNT; r++) {
        for (size_t i = 0; i < ADM_CODES_PER_ROUTE && h->counts[r][i].code != 0; i++) {
            char code[12];
            snprintf(code, sizeof(code), "%u", h->counts[r][i].code);
            struct prom_label l[] = {{"route", adm_route_labels[r]}, {"code", code}};
            prom_sample_u64(w, NULL, l, 2, h->counts[r][i].n);
        }
    }
}

static void adm_http_metrics_hook(const void *arg, struct prom_writer *w)
{
    adm_http_write_metrics(arg, w);
}

static enum MHD_Result adm_send(struct adm_pending *p, const char *url, struct adm_reply *reply)
{
    char *body = NULL;
    const char *type = "application/json";
    if (reply->text != NULL) {
        body = reply->text;
        reply->text = NULL;
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (reply->json != NULL) {
        body = json_dumps(reply->json, JSON_COMPACT);
    }
    size_t len = body != NULL ? strlen(body) : 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body != NULL ? body : (void *)"",
        body != NULL ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        free(body);
        adm_reply_fini(reply);
        return MHD_NO;
    }
    if (len > 0)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (reply->allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, reply->allow);
    if (reply->status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    adm_count(p->h, adm_route_match(url), reply->status);
    enum MHD_Result rc = MHD_queue_response(p->conn, reply->status, resp);
    MHD_destroy_response(resp);
    adm_reply_fini(reply);
    return rc;
}

/*
 * GET / (see status_page.h): the page needs no token, its data does. Any
 * other method is 405. Answered on the request's first call, which makes
 * MHD close the connection afterwards: a page load is one request.
 */
static enum MHD_Result adm_send_page(struct adm_pending *p, const char *method)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    size_t len = 0;
    const char *page = adm_status_page(&len);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(get ? len : 0, (void *)page, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    unsigned status = get ? MHD_HTTP_OK : MHD_HTTP_METHOD_NOT_ALLOWED;
    if (get) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, "Content-Security-Policy", ADM_STATUS_PAGE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    } else {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    adm_count(p->h, ADM_ROUTE_PAGE, status);
    enum MHD_Result rc = MHD_queue_response(p->conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* Completes a request that went asynchronous (adm_reply_done_fn); takes
 * reply's contents. */
static void adm_http_finish(void *arg, struct adm_reply *reply)
{
    struct adm_pending *p = arg;
    p->reply = *reply;
    memset(reply, 0, sizeof(*reply));
    p->done = true;
    if (p->suspended) {
        p->suspended = false;
        MHD_resume_connection(p->conn);
    }
}

/* The browser guard (admin_guard.h), on the request's headers alone: true
 * with the refusal in *early when the request must not go on. */
static bool adm_guarded(const struct adm_http *h, struct MHD_Connection *conn, const char *method,
                        struct adm_reply *early)
{
    struct adm_guard_request r = {
        .method = method,
        .host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
        .origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"),
        .sec_fetch_site = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site"),
        .content_type =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
    };
    char why[256];
    unsigned status = adm_guard_check(&h->guard, &r, why, sizeof(why));
    if (status == 0)
        return false;
    adm_reply_error(early, status, "%s", why);
    return true;
}

static enum MHD_Result adm_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct adm_http *h = cls;
    struct adm_pending *p = *con_cls;
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return MHD_NO;
        p->h = h;
        p->conn = conn;
        buf_init(&p->body, ADM_HTTP_BODY_MAX);
        *con_cls = p;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci != NULL && ci->socket_context != NULL)
            ((struct adm_conn *)ci->socket_context)->in_request = true;
        struct adm_reply early = {0};
        if (adm_guarded(h, conn, method, &early))
            return adm_send(p, url, &early);
        if (strcmp(url, "/") == 0)
            return adm_send_page(p, method);
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (!adm_authorized(h, conn))
            adm_reply_error(&early, MHD_HTTP_UNAUTHORIZED, "missing or wrong bearer token");
        else if (cl != NULL && strtoull(cl, NULL, 10) > ADM_HTTP_BODY_MAX)
            adm_reply_error(&early, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %u bytes",
                            ADM_HTTP_BODY_MAX);
        if (early.status != 0)
            return adm_send(p, url, &early);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (p->too_big)
            return MHD_YES;
        int rc = buf_append(&p->body, upload_data, n);
        if (rc == -E2BIG)
            p->too_big = true; /* the rest is read and dropped; 413 at the end */
        return rc == 0 || rc == -E2BIG ? MHD_YES : MHD_NO;
    }
    if (p->done)
        return adm_send(p, url, &p->reply);
    if (p->suspended)
        return MHD_YES; /* not ours to answer yet */
    struct adm_reply reply = {0};
    if (p->too_big) {
        adm_reply_error(&reply, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %u bytes",
                        ADM_HTTP_BODY_MAX);
        return adm_send(p, url, &reply);
    }
    struct adm_reply_later later = {.fn = adm_http_finish, .arg = p};
    if (adm_route_serve(h->ctx, method, url, p->body.data != NULL ? p->body.data : "", p->body.len,
                        &later, &reply))
        return adm_send(p, url, &reply);
    if (p->done)
        return adm_send(p, url, &p->reply);
    p->suspended = true;
    MHD_suspend_connection(conn);
    return MHD_YES;
}

static void adm_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci =
        conn != NULL ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    if (ci != NULL && ci->socket_context != NULL) {
        struct adm_conn *ac = ci->socket_context;
        ac->in_request = false;
        ac->idle_since_ms = proc_monotonic_ms();
    }
    struct adm_pending *p = *con_cls;
    if (p == NULL)
        return;
    adm_reply_fini(&p->reply);
    buf_fini(&p->body);
    free(p);
    *con_cls = NULL;
}

static int adm_load_token(struct adm_http *h, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        log_error("admin_token_file %s: %s", path, strerror(errno));
        return -errno;
    }
    /* The token grants every admin action: a file others can read is as
     * good as none (common/secret_file.h says who "others" are). */
    struct stat st;
    char why[160];
    if (fstat(fd, &st) != 0) {
        log_error("admin_token_file %s: %s", path, strerror(errno));
        close(fd);
        return -EIO;
    }
    if (secret_file_check(&st, why, sizeof(why)) != 0) {
        log_error("admin_token_file %s is %s", path, why);
        close(fd);
        return -EPERM;
    }
    char *buf = calloc(1, ADM_TOKEN_MAX + 1);
    ssize_t n = buf != NULL ? read(fd, buf, ADM_TOKEN_MAX + 1) : -1;
    close(fd);
    if (n < 0 || (size_t)n > ADM_TOKEN_MAX) {
        log_error("admin_token_file %s: unreadable or over %u bytes", path, ADM_TOKEN_MAX);
        free(buf);
        return -EINVAL;
    }
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0) {
        log_error("admin_token_file %s is empty", path);
        free(buf);
        return -EINVAL;
    }
    h->token = buf;
    h->token_len = (size_t)n;
    return 0;
}

static void adm_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                  enum MHD_ConnectionNotificationCode toe)
{
    struct adm_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct adm_conn *ac = calloc(1, sizeof(*ac));
        *socket_context = ac;
        if (ac == NULL)
            return; /* untracked: MHD's inactivity timeout still applies */
        ac->conn = conn;
        ac->idle_since_ms = proc_monotonic_ms();
        list_push_front(&h->conns, &ac->link);
        return;
    }
    struct adm_conn *ac = *socket_context;
    if (ac == NULL)
        return;
    list_remove(&ac->link);
    free(ac);
    *socket_context = NULL;
}

/* Shuts down connections past the header deadline (see struct adm_conn);
 * MHD then sees the end and closes them the ordinary way. */
static void adm_sweep(struct adm_http *h, uint64_t now_ms)
{
    if (now_ms < h->next_sweep_ms)
        return;
    h->next_sweep_ms = now_ms + 100;
    struct list_node *it;
    list_foreach(it, &h->conns)
    {
        struct adm_conn *ac = list_entry(it, struct adm_conn, link);
        if (ac->cut || ac->in_request || now_ms - ac->idle_since_ms <= ADM_HEADER_DEADLINE_MS)
            continue;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(ac->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci == NULL)
            continue;
        ac->cut = true;
        shutdown(ci->connect_fd, SHUT_RDWR);
    }
}

static bool adm_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/*
 * At most a quarter of the descriptor limit (between 4 and 256) for admin
 * connections: idle clients of the admin port must never leave the control
 * plane without descriptors for its probes, the data planes' channel and
 * the /proc reads that judge their leases.
 */
static unsigned adm_connection_cap(void)
{
    uint64_t quarter = proc_fd_limit() / 4;
    if (quarter < 4)
        return 4;
    return quarter > 256 ? 256u : (unsigned)quarter;
}

int adm_http_create(struct adm_ctx *ctx, struct adm_http **out)
{
    struct adm_http *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    h->ctx = ctx;
    list_init(&h->conns);
    const struct cfg_controlplane *cp = &ctx->cfg->controlplane;
    int rc = 0;
    if (cp->admin_token_file[0] != '\0' && (rc = adm_load_token(h, cp->admin_token_file)) != 0)
        goto out_fail;
    char host[CFG_ADDR_MAX], port[8];
    uint16_t portn = 0;
    if (cfg_parse_host_port(cp->admin_listen, host, sizeof(host), &portn) != 0) {
        rc = -EINVAL;
        goto out_fail;
    }
    snprintf(port, sizeof(port), "%u", (unsigned)portn);
    if (adm_guard_init(&h->guard, cp->admin_listen, &cp->admin_allowed_hosts) != 0) {
        rc = -EINVAL;
        goto out_fail;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        log_error("admin_listen %s: %s", cp->admin_listen, gai_strerror(gai));
        rc = -EINVAL;
        goto out_fail;
    }
    if (h->token == NULL && !adm_is_loopback(ai->ai_addr)) {
        if (!cp->admin_insecure) {
            log_error("admin_listen %s is not a loopback address and admin_token_file is empty: "
                      "anyone who reaches it could add, drain and remove workers. Set "
                      "admin_token_file, listen on loopback, or set admin_insecure: true",
                      cp->admin_listen);
            freeaddrinfo(ai);
            rc = -EPERM;
            goto out_fail;
        }
        log_warn("admin API on %s without a token (admin_insecure: true): anyone who reaches "
                 "it can change the fleet",
                 cp->admin_listen);
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(
        flags, portn, NULL, NULL, adm_handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message, NULL,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, adm_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, adm_notify_connection, h, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)30, MHD_OPTION_CONNECTION_LIMIT, adm_connection_cap(), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->daemon == NULL) {
        log_error("admin API: cannot listen on %s", cp->admin_listen);
        rc = -EADDRINUSE;
        goto out_fail;
    }
    log_info("admin API listening on %s%s", cp->admin_listen,
             h->token != NULL ? " (bearer token required)" : "");
    ctx->http_metrics = adm_http_metrics_hook;
    ctx->http_metrics_arg = h;
    *out = h;
    return 0;

out_fail:
    adm_http_destroy(h);
    return rc;
}

void adm_http_destroy(struct adm_http *h)
{
    if (h == NULL)
        return;
    if (h->ctx->http_metrics_arg == h) {
        h->ctx->http_metrics = NULL;
        h->ctx->http_metrics_arg = NULL;
    }
    if (h->daemon != NULL)
        MHD_stop_daemon(h->daemon);
    if (h->token != NULL)
        explicit_bzero(h->token, h->token_len);
    free(h->token);
    free(h);
}

int adm_http_fd(const struct adm_http *h)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info != NULL ? info->epoll_fd : -1;
}

int adm_http_timeout_ms(const struct adm_http *h)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    if (MHD_get_timeout(h->daemon, &ms) != MHD_YES)
        return -1;
    return ms > 60000 ? 60000 : (int)ms;
}

void adm_http_run(struct adm_http *h)
{
    MHD_run(h->daemon);
    adm_sweep(h, proc_monotonic_ms());
}
