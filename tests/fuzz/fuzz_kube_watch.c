/*
 * Fuzz target: a Kubernetes watch stream, as the Kubernetes worker source
 * reads it from the API server (outside our process: any bytes may come).
 * The stream goes through the real line splitter, each line's event
 * (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) to the source's event code,
 * each Pod object to the pod-to-worker rule, and after every read the
 * source syncs its workers into a real (private, unlinked) registry
 * segment, as it does on its loop.
 * Input: byte 0 picks the read size (0 = all at once), byte 1 the
 * discovery settings (a fixed port or a named one, model and role labels,
 * http or https), the rest is the stream.
 *
 * One source serves every input, reset between them (cp_kube_reset), so
 * an execution costs what parsing the stream costs.
 *
 * Oracle beyond the sanitizers: the events the splitter hands up, and
 * whether it refuses the stream, do not depend on how the stream was cut
 * into reads (the source's events, through a tap, against a bare
 * splitter fed the stream in one read); after every sync, each worker of
 * the Kubernetes source in the registry belongs to a pod the source
 * knows, has a url of the configured scheme, and the source's own worker
 * count matches the registry's.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source.h"
#include "controlplane/sources/source_kubernetes.h"
#include "controlplane/sources/source_kubernetes_http.h"
#include "shm/registry.h"
#include "shm/segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_MAX_WORKERS 16

static struct cfg fuzz_cfg;
static struct shm_segment fuzz_seg;
static struct cp_registry fuzz_reg; /* the registry's writer over fuzz_seg */
static struct shm_worker_info fuzz_snap[FUZZ_MAX_WORKERS];

/* The splitter alone: a digest of every event it hands up, in order. */
struct ev_log {
    uint64_t digest;
    size_t n;
};

static struct ev_log fuzz_whole, fuzz_cut;
/* Made once and reused, reset between inputs: a curl handle and an epoll
 * set per input would cost more than parsing the input does. The source's
 * own splitter is the cut one (a tap shows its events), so each line is
 * parsed twice, not three times. */
static struct kube_api *fuzz_api_whole;
static struct cp_kube *fuzz_kube;

static void ev_record(void *user, const json_t *ev);
static void ev_done(void *user, const struct kube_result *r);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    cfg_init_defaults(&fuzz_cfg);
    struct cfg_kubernetes *kc = &fuzz_cfg.discovery.kubernetes;
    kc->enabled = true;
    snprintf(kc->api_server, sizeof(kc->api_server), "http://127.0.0.1:1"); /* never contacted */
    snprintf(kc->namespace_name, sizeof(kc->namespace_name), "fuzz");
    snprintf(kc->token_file, sizeof(kc->token_file), "/nonexistent/switchyard-fuzz-token");
    kc->insecure_http = true;
    char name[64], err[256];
    snprintf(name, sizeof(name), "/switchyard-fuzz-kube-%d", (int)getpid());
    enum shm_open_outcome outcome;
    if (shm_segment_open_owner(&fuzz_seg, name, FUZZ_MAX_WORKERS, 4, &outcome, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "fuzz_kube_watch: %s\n", err);
        abort();
    }
    shm_segment_unlink(name); /* the mapping stays; nothing is left behind */
    cp_registry_init(&fuzz_reg, &fuzz_seg);
    struct kube_api_opts w = {.on_event = ev_record, .on_done = ev_done, .user = &fuzz_whole};
    if (kube_api_create(&w, &fuzz_api_whole) != 0)
        abort();
    if (cp_kube_create(&fuzz_reg, &fuzz_cfg, &fuzz_kube, err, sizeof(err)) != 0)
        abort();
    cp_kube_set_event_tap(fuzz_kube, ev_record, &fuzz_cut);
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* A digest of a JSON value: its type and contents, members in order (one
 * line parsed twice gives one order). Walks the tree instead of dumping
 * it: no allocation, a fraction of the cost. */
static uint64_t json_digest(uint64_t h, const json_t *v)
{
    int type = (int)json_typeof(v);
    h = fnv(h, &type, sizeof(type));
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *m;
        size_t n = json_object_size(v);
        h = fnv(h, &n, sizeof(n));
        json_object_foreach((json_t *)v, key, m)
        {
            h = fnv(h, key, strlen(key) + 1);
            h = json_digest(h, m);
        }
        return h;
    }
    case JSON_ARRAY: {
        size_t i, n = json_array_size(v);
        json_t *m;
        h = fnv(h, &n, sizeof(n));
        json_array_foreach(v, i, m)
        {
            h = json_digest(h, m);
        }
        return h;
    }
    case JSON_STRING: {
        size_t n = json_string_length(v);
        h = fnv(h, &n, sizeof(n));
        return fnv(h, json_string_value(v), n);
    }
    case JSON_INTEGER: {
        json_int_t i = json_integer_value(v);
        return fnv(h, &i, sizeof(i));
    }
    case JSON_REAL: {
        double d = json_real_value(v);
        return fnv(h, &d, sizeof(d));
    }
    default: /* true, false, null: the type says it all */
        return h;
    }
}

static void ev_record(void *user, const json_t *ev)
{
    struct ev_log *l = user;
    l->digest = json_digest(l->digest, ev);
    l->digest = (l->digest ^ 0xff) * 0x100000001b3ull; /* event boundary */
    l->n++;
}

static void ev_done(void *user, const struct kube_result *r)
{
    (void)user;
    (void)r;
}

/* Feeds the stream to splitter a in one read; false when it was refused. */
static bool split_whole(struct kube_api *a, const char *s, size_t len)
{
    bool ok = kube_api_feed_watch(a, s, len);
    kube_api_cancel(a); /* drops an unfinished last line, as the end of a watch does */
    return ok;
}

static void check_registry(const struct cp_kube *k)
{
    size_t n = shm_registry_snapshot(&fuzz_seg, fuzz_snap, FUZZ_MAX_WORKERS);
    const char *scheme = fuzz_cfg.discovery.kubernetes.scheme;
    size_t ours = 0;
    for (size_t i = 0; i < n; i++) {
        const struct shm_worker_info *w = &fuzz_snap[i];
        if (w->source != CP_SOURCE_KUBERNETES)
            continue;
        ours++;
        const char *ns, *name, *uid;
        if (!cp_kube_pod_of(k, w->id, &ns, &name, &uid))
            abort(); /* a worker the source lost track of: nothing would remove it */
        size_t sl = strlen(scheme);
        if (strncmp(w->url, scheme, sl) != 0 || strncmp(w->url + sl, "://", 3) != 0)
            abort();
    }
    json_t *st = cp_kube_status_json(k, 0);
    if (st == NULL)
        abort();
    if ((size_t)json_integer_value(json_object_get(st, "workers")) != ours)
        abort();
    json_decref(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t chunk = data[0] % 64;
    uint8_t knobs = data[1];
    const char *s = (const char *)data + 2;
    size_t len = size - 2;
    size_t step = chunk == 0 ? (len ? len : 1) : chunk;

    struct cfg_kubernetes *kc = &fuzz_cfg.discovery.kubernetes;
    kc->port = 8000;
    snprintf(kc->port_name, sizeof(kc->port_name), "%s", (knobs & 1) ? "http" : "");
    snprintf(kc->model_label, sizeof(kc->model_label), "%s", (knobs & 2) ? "model" : "");
    snprintf(kc->role_label, sizeof(kc->role_label), "%s", (knobs & 4) ? "role" : "");
    snprintf(kc->scheme, sizeof(kc->scheme), "%s", (knobs & 8) ? "https" : "http");

    /* The stream in reads of step bytes to the source, whose splitter's
     * events the tap digests (the settings are read through the config at
     * every event: changing them between inputs is as good as a new
     * source). */
    struct cp_kube *k = fuzz_kube;
    memset(&fuzz_cut, 0, sizeof(fuzz_cut));
    bool ok_cut = true;
    uint64_t now = 1000000;
    for (size_t off = 0; off < len; off += step) {
        size_t n = len - off < step ? len - off : step;
        bool ok = cp_kube_feed_watch(k, s + off, n, now);
        if (!ok || memchr(s + off, '\n', n) != NULL) /* an event may have changed the registry */
            check_registry(k);
        if (!ok) {
            ok_cut = false;
            break;
        }
        now += 100;
    }
    /* The same stream in one read to a bare splitter: the same events, and
     * the same refusal, or what the source sees depends on where a read
     * ended. One read already was one read. */
    if (step < len) {
        memset(&fuzz_whole, 0, sizeof(fuzz_whole));
        bool ok_whole = split_whole(fuzz_api_whole, s, len);
        if (ok_whole != ok_cut || fuzz_whole.n != fuzz_cut.n ||
            fuzz_whole.digest != fuzz_cut.digest)
            abort();
    }
    /* Leave the registry empty and the source new (an unfinished last line
     * dropped, as the end of a watch does) for the next input. */
    char err[256];
    struct cp_source_set none = {.kind = CP_SOURCE_KUBERNETES, .workers = NULL, .n = 0};
    if (cp_registry_sync(&fuzz_reg, &none, err, sizeof(err)) != 0)
        abort();
    cp_kube_reset(k);
    return 0;
}
