/*
 * Fuzz target: the remaining parsers of outside bytes that landed with the
 * API and operations work, one per input, picked by byte 0:
 *  0. the status page's GET /decisions: a data plane's /metrics page to
 *     the parser that turns its decision counters into JSON (the page
 *     comes over HTTP: any bytes may come);
 *  1. a CORS preflight: Origin, Access-Control-Request-Method and
 *     -Headers from a browser (one line each), plus the route's Allow
 *     value, against a dataplane.cors the input also picks (origins "*" or
 *     a list; allowed headers "*" or up to 16 names of any length the
 *     config loader accepts, written compactly as length and fill byte);
 *  2. the admin API's POST /adapters body and DELETE /adapters/{name}, to
 *     the adapter code over a real (private) registry whose workers are
 *     all draining and list no adapter: everything short of calling a
 *     worker runs, and no worker is ever called (the admin_rest target
 *     leaves /adapters out for that reason: its registry is the input's).
 * POST /reload has no body; the admin_rest target serves it.
 *
 * Oracle beyond the sanitizers: /decisions: a JSON object with the two
 * arrays, each entry with all its labels as strings and a count >= 0; CORS: a passing
 * preflight has an allowed origin and a method, and the Allow-Headers
 * value made of the config is a terminated string inside its buffer that
 * lists every configured name whole; adapters: a status in 200..599 with a body, and no worker
 * gained a name.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "controlplane/admin/adapters.h"
#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_reply.h"
#include "controlplane/admin/decisions.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "dataplane/http/cors.h"
#include "shm/registry.h"
#include "shm/segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_WORKERS 4

static struct cfg fuzz_cfg;
static struct shm_segment fuzz_seg;
static struct cp_registry fuzz_reg; /* the registry's writer over fuzz_seg */
static struct adm_ctx fuzz_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    cfg_init_defaults(&fuzz_cfg);
    char name[64], err[256];
    snprintf(name, sizeof(name), "/switchyard-fuzz-cors-admin-%d", (int)getpid());
    enum shm_open_outcome outcome;
    if (shm_segment_open_owner(&fuzz_seg, name, 8, 4, &outcome, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_cors_and_admin: %s\n", err);
        abort();
    }
    shm_segment_unlink(name); /* the mapping stays; nothing is left behind */
    cp_registry_init(&fuzz_reg, &fuzz_seg);
    fuzz_ctx.cfg = &fuzz_cfg;
    fuzz_ctx.seg = &fuzz_seg;
    fuzz_ctx.reg = &fuzz_reg;
    /* Two base models, so "the fleet's only model" and base_model both
     * matter; every worker draining: none is ever called. */
    static const char *const models[FUZZ_WORKERS] = {"m", "m", "n", ""};
    for (int i = 0; i < FUZZ_WORKERS; i++) {
        struct cp_source_worker w;
        memset(&w, 0, sizeof(w));
        snprintf(w.id, sizeof(w.id), "w%d", i);
        snprintf(w.url, sizeof(w.url), "http://127.0.0.1:%d", 9 + i);
        snprintf(w.model, sizeof(w.model), "%s", models[i]);
        w.role = CFG_ROLE_REGULAR;
        struct shm_worker_info placed;
        if (cp_registry_add(&fuzz_reg, CP_SOURCE_API, &w, &placed) != 0 ||
            shm_registry_set_draining(&fuzz_seg, placed.slot, true) != 0)
            abort();
    }
    return 0;
}

/* ---- 0: /decisions ------------------------------------------------------------ */

static void check_entries(const json_t *arr, bool pd)
{
    if (!json_is_array(arr))
        abort();
    size_t i;
    const json_t *e;
    json_array_foreach(arr, i, e)
    {
        if (!json_is_string(json_object_get(e, "policy")) ||
            !json_is_string(json_object_get(e, "decision")) ||
            !json_is_integer(json_object_get(e, "count")) ||
            json_integer_value(json_object_get(e, "count")) < 0 ||
            (pd && !json_is_string(json_object_get(e, "phase"))))
            abort();
    }
}

static void fuzz_decisions(const char *s, size_t len)
{
    char *text = strndup(s, len); /* the fetch keeps the page NUL-terminated */
    if (text == NULL)
        return;
    json_t *j = cp_decisions_parse(text, "http://127.0.0.1:8080/metrics");
    if (j == NULL || !json_is_string(json_object_get(j, "source")))
        abort();
    check_entries(json_object_get(j, "decisions"), false);
    check_entries(json_object_get(j, "pd_decisions"), true);
    json_decref(j);
    free(text);
}

/* ---- 1: CORS preflight ---------------------------------------------------------- */

static const char fuzz_tchar[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                 "!#$%&'*+-.^_`|~";

/* The next line of s as a new string, NULL past the end. */
static char *next_line(const char **s, const char *end)
{
    if (*s >= end)
        return NULL;
    const char *nl = memchr(*s, '\n', (size_t)(end - *s));
    const char *stop = nl != NULL ? nl : end;
    char *line = strndup(*s, (size_t)(stop - *s)); /* a header value stops at a NUL */
    *s = nl != NULL ? nl + 1 : end;
    return line;
}

static void fuzz_cors(const uint8_t *d, size_t len)
{
    if (len < 2)
        return;
    static struct cfg_cors c;
    memset(&c, 0, sizeof(c));
    uint8_t flags = d[0];
    size_t nh = d[1] % (CFG_LIST_MAX + 1);
    d += 2;
    len -= 2;
    if (flags & 4) {
        snprintf(c.allowed_headers.item[c.allowed_headers.n++], CFG_LIST_ITEM_MAX, "*");
    } else {
        /* Names as the config loader takes them: token characters, at
         * most CFG_LIST_ITEM_MAX - 1 bytes. */
        for (size_t i = 0; i < nh && len >= 2; i++, d += 2, len -= 2) {
            size_t n = d[0] % CFG_LIST_ITEM_MAX;
            if (n == 0)
                n = 1;
            char *item = c.allowed_headers.item[c.allowed_headers.n++];
            memset(item, fuzz_tchar[d[1] % (sizeof(fuzz_tchar) - 1)], n);
            item[n] = '\0';
        }
    }
    const char *s = (const char *)d, *end = s + len;
    char *origin = next_line(&s, end);
    char *method = next_line(&s, end);
    char *headers = next_line(&s, end);
    char *allow = next_line(&s, end);
    if (flags & 1) {
        snprintf(c.allowed_origins.item[c.allowed_origins.n++], CFG_LIST_ITEM_MAX, "*");
    } else {
        snprintf(c.allowed_origins.item[c.allowed_origins.n++], CFG_LIST_ITEM_MAX,
                 "https://app.example:8443");
        if ((flags & 2) && origin != NULL)
            snprintf(c.allowed_origins.item[c.allowed_origins.n++], CFG_LIST_ITEM_MAX, "%s",
                     origin);
    }
    static char list[DP_CORS_ALLOW_HEADERS_MAX + 1];
    list[DP_CORS_ALLOW_HEADERS_MAX] = '\x7f'; /* a guard byte past the buffer */
    const char *allow_origin, *allow_headers;
    const char *reason =
        dp_cors_check(&c, origin, method, headers, allow != NULL ? allow : "POST", &allow_origin,
                      list, DP_CORS_ALLOW_HEADERS_MAX, &allow_headers);
    if (reason == NULL && (allow_origin == NULL || method == NULL || method[0] == '\0'))
        abort();
    if (allow_headers == list) {
        if (memchr(list, '\0', DP_CORS_ALLOW_HEADERS_MAX) == NULL)
            abort();
        /* The browser allows only what the value lists: every configured
         * name, whole. */
        static char want[CFG_LIST_MAX * (CFG_LIST_ITEM_MAX + 2) + 1];
        size_t at = 0;
        for (size_t i = 0; i < c.allowed_headers.n; i++)
            at += (size_t)snprintf(want + at, sizeof(want) - at, "%s%s", i ? ", " : "",
                                   c.allowed_headers.item[i]);
        if (strcmp(list, want) != 0)
            abort();
    }
    if (list[DP_CORS_ALLOW_HEADERS_MAX] != '\x7f')
        abort();
    free(origin);
    free(method);
    free(headers);
    free(allow);
}

/* ---- 2: /adapters --------------------------------------------------------------- */

static void fuzz_adapters(const uint8_t *d, size_t len)
{
    if (len < 1)
        return;
    bool unload = d[0] & 1;
    const char *s = (const char *)d + 1, *end = s + len - 1;
    struct adm_reply reply;
    memset(&reply, 0, sizeof(reply));
    if (unload) {
        char *name = next_line(&s, end); /* the path segment: the rest is unused */
        cp_adapters_serve(&fuzz_ctx, (d[0] & 2) ? "GET" : "DELETE", name != NULL ? name : "", NULL,
                          0, &reply);
        free(name);
    } else {
        cp_adapters_serve(&fuzz_ctx, (d[0] & 2) ? "PUT" : "POST", NULL, s, (size_t)(end - s),
                          &reply);
    }
    if (reply.status < 200 || reply.status > 599 || (reply.json == NULL && reply.text == NULL))
        abort();
    adm_reply_fini(&reply);
    struct shm_worker_info w[8];
    size_t n = shm_registry_snapshot(&fuzz_seg, w, 8);
    for (size_t i = 0; i < n; i++)
        if (w[i].aliases[0] != '\0')
            abort(); /* a name was set without a worker saying yes */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        fuzz_decisions((const char *)data + 1, size - 1);
        break;
    case 1:
        fuzz_cors(data + 1, size - 1);
        break;
    default:
        fuzz_adapters(data + 1, size - 1);
        break;
    }
    return 0;
}
