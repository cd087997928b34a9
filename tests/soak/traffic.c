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
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/e2e/harness.h"

#define SK_BODY_CAP  (64u * 1024u)
#define SK_RESP_RING 64 /* continued conversations pick among the last responses */

/* One route of the mix: its path, its share (out of the sum of shares),
 * whether it may stream. */
static const struct {
    const char *name, *path;
    int share;
    bool streams;
} sk_routes[SK_R_N] = {
    [SK_R_CHAT] = {"chat", "/v1/chat/completions", 4, true},
    [SK_R_COMPLETIONS] = {"completions", "/v1/completions", 3, true},
    [SK_R_RESPONSES] = {"responses", "/v1/responses", 2, true},
    [SK_R_RESPONSES_NEXT] = {"responses_next", "/v1/responses", 2, true},
    [SK_R_MESSAGES] = {"messages", "/v1/messages", 2, true},
    [SK_R_RERANK] = {"rerank", "/v1/rerank", 1, false},
    [SK_R_SCORE] = {"score", "/v1/score", 1, false},
    [SK_R_TOKENIZE] = {"tokenize", "/tokenize", 1, false},
    [SK_R_EMBEDDINGS] = {"embeddings", "/v1/embeddings", 1, false},
};

/* A response a later request may continue: its id and its worker. */
struct sk_resp_ref {
    char id[96];
    char worker[32];
};

const char *sk_route_name(enum sk_route r)
{
    return r < SK_R_N ? sk_routes[r].name : "?";
}

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
    struct sk_resp_ref ring[SK_RESP_RING]; /* under mu: the last responses made */
    size_t n_ring, ring_next;
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

/* The data of the first `event: name` of an SSE body, parsed; NULL when
 * there is none or it is not JSON. */
static json_t *sk_sse_event(const char *body, const char *name)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "event: %s\ndata: ", name);
    const char *p = strstr(body, tag);
    if (p == NULL)
        return NULL;
    p += strlen(tag);
    const char *end = strchr(p, '\n');
    return json_loadb(p, end != NULL ? (size_t)(end - p) : strlen(p), 0, NULL);
}

static bool sk_array_of(const json_t *root, const char *key, size_t n)
{
    const json_t *a = json_object_get(root, key);
    return json_is_array(a) && json_array_size(a) == n;
}

/*
 * Is a 200 answer complete, as its route's client would judge it? A chat
 * or completions stream ends with [DONE] and carries no error event, a
 * plain answer is a JSON object with choices; a Responses answer is the
 * response object (in a stream: response.completed's) with status
 * "completed" and an id, which *id gets; a Messages answer is a message
 * (a stream ends with message_stop and has no error event); rerank,
 * score, tokenize and embeddings answers hold every result asked for.
 */
static bool sk_complete(const struct sk_xfer *x, enum sk_route route, bool stream, char *id,
                        size_t id_cap)
{
    if (x->body == NULL)
        return false;
    if (route == SK_R_CHAT || route == SK_R_COMPLETIONS) {
        if (stream)
            return strstr(x->body, "data: [DONE]") != NULL && strstr(x->body, "\"error\"") == NULL;
        return strstr(x->body, "\"choices\"") != NULL && strstr(x->body, "\"error\"") == NULL;
    }
    if (stream && route == SK_R_MESSAGES)
        return strstr(x->body, "event: message_stop\n") != NULL &&
               strstr(x->body, "event: error\n") == NULL;
    json_t *root = NULL;
    if (stream) {
        if (strstr(x->body, "event: error\n") == NULL) {
            json_t *ev = sk_sse_event(x->body, "response.completed");
            root = json_incref(json_object_get(ev, "response"));
            json_decref(ev);
        }
    } else {
        root = json_loads(x->body, 0, NULL);
    }
    bool ok = json_is_object(root);
    switch (route) {
    case SK_R_RESPONSES:
    case SK_R_RESPONSES_NEXT: {
        const char *st = json_string_value(json_object_get(root, "status"));
        const json_t *rid = json_object_get(root, "id");
        ok = ok && st != NULL && strcmp(st, "completed") == 0 && json_is_string(rid) &&
             json_string_length(rid) > 0 && json_string_length(rid) < id_cap &&
             json_is_null(json_object_get(root, "error"));
        if (ok)
            snprintf(id, id_cap, "%s", json_string_value(rid));
        break;
    }
    case SK_R_MESSAGES: {
        const char *type = json_string_value(json_object_get(root, "type"));
        ok = ok && type != NULL && strcmp(type, "message") == 0 && sk_array_of(root, "content", 1);
        break;
    }
    case SK_R_RERANK:
        ok = ok && sk_array_of(root, "results", 3);
        break;
    case SK_R_SCORE:
        ok = ok && sk_array_of(root, "data", 2);
        break;
    case SK_R_TOKENIZE:
        ok = ok && json_is_array(json_object_get(root, "tokens")) &&
             json_integer_value(json_object_get(root, "count")) > 0;
        break;
    default: /* SK_R_EMBEDDINGS */
        ok = ok && sk_array_of(root, "data", 1) &&
             json_is_array(
                 json_object_get(json_array_get(json_object_get(root, "data"), 0), "embedding"));
        break;
    }
    json_decref(root);
    return ok;
}

/* The request body of a route (512 bytes at most). */
static void sk_body(char *body, size_t cap, enum sk_route route, const char *model, int max_tokens,
                    bool stream, unsigned topic, const char *prev_id)
{
    const char *st = stream ? "true" : "false";
    switch (route) {
    case SK_R_CHAT:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"soak question %u\"}]}",
                 model, max_tokens, st, topic);
        break;
    case SK_R_COMPLETIONS:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"prompt\":\"soak prompt %u\"}",
                 model, max_tokens, st, topic);
        break;
    case SK_R_RESPONSES:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"max_output_tokens\":%d,\"stream\":%s,\"instructions\":"
                 "\"answer briefly\",\"input\":\"soak conversation %u\"}",
                 model, max_tokens, st, topic);
        break;
    case SK_R_RESPONSES_NEXT:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"max_output_tokens\":%d,\"stream\":%s,"
                 "\"previous_response_id\":\"%s\",\"input\":[{\"role\":\"user\",\"content\":"
                 "\"and then %u\"}]}",
                 model, max_tokens, st, prev_id, topic);
        break;
    case SK_R_MESSAGES:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"max_tokens\":%d,\"stream\":%s,\"system\":\"be brief\","
                 "\"messages\":[{\"role\":\"user\",\"content\":\"soak message %u\"}]}",
                 model, max_tokens, st, topic);
        break;
    case SK_R_RERANK:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"query\":\"soak query %u\",\"documents\":[\"one\","
                 "\"two\",\"three\"]}",
                 model, topic);
        break;
    case SK_R_SCORE:
        snprintf(body, cap,
                 "{\"model\":\"%s\",\"text_1\":\"soak text %u\",\"text_2\":[\"left\","
                 "\"right\"]}",
                 model, topic);
        break;
    case SK_R_TOKENIZE:
        snprintf(body, cap, "{\"model\":\"%s\",\"prompt\":\"soak tokens %u\"}", model, topic);
        break;
    default: /* SK_R_EMBEDDINGS */
        snprintf(body, cap, "{\"model\":\"%s\",\"input\":\"soak embedding %u\"}", model, topic);
        break;
    }
}

static enum sk_route sk_pick_route(struct sk_traffic *t)
{
    int total = 0;
    for (int r = 0; r < SK_R_N; r++)
        total += sk_routes[r].share;
    int x = (int)rng_below(&t->rng, (uint64_t)total);
    for (int r = 0; r < SK_R_N; r++) {
        if (x < sk_routes[r].share)
            return (enum sk_route)r;
        x -= sk_routes[r].share;
    }
    return SK_R_CHAT;
}

static void sk_one_request(struct sk_traffic *t, CURL *easy, int64_t due)
{
    pthread_mutex_lock(&t->mu);
    int dp = (int)rng_below(&t->rng, (uint64_t)t->o.n_dp);
    enum sk_route route = sk_pick_route(t);
    struct sk_resp_ref prev = {.id = ""};
    if (route == SK_R_RESPONSES_NEXT && t->n_ring == 0)
        route = SK_R_RESPONSES; /* nothing to continue yet */
    if (route == SK_R_RESPONSES_NEXT)
        prev = t->ring[rng_below(&t->rng, (uint64_t)t->n_ring)];
    bool stream = sk_routes[route].streams && (int)rng_below(&t->rng, 100) < t->o.stream_percent;
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

    char url[128], body[512];
    snprintf(url, sizeof(url), "%s%s", t->o.base[dp], sk_routes[route].path);
    sk_body(body, sizeof(body), route, t->o.model, max_tokens, stream, topic, prev.id);

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
    snprintf(fr.pinned, sizeof(fr.pinned), "%s", prev.worker);
    fr.status = x.status;
    fr.curl_code = (int)rc;
    snprintf(fr.route, sizeof(fr.route), "%s", sk_routes[route].name);
    char id[sizeof(prev.id)] = "";
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
    else if (!sk_complete(&x, route, stream, id, sizeof(id)))
        snprintf(fr.what, sizeof(fr.what), "incomplete 200 (%zu bytes)", x.len);
    else
        ok = true;
    free(x.body);

    pthread_mutex_lock(&t->mu);
    t->inflight--;
    if (ok) {
        t->c.ok++;
        t->c.ok_by_route[route]++;
        if (id[0] != '\0' && x.worker[0] != '\0') { /* a response to continue later */
            struct sk_resp_ref *r = &t->ring[t->ring_next];
            snprintf(r->id, sizeof(r->id), "%s", id);
            snprintf(r->worker, sizeof(r->worker), "%s", x.worker);
            t->ring_next = (t->ring_next + 1) % SK_RESP_RING;
            if (t->n_ring < SK_RESP_RING)
                t->n_ring++;
        }
    } else if (aborted) {
        t->c.aborted++;
    } else {
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
