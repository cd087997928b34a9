/*
 * The fake API server's store (see store.h): pods in a flat array, events
 * in an append-only log, faults as flags and generation counters that each
 * watch compares with the values it started with.
 *
 * A watch that starts from version V skips the log up to V and then sends
 * each event whose pod matched its selector before or after the change, as
 * the real server does: matched after only is ADDED, before only is
 * DELETED, both is the event's own type.
 */
#include "tests/fakekube/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/proc.h"

#define FK_EVENT_MAX_LINE (1u << 20)

struct fk_pod {
    char ns[256];
    char name[256];
    json_t *obj;
};

struct fk_event {
    uint64_t rv;
    const char *type; /* ADDED, MODIFIED, DELETED */
    char ns[256];
    json_t *before; /* NULL for ADDED */
    json_t *after;  /* the object as sent (for DELETED: the last state, new version) */
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct fk_pod *pods;
    size_t n_pods, cap_pods;
    struct fk_event *log;
    size_t n_log, cap_log;
    uint64_t rv;
    uint64_t compacted_rv; /* versions below this are too old */
    uint64_t bookmark_interval_ms;
    uint64_t expire_gen, sever_gen, silence_gen;
    bool drop_next_event;
    int fail_status;
    char require_token[512];
    struct fk_flood flood;
    bool stopping;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---- selectors -------------------------------------------------------------- */

static void fk_trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ')
        s[--n] = '\0';
    size_t lead = strspn(s, " ");
    memmove(s, s + lead, strlen(s + lead) + 1);
}

static bool fk_label_ok(const char *s, bool key)
{
    size_t n = strlen(s);
    if (n == 0)
        return !key;
    if (n > (key ? 253u + 1u + 63u : 63u))
        return false;
    for (const char *c = s; *c != '\0'; c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.' ||
                  (key && *c == '/');
        if (!ok)
            return false;
    }
    return true;
}

int fk_selector_parse(const char *text, struct fk_selector *out)
{
    memset(out, 0, sizeof(*out));
    if (text == NULL || text[0] == '\0')
        return 0;
    char copy[4096];
    if (strlen(text) >= sizeof(copy))
        return -EINVAL;
    snprintf(copy, sizeof(copy), "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (out->n == FK_SEL_TERMS_MAX)
            return -EINVAL;
        struct fk_sel_term *t = &out->terms[out->n];
        char *op;
        if ((op = strstr(tok, "!=")) != NULL) {
            t->op = FK_SEL_NEQ;
            *op = '\0';
            op += 2;
        } else if ((op = strstr(tok, "==")) != NULL) {
            t->op = FK_SEL_EQ;
            *op = '\0';
            op += 2;
        } else if ((op = strchr(tok, '=')) != NULL) {
            t->op = FK_SEL_EQ;
            *op = '\0';
            op += 1;
        } else {
            fk_trim(tok);
            t->op = FK_SEL_EXISTS;
            if (tok[0] == '!') {
                t->op = FK_SEL_NOT_EXISTS;
                tok++;
                fk_trim(tok);
            }
            if (strchr(tok, ' ') != NULL || strchr(tok, '(') != NULL)
                return -EINVAL; /* set-based (in, notin) is not supported */
        }
        fk_trim(tok);
        if (strlen(tok) >= sizeof(t->key) || !fk_label_ok(tok, true))
            return -EINVAL;
        snprintf(t->key, sizeof(t->key), "%s", tok);
        if (op != NULL) {
            fk_trim(op);
            if (strlen(op) >= sizeof(t->value) || !fk_label_ok(op, false))
                return -EINVAL;
            snprintf(t->value, sizeof(t->value), "%s", op);
        }
        out->n++;
    }
    return 0;
}

bool fk_selector_matches(const struct fk_selector *sel, const json_t *pod)
{
    const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    for (size_t i = 0; i < sel->n; i++) {
        const struct fk_sel_term *t = &sel->terms[i];
        const char *v = json_string_value(json_object_get(labels, t->key));
        switch (t->op) {
        case FK_SEL_EQ:
            if (v == NULL || strcmp(v, t->value) != 0)
                return false;
            break;
        case FK_SEL_NEQ:
            if (v != NULL && strcmp(v, t->value) == 0)
                return false;
            break;
        case FK_SEL_EXISTS:
            if (v == NULL)
                return false;
            break;
        case FK_SEL_NOT_EXISTS:
            if (v != NULL)
                return false;
            break;
        }
    }
    return true;
}

json_t *fk_status(int code, const char *reason, const char *message)
{
    return json_pack("{s:s, s:s, s:{}, s:s, s:s, s:s, s:i}", "kind", "Status", "apiVersion", "v1",
                     "metadata", "status", "Failure", "message", message, "reason", reason, "code",
                     code);
}

/* ---- store ------------------------------------------------------------------ */

void fk_store_init(uint64_t bookmark_interval_ms)
{
    fk.bookmark_interval_ms = bookmark_interval_ms;
    fk.rv = 1000; /* versions are opaque to clients: do not start at a round 0 */
    fk.compacted_rv = 0;
}

void fk_store_shutdown(void)
{
    pthread_mutex_lock(&fk.mu);
    fk.stopping = true;
    pthread_cond_broadcast(&fk.cond);
    pthread_mutex_unlock(&fk.mu);
}

void fk_store_fini(void)
{
    for (size_t i = 0; i < fk.n_pods; i++)
        json_decref(fk.pods[i].obj);
    for (size_t i = 0; i < fk.n_log; i++) {
        json_decref(fk.log[i].before);
        json_decref(fk.log[i].after);
    }
    free(fk.pods);
    free(fk.log);
    free(fk.flood.item);
}

static struct fk_pod *fk_find(const char *ns, const char *name)
{
    for (size_t i = 0; i < fk.n_pods; i++)
        if (strcmp(fk.pods[i].ns, ns) == 0 && strcmp(fk.pods[i].name, name) == 0)
            return &fk.pods[i];
    return NULL;
}

static void fk_set_rv(json_t *obj, uint64_t rv)
{
    char s[32];
    snprintf(s, sizeof(s), "%llu", (unsigned long long)rv);
    json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string(s));
}

/* Appends an event (takes both references) unless drop_next_event eats it. */
static void fk_log_event(const char *type, const char *ns, json_t *before, json_t *after)
{
    if (fk.drop_next_event) {
        fk.drop_next_event = false;
        json_decref(before);
        json_decref(after);
        fprintf(stderr, "fakekube: dropped the %s event of version %llu\n", type,
                (unsigned long long)fk.rv);
        return;
    }
    if (fk.n_log == fk.cap_log) {
        size_t cap = fk.cap_log ? fk.cap_log * 2 : 256;
        struct fk_event *l = realloc(fk.log, cap * sizeof(*l));
        if (l == NULL)
            abort(); /* a test server: out of memory ends the test */
        fk.log = l;
        fk.cap_log = cap;
    }
    struct fk_event *e = &fk.log[fk.n_log++];
    e->rv = fk.rv;
    e->type = type;
    snprintf(e->ns, sizeof(e->ns), "%s", ns);
    e->before = before;
    e->after = after;
    pthread_cond_broadcast(&fk.cond);
}

static void fk_new_uid(char *out, size_t len)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)rand();
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

json_t *fk_store_put(const char *ns, const char *name, const json_t *body, bool *created,
                     int *err_status)
{
    if (!json_is_object(body)) {
        *err_status = 400;
        return NULL;
    }
    json_t *obj = json_deep_copy(body);
    json_t *meta = json_object_get(obj, "metadata");
    if (!json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(obj, "metadata", meta);
    }
    json_object_set_new(obj, "kind", json_string("Pod"));
    json_object_set_new(obj, "apiVersion", json_string("v1"));
    json_object_set_new(meta, "name", json_string(name));
    json_object_set_new(meta, "namespace", json_string(ns));

    pthread_mutex_lock(&fk.mu);
    struct fk_pod *p = fk_find(ns, name);
    *created = p == NULL;
    if (json_string_value(json_object_get(meta, "uid")) == NULL) {
        char uid[40];
        if (p != NULL)
            snprintf(
                uid, sizeof(uid), "%s",
                json_string_value(json_object_get(json_object_get(p->obj, "metadata"), "uid")));
        else
            fk_new_uid(uid, sizeof(uid));
        json_object_set_new(meta, "uid", json_string(uid));
    }
    if (p != NULL && json_object_get(meta, "creationTimestamp") == NULL)
        json_object_set(meta, "creationTimestamp",
                        json_object_get(json_object_get(p->obj, "metadata"), "creationTimestamp"));
    if (json_object_get(meta, "creationTimestamp") == NULL) {
        char ts[32];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(meta, "creationTimestamp", json_string(ts));
    }
    fk.rv++;
    fk_set_rv(obj, fk.rv);
    json_t *before = NULL;
    if (p == NULL) {
        if (fk.n_pods == fk.cap_pods) {
            size_t cap = fk.cap_pods ? fk.cap_pods * 2 : 64;
            struct fk_pod *np = realloc(fk.pods, cap * sizeof(*np));
            if (np == NULL)
                abort();
            fk.pods = np;
            fk.cap_pods = cap;
        }
        p = &fk.pods[fk.n_pods++];
        snprintf(p->ns, sizeof(p->ns), "%s", ns);
        snprintf(p->name, sizeof(p->name), "%s", name);
    } else {
        before = p->obj;
    }
    p->obj = obj;
    fk_log_event(before == NULL ? "ADDED" : "MODIFIED", ns, before, json_deep_copy(obj));
    json_t *out = json_deep_copy(obj);
    pthread_mutex_unlock(&fk.mu);
    return out;
}

json_t *fk_store_delete(const char *ns, const char *name)
{
    pthread_mutex_lock(&fk.mu);
    struct fk_pod *p = fk_find(ns, name);
    if (p == NULL) {
        pthread_mutex_unlock(&fk.mu);
        return NULL;
    }
    json_t *obj = p->obj;
    *p = fk.pods[--fk.n_pods];
    fk.rv++;
    json_t *last = json_deep_copy(obj);
    fk_set_rv(last, fk.rv);
    json_t *out = json_deep_copy(last);
    fk_log_event("DELETED", ns, obj, last);
    pthread_mutex_unlock(&fk.mu);
    return out;
}

json_t *fk_store_get(const char *ns, const char *name)
{
    pthread_mutex_lock(&fk.mu);
    struct fk_pod *p = fk_find(ns, name);
    json_t *out = p != NULL ? json_deep_copy(p->obj) : NULL;
    pthread_mutex_unlock(&fk.mu);
    return out;
}

static int fk_cmp_name(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a;
    const json_t *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_object_get(json_object_get(x, "metadata"), "name")),
                  json_string_value(json_object_get(json_object_get(y, "metadata"), "name")));
}

json_t *fk_store_list(const char *ns, const struct fk_selector *sel, long limit, const char *cont,
                      int *status)
{
    char after[256] = "";
    unsigned long long cont_rv = 0;
    if (cont != NULL && cont[0] != '\0') {
        const char *colon = strchr(cont, ':');
        if (colon == NULL || sscanf(cont, "%llu:", &cont_rv) != 1) {
            *status = 400;
            return fk_status(400, "BadRequest", "invalid continue token");
        }
        snprintf(after, sizeof(after), "%s", colon + 1);
    }
    pthread_mutex_lock(&fk.mu);
    if (cont_rv != 0 && cont_rv < fk.compacted_rv) {
        pthread_mutex_unlock(&fk.mu);
        *status = 410;
        return fk_status(410, "Expired",
                         "The provided continue parameter is too old to display a consistent list "
                         "result. You can start a new list without the continue parameter.");
    }
    json_t **match = calloc(fk.n_pods + 1, sizeof(*match));
    size_t n = 0;
    for (size_t i = 0; i < fk.n_pods; i++)
        if (strcmp(fk.pods[i].ns, ns) == 0 && fk_selector_matches(sel, fk.pods[i].obj))
            match[n++] = fk.pods[i].obj;
    qsort(match, n, sizeof(*match), fk_cmp_name);
    uint64_t rv = cont_rv != 0 ? cont_rv : fk.rv;
    json_t *items = json_array();
    size_t taken = 0;
    const char *last = NULL;
    bool more = false;
    for (size_t i = 0; i < n; i++) {
        const char *nm =
            json_string_value(json_object_get(json_object_get(match[i], "metadata"), "name"));
        if (after[0] != '\0' && strcmp(nm, after) <= 0)
            continue;
        if (limit > 0 && (long)taken == limit) {
            more = true;
            break;
        }
        json_array_append_new(items, json_deep_copy(match[i]));
        last = nm;
        taken++;
    }
    char rvs[32], next[320] = "";
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    if (more && last != NULL)
        snprintf(next, sizeof(next), "%llu:%s", (unsigned long long)rv, last);
    free(match);
    pthread_mutex_unlock(&fk.mu);
    json_t *meta = json_pack("{s:s}", "resourceVersion", rvs);
    if (next[0] != '\0')
        json_object_set_new(meta, "continue", json_string(next));
    *status = 200;
    return json_pack("{s:s, s:s, s:o, s:o}", "kind", "PodList", "apiVersion", "v1", "metadata",
                     meta, "items", items);
}

bool fk_store_flood(struct fk_flood *out)
{
    pthread_mutex_lock(&fk.mu);
    *out = fk.flood;
    out->item = fk.flood.items > 0 ? strdup(fk.flood.item) : NULL;
    out->rv = fk.rv;
    pthread_mutex_unlock(&fk.mu);
    if (out->items > 0 && out->item == NULL)
        out->items = 0;
    return out->items > 0;
}

/* Checks a flood_list value (null, or an object of the documented keys)
 * into *out; 0 or -EINVAL with err. */
static int fk_parse_flood(const json_t *v, struct fk_flood *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof(*out));
    if (json_is_null(v))
        return 0;
    const json_t *n = json_object_get(v, "items");
    const json_t *item = json_object_get(v, "item");
    const json_t *named = json_object_get(v, "named");
    const json_t *honour = json_object_get(v, "honour_limit");
    if (!json_is_object(v) || !json_is_integer(n) || json_integer_value(n) < 0 ||
        (item != NULL && !json_is_object(item)) || (named != NULL && !json_is_boolean(named)) ||
        (honour != NULL && !json_is_boolean(honour))) {
        snprintf(err, err_len,
                 "'flood_list' must be null or {\"items\": N, \"item\": {...}, \"named\": "
                 "bool, \"honour_limit\": bool}");
        return -EINVAL;
    }
    out->items = (size_t)json_integer_value(n);
    out->named = json_is_true(named);
    out->honour_limit = json_is_true(honour);
    json_t *empty = json_object();
    out->item = json_dumps(item != NULL ? item : empty, JSON_COMPACT);
    json_decref(empty);
    if (out->item == NULL) {
        snprintf(err, err_len, "out of memory");
        return -EINVAL;
    }
    return 0;
}

int fk_store_faults(const json_t *body, char *err, size_t err_len)
{
    if (!json_is_object(body)) {
        snprintf(err, err_len, "body must be a JSON object");
        return -EINVAL;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "flood_list") == 0)
            continue;
        bool known = strcmp(key, "expire") == 0 || strcmp(key, "drop_next_event") == 0 ||
                     strcmp(key, "sever_watches") == 0 || strcmp(key, "silence_watches") == 0;
        if (known && !json_is_boolean(v)) {
            snprintf(err, err_len, "'%s' must be true or false", key);
            return -EINVAL;
        }
        if (!known && strcmp(key, "fail_status") == 0 && !json_is_integer(v)) {
            snprintf(err, err_len, "'fail_status' must be an HTTP status, 0 to clear");
            return -EINVAL;
        }
        if (!known && strcmp(key, "require_token") == 0 && !json_is_string(v)) {
            snprintf(err, err_len, "'require_token' must be a string, \"\" to clear");
            return -EINVAL;
        }
        if (!known && strcmp(key, "fail_status") != 0 && strcmp(key, "require_token") != 0) {
            snprintf(err, err_len,
                     "unknown fault '%s' (expected expire, drop_next_event, sever_watches, "
                     "silence_watches, fail_status, require_token, flood_list)",
                     key);
            return -EINVAL;
        }
    }
    struct fk_flood flood = {0};
    const json_t *fv = json_object_get(body, "flood_list");
    if (fv != NULL && fk_parse_flood(fv, &flood, err, err_len) != 0)
        return -EINVAL;
    pthread_mutex_lock(&fk.mu);
    if (fv != NULL) {
        free(fk.flood.item);
        fk.flood = flood;
    }
    if (json_is_true(json_object_get(body, "expire"))) {
        /* A compaction at a fresh version: every version a client holds is
         * now too old, while a new list's version is not. */
        fk.rv++;
        fk.compacted_rv = fk.rv;
        fk.expire_gen++;
    }
    json_t *d = json_object_get(body, "drop_next_event");
    if (d != NULL)
        fk.drop_next_event = json_is_true(d);
    if (json_is_true(json_object_get(body, "sever_watches")))
        fk.sever_gen++;
    if (json_is_true(json_object_get(body, "silence_watches")))
        fk.silence_gen++;
    json_t *f = json_object_get(body, "fail_status");
    if (f != NULL)
        fk.fail_status = (int)json_integer_value(f);
    json_t *t = json_object_get(body, "require_token");
    if (t != NULL)
        snprintf(fk.require_token, sizeof(fk.require_token), "%s", json_string_value(t));
    pthread_cond_broadcast(&fk.cond);
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

int fk_store_gate(const char *authorization, json_t **status_obj)
{
    pthread_mutex_lock(&fk.mu);
    int fail = fk.fail_status;
    char want[512];
    snprintf(want, sizeof(want), "%s", fk.require_token);
    pthread_mutex_unlock(&fk.mu);
    if (want[0] != '\0') {
        const char *prefix = "Bearer ";
        if (authorization == NULL || strncmp(authorization, prefix, strlen(prefix)) != 0 ||
            strcmp(authorization + strlen(prefix), want) != 0) {
            *status_obj = fk_status(401, "Unauthorized", "Unauthorized");
            return 401;
        }
    }
    if (fail != 0) {
        *status_obj = fk_status(fail, "InternalError", "fake fault: fail_status");
        return fail;
    }
    return 0;
}

/* ---- watches ---------------------------------------------------------------- */

int fk_watch_start(struct fk_watch *w, const char *ns, const struct fk_selector *sel,
                   const char *resource_version, bool bookmarks, long timeout_s)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->ns, sizeof(w->ns), "%s", ns);
    w->sel = *sel;
    w->bookmarks = bookmarks;
    uint64_t now = proc_monotonic_ms();
    w->deadline_ms = now + (uint64_t)(timeout_s > 0 ? timeout_s : 1800) * 1000u;
    w->last_sent_ms = now;
    bool from_now = resource_version == NULL || resource_version[0] == '\0' ||
                    strcmp(resource_version, "0") == 0;
    unsigned long long rv = 0;
    if (!from_now) {
        char *end = NULL;
        rv = strtoull(resource_version, &end, 10);
        if (end == resource_version || *end != '\0')
            return 400;
    }
    pthread_mutex_lock(&fk.mu);
    w->expire_gen = fk.expire_gen;
    w->sever_gen = fk.sever_gen;
    w->silence_gen = fk.silence_gen;
    int rc = 0;
    if (from_now) {
        w->initial = json_array();
        for (size_t i = 0; i < fk.n_pods; i++)
            if (strcmp(fk.pods[i].ns, ns) == 0 && fk_selector_matches(sel, fk.pods[i].obj))
                json_array_append_new(w->initial, json_deep_copy(fk.pods[i].obj));
        w->rv = fk.rv;
    } else if (rv < fk.compacted_rv) {
        rc = 410;
        w->rv = rv;
    } else {
        w->rv = rv;
    }
    /* Events up to w->rv are already known to the client. */
    while (w->log_pos < fk.n_log && fk.log[w->log_pos].rv <= w->rv)
        w->log_pos++;
    pthread_mutex_unlock(&fk.mu);
    if (rc == 410)
        w->expire_gen = UINT64_MAX; /* the next step is the ERROR event */
    return rc;
}

static char *fk_event_line(const char *type, json_t *obj)
{
    json_t *ev = json_pack("{s:s, s:O}", "type", type, "object", obj);
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (s == NULL)
        return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (line == NULL) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

static char *fk_gone_line(uint64_t rv)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", (unsigned long long)rv,
             (unsigned long long)fk.compacted_rv);
    json_t *st = fk_status(410, "Expired", msg);
    char *line = fk_event_line("ERROR", st);
    json_decref(st);
    return line;
}

/* The next log event this watch sends, or NULL; advances past skipped ones. */
static char *fk_next_logged(struct fk_watch *w)
{
    while (w->log_pos < fk.n_log) {
        struct fk_event *e = &fk.log[w->log_pos++];
        w->rv = e->rv;
        if (strcmp(e->ns, w->ns) != 0)
            continue;
        bool was = e->before != NULL && fk_selector_matches(&w->sel, e->before);
        bool is = strcmp(e->type, "DELETED") != 0 && fk_selector_matches(&w->sel, e->after);
        if (!was && !is)
            continue;
        const char *type = e->type;
        if (strcmp(e->type, "DELETED") != 0)
            type = !was ? "ADDED" : !is ? "DELETED" : "MODIFIED";
        return fk_event_line(type, e->after);
    }
    return NULL;
}

enum fk_watch_step fk_watch_next(struct fk_watch *w, char **line)
{
    *line = NULL;
    if (w->ending)
        return FK_WATCH_END;
    if (w->initial != NULL && w->initial_pos < json_array_size(w->initial)) {
        *line = fk_event_line("ADDED", json_array_get(w->initial, w->initial_pos++));
        return FK_WATCH_EVENT;
    }
    pthread_mutex_lock(&fk.mu);
    enum fk_watch_step step = FK_WATCH_END;
    for (;;) {
        uint64_t now = proc_monotonic_ms();
        if (fk.stopping || fk.sever_gen != w->sever_gen) {
            step = FK_WATCH_SEVER;
            break;
        }
        if (fk.silence_gen != w->silence_gen)
            w->silenced = true;
        if (!w->silenced) {
            if (fk.expire_gen != w->expire_gen) {
                *line = fk_gone_line(w->rv);
                w->ending = true;
                step = FK_WATCH_EVENT;
                break;
            }
            if ((*line = fk_next_logged(w)) != NULL) {
                step = FK_WATCH_EVENT;
                w->last_sent_ms = now;
                break;
            }
            if (now >= w->deadline_ms) {
                step = FK_WATCH_END;
                break;
            }
            if (w->bookmarks && fk.bookmark_interval_ms > 0 &&
                now >= w->last_sent_ms + fk.bookmark_interval_ms) {
                json_t *b = json_pack("{s:s, s:s, s:{s:s}}", "kind", "Pod", "apiVersion", "v1",
                                      "metadata", "resourceVersion", "");
                fk_set_rv(b, w->rv);
                *line = fk_event_line("BOOKMARK", b);
                json_decref(b);
                w->last_sent_ms = now;
                step = FK_WATCH_EVENT;
                break;
            }
        }
        /* Wake at the next deadline (bookmark or timeout), at most 200 ms. */
        uint64_t wake = now + 200;
        if (!w->silenced && w->deadline_ms < wake)
            wake = w->deadline_ms;
        if (!w->silenced && w->bookmarks && fk.bookmark_interval_ms > 0 &&
            w->last_sent_ms + fk.bookmark_interval_ms < wake)
            wake = w->last_sent_ms + fk.bookmark_interval_ms;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t delta = wake > now ? wake - now : 0;
        ts.tv_sec += (time_t)(delta / 1000);
        ts.tv_nsec += (long)(delta % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&fk.cond, &fk.mu, &ts);
    }
    pthread_mutex_unlock(&fk.mu);
    return step;
}

void fk_watch_fini(struct fk_watch *w)
{
    json_decref(w->initial);
    w->initial = NULL;
}
