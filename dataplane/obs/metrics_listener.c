/*
 * The data plane's separate /metrics listener (see metrics_listener.h).
 */
#include "dataplane/obs/metrics_listener.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/mhd_log.h"
#include "shm/registry.h"

struct dp_metrics_listener {
    struct MHD_Daemon *daemon;
    const struct dp_metrics *m;
    const struct dp_guards *guards;
    const struct shm_segment *seg;
    uint32_t max_workers;
};

static enum MHD_Result ml_queue_response(struct MHD_Connection *conn, unsigned status,
                                         const char *type, struct MHD_Response *r,
                                         const char *allow)
{
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow != NULL)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Queues a static JSON error body. */
static enum MHD_Result ml_queue_error(struct MHD_Connection *conn, unsigned status,
                                      const char *text, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    return ml_queue_response(conn, status, "application/json", r, allow);
}

static enum MHD_Result ml_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)con_cls;
    struct dp_metrics_listener *l = cls;
    /* No body is wanted: what a client sends is skipped. */
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/metrics") != 0)
        return ml_queue_error(conn, MHD_HTTP_NOT_FOUND,
                              "{\"error\":{\"message\":\"no such route\",\"type\":\"not_found\","
                              "\"code\":404}}",
                              NULL);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return ml_queue_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                              "{\"error\":{\"message\":\"method not allowed on this route\","
                              "\"type\":\"method_not_allowed\",\"code\":405}}",
                              "GET, HEAD");
    struct shm_worker_info *w = calloc(l->max_workers, sizeof(*w));
    size_t n = w != NULL ? shm_registry_snapshot(l->seg, w, l->max_workers) : 0;
    char *text = NULL;
    size_t len = 0;
    int rc = w != NULL ? dp_metrics_render(l->m, w, n, l->guards, &text, &len) : -ENOMEM;
    free(w);
    if (rc != 0)
        return ml_queue_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                              "{\"error\":{\"message\":\"the router could not answer\","
                              "\"type\":\"internal_error\",\"code\":500}}",
                              NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL)
        free(text);
    return ml_queue_response(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", r,
                             NULL);
}

int dp_metrics_listener_start(const char *addr, const struct dp_metrics *m,
                              const struct dp_guards *guards, const struct shm_segment *seg,
                              struct dp_metrics_listener **out)
{
    char host[CFG_ADDR_MAX];
    uint16_t portn = 0;
    if (cfg_parse_host_port(addr, host, sizeof(host), &portn) != 0) {
        log_error("dataplane.metrics_listen %s: not HOST:PORT", addr);
        return -EINVAL;
    }
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)portn);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        log_error("dataplane.metrics_listen %s: %s", addr, gai_strerror(gai));
        return -EINVAL;
    }
    struct dp_metrics_listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        freeaddrinfo(ai);
        return -ENOMEM;
    }
    l->m = m;
    l->guards = guards;
    l->seg = seg;
    l->max_workers = seg->max_workers;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    l->daemon = MHD_start_daemon(
        flags, portn, NULL, NULL, ml_handler, l, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message, NULL,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (l->daemon == NULL) {
        log_error("dataplane.metrics_listen: cannot listen on %s", addr);
        free(l);
        return -EADDRINUSE;
    }
    log_info("/metrics served on %s (and no longer on the client listener)", addr);
    *out = l;
    return 0;
}

void dp_metrics_listener_stop(struct dp_metrics_listener *l)
{
    if (l == NULL)
        return;
    MHD_stop_daemon(l->daemon);
    free(l);
}
