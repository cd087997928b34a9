/*
 * LoRA adapter admin routes (see adapters.h). One curl multi handle per
 * call, driven by curl_multi_poll until every transfer ended or the
 * deadline passed; the answers are small (vLLM's are a line of text).
 */
#include "controlplane/admin/adapters.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/tls_client.h"
#include "common/proc.h"
#include "controlplane/probes/health_prober.h"
#include "shm/load.h"
#include "shm/registry.h"

#define CP_ADAPTERS_MAX    64u   /* workers one call may touch */
#define CP_ADAPTERS_ANSWER 1024u /* bytes of a worker's answer kept for the reply */

struct cp_call {
    struct shm_worker_info w;
    CURL *easy;
    char *body;
    struct buf answer;
    long status;
    CURLcode result;
};

static size_t cp_adapters_collect(char *data, size_t size, size_t n, void *arg)
{
    struct cp_call *c = arg;
    size_t len = size * n;
    size_t room = buf_room(&c->answer);
    (void)buf_append(&c->answer, data, len < room ? len : room);
    return len;
}

/* POSTs each call's body to its worker's path, all at once, reaching
 * https:// workers as traffic does (dataplane.upstream_tls). */
static void cp_adapters_run(const struct adm_ctx *ctx, struct cp_call *calls, size_t n,
                            const char *path)
{
    CURLM *m = curl_multi_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    for (size_t i = 0; i < n; i++) {
        struct cp_call *c = &calls[i];
        c->result = CURLE_FAILED_INIT;
        buf_init(&c->answer, CP_ADAPTERS_ANSWER);
        char url[CFG_URL_MAX + 64];
        snprintf(url, sizeof(url), "%s%s", c->w.url, path);
        c->easy = curl_easy_init();
        if (c->easy == NULL || m == NULL)
            continue;
        if (tls_client_apply(c->easy, &ctx->cfg->dataplane.upstream_tls) != 0) {
            curl_easy_cleanup(c->easy);
            c->easy = NULL;
            continue;
        }
        curl_easy_setopt(c->easy, CURLOPT_URL, url);
        curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c->easy, CURLOPT_PROXY, "");
        curl_easy_setopt(c->easy, CURLOPT_NOPROXY, "");
        curl_easy_setopt(c->easy, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)CP_ADAPTERS_TIMEOUT_MS);
        curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body != NULL ? c->body : "{}");
        curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, cp_adapters_collect);
        curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
        curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
        curl_multi_add_handle(m, c->easy);
    }
    uint64_t deadline = proc_monotonic_ms() + CP_ADAPTERS_TIMEOUT_MS + 500;
    int running = 1;
    while (m != NULL && running > 0 && proc_monotonic_ms() < deadline) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct cp_call *c = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            c->result = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &c->status);
        }
        if (running > 0)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        if (calls[i].easy == NULL)
            continue;
        if (m != NULL)
            curl_multi_remove_handle(m, calls[i].easy);
        curl_easy_cleanup(calls[i].easy);
        calls[i].easy = NULL;
    }
    curl_slist_free_all(hdrs);
    if (m != NULL)
        curl_multi_cleanup(m);
}

static bool cp_call_ok(const struct cp_call *c)
{
    return c->result == CURLE_OK && c->status >= 200 && c->status < 300;
}

/* The worker's names with name added (or removed), written to the registry. */
static void cp_adapters_set_alias(struct adm_ctx *ctx, const struct shm_worker_info *w,
                                  const char *name, bool add)
{
    struct shm_worker_info now;
    if (shm_registry_read_slot(ctx->seg, w->slot, &now) != 0 || now.generation != w->generation)
        return;
    char aliases[SHM_ALIASES_MAX] = "";
    size_t len = 0;
    for (const char *p = now.aliases; *p != '\0';) {
        size_t n = strcspn(p, "\n");
        if (!(n == strlen(name) && strncmp(p, name, n) == 0) && len + n + 2 < sizeof(aliases)) {
            if (len > 0)
                aliases[len++] = '\n';
            memcpy(aliases + len, p, n);
            len += n;
            aliases[len] = '\0';
        }
        p += n;
        if (*p == '\n')
            p++;
    }
    if (add && len + strlen(name) + 2 < sizeof(aliases))
        snprintf(aliases + len, sizeof(aliases) - len, "%s%s", len > 0 ? "\n" : "", name);
    if (shm_registry_set_names(ctx->seg, w->slot, now.model, aliases) != 0)
        log_warn("admin API: could not update the names of worker %s", w->id);
    if (ctx->hc != NULL)
        hc_refresh_models(ctx->hc, w->slot);
}

/* {"<key>": [ids], "failed": [{id, status, message}]}, freeing the calls. */
static json_t *cp_adapters_result(struct cp_call *calls, size_t n, const char *name,
                                  const char *key, size_t *ok_out)
{
    json_t *done = json_array(), *failed = json_array();
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        struct cp_call *c = &calls[i];
        (void)buf_append(&c->answer, "", 1);
        const char *text = c->answer.data != NULL ? c->answer.data : "";
        if (cp_call_ok(c)) {
            json_array_append_new(done, json_string(c->w.id));
            ok++;
        } else {
            json_array_append_new(
                failed,
                json_pack("{s:s, s:i, s:s}", "id", c->w.id, "status", (int)c->status, "message",
                          c->result != CURLE_OK ? curl_easy_strerror(c->result) : text));
        }
        buf_fini(&c->answer);
        free(c->body);
    }
    *ok_out = ok;
    return json_pack("{s:s, s:o, s:o}", "adapter", name, key, done, "failed", failed);
}

static bool cp_worker_usable(const struct shm_worker_info *w)
{
    return w->healthy && !w->draining && (w->role == CFG_ROLE_REGULAR || w->role == CFG_ROLE_UNSET);
}

static void cp_adapters_load(struct adm_ctx *ctx, const char *body, size_t len,
                             struct adm_reply *reply)
{
    json_error_t jerr;
    json_t *root = json_loadb(body != NULL ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    const char *name = json_string_value(json_object_get(root, "lora_name"));
    const char *path = json_string_value(json_object_get(root, "lora_path"));
    json_t *base_j = json_object_get(root, "base_model");
    json_t *count_j = json_object_get(root, "count");
    if (!json_is_object(root) || name == NULL || path == NULL || name[0] == '\0' ||
        strlen(name) >= CFG_MODEL_MAX || strchr(name, '\n') != NULL ||
        (base_j != NULL && !json_is_string(base_j)) ||
        (count_j != NULL && (!json_is_integer(count_j) || json_integer_value(count_j) < 1 ||
                             json_integer_value(count_j) > CP_ADAPTERS_MAX))) {
        adm_reply_error(reply, 400,
                        "body must be {\"lora_name\": string, \"lora_path\": string, "
                        "\"base_model\"?: string, \"count\"?: 1..%u}",
                        CP_ADAPTERS_MAX);
        json_decref(root);
        return;
    }
    size_t count = count_j != NULL ? (size_t)json_integer_value(count_j) : 1;
    struct shm_worker_info *all = calloc(ctx->seg->max_workers, sizeof(*all));
    struct cp_call *calls = calloc(CP_ADAPTERS_MAX, sizeof(*calls));
    if (all == NULL || calls == NULL) {
        adm_reply_error(reply, 500, "out of memory");
        goto out_free;
    }
    size_t n_all = shm_registry_snapshot(ctx->seg, all, ctx->seg->max_workers);
    /* The base model: given, or the fleet's only one. */
    const char *base = json_string_value(base_j);
    for (size_t i = 0; base == NULL && i < n_all; i++)
        base = all[i].model[0] != '\0' ? all[i].model : NULL;
    for (size_t i = 0; base_j == NULL && base != NULL && i < n_all; i++)
        if (all[i].model[0] != '\0' && strcmp(all[i].model, base) != 0) {
            adm_reply_error(reply, 400, "the fleet serves several models: name base_model");
            goto out_free;
        }
    size_t have = 0, n = 0;
    uint64_t loads[CP_ADAPTERS_MAX];
    for (size_t i = 0; base != NULL && i < n_all; i++) {
        const struct shm_worker_info *w = &all[i];
        if (strcmp(w->model, base) != 0)
            continue;
        if (shm_worker_serves(w, name)) {
            have++;
            continue;
        }
        if (!cp_worker_usable(w))
            continue;
        /* Insert by load, keeping the count least loaded. */
        uint64_t load = shm_load_of(ctx->seg, w->slot, w->generation);
        size_t at = n;
        while (at > 0 && loads[at - 1] > load)
            at--;
        if (at >= count)
            continue;
        size_t last = n < count ? n : count - 1;
        for (size_t k = last; k > at; k--) {
            calls[k] = calls[k - 1];
            loads[k] = loads[k - 1];
        }
        calls[at].w = *w;
        loads[at] = load;
        if (n < count)
            n++;
    }
    if (base == NULL || (n == 0 && have == 0)) {
        adm_reply_error(reply, 404, "no healthy worker serves base model '%s'",
                        base != NULL ? base : "");
        goto out_free;
    }
    /* The workers get vLLM's own body: lora_name and lora_path (and load_inplace). */
    json_t *fwd = json_pack("{s:s, s:s}", "lora_name", name, "lora_path", path);
    json_t *inplace = json_object_get(root, "load_inplace");
    if (fwd != NULL && json_is_boolean(inplace))
        json_object_set(fwd, "load_inplace", inplace);
    for (size_t i = 0; i < n; i++)
        calls[i].body = fwd != NULL ? json_dumps(fwd, JSON_COMPACT) : NULL;
    json_decref(fwd);
    cp_adapters_run(ctx, calls, n, "/v1/load_lora_adapter");
    for (size_t i = 0; i < n; i++) {
        if (cp_call_ok(&calls[i])) {
            cp_adapters_set_alias(ctx, &calls[i].w, name, true);
            log_info("admin API: loaded LoRA adapter '%s' on worker %s", name, calls[i].w.id);
        } else {
            log_warn("admin API: loading LoRA adapter '%s' on worker %s failed (HTTP %ld)", name,
                     calls[i].w.id, calls[i].status);
        }
    }
    size_t ok = 0;
    json_t *out = cp_adapters_result(calls, n, name, "loaded", &ok);
    json_object_set_new(out, "base_model", json_string(base));
    json_object_set_new(out, "already_loaded_on", json_integer((json_int_t)have));
    adm_reply_json(reply, ok > 0 || n == 0 ? 200 : 502, out);

out_free:
    free(all);
    free(calls);
    json_decref(root);
}

static void cp_adapters_unload(struct adm_ctx *ctx, const char *name, struct adm_reply *reply)
{
    struct shm_worker_info *all = calloc(ctx->seg->max_workers, sizeof(*all));
    struct cp_call *calls = calloc(CP_ADAPTERS_MAX, sizeof(*calls));
    if (all == NULL || calls == NULL) {
        adm_reply_error(reply, 500, "out of memory");
        goto out_free;
    }
    size_t n_all = shm_registry_snapshot(ctx->seg, all, ctx->seg->max_workers);
    size_t n = 0;
    for (size_t i = 0; i < n_all && n < CP_ADAPTERS_MAX; i++) {
        /* An alias, not a worker's base model: only adapters are unloaded. */
        if (strcmp(all[i].model, name) == 0 || !shm_worker_serves(&all[i], name))
            continue;
        calls[n].w = all[i];
        json_t *b = json_pack("{s:s}", "lora_name", name);
        calls[n].body = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
        n++;
    }
    if (n == 0) {
        adm_reply_error(reply, 404, "no worker has an adapter named '%s'", name);
        goto out_free;
    }
    cp_adapters_run(ctx, calls, n, "/v1/unload_lora_adapter");
    for (size_t i = 0; i < n; i++) {
        /* Gone from the worker (or unknown to it): gone from its names. */
        if (cp_call_ok(&calls[i]) || (calls[i].result == CURLE_OK && calls[i].status == 404)) {
            cp_adapters_set_alias(ctx, &calls[i].w, name, false);
            log_info("admin API: unloaded LoRA adapter '%s' from worker %s", name, calls[i].w.id);
        }
    }
    size_t ok = 0;
    json_t *out = cp_adapters_result(calls, n, name, "unloaded", &ok);
    adm_reply_json(reply, ok > 0 ? 200 : 502, out);

out_free:
    free(all);
    free(calls);
}

void cp_adapters_serve(struct adm_ctx *ctx, const char *method, const char *name, const char *body,
                       size_t len, struct adm_reply *reply)
{
    if (name == NULL) {
        if (strcmp(method, "POST") != 0) {
            adm_reply_error(reply, 405, "method not allowed");
            reply->allow = "POST";
            return;
        }
        cp_adapters_load(ctx, body, len, reply);
        return;
    }
    if (strcmp(method, "DELETE") != 0) {
        adm_reply_error(reply, 405, "method not allowed");
        reply->allow = "DELETE";
        return;
    }
    cp_adapters_unload(ctx, name, reply);
}
