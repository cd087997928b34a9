/*
 * GET /decisions (see decisions.h): one libcurl transfer at a time in an
 * inner epoll set, its answer parsed line by line for the two decision
 * families and handed to every request that waited for it.
 */
#include "controlplane/admin/decisions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/curl_epoll.h"
#include "common/log.h"

#define CP_DECISIONS_BODY_MAX   (4u << 20)
#define CP_DECISIONS_TIMEOUT_MS 2000L

/* Owned by the control plane (controlplane.c); loop thread only. */
struct cp_decisions {
    struct cep cep;
    int epfd;
    CURL *easy;
    bool running;
    bool done;
    CURLcode result;
    char url[CFG_ADDR_MAX + 32];
    struct buf body;
    struct adm_reply_later waiters[CP_DECISIONS_WAITERS];
    size_t n_waiters;
};

static void cp_decisions_on_done(void *user, CURL *e, CURLcode res)
{
    struct cp_decisions *d = user;
    cep_remove(&d->cep, e);
    d->running = false;
    d->done = true;
    d->result = res;
}

static size_t cp_decisions_collect(char *data, size_t size, size_t n, void *arg)
{
    struct buf *b = arg;
    return buf_append(b, data, size * n) == 0 ? size * n : 0;
}

int cp_decisions_create(struct cp_decisions **out)
{
    struct cp_decisions *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    buf_init(&d->body, CP_DECISIONS_BODY_MAX);
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0 ||
        cep_init(&d->cep, &(struct cep_opts){
                              .epfd = d->epfd, .on_done = cp_decisions_on_done, .user = d}) != 0) {
        cp_decisions_destroy(d);
        return -ENOMEM;
    }
    *out = d;
    return 0;
}

static void cp_decisions_answer_all(struct cp_decisions *d, struct adm_reply *proto)
{
    for (size_t i = 0; i < d->n_waiters; i++) {
        struct adm_reply r = {.status = proto->status};
        if (proto->json != NULL)
            r.json = json_deep_copy(proto->json);
        adm_reply_deliver(&d->waiters[i], &r);
    }
    d->n_waiters = 0;
    adm_reply_fini(proto);
}

void cp_decisions_destroy(struct cp_decisions *d)
{
    if (d == NULL)
        return;
    struct adm_reply r = {0};
    adm_reply_error(&r, 503, "the control plane is shutting down");
    cp_decisions_answer_all(d, &r);
    if (d->running)
        cep_remove(&d->cep, d->easy);
    if (d->easy != NULL)
        curl_easy_cleanup(d->easy);
    cep_fini(&d->cep);
    if (d->epfd >= 0)
        close(d->epfd);
    buf_fini(&d->body);
    free(d);
}

int cp_decisions_fd(const struct cp_decisions *d)
{
    return d->epfd;
}

int cp_decisions_timeout_ms(const struct cp_decisions *d, uint64_t now_ms)
{
    if (d->done)
        return 0;
    return d->running ? cep_timeout_ms(&d->cep, now_ms) : -1;
}

/* The value of label name in a Prometheus label set "{a=\"x\",b=\"y\"}", copied to out. */
static bool cp_label(const char *labels, const char *end, const char *name, char *out, size_t len)
{
    char key[32];
    snprintf(key, sizeof(key), "%s=\"", name);
    const char *p = labels;
    for (;;) {
        p = strstr(p, key);
        if (p == NULL || p >= end)
            return false;
        if (p == labels + 1 || p[-1] == ',' || p[-1] == '{')
            break;
        p++;
    }
    p += strlen(key);
    const char *q = strchr(p, '"');
    if (q == NULL || q > end || (size_t)(q - p) >= len)
        return false;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return true;
}

json_t *cp_decisions_parse(const char *text, const char *url)
{
    json_t *plain = json_array(), *pd = json_array();
    static const char fam[] = "switchyard_routing_decisions_total{";
    static const char pd_fam[] = "switchyard_pd_routing_decisions_total{";
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        const char *end = eol != NULL ? eol : line + strlen(line);
        bool is_pd = strncmp(line, pd_fam, sizeof(pd_fam) - 1) == 0;
        if (is_pd || strncmp(line, fam, sizeof(fam) - 1) == 0) {
            const char *labels = strchr(line, '{');
            const char *close = strchr(labels, '}');
            char policy[64] = "", decision[64] = "", phase[16] = "";
            if (close != NULL && close < end && cp_label(labels, close, "policy", policy, 64) &&
                cp_label(labels, close, "decision", decision, 64) &&
                (!is_pd || cp_label(labels, close, "phase", phase, 16))) {
                /* strtoull takes "-1" as 2^64 - 1, which JSON's signed
                 * integers show as -1: a counter is never negative, and one
                 * past INT64_MAX is shown as INT64_MAX. */
                const char *num = close + 1 + strspn(close + 1, " \t");
                unsigned long long v = *num == '-' ? 0 : strtoull(num, NULL, 10);
                json_int_t count = v > (unsigned long long)INT64_MAX ? INT64_MAX : (json_int_t)v;
                /* One pack per row, phase included: a label jansson refuses
                 * (not UTF-8) drops the whole row, never just its phase. */
                json_t *o = is_pd ? json_pack("{s:s, s:s, s:s, s:I}", "phase", phase, "policy",
                                              policy, "decision", decision, "count", count)
                                  : json_pack("{s:s, s:s, s:I}", "policy", policy, "decision",
                                              decision, "count", count);
                if (o != NULL)
                    json_array_append_new(is_pd ? pd : plain, o);
            }
        }
        line = eol != NULL ? eol + 1 : NULL;
    }
    return json_pack("{s:s, s:o, s:o}", "source", url, "decisions", plain, "pd_decisions", pd);
}

void cp_decisions_run(struct cp_decisions *d, uint64_t now_ms)
{
    struct epoll_event evs[16];
    int n = epoll_wait(d->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&d->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&d->cep, now_ms);
    cep_collect(&d->cep);
    if (!d->done)
        return;
    d->done = false;
    struct adm_reply r = {0};
    long code = 0;
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &code);
    if (d->result != CURLE_OK || code != 200) {
        char why[128];
        if (d->result != CURLE_OK)
            snprintf(why, sizeof(why), "%s", curl_easy_strerror(d->result));
        else
            snprintf(why, sizeof(why), "HTTP %ld", code);
        adm_reply_error(&r, 502, "the data plane's metrics at %s did not answer: %s", d->url, why);
    } else {
        adm_reply_json(&r, 200,
                       cp_decisions_parse(d->body.data != NULL ? d->body.data : "", d->url));
    }
    cp_decisions_answer_all(d, &r);
}

/* http://HOST:PORT/metrics of the data plane, a wildcard host on loopback. */
static int cp_decisions_url(const struct cfg *cfg, char *url, size_t len)
{
    const char *addr = cfg->dataplane.metrics_listen[0] != '\0' ? cfg->dataplane.metrics_listen
                                                                : cfg->dataplane.listen;
    char host[CFG_ADDR_MAX];
    uint16_t port = 0;
    if (cfg_parse_host_port(addr, host, sizeof(host), &port) != 0)
        return -EINVAL;
    const char *h = host;
    if (strcmp(host, "0.0.0.0") == 0)
        h = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        h = "::1";
    bool v6 = strchr(h, ':') != NULL;
    snprintf(url, len, "http://%s%s%s:%u/metrics", v6 ? "[" : "", h, v6 ? "]" : "", (unsigned)port);
    return 0;
}

int cp_decisions_start(struct cp_decisions *d, const struct cfg *cfg,
                       const struct adm_reply_later *later, struct adm_reply *reply)
{
    if (d->n_waiters >= CP_DECISIONS_WAITERS) {
        adm_reply_error(reply, 503, "too many GET /decisions waiting; retry");
        return 1;
    }
    if (!d->running) {
        if (cp_decisions_url(cfg, d->url, sizeof(d->url)) != 0) {
            adm_reply_error(reply, 500, "no usable dataplane.listen in the config");
            return 1;
        }
        if (d->easy == NULL)
            d->easy = curl_easy_init();
        if (d->easy == NULL) {
            adm_reply_error(reply, 503, "out of memory");
            return 1;
        }
        buf_reset(&d->body);
        curl_easy_setopt(d->easy, CURLOPT_URL, d->url);
        curl_easy_setopt(d->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(d->easy, CURLOPT_TIMEOUT_MS, CP_DECISIONS_TIMEOUT_MS);
        curl_easy_setopt(d->easy, CURLOPT_CONNECTTIMEOUT_MS, CP_DECISIONS_TIMEOUT_MS);
        curl_easy_setopt(d->easy, CURLOPT_WRITEFUNCTION, cp_decisions_collect);
        curl_easy_setopt(d->easy, CURLOPT_WRITEDATA, &d->body);
        curl_easy_setopt(d->easy, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(d->easy, CURLOPT_PROXY, "");
        curl_easy_setopt(d->easy, CURLOPT_NOPROXY, "");
        if (cep_add(&d->cep, d->easy) != 0) {
            adm_reply_error(reply, 503, "cannot start the request to the data plane");
            return 1;
        }
        d->running = true;
    }
    d->waiters[d->n_waiters++] = *later;
    return 0;
}
