/*
 * The soak's client traffic (see traffic.h). Arrival times come from one
 * shared clock (a Poisson process): a client thread takes the next arrival,
 * sleeps until it is due and sends it. With enough threads every request
 * starts on time whatever the others do (open loop); when the pool is
 * exhausted a request starts late and is counted as such, so a report can
 * tell an overloaded client from a slow router.
 */
#include "tests/soak/traffic.h"

#include "common/rng.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/e2e/harness.h"

#define SK_BODY_CAP (64u * 1024u)

struct sk_traffic {
    struct sk_traffic_opts o;
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool paused, stop;       /* under mu */
    double next_arrival;     /* ms on h_now_ms's clock, under mu */
    struct rng rng;          /* under mu: arrivals and request shapes */
    struct sk_counts c;      /* under mu */
    long inflight;           /* under mu */
    struct sk_failure *fail; /* under mu */
    size_t n_fail, cap_fail;
};

/* One request's state, on its thread's stack. */
struct sk_xfer {
    int64_t t0;
    int64_t abort_at; /* -1: never */
    bool aborted;
    long status;
    char worker[32];
    char *body;
    size_t len;
};

static size_t sk_on_header(char *data, size_t size, size_t n, void *arg)
{
    struct sk_xfer *x = arg;
    size_t len = size * n;
    static const char name[] = "x-switchyard-worker:";
    if (len > sizeof(name) && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        const char *v = data + sizeof(name) - 1;
        size_t vl = len - (sizeof(name) - 1);
        while (vl > 0 && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl >= sizeof(x->worker))
            vl = sizeof(x->worker) - 1;
        memcpy(x->worker, v, vl);
        x->worker[vl] = '\0';
    }
    return len;
}

static size_t sk_on_body(char *data, size_t size, size_t n, void *arg)
{
    struct sk_xfer *x = arg;
    size_t len = size * n;
    if (x->len + len < SK_BODY_CAP) {
        char *b = realloc(x->body, x->len + len + 1);
        if (b == NULL)
            return 0;
        x->body = b;
        memcpy(b + x->len, data, len);
        x->len += len;
        b[x->len] = '\0';
    }
    return len;
}

/* The client's hang-up: returning non-zero makes libcurl close the
 * connection at once, which the router sees as a client disconnect. */
static int sk_on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    struct sk_xfer *x = arg;
    if (x->abort_at >= 0 && h_now_ms() >= x->abort_at) {
        x->aborted = true;
        return 1;
    }
    return 0;
}

static void sk_sleep_until(int64_t t_ms)
{
    int64_t now = h_now_ms();
    if (t_ms <= now)
        return;
    struct timespec ts = {.tv_sec = (t_ms - now) / 1000,
                          .tv_nsec = ((t_ms - now) % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void sk_record_failure(struct sk_traffic *t, const struct sk_failure *fr)
{
    if (t->n_fail == t->cap_fail) {
        size_t cap = t->cap_fail != 0 ? t->cap_fail * 2 : 64;
        struct sk_failure *f = realloc(t->fail, cap * sizeof(*f));
        if (f == NULL)
            return; /* counted in c.failed all the same */
        t->fail = f;
        t->cap_fail = cap;
    }
    t->fail[t->n_fail++] = *fr;
}

/* Is a 200 answer complete? A stream must end with [DONE] and carry no
 * error event; a plain answer must be a JSON object with choices. */
static bool sk_complete(const struct sk_xfer *x, bool stream)
{
    if (x->body == NULL)
        return false;
    if (stream)
        return strstr(x->body, "data: [DONE]") != NULL && strstr(x->body, "\"error\"") == NULL;
    return strstr(x->body, "\"choices\"") != NULL && strstr(x->body, "\"error\"") == NULL;
}

static void sk_one_request(struct sk_traffic *t, CURL *easy, int64_t due)
{
    pthread_mutex_lock(&t->mu);
    int dp = (int)rng_below(&t->rng, (uint64_t)t->o.n_dp);
    int route = (int)rng_below(&t->rng, 2);
    bool stream = (int)rng_below(&t->rng, 100) < t->o.stream_percent;
    bool abort = (int)rng_below(&t->rng, 100) < t->o.abort_percent;
    int64_t abort_ms = (int64_t)rng_below(&t->rng, (uint64_t)t->o.abort_max_ms);
    int max_tokens = 1 + (int)rng_below(&t->rng, (uint64_t)t->o.max_tokens);
    unsigned topic = (unsigned)rng_below(&t->rng, 1000);
    t->c.started++;
    t->c.by_route[route]++;
    t->c.streamed += stream;
    t->c.late += h_now_ms() > due + 1000;
    t->inflight++;
    pthread_mutex_unlock(&t->mu);

    static const char *const paths[2] = {"/v1/chat/completions", "/v1/completions"};
    char url[128], body[512];
    snprintf(url, sizeof(url), "%s%s", t->o.base[dp], paths[route]);
    if (route == 0)
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"soak question %u\"}]}",
                 t->o.model, max_tokens, stream ? "true" : "false", topic);
    else
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"prompt\":\"soak prompt %u\"}",
                 t->o.model, max_tokens, stream ? "true" : "false", topic);

    struct sk_xfer x = {.t0 = h_now_ms(), .abort_at = -1};
    if (abort)
        x.abort_at = x.t0 + abort_ms;
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(easy);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)t->o.timeout_ms);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, sk_on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, sk_on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, sk_on_progress);
    curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &x);
    CURLcode rc = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &x.status);
    curl_slist_free_all(hdrs);

    struct sk_failure fr = {
        .t0 = x.t0, .t1 = h_now_ms(), .dp = dp, .stream = stream, .explained_by = -1};
    snprintf(fr.worker, sizeof(fr.worker), "%s", x.worker);
    fr.status = x.status;
    fr.curl_code = (int)rc;
    snprintf(fr.route, sizeof(fr.route), "%s", route == 0 ? "chat" : "completions");
    bool ok = false, aborted = false;
    if (rc == CURLE_ABORTED_BY_CALLBACK && x.aborted)
        aborted = true;
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(fr.what, sizeof(fr.what), "timeout after %d ms", t->o.timeout_ms);
    else if (rc != CURLE_OK)
        snprintf(fr.what, sizeof(fr.what), "curl %d (%s), status %ld", (int)rc,
                 curl_easy_strerror(rc), x.status);
    else if (x.status != 200)
        snprintf(fr.what, sizeof(fr.what), "http %ld: %.60s", x.status, x.body ? x.body : "");
    else if (!sk_complete(&x, stream))
        snprintf(fr.what, sizeof(fr.what), "incomplete 200 (%zu bytes)", x.len);
    else
        ok = true;
    free(x.body);

    pthread_mutex_lock(&t->mu);
    t->inflight--;
    if (ok)
        t->c.ok++;
    else if (aborted)
        t->c.aborted++;
    else {
        t->c.failed++;
        sk_record_failure(t, &fr);
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void *sk_client(void *arg)
{
    struct sk_traffic *t = arg;
    CURL *easy = curl_easy_init();
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->paused && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop || easy == NULL) {
            pthread_mutex_unlock(&t->mu);
            break;
        }
        /* After a pause the clock restarts now: no burst of overdue arrivals. */
        if (t->next_arrival < (double)h_now_ms() - 1000.0)
            t->next_arrival = (double)h_now_ms();
        int64_t due = (int64_t)t->next_arrival;
        double u = rng_unit(&t->rng);
        t->next_arrival += -log(1.0 - u) * 1000.0 / t->o.rate;
        pthread_mutex_unlock(&t->mu);
        sk_sleep_until(due);
        pthread_mutex_lock(&t->mu);
        bool skip = t->paused || t->stop;
        pthread_mutex_unlock(&t->mu);
        if (!skip)
            sk_one_request(t, easy, due);
    }
    curl_easy_cleanup(easy);
    return NULL;
}

int sk_traffic_start(const struct sk_traffic_opts *o, struct sk_traffic **out)
{
    struct sk_traffic *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->o = *o;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    rng_seed(&t->rng, o->seed);
    t->next_arrival = (double)h_now_ms();
    t->threads = calloc((size_t)o->threads, sizeof(*t->threads));
    if (t->threads == NULL) {
        free(t);
        return -ENOMEM;
    }
    for (int i = 0; i < o->threads; i++) {
        if (pthread_create(&t->threads[i], NULL, sk_client, t) != 0)
            break;
        t->n_threads++;
    }
    *out = t;
    return t->n_threads == o->threads ? 0 : -EAGAIN;
}

void sk_traffic_pause(struct sk_traffic *t, bool paused)
{
    pthread_mutex_lock(&t->mu);
    t->paused = paused;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

long sk_traffic_inflight(struct sk_traffic *t)
{
    pthread_mutex_lock(&t->mu);
    long n = t->inflight;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void sk_traffic_counts(struct sk_traffic *t, struct sk_counts *c)
{
    pthread_mutex_lock(&t->mu);
    *c = t->c;
    pthread_mutex_unlock(&t->mu);
}

size_t sk_traffic_take_failures(struct sk_traffic *t, struct sk_failure **out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->fail;
    size_t n = t->n_fail;
    t->fail = NULL;
    t->n_fail = t->cap_fail = 0;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void sk_traffic_stop(struct sk_traffic *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_threads; i++)
        pthread_join(t->threads[i], NULL);
    free(t->threads);
    free(t->fail);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
