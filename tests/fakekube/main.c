/*
 * switchyard-fakekube: a fake Kubernetes API server for the tests of the
 * Kubernetes worker source (docs/fakekube.md). It serves the pod routes of
 * the core API the source uses, as the real server does on the wire:
 *
 *   GET /api/v1/namespaces/{ns}/pods            PodList (labelSelector, limit, continue)
 *   GET /api/v1/namespaces/{ns}/pods?watch=true newline-delimited events, chunked
 *        (resourceVersion, allowWatchBookmarks, timeoutSeconds, labelSelector)
 *   GET /api/v1/namespaces/{ns}/pods/{name}     one Pod
 *
 * and a control API for tests: PUT and DELETE /fake/namespaces/{ns}/pods/{name}
 * and POST /fake/faults. Plain HTTP only; the bearer token is checked only
 * when a test asks for one (the require_token fault).
 *
 * One thread per connection (libmicrohttpd's thread-per-connection mode):
 * a watch's content reader blocks in the store until its next event, which
 * keeps every watch independent and the code straight. Exit status: 0
 * after SIGTERM/SIGINT, 2 for bad flags, 1 when it cannot listen.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

#include "common/config.h"
#include "common/version.h"
#include "tests/fakekube/store.h"

#define FK_BODY_MAX (4u << 20)

struct fk_req {
    char *body;
    size_t len;
    bool too_big;
};

/* What a watch connection streams: the current line, sent in pieces. */
struct fk_stream {
    struct fk_watch w;
    char *line;
    size_t off;
    bool end_after_line;
};

static enum MHD_Result fk_send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result fk_error(struct MHD_Connection *c, int code, const char *reason,
                                const char *msg)
{
    return fk_send_json(c, (unsigned)code, fk_status(code, reason, msg));
}

static ssize_t fk_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct fk_stream *s = cls;
    while (s->line == NULL) {
        if (s->end_after_line)
            return MHD_CONTENT_READER_END_OF_STREAM;
        char *line = NULL;
        enum fk_watch_step step = fk_watch_next(&s->w, &line);
        if (step == FK_WATCH_SEVER)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (step == FK_WATCH_END)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (line == NULL)
            return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
        s->line = line;
        s->off = 0;
    }
    size_t left = strlen(s->line) - s->off;
    size_t n = left < max ? left : max;
    memcpy(buf, s->line + s->off, n);
    s->off += n;
    if (s->off == strlen(s->line)) {
        free(s->line);
        s->line = NULL;
    }
    return (ssize_t)n;
}

static void fk_stream_free(void *cls)
{
    struct fk_stream *s = cls;
    free(s->line);
    fk_watch_fini(&s->w);
    free(s);
}

/* A flood_list answer, made as it is sent: millions of items are never
 * held whole, so the fake can play a hostile server cheaply. */
struct fk_flood_stream {
    struct fk_flood f;
    size_t next, end; /* items [next, end) are still to send */
    char *piece;      /* the text being sent */
    size_t off, len;
    int phase; /* 0: head, 1: items, 2: tail, 3: done */
    char head[320], tail[8];
    char rv[32]; /* of the list and its items */
};

/* The next item's text (malloc'd). */
static char *fk_flood_item(struct fk_flood_stream *s, size_t *len)
{
    size_t i = s->next++;
    char *text;
    if (!s->f.named) {
        text = strdup(s->f.item);
    } else {
        json_error_t jerr;
        json_t *item = json_loads(s->f.item, 0, &jerr);
        json_t *meta = json_object_get(item, "metadata");
        if (!json_is_object(meta)) {
            meta = json_object();
            json_object_set_new(item, "metadata", meta);
        }
        char name[64], uid[64];
        snprintf(name, sizeof(name), "flood-%07zu", i);
        snprintf(uid, sizeof(uid), "flood-uid-%07zu", i);
        json_object_set_new(meta, "name", json_string(name));
        json_object_set_new(meta, "uid", json_string(uid));
        json_object_set_new(meta, "resourceVersion", json_string(s->rv));
        text = json_dumps(item, JSON_COMPACT);
        json_decref(item);
    }
    if (text == NULL)
        return NULL;
    *len = strlen(text);
    return text;
}

static ssize_t fk_flood_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct fk_flood_stream *s = cls;
    size_t out = 0;
    while (out < max) {
        if (s->piece == NULL) {
            if (s->phase == 0) {
                s->piece = strdup(s->head);
                s->len = strlen(s->head);
                s->phase = 1;
            } else if (s->phase == 1 && s->next < s->end) {
                size_t n = 0;
                char *item = fk_flood_item(s, &n);
                if (item == NULL)
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                /* A comma after every item but the last. */
                if (s->next < s->end) {
                    char *withc = realloc(item, n + 2);
                    if (withc == NULL) {
                        free(item);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                    }
                    item = withc;
                    item[n++] = ',';
                    item[n] = '\0';
                }
                s->piece = item;
                s->len = n;
            } else if (s->phase == 1) {
                s->phase = 2;
                continue;
            } else if (s->phase == 2) {
                s->piece = strdup(s->tail);
                s->len = strlen(s->tail);
                s->phase = 3;
            } else {
                break;
            }
            if (s->piece == NULL)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            s->off = 0;
        }
        size_t n = s->len - s->off < max - out ? s->len - s->off : max - out;
        memcpy(buf + out, s->piece + s->off, n);
        out += n;
        s->off += n;
        if (s->off == s->len) {
            free(s->piece);
            s->piece = NULL;
        }
    }
    if (out == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    return (ssize_t)out;
}

static void fk_flood_free(void *cls)
{
    struct fk_flood_stream *s = cls;
    free(s->piece);
    free(s->f.item);
    free(s);
}

/* A list answered by the flood_list fault (takes f's item). */
static enum MHD_Result fk_flood_list(struct MHD_Connection *c, struct fk_flood *f, long limit,
                                     const char *cont)
{
    struct fk_flood_stream *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        free(f->item);
        return MHD_NO;
    }
    s->f = *f;
    size_t start = 0;
    if (s->f.honour_limit && cont != NULL && cont[0] != '\0' &&
        sscanf(cont, "flood:%zu", &start) != 1) {
        fk_flood_free(s);
        return fk_error(c, 400, "BadRequest", "invalid continue token");
    }
    s->next = start < s->f.items ? start : s->f.items;
    s->end = s->f.items;
    if (s->f.honour_limit && limit > 0 && s->end - s->next > (size_t)limit)
        s->end = s->next + (size_t)limit;
    char next[64] = "";
    if (s->end < s->f.items)
        snprintf(next, sizeof(next), ",\"continue\":\"flood:%zu\"", s->end);
    snprintf(s->rv, sizeof(s->rv), "%llu", (unsigned long long)s->f.rv);
    const char *rv = s->rv;
    snprintf(s->head, sizeof(s->head),
             "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
             "\"%s\"%s},\"items\":[",
             rv, next);
    snprintf(s->tail, sizeof(s->tail), "]}");
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                               fk_flood_read, s, fk_flood_free);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static bool fk_arg_true(struct MHD_Connection *c, const char *key)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    return v != NULL && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

static enum MHD_Result fk_watch(struct MHD_Connection *c, const char *ns,
                                const struct fk_selector *sel)
{
    struct fk_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return MHD_NO;
    const char *rv = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "resourceVersion");
    const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "timeoutSeconds");
    long timeout = to != NULL ? strtol(to, NULL, 10) : 0;
    int rc = fk_watch_start(&s->w, ns, sel, rv, fk_arg_true(c, "allowWatchBookmarks"), timeout);
    if (rc == 400) {
        fk_watch_fini(&s->w);
        free(s);
        return fk_error(c, 400, "BadRequest", "invalid resourceVersion");
    }
    /* 410 is streamed as an ERROR event after a 200, as the real server does. */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               fk_stream_read, s, fk_stream_free);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Transfer-Encoding", "chunked");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result fk_api(struct MHD_Connection *c, const char *method, const char *url)
{
    json_t *gate = NULL;
    int code = fk_store_gate(
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), &gate);
    if (code != 0)
        return fk_send_json(c, (unsigned)code, gate);
    char ns[256], name[256] = "";
    int consumed = 0;
    if (sscanf(url, "/api/v1/namespaces/%255[^/]/pods%n", ns, &consumed) != 1 || consumed == 0)
        return fk_error(c, 404, "NotFound", "the server could not find the requested resource");
    const char *rest = url + consumed;
    if (rest[0] == '/' && sscanf(rest, "/%255[^/]", name) != 1)
        return fk_error(c, 404, "NotFound", "the server could not find the requested resource");
    if (rest[0] != '\0' && rest[0] != '/')
        return fk_error(c, 404, "NotFound", "the server could not find the requested resource");
    if (strcmp(method, "GET") != 0)
        return fk_error(c, 405, "MethodNotAllowed", "the fake serves GET on pods");
    if (name[0] != '\0') {
        json_t *pod = fk_store_get(ns, name);
        if (pod == NULL) {
            char msg[320];
            snprintf(msg, sizeof(msg), "pods \"%s\" not found", name);
            return fk_error(c, 404, "NotFound", msg);
        }
        return fk_send_json(c, 200, pod);
    }
    struct fk_selector sel;
    const char *ls = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "labelSelector");
    if (fk_selector_parse(ls, &sel) != 0)
        return fk_error(c, 400, "BadRequest",
                        "unable to parse requirement: invalid label selector");
    if (fk_arg_true(c, "watch"))
        return fk_watch(c, ns, &sel);
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *cont = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "continue");
    struct fk_flood flood;
    if (fk_store_flood(&flood))
        return fk_flood_list(c, &flood, lim != NULL ? strtol(lim, NULL, 10) : 0, cont);
    int status = 200;
    json_t *list = fk_store_list(ns, &sel, lim != NULL ? strtol(lim, NULL, 10) : 0, cont, &status);
    return fk_send_json(c, (unsigned)status, list);
}

static enum MHD_Result fk_control(struct MHD_Connection *c, const char *method, const char *url,
                                  const struct fk_req *rq)
{
    json_error_t jerr;
    if (strcmp(url, "/fake/faults") == 0) {
        if (strcmp(method, "POST") != 0)
            return fk_error(c, 405, "MethodNotAllowed", "POST /fake/faults");
        json_t *body = json_loadb(rq->body != NULL ? rq->body : "", rq->len, 0, &jerr);
        char err[256];
        int rc = fk_store_faults(body, err, sizeof(err));
        json_decref(body);
        if (rc != 0)
            return fk_error(c, 400, "BadRequest", err);
        return fk_send_json(c, 200, json_pack("{s:b}", "ok", 1));
    }
    char ns[256], name[256];
    int consumed = 0;
    if (sscanf(url, "/fake/namespaces/%255[^/]/pods/%255[^/]%n", ns, name, &consumed) != 2 ||
        url[consumed] != '\0')
        return fk_error(c, 404, "NotFound", "no such control route");
    if (strcmp(method, "PUT") == 0) {
        json_t *body = json_loadb(rq->body != NULL ? rq->body : "", rq->len, 0, &jerr);
        bool created = false;
        int err_status = 0;
        json_t *pod = fk_store_put(ns, name, body, &created, &err_status);
        json_decref(body);
        if (pod == NULL)
            return fk_error(c, 400, "BadRequest", "body must be a Pod object");
        return fk_send_json(c, created ? 201 : 200, pod);
    }
    if (strcmp(method, "DELETE") == 0) {
        json_t *pod = fk_store_delete(ns, name);
        if (pod == NULL)
            return fk_error(c, 404, "NotFound", "no such pod");
        return fk_send_json(c, 200, pod);
    }
    return fk_error(c, 405, "MethodNotAllowed", "PUT or DELETE");
}

static enum MHD_Result fk_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct fk_req *rq = *con_cls;
    if (rq == NULL) {
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (rq->len + *upload_size > FK_BODY_MAX) {
            rq->too_big = true;
        } else {
            char *b = realloc(rq->body, rq->len + *upload_size + 1);
            if (b == NULL)
                return MHD_NO;
            memcpy(b + rq->len, upload, *upload_size);
            rq->body = b;
            rq->len += *upload_size;
            rq->body[rq->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return fk_error(c, 413, "RequestEntityTooLarge", "body too large");
    if (strncmp(url, "/fake/", 6) == 0)
        return fk_control(c, method, url, rq);
    return fk_api(c, method, url);
}

static void fk_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct fk_req *rq = *con_cls;
    if (rq != NULL) {
        free(rq->body);
        free(rq);
    }
    *con_cls = NULL;
}

/* As the real API server (Go's default): no Nagle, so an event leaves at
 * once instead of waiting for the ACK of the previous chunk. */
static void fk_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    (void)socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int one = 1;
    if (ci != NULL)
        setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void fk_usage(FILE *f)
{
    fprintf(f, "usage: switchyard-fakekube --listen 127.0.0.1:PORT [--bookmark-interval MS]\n"
               "A fake Kubernetes API server for tests (docs/fakekube.md).\n");
}

int main(int argc, char **argv)
{
    const char *listen = NULL;
    unsigned long bookmark_ms = 1000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen = argv[++i];
        } else if (strcmp(argv[i], "--bookmark-interval") == 0 && i + 1 < argc) {
            bookmark_ms = strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--help") == 0) {
            fk_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("switchyard-fakekube %s\n", SY_VERSION);
            return 0;
        } else {
            fk_usage(stderr);
            return 2;
        }
    }
    char host[CFG_ADDR_MAX];
    uint16_t port = 0;
    if (listen == NULL || cfg_parse_host_port(listen, host, sizeof(host), &port) != 0 ||
        strcmp(host, "127.0.0.1") != 0) {
        fprintf(stderr, "switchyard-fakekube: --listen 127.0.0.1:PORT is required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    fk_store_init(bookmark_ms);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, port,
        NULL, NULL, fk_access, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, fk_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
        fk_connection, NULL, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "switchyard-fakekube: cannot listen on %s: %s\n", listen, strerror(errno));
        return 1;
    }
    fprintf(stderr, "switchyard-fakekube: listening on %s\n", listen);
    int sig = 0;
    sigwait(&stop, &sig);
    fk_store_shutdown();
    MHD_stop_daemon(d);
    fk_store_fini();
    return 0;
}
