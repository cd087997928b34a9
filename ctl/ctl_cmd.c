/*
 * The commands of switchyard-ctl (see ctl_cmd.h). One table row per
 * command: its name, how many positional arguments it takes, and the
 * function that builds the request and prints the answer. The HTTP status
 * decides the exit code in one place (ctl_exit_for), so every command
 * fails the same way for the same reason.
 */
#include "ctl/ctl_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

typedef int (*ctl_cmd_fn)(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args);

struct ctl_cmd {
    const char *name;
    int n_args; /* positional arguments after the name */
    ctl_cmd_fn fn;
};

static int ctl_exit_for(long status)
{
    if (status >= 200 && status < 300)
        return CTL_EXIT_OK;
    if (status == 401)
        return CTL_EXIT_AUTH;
    if (status == 404)
        return CTL_EXIT_NOT_FOUND;
    if (status >= 400 && status < 500)
        return CTL_EXIT_REFUSED;
    return CTL_EXIT_SERVER;
}

/* The server's {"error": ...} text, or a generic one. */
static void ctl_print_error(const struct ctl_answer *a)
{
    const char *msg = json_string_value(json_object_get(a->json, "error"));
    if (msg != NULL)
        fprintf(stderr, "switchyard-ctl: %s (HTTP %ld)\n", msg, a->status);
    else
        fprintf(stderr, "switchyard-ctl: the admin API answered HTTP %ld\n", a->status);
    if (a->status == 401)
        fprintf(stderr, "switchyard-ctl: check --token-file (or controlplane.admin_token_file "
                        "in the config)\n");
}

static void ctl_print_json(const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    if (s != NULL)
        printf("%s\n", s);
    free(s);
}

/*
 * Sends one request. Returns the exit code; on success *out holds the
 * answer (JSON checked) for the caller to print and free. On failure the
 * message is printed (and the JSON body too with --json) and *out freed.
 */
static int ctl_call(const struct ctl_conn *c, const struct ctl_cmd_opts *o, const char *method,
                    const char *path, const char *body, struct ctl_answer *out)
{
    int rc = ctl_http_request(c, method, path, body, out);
    if (rc != 0) {
        fprintf(stderr, "switchyard-ctl: %s\n", out->err);
        ctl_answer_fini(out);
        return rc == -EHOSTUNREACH ? CTL_EXIT_UNREACHABLE : CTL_EXIT_SERVER;
    }
    int code = ctl_exit_for(out->status);
    if (code == CTL_EXIT_OK && out->json == NULL) {
        fprintf(stderr,
                "switchyard-ctl: the admin API answered HTTP %ld with a body that is not "
                "JSON: is %s a switchyard control plane?\n",
                out->status, c->base);
        code = CTL_EXIT_SERVER;
    }
    if (code != CTL_EXIT_OK) {
        if (o->json && out->json != NULL)
            ctl_print_json(out->json);
        ctl_print_error(out);
        ctl_answer_fini(out);
    }
    return code;
}

/* Ids go into the path: refuse anything the registry would not hold. */
static bool ctl_id_ok(const char *id)
{
    if (cfg_worker_id_is_valid(id))
        return true;
    fprintf(stderr,
            "switchyard-ctl: invalid worker id '%s': 1..63 characters of "
            "[A-Za-z0-9._:-]\n",
            id);
    return false;
}

static const char *ctl_str(const json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : dflt;
}

/* Where a worker came from: the "source" field when the server sends one,
 * else the older from_api flag. */
static const char *ctl_source(const json_t *w)
{
    const char *s = json_string_value(json_object_get(w, "source"));
    if (s != NULL)
        return s;
    return json_is_true(json_object_get(w, "from_api")) ? "api" : "static";
}

/* "healthy", "unhealthy" or "unknown" (not probed yet). */
static const char *ctl_health(const json_t *w)
{
    const char *s = json_string_value(json_object_get(w, "health"));
    if (s != NULL)
        return s;
    return json_is_true(json_object_get(w, "healthy")) ? "healthy" : "unhealthy";
}

static int ctl_workers(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    (void)args;
    struct ctl_answer a;
    int code = ctl_call(c, o, "GET", "/workers", NULL, &a);
    if (code != CTL_EXIT_OK)
        return code;
    json_t *ws = json_object_get(a.json, "workers");
    if (!json_is_array(ws)) {
        fprintf(stderr, "switchyard-ctl: GET /workers answered without a workers list\n");
        ctl_answer_fini(&a);
        return CTL_EXIT_SERVER;
    }
    if (o->json) {
        ctl_print_json(a.json);
        ctl_answer_fini(&a);
        return CTL_EXIT_OK;
    }
    /* Column widths from the data, so long ids and urls stay aligned. */
    int wid = 2, wurl = 3, wmodel = 5;
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w)
    {
        int n = (int)strlen(ctl_str(w, "id", ""));
        wid = n > wid ? n : wid;
        n = (int)strlen(ctl_str(w, "url", ""));
        wurl = n > wurl ? n : wurl;
        n = (int)strlen(ctl_str(w, "model", "-"));
        wmodel = n > wmodel ? n : wmodel;
    }
    printf("%-*s  %-*s  %-*s  %-7s  %-9s  %-8s  %5s  %s\n", wid, "ID", wurl, "URL", wmodel, "MODEL",
           "ROLE", "HEALTH", "DRAINING", "LOAD", "SOURCE");
    json_array_foreach(ws, i, w)
    {
        const char *model = ctl_str(w, "model", "");
        printf("%-*s  %-*s  %-*s  %-7s  %-9s  %-8s  %5lld  %s\n", wid, ctl_str(w, "id", "?"), wurl,
               ctl_str(w, "url", "?"), wmodel, model[0] != '\0' ? model : "-",
               ctl_str(w, "role", "?"), ctl_health(w),
               json_is_true(json_object_get(w, "draining")) ? "yes" : "no",
               (long long)json_integer_value(json_object_get(w, "load")), ctl_source(w));
    }
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_set_drain(const struct ctl_conn *c, const struct ctl_cmd_opts *o, const char *id,
                         bool draining)
{
    if (!ctl_id_ok(id))
        return CTL_EXIT_USAGE;
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s/drain", id);
    struct ctl_answer a;
    int code =
        ctl_call(c, o, "POST", path, draining ? "{\"draining\":true}" : "{\"draining\":false}", &a);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json)
        ctl_print_json(a.json);
    else
        printf("%s: %s\n", id, draining ? "draining" : "not draining");
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_drain(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    return ctl_set_drain(c, o, args[0], true);
}

static int ctl_undrain(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    return ctl_set_drain(c, o, args[0], false);
}

static int ctl_add(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    json_t *req = json_pack("{s:s}", "url", args[0]);
    if (o->id != NULL)
        json_object_set_new(req, "id", json_string(o->id));
    if (o->model != NULL)
        json_object_set_new(req, "model", json_string(o->model));
    if (o->role != NULL)
        json_object_set_new(req, "role", json_string(o->role));
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (body == NULL) {
        fprintf(stderr, "switchyard-ctl: out of memory\n");
        return CTL_EXIT_SERVER;
    }
    struct ctl_answer a;
    int code = ctl_call(c, o, "POST", "/workers", body, &a);
    free(body);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json)
        ctl_print_json(a.json);
    else
        printf("%s: added (%s, slot %lld, generation %lld)\n", ctl_str(a.json, "id", "?"),
               ctl_str(a.json, "url", "?"),
               (long long)json_integer_value(json_object_get(a.json, "slot")),
               (long long)json_integer_value(json_object_get(a.json, "generation")));
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_remove(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    if (!ctl_id_ok(args[0]))
        return CTL_EXIT_USAGE;
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s", args[0]);
    struct ctl_answer a;
    int code = ctl_call(c, o, "DELETE", path, NULL, &a);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json)
        ctl_print_json(a.json);
    else
        printf("%s: removed\n", args[0]);
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_reset_load(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    if (!ctl_id_ok(args[0]))
        return CTL_EXIT_USAGE;
    char path[128];
    snprintf(path, sizeof(path), "/workers/%s/reset_load", args[0]);
    struct ctl_answer a;
    int code = ctl_call(c, o, "POST", path, NULL, &a);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json)
        ctl_print_json(a.json);
    else
        printf("%s: load reset (%lld discarded)\n", args[0],
               (long long)json_integer_value(json_object_get(a.json, "discarded")));
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_status(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    (void)args;
    struct ctl_answer a;
    int code = ctl_call(c, o, "GET", "/status", NULL, &a);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json) {
        ctl_print_json(a.json);
        ctl_answer_fini(&a);
        return CTL_EXIT_OK;
    }
    const json_t *seg = json_object_get(a.json, "segment");
    json_t *dps = json_object_get(a.json, "dataplanes");
    printf("control plane  pid %lld, epoch %lld, up %.1f s\n",
           (long long)json_integer_value(json_object_get(a.json, "pid")),
           (long long)json_integer_value(json_object_get(a.json, "epoch")),
           (double)json_integer_value(json_object_get(a.json, "uptime_ms")) / 1000.0);
    printf("segment        %s (layout %lld, %lld bytes, max %lld workers, %lld dataplanes, "
           "%lld leases reaped)\n",
           ctl_str(seg, "name", "?"),
           (long long)json_integer_value(json_object_get(seg, "layout_version")),
           (long long)json_integer_value(json_object_get(seg, "size")),
           (long long)json_integer_value(json_object_get(seg, "max_workers")),
           (long long)json_integer_value(json_object_get(seg, "max_dataplanes")),
           (long long)json_integer_value(json_object_get(seg, "leases_reaped")));
    printf("dataplanes     %zu\n", json_array_size(dps));
    size_t i;
    json_t *d;
    json_array_foreach(dps, i, d)
    {
        printf("  pid %-8lld lease %-3lld up %.1f s, admin channel %s\n",
               (long long)json_integer_value(json_object_get(d, "pid")),
               (long long)json_integer_value(json_object_get(d, "lease")),
               (double)json_integer_value(json_object_get(d, "uptime_ms")) / 1000.0,
               json_is_true(json_object_get(d, "admin_channel")) ? "connected" : "not connected");
    }
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static int ctl_reload(const struct ctl_conn *c, const struct ctl_cmd_opts *o, char **args)
{
    (void)args;
    struct ctl_answer a;
    int code = ctl_call(c, o, "POST", "/reload", NULL, &a);
    if (code != CTL_EXIT_OK)
        return code;
    if (o->json)
        ctl_print_json(a.json);
    else
        printf("%s\n", ctl_str(a.json, "message", "reloaded"));
    ctl_answer_fini(&a);
    return CTL_EXIT_OK;
}

static const struct ctl_cmd ctl_cmds[] = {
    {"workers", 0, ctl_workers}, {"drain", 1, ctl_drain},   {"undrain", 1, ctl_undrain},
    {"add", 1, ctl_add},         {"remove", 1, ctl_remove}, {"reset-load", 1, ctl_reset_load},
    {"status", 0, ctl_status},   {"reload", 0, ctl_reload},
};

static const struct ctl_cmd *ctl_cmd_find(const char *name)
{
    for (size_t i = 0; i < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); i++)
        if (strcmp(ctl_cmds[i].name, name) == 0)
            return &ctl_cmds[i];
    return NULL;
}

int ctl_cmd_check(const struct ctl_cmd_opts *o, int argc, char **argv)
{
    const struct ctl_cmd *cmd = argc > 0 ? ctl_cmd_find(argv[0]) : NULL;
    if (cmd == NULL) {
        fprintf(stderr, "switchyard-ctl: unknown command '%s' (see --help)\n",
                argc > 0 ? argv[0] : "");
        return CTL_EXIT_USAGE;
    }
    if (argc - 1 != cmd->n_args) {
        fprintf(stderr, "switchyard-ctl: %s takes %s (see --help)\n", cmd->name,
                cmd->n_args == 0     ? "no argument"
                : cmd->fn == ctl_add ? "one argument, the worker's URL"
                                     : "one argument, the worker's id");
        return CTL_EXIT_USAGE;
    }
    bool add_opts = o->model != NULL || o->role != NULL || o->id != NULL;
    if (add_opts && cmd->fn != ctl_add) {
        fprintf(stderr, "switchyard-ctl: --model, --role and --id go with add only\n");
        return CTL_EXIT_USAGE;
    }
    enum cfg_role role;
    if (o->role != NULL && cfg_role_parse(o->role, &role) != 0) {
        fprintf(stderr, "switchyard-ctl: --role must be regular, prefill or decode, not '%s'\n",
                o->role);
        return CTL_EXIT_USAGE;
    }
    if (cmd->fn != ctl_add && cmd->n_args == 1 && !ctl_id_ok(argv[1]))
        return CTL_EXIT_USAGE;
    return CTL_EXIT_OK;
}

int ctl_cmd_run(const struct ctl_conn *c, const struct ctl_cmd_opts *o, int argc, char **argv)
{
    int code = ctl_cmd_check(o, argc, argv);
    return code != CTL_EXIT_OK ? code : ctl_cmd_find(argv[0])->fn(c, o, argv + 1);
}
