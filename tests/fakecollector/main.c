/*
 * switchyard-fakecollector: a fake OpenTelemetry collector for the tests.
 * It receives OTLP/HTTP with JSON encoding (POST /v1/traces, an
 * ExportTraceServiceRequest: resourceSpans[].scopeSpans[].spans[]) and
 * checks what the OTLP/JSON mapping requires of each span (traceId of 32
 * and spanId / parentSpanId of 16 lowercase hex digits, a name, start and
 * end times as decimal strings, attributes as key / AnyValue pairs),
 * answering 400 with the reason otherwise, as a collector does. What it
 * accepted, tests read back:
 *
 *   GET  /fake/spans    {"requests":N,"rejected":N,"spans":[span, ...]}: every
 *                       accepted span, with "service.name" of its resource
 *                       added as "_service"
 *   POST /fake/config   {"delay_ms":N,"status":N}: hold each export that
 *                       long before answering, answer that status (0 = 200)
 *   GET  /health        200
 *
 * A slow collector (delay_ms) must not slow the router: each connection
 * has its own thread here, so a held export never holds up /fake/spans.
 *
 * Usage: switchyard-fakecollector --listen 127.0.0.1:PORT
 * Loopback only; for tests, never for production.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define FC_BODY_MAX (16u << 20)

struct fc_state {
    pthread_mutex_t lock;
    json_t *spans; /* array of accepted spans */
    long requests, rejected;
    long delay_ms;
    int status;
};

static struct fc_state fc = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct fc_upload {
    char *data;
    size_t len;
    bool too_large;
};

static bool fc_is_hex(const char *s, size_t n)
{
    if (s == NULL || strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool fc_is_decimal(json_t *v)
{
    const char *s = json_string_value(v);
    if (s == NULL || *s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Checks one span; NULL when valid, else why not. */
static const char *fc_check_span(json_t *span)
{
    if (!json_is_object(span))
        return "a span is not an object";
    if (!fc_is_hex(json_string_value(json_object_get(span, "traceId")), 32))
        return "traceId is not 32 lowercase hex digits";
    if (!fc_is_hex(json_string_value(json_object_get(span, "spanId")), 16))
        return "spanId is not 16 lowercase hex digits";
    json_t *parent = json_object_get(span, "parentSpanId");
    if (parent != NULL && !(json_is_string(parent) && json_string_length(parent) == 0) &&
        !fc_is_hex(json_string_value(parent), 16))
        return "parentSpanId is not 16 lowercase hex digits";
    if (!json_is_string(json_object_get(span, "name")))
        return "name is missing";
    if (!fc_is_decimal(json_object_get(span, "startTimeUnixNano")) ||
        !fc_is_decimal(json_object_get(span, "endTimeUnixNano")))
        return "start/endTimeUnixNano are not decimal strings";
    json_t *kind = json_object_get(span, "kind");
    if (kind != NULL && !json_is_integer(kind))
        return "kind is not an integer";
    json_t *attrs = json_object_get(span, "attributes");
    if (attrs != NULL) {
        if (!json_is_array(attrs))
            return "attributes is not an array";
        size_t i;
        json_t *a;
        json_array_foreach(attrs, i, a)
        {
            json_t *val = json_object_get(a, "value");
            if (!json_is_string(json_object_get(a, "key")) || !json_is_object(val) ||
                json_object_size(val) != 1)
                return "an attribute is not {key, value: AnyValue}";
        }
    }
    return NULL;
}

/* The resource's service.name, or NULL. */
static const char *fc_service(json_t *resource)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(resource, "attributes"), i, a)
    {
        const char *k = json_string_value(json_object_get(a, "key"));
        if (k != NULL && strcmp(k, "service.name") == 0)
            return json_string_value(json_object_get(json_object_get(a, "value"), "stringValue"));
    }
    return NULL;
}

/* Validates an export request; on success appends its spans. */
static const char *fc_accept(json_t *root)
{
    json_t *rs = json_object_get(root, "resourceSpans");
    if (!json_is_array(rs))
        return "resourceSpans is not an array";
    json_t *accepted = json_array();
    size_t i, k, m;
    json_t *r, *ss, *span;
    json_array_foreach(rs, i, r)
    {
        json_t *scopes = json_object_get(r, "scopeSpans");
        if (!json_is_array(scopes)) {
            json_decref(accepted);
            return "scopeSpans is not an array";
        }
        const char *service = fc_service(json_object_get(r, "resource"));
        json_array_foreach(scopes, k, ss)
        {
            json_t *spans = json_object_get(ss, "spans");
            if (!json_is_array(spans)) {
                json_decref(accepted);
                return "spans is not an array";
            }
            json_array_foreach(spans, m, span)
            {
                const char *why = fc_check_span(span);
                if (why != NULL) {
                    json_decref(accepted);
                    return why;
                }
                json_t *copy = json_deep_copy(span);
                json_object_set_new(copy, "_service", service ? json_string(service) : json_null());
                json_array_append_new(accepted, copy);
            }
        }
    }
    pthread_mutex_lock(&fc.lock);
    json_array_extend(fc.spans, accepted);
    pthread_mutex_unlock(&fc.lock);
    json_decref(accepted);
    return NULL;
}

static enum MHD_Result fc_reply(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text == NULL)
        return MHD_NO;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result fc_export(struct MHD_Connection *conn, struct fc_upload *up)
{
    pthread_mutex_lock(&fc.lock);
    fc.requests++;
    long delay = fc.delay_ms;
    int status = fc.status;
    pthread_mutex_unlock(&fc.lock);
    if (delay > 0)
        usleep((useconds_t)delay * 1000);
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    const char *why = NULL;
    json_t *root = NULL;
    if (up->too_large)
        why = "body too large";
    else if (ct == NULL || strncmp(ct, "application/json", 16) != 0)
        why = "Content-Type is not application/json";
    else if ((root = json_loadb(up->data != NULL ? up->data : "", up->len, 0, NULL)) == NULL)
        why = "not JSON";
    else if (status == 0 || status == 200)
        why = fc_accept(root);
    json_decref(root);
    if (why != NULL) {
        pthread_mutex_lock(&fc.lock);
        fc.rejected++;
        pthread_mutex_unlock(&fc.lock);
        return fc_reply(conn, 400, json_pack("{s:i,s:s}", "code", 3, "message", why));
    }
    return fc_reply(conn, status != 0 ? (unsigned)status : 200, json_object());
}

static enum MHD_Result fc_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct fc_upload *up = *con_cls;
    if (up == NULL) {
        up = calloc(1, sizeof(*up));
        if (up == NULL)
            return MHD_NO;
        *con_cls = up;
        return MHD_YES;
    }
    if (*upload_size != 0) {
        if (up->len + *upload_size > FC_BODY_MAX) {
            up->too_large = true;
        } else {
            char *grown = realloc(up->data, up->len + *upload_size + 1);
            if (grown == NULL)
                return MHD_NO;
            up->data = grown;
            memcpy(up->data + up->len, upload_data, *upload_size);
            up->len += *upload_size;
            up->data[up->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "POST") == 0 && strcmp(url, "/v1/traces") == 0)
        return fc_export(conn, up);
    if (strcmp(method, "GET") == 0 && strcmp(url, "/fake/spans") == 0) {
        pthread_mutex_lock(&fc.lock);
        json_t *body = json_pack("{s:i,s:i,s:O}", "requests", (json_int_t)fc.requests, "rejected",
                                 (json_int_t)fc.rejected, "spans", fc.spans);
        pthread_mutex_unlock(&fc.lock);
        return fc_reply(conn, 200, body);
    }
    if (strcmp(method, "POST") == 0 && strcmp(url, "/fake/config") == 0) {
        json_t *cfg = json_loadb(up->data != NULL ? up->data : "", up->len, 0, NULL);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return fc_reply(conn, 400, json_pack("{s:s}", "error", "expected a JSON object"));
        }
        pthread_mutex_lock(&fc.lock);
        json_t *v;
        if ((v = json_object_get(cfg, "delay_ms")) != NULL)
            fc.delay_ms = (long)json_integer_value(v);
        if ((v = json_object_get(cfg, "status")) != NULL)
            fc.status = (int)json_integer_value(v);
        pthread_mutex_unlock(&fc.lock);
        json_decref(cfg);
        return fc_reply(conn, 200, json_object());
    }
    if (strcmp(url, "/health") == 0)
        return fc_reply(conn, 200, json_object());
    return fc_reply(conn, 404, json_pack("{s:s}", "error", "no such route"));
}

static void fc_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct fc_upload *up = *con_cls;
    if (up != NULL) {
        free(up->data);
        free(up);
    }
    *con_cls = NULL;
}

static int fc_parse_listen(const char *text, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= sizeof(host))
        return -EINVAL;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    long port = strtol(colon + 1, NULL, 10);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return -EINVAL;
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: switchyard-fakecollector --listen 127.0.0.1:PORT\n"
                   "\n"
                   "A fake OTLP/HTTP JSON collector for the tests: POST /v1/traces,\n"
                   "GET /fake/spans, POST /fake/config {\"delay_ms\":N,\"status\":N}.\n");
            return 0;
        } else {
            fprintf(stderr, "switchyard-fakecollector: unknown argument '%s' (see --help)\n",
                    argv[i]);
            return 2;
        }
    }
    struct sockaddr_in sa;
    if (listen == NULL || fc_parse_listen(listen, &sa) != 0) {
        fprintf(stderr, "switchyard-fakecollector: --listen HOST:PORT (IPv4) is required\n");
        return 2;
    }
    fc.spans = json_array();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, fc_handler, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED,
        fc_completed, NULL, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "switchyard-fakecollector: cannot listen on %s\n", listen);
        return 1;
    }
    fprintf(stderr, "switchyard-fakecollector: listening on %s\n", listen);
    int sig = 0;
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    json_decref(fc.spans);
    return 0;
}
