/*
 * Control-plane reload (see reload.h). The file is loaded and compared with
 * the running config key by key (cfg_diff), and each changed key judged by
 * the effect its schema row gives it (cfg_key_effect), before anything is
 * touched, so a refused reload leaves no trace; then the static workers are
 * re-synced (their sync checks for clashes before changing anything), and
 * only then the health settings switch, so a reload that fails in the sync
 * changes nothing at all.
 */
#include "controlplane/admin/reload.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "controlplane/sources/registry_sync.h"
#include "controlplane/sources/source_static.h"

#define CP_RELOAD_KEYS_MAX 128

/* Appends the changed keys of one effect to buf as "a, b, c"; returns how many. */
static size_t cp_keys_of(char (*keys)[CFG_KEY_NAME_MAX], size_t n, enum cfg_reload_effect effect,
                         char *buf, size_t len)
{
    size_t count = 0, used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (cfg_key_effect(keys[i]) != effect)
            continue;
        int w = snprintf(buf + used, used < len ? len - used : 0, "%s%s", count > 0 ? ", " : "",
                         keys[i]);
        if (w > 0 && used + (size_t)w < len)
            used += (size_t)w;
        count++;
    }
    return count;
}

static const struct cfg_worker *cp_find_worker(const struct cfg *cfg, const char *id)
{
    for (size_t i = 0; i < cfg->n_workers; i++)
        if (strcmp(cfg->workers[i].id, id) == 0)
            return &cfg->workers[i];
    return NULL;
}

static bool cp_kv_events_differ(const struct cfg_kv_events *a, const struct cfg_kv_events *b)
{
    return strcmp(a->endpoint, b->endpoint) != 0 ||
           strcmp(a->replay_endpoint, b->replay_endpoint) != 0 ||
           a->data_parallel_size != b->data_parallel_size;
}

/* "workers: 1 added, 0 removed, 1 changed, 2 unchanged" between two configs. */
static void cp_workers_summary(const struct cfg *cur, const struct cfg *next, char *buf, size_t len)
{
    size_t added = 0, removed = 0, changed = 0, same = 0;
    for (size_t i = 0; i < next->n_workers; i++) {
        const struct cfg_worker *n = &next->workers[i];
        const struct cfg_worker *c = cp_find_worker(cur, n->id);
        if (c == NULL)
            added++;
        else if (strcmp(c->url, n->url) != 0 || strcmp(c->model, n->model) != 0 ||
                 c->role != n->role || cp_kv_events_differ(&c->kv_events, &n->kv_events))
            changed++;
        else
            same++;
    }
    for (size_t i = 0; i < cur->n_workers; i++)
        if (cp_find_worker(next, cur->workers[i].id) == NULL)
            removed++;
    snprintf(buf, len, "workers: %zu added, %zu removed, %zu changed, %zu unchanged", added,
             removed, changed, same);
}

int cp_reload(const struct cfg *cur, const struct cfg *dp_base, struct cp_registry *reg,
              struct hc_prober *hc, struct cfg **next, bool *discovery_changed, char *msg,
              size_t msg_len)
{
    *next = NULL;
    *discovery_changed = false;
    struct cfg *n = calloc(1, sizeof(*n));
    char(*keys)[CFG_KEY_NAME_MAX] = calloc(CP_RELOAD_KEYS_MAX, sizeof(*keys));
    char err[1024];
    int rc = 0;
    if (n == NULL || keys == NULL) {
        snprintf(msg, msg_len, "reload of %s failed: out of memory", cur->path);
        rc = -ENOMEM;
        goto out_free;
    }
    rc = cfg_load_file(n, cur->path, err, sizeof(err));
    if (rc != 0) {
        snprintf(msg, msg_len, "reload refused, the running config stays: %s", err);
        rc = -EINVAL;
        goto out_free;
    }
    size_t n_keys = cfg_diff(cur, n, keys, CP_RELOAD_KEYS_MAX);
    if (n_keys > CP_RELOAD_KEYS_MAX)
        n_keys = CP_RELOAD_KEYS_MAX;
    char restart[1024], later[1024], workers[128] = "workers: unchanged";
    if (cp_keys_of(keys, n_keys, CFG_EFFECT_RESTART, restart, sizeof(restart)) > 0) {
        snprintf(msg, msg_len,
                 "reload refused, the running config stays: changing %s needs a restart of the "
                 "control plane",
                 restart);
        rc = -EPERM;
        goto out_fini;
    }
    /* Pending for the data planes: what differs from the config they run,
     * not only what this reload changed (an earlier reload's change still
     * waits for the same hot restart). */
    if (dp_base != cur) {
        n_keys = cfg_diff(dp_base, n, keys, CP_RELOAD_KEYS_MAX);
        if (n_keys > CP_RELOAD_KEYS_MAX)
            n_keys = CP_RELOAD_KEYS_MAX;
    }
    cp_keys_of(keys, n_keys, CFG_EFFECT_DATAPLANE_RESTART, later, sizeof(later));
    if (dp_base != cur) { /* the health and discovery flags below are about this reload */
        n_keys = cfg_diff(cur, n, keys, CP_RELOAD_KEYS_MAX);
        if (n_keys > CP_RELOAD_KEYS_MAX)
            n_keys = CP_RELOAD_KEYS_MAX;
    }

    /* New configured workers start as the new health.initial says. */
    cp_registry_set_start_healthy(reg, strcmp(n->controlplane.health.initial, "healthy") == 0);
    rc = cp_source_static_sync(reg, n, err, sizeof(err));
    if (rc != 0 && rc != -ENOSPC) {
        cp_registry_set_start_healthy(reg,
                                      strcmp(cur->controlplane.health.initial, "healthy") == 0);
        snprintf(msg, msg_len, "reload refused, the running config stays: %s", err);
        goto out_fini;
    }
    if (rc == -ENOSPC) {
        /* Half-applied, as a sync at start would be: the rest is the new config. */
        log_error("reload: %s", err);
        rc = 0;
    }
    hc_set_health(hc, &n->controlplane.health);
    cp_workers_summary(cur, n, workers, sizeof(workers));
    bool health_changed = false;
    for (size_t i = 0; i < n_keys; i++) {
        health_changed = health_changed || strncmp(keys[i], "controlplane.health.", 20) == 0;
        *discovery_changed = *discovery_changed || strncmp(keys[i], "discovery.", 10) == 0;
    }
    snprintf(msg, msg_len, "reloaded %s: %s; health settings %s%s%s%s%s", cur->path, workers,
             health_changed ? "applied" : "unchanged",
             *discovery_changed ? "; discovery settings applied" : "", later[0] != '\0' ? "; " : "",
             later,
             later[0] != '\0' ? " changed: the data planes apply them at their next hot restart"
                              : "");
    *next = n;
    n = NULL;
    goto out_free;

out_fini:
    cfg_fini(n);
out_free:
    free(n);
    free(keys);
    return rc;
}
