/*
 * GET /decisions and /decisions/history (see decisions.h): one libcurl
 * transfer at a time in an inner epoll set, to wherever the config says the
 * data plane serves /metrics; its answer parsed line by line for the two
 * decision families, handed to every request that waited for it, and kept
 * in a small ring when a sample is due. The timer of the ring's samples is
 * the only reason this module wakes the loop on its own.
 */
#include "controlplane/admin/decisions.h"

#include <errno.h>
#include <limits.h>
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
#include "common/proc.h"

#define CP_DECISIONS_BODY_MAX   (4u << 20)
#define CP_DECISIONS_TIMEOUT_MS 2000L
/* A certificate chain file is a few KiB; its leaf comes first. */
#define CP_DECISIONS_CERT_MAX (256u << 10)

/* One answer kept for /decisions/history: a /decisions 200 body, or {"error": why}. */
struct cp_decisions_sample {
    uint64_t t_ms; /* monotonic */
    json_t *json;  /* owned */
};

/* Owned by the control plane (controlplane.c); loop thread only. */
struct cp_decisions {
    struct cep cep;
    int epfd;
    CURL *easy;
    bool running;
    bool done;
    CURLcode result;
    char url[CFG_ADDR_MAX + 32];
    char errbuf[CURL_ERROR_SIZE];
    bool pinned;    /* url is https://, verified against pin */
    struct buf pin; /* the leaf of dataplane.tls.cert_file, PEM */
    struct buf body;
    struct adm_reply_later waiters[CP_DECISIONS_WAITERS];
    size_t n_waiters;
    bool tried;               /* a fetch was started (or refused) once */
    uint64_t last_attempt_ms; /* monotonic, of the last fetch started or refused */
    struct cp_decisions_sample ring[CP_DECISIONS_HISTORY];
    size_t ring_first, ring_len;
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
    buf_init(&d->pin, CP_DECISIONS_CERT_MAX);
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
    buf_fini(&d->pin);
    for (size_t i = 0; i < d->ring_len; i++)
        json_decref(d->ring[(d->ring_first + i) % CP_DECISIONS_HISTORY].json);
    free(d);
}

int cp_decisions_fd(const struct cp_decisions *d)
{
    return d->epfd;
}

int cp_decisions_timeout_ms(const struct cp_decisions *d, uint64_t now_ms)
{
    if (d->done || !d->tried)
        return 0;
    if (d->running)
        return cep_timeout_ms(&d->cep, now_ms);
    uint64_t next = d->last_attempt_ms + CP_DECISIONS_SAMPLE_MS;
    return next <= now_ms ? 0 : next - now_ms > INT_MAX ? INT_MAX : (int)(next - now_ms);
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

/* Milliseconds from then to now, 0 if now is earlier (readings of one clock
 * taken in different places of a loop pass). */
static uint64_t cp_since(uint64_t now_ms, uint64_t then_ms)
{
    return now_ms > then_ms ? now_ms - then_ms : 0;
}

static bool cp_sample_is_error(const struct cp_decisions_sample *s)
{
    return json_object_get(s->json, "error") != NULL;
}

/*
 * Keeps a copy of answer (a reply's JSON) as the sample of now_ms when one
 * is due: a sample interval after the last one, or at once when the last
 * one was a failure and this is not (the page then sees the recovery
 * without a wait, and a data plane that is down does not fill the ring
 * with failures at the page's polling rate).
 */
static void cp_decisions_record(struct cp_decisions *d, const json_t *answer, uint64_t now_ms)
{
    if (answer == NULL)
        return;
    if (d->ring_len > 0) {
        const struct cp_decisions_sample *last =
            &d->ring[(d->ring_first + d->ring_len - 1) % CP_DECISIONS_HISTORY];
        bool recovered = cp_sample_is_error(last) && json_object_get(answer, "error") == NULL;
        if (cp_since(now_ms, last->t_ms) < CP_DECISIONS_SAMPLE_MS && !recovered)
            return;
    }
    json_t *copy = json_deep_copy(answer);
    if (copy == NULL)
        return;
    if (d->ring_len == CP_DECISIONS_HISTORY) {
        json_decref(d->ring[d->ring_first].json);
        d->ring_first = (d->ring_first + 1) % CP_DECISIONS_HISTORY;
        d->ring_len--;
    }
    d->ring[(d->ring_first + d->ring_len) % CP_DECISIONS_HISTORY] =
        (struct cp_decisions_sample){.t_ms = now_ms, .json = copy};
    d->ring_len++;
}

static void cp_decisions_finish(struct cp_decisions *d, uint64_t now_ms)
{
    d->done = false;
    struct adm_reply r = {0};
    long code = 0;
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &code);
    if (d->result != CURLE_OK || code != 200) {
        char why[CURL_ERROR_SIZE + 32];
        if (d->result != CURLE_OK)
            snprintf(why, sizeof(why), "%s",
                     d->errbuf[0] != '\0' ? d->errbuf : curl_easy_strerror(d->result));
        else
            snprintf(why, sizeof(why), "HTTP %ld", code);
        /* A certificate failure is one an operator can fix: say against what. */
        bool cert = d->pinned &&
                    (d->result == CURLE_PEER_FAILED_VERIFICATION ||
                     d->result == CURLE_SSL_CACERT_BADFILE || d->result == CURLE_SSL_CONNECT_ERROR);
        adm_reply_error(&r, 502, "the data plane's metrics at %s did not answer: %s%s", d->url, why,
                        cert ? " (its certificate is verified against the first one of "
                               "dataplane.tls.cert_file, which the data plane serves once it "
                               "has loaded that file: at start and on SIGHUP)"
                             : "");
    } else {
        adm_reply_json(&r, 200,
                       cp_decisions_parse(d->body.data != NULL ? d->body.data : "", d->url));
    }
    cp_decisions_record(d, r.json, now_ms);
    cp_decisions_answer_all(d, &r);
}

/* HOST:PORT of addr as a URL's authority, a wildcard host on loopback. */
static int cp_decisions_authority(const char *addr, char *out, size_t len)
{
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
    snprintf(out, len, "%s%s%s:%u", v6 ? "[" : "", h, v6 ? "]" : "", (unsigned)port);
    return 0;
}

/*
 * The first PEM certificate of path into d->pin: the leaf the data plane
 * serves (its cert_file is a chain, leaf first). 0, or -1 with why filled.
 */
static int cp_decisions_load_pin(struct cp_decisions *d, const char *path, char *why, size_t len)
{
    static const char begin[] = "-----BEGIN CERTIFICATE-----";
    static const char end[] = "-----END CERTIFICATE-----";
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(why, len,
                 "cannot read dataplane.tls.cert_file (%s: %s), the certificate the data "
                 "plane's HTTPS is verified against",
                 path, strerror(errno));
        return -1;
    }
    int rc = -1;
    struct buf file;
    buf_init(&file, CP_DECISIONS_CERT_MAX);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && buf_append(&file, chunk, n) == 0)
        ;
    fclose(f);
    const char *b = file.data != NULL ? strstr(file.data, begin) : NULL;
    const char *e = b != NULL ? strstr(b, end) : NULL;
    if (e == NULL) {
        snprintf(why, len, "dataplane.tls.cert_file (%s) holds no PEM certificate%s", path,
                 buf_error(&file) != 0 ? " in its first 256 KiB" : "");
        goto out_free_file;
    }
    /* Only the leaf: an intermediate kept as an anchor would trust every
     * other certificate it signed. */
    buf_reset(&d->pin);
    if (buf_append(&d->pin, b, (size_t)(e + sizeof(end) - 1 - b)) != 0 ||
        buf_append(&d->pin, "\n", 1) != 0) {
        snprintf(why, len, "out of memory");
        goto out_free_file;
    }
    rc = 0;
out_free_file:
    buf_fini(&file);
    return rc;
}

/*
 * Where cfg's data plane serves /metrics (decisions.h, in that order) into
 * d->url, and the leaf to trust for https into d->pin. 0, or -1 with why
 * filled when there is no way in.
 */
static int cp_decisions_target(struct cp_decisions *d, const struct cfg *cfg, char *why, size_t len)
{
    const struct cfg_dataplane *dp = &cfg->dataplane;
    const char *addr = dp->listen, *key = "dataplane.listen";
    bool https = false;
    char authority[CFG_ADDR_MAX + 8];
    if (dp->metrics_listen[0] != '\0') {
        addr = dp->metrics_listen;
        key = "dataplane.metrics_listen";
    } else if (dp->plain_listen[0] != '\0') {
        addr = dp->plain_listen;
        key = "dataplane.plain_listen";
    } else {
        https = dp->tls.cert_file[0] != '\0';
    }
    if (cp_decisions_authority(addr, authority, sizeof(authority)) != 0) {
        snprintf(why, len, "%s is not HOST:PORT: '%s'", key, addr);
        return -1;
    }
    snprintf(d->url, sizeof(d->url), "%s://%s/metrics", https ? "https" : "http", authority);
    d->pinned = https;
    if (!https)
        return 0;
    if (dp->tls.client_ca_file[0] != '\0') {
        snprintf(why, len,
                 "the data plane serves its metrics only at %s, over HTTPS with client "
                 "certificates (dataplane.tls.client_ca_file), and the control plane has none "
                 "to present: set dataplane.metrics_listen (plain HTTP; keep it on loopback) "
                 "or dataplane.plain_listen to show them here",
                 d->url);
        return -1;
    }
    return cp_decisions_load_pin(d, dp->tls.cert_file, why, len);
}

/* Starts a fetch for cfg. 0, or -1 with why filled (nothing started). */
static int cp_decisions_fetch(struct cp_decisions *d, const struct cfg *cfg, uint64_t now_ms,
                              char *why, size_t len)
{
    d->tried = true;
    d->last_attempt_ms = now_ms;
    if (cp_decisions_target(d, cfg, why, len) != 0)
        return -1;
    if (d->easy == NULL)
        d->easy = curl_easy_init();
    if (d->easy == NULL) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    /* Every option on every fetch: the target changes with the config. */
    curl_easy_reset(d->easy);
    buf_reset(&d->body);
    d->errbuf[0] = '\0';
    curl_easy_setopt(d->easy, CURLOPT_URL, d->url);
    curl_easy_setopt(d->easy, CURLOPT_ERRORBUFFER, d->errbuf);
    curl_easy_setopt(d->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(d->easy, CURLOPT_TIMEOUT_MS, CP_DECISIONS_TIMEOUT_MS);
    curl_easy_setopt(d->easy, CURLOPT_CONNECTTIMEOUT_MS, CP_DECISIONS_TIMEOUT_MS);
    curl_easy_setopt(d->easy, CURLOPT_WRITEFUNCTION, cp_decisions_collect);
    curl_easy_setopt(d->easy, CURLOPT_WRITEDATA, &d->body);
    curl_easy_setopt(d->easy, CURLOPT_PROXY, "");
    curl_easy_setopt(d->easy, CURLOPT_NOPROXY, "");
    curl_easy_setopt(d->easy, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(d->easy, CURLOPT_PROTOCOLS_STR, d->pinned ? "https" : "http");
    if (d->pinned) {
        struct curl_blob leaf = {.data = d->pin.data, .len = d->pin.len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(d->easy, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
        /* The leaf is the only anchor: no system store, no CA directory. */
        curl_easy_setopt(d->easy, CURLOPT_CAINFO, NULL);
        curl_easy_setopt(d->easy, CURLOPT_CAPATH, NULL);
        curl_easy_setopt(d->easy, CURLOPT_CAINFO_BLOB, &leaf);
        curl_easy_setopt(d->easy, CURLOPT_SSL_VERIFYPEER, 1L);
        /* Only the leaf's key holder can pass the check above, whatever
         * name the leaf carries; the fetch goes to loopback. */
        curl_easy_setopt(d->easy, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (cep_add(&d->cep, d->easy) != 0) {
        snprintf(why, len, "cannot start the request to the data plane");
        return -1;
    }
    d->running = true;
    return 0;
}

void cp_decisions_run(struct cp_decisions *d, const struct cfg *cfg, uint64_t now_ms)
{
    struct epoll_event evs[16];
    int n = epoll_wait(d->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++)
        cep_on_fd_event(&d->cep, cep_fd_of(evs[i].data.u64), evs[i].events);
    cep_on_timer(&d->cep, now_ms);
    cep_collect(&d->cep);
    if (d->done)
        cp_decisions_finish(d, now_ms);
    if (d->running || (d->tried && cp_since(now_ms, d->last_attempt_ms) < CP_DECISIONS_SAMPLE_MS))
        return;
    char why[512];
    if (cp_decisions_fetch(d, cfg, now_ms, why, sizeof(why)) != 0) {
        json_t *e = json_pack("{s:s}", "error", why);
        cp_decisions_record(d, e, now_ms);
        json_decref(e);
    }
}

int cp_decisions_start(struct cp_decisions *d, const struct cfg *cfg,
                       const struct adm_reply_later *later, struct adm_reply *reply)
{
    if (d->n_waiters >= CP_DECISIONS_WAITERS) {
        adm_reply_error(reply, 503, "too many GET /decisions waiting; retry");
        return 1;
    }
    if (!d->running) {
        char why[512];
        uint64_t now_ms = proc_monotonic_ms();
        if (cp_decisions_fetch(d, cfg, now_ms, why, sizeof(why)) != 0) {
            adm_reply_error(reply, 502, "%s", why);
            cp_decisions_record(d, reply->json, now_ms);
            return 1;
        }
    }
    d->waiters[d->n_waiters++] = *later;
    return 0;
}

void cp_decisions_history(const struct cp_decisions *d, uint64_t now_ms, struct adm_reply *reply)
{
    json_t *samples = json_array();
    for (size_t i = 0; samples != NULL && i < d->ring_len; i++) {
        const struct cp_decisions_sample *s = &d->ring[(d->ring_first + i) % CP_DECISIONS_HISTORY];
        json_t *o = json_copy(s->json); /* shallow: only age_ms is added */
        json_int_t age = (json_int_t)cp_since(now_ms, s->t_ms);
        if (o != NULL && json_object_set_new(o, "age_ms", json_integer(age)) == 0)
            json_array_append_new(samples, o);
        else
            json_decref(o);
    }
    json_t *j = json_pack("{s:I, s:o*}", "interval_ms", (json_int_t)CP_DECISIONS_SAMPLE_MS,
                          "samples", samples);
    if (j == NULL)
        adm_reply_error(reply, 503, "out of memory");
    else
        adm_reply_json(reply, 200, j);
}
