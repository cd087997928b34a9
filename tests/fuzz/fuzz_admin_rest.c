/*
 * Fuzz target: the admin REST API's routing and request bodies, served by
 * the real route code over a real (private, unlinked) registry segment.
 * Input: one byte picks the method, then the URL up to the first newline,
 * then the body. reset_load is left out: it goes asynchronous through the
 * admin channel, which this target has no data plane for. /adapters is
 * left out too: it calls the registry's workers, whose urls here are the
 * input's (any host); the cors_and_admin target serves it over a registry
 * whose workers are never called. POST /reload runs a stub that answers
 * success or a refusal, as the control plane's does.
 *
 * Oracle beyond the sanitizers: every request gets a status in 200..599
 * and a body; the registry stays within its capacity (the segment's own
 * checks).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "controlplane/admin/admin_ctx.h"
#include "controlplane/admin/admin_reply.h"
#include "controlplane/admin/admin_routes.h"
#include "controlplane/admin/reset_load.h"
#include "controlplane/sources/registry_sync.h"
#include "shm/registry.h"
#include "shm/segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct cfg fuzz_cfg;
static struct shm_segment fuzz_seg;
static struct cp_registry fuzz_reg; /* the registry's writer over fuzz_seg */
static struct adm_ctx fuzz_ctx;
static struct cp_reset *fuzz_reset;

/* The control plane's reload, without a config file to read. */
static int fuzz_reload(void *arg, char *msg, size_t msg_len)
{
    unsigned *calls = arg;
    if (++*calls % 2 == 0) {
        snprintf(msg, msg_len, "config.yaml:1:1: stub refusal");
        return -EINVAL;
    }
    snprintf(msg, msg_len, "reloaded");
    return 0;
}
static unsigned fuzz_reload_calls;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    cfg_init_defaults(&fuzz_cfg);
    char name[64], err[256];
    snprintf(name, sizeof(name), "/switchyard-fuzz-admin-%d", (int)getpid());
    enum shm_open_outcome outcome;
    if (shm_segment_open_owner(&fuzz_seg, name, 16, 4, &outcome, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_admin_rest: %s\n", err);
        abort();
    }
    shm_segment_unlink(name); /* the mapping stays; nothing is left behind */
    cp_registry_init(&fuzz_reg, &fuzz_seg);
    fuzz_ctx.cfg = &fuzz_cfg;
    fuzz_ctx.seg = &fuzz_seg;
    fuzz_ctx.reg = &fuzz_reg;
    if (cp_reset_create(&fuzz_ctx, &fuzz_reset) != 0)
        abort();
    fuzz_ctx.reset = fuzz_reset;
    fuzz_ctx.reload = fuzz_reload;
    fuzz_ctx.reload_arg = &fuzz_reload_calls;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"};
    if (size < 2)
        return 0;
    const char *method = methods[data[0] % (sizeof(methods) / sizeof(methods[0]))];
    const char *rest = (const char *)data + 1;
    size_t rest_len = size - 1;
    const char *nl = memchr(rest, '\n', rest_len);
    size_t url_len = nl != NULL ? (size_t)(nl - rest) : rest_len;
    char *url = strndup(rest, url_len); /* stops at a NUL, as the HTTP server's URL does */
    if (url == NULL)
        return 0;
    const char *body = nl != NULL ? nl + 1 : "";
    size_t body_len = nl != NULL ? rest_len - url_len - 1 : 0;
    bool adapters = strcmp(url, "/adapters") == 0 || strncmp(url, "/adapters/", 10) == 0;
    if (strstr(url, "reset_load") == NULL && !adapters) {
        struct adm_reply reply;
        memset(&reply, 0, sizeof(reply));
        if (adm_route_serve(&fuzz_ctx, method, url, body, body_len, NULL, &reply) != 1)
            abort(); /* only reset_load may go asynchronous */
        if (reply.status < 200 || reply.status > 599 || (reply.json == NULL && reply.text == NULL))
            abort();
        adm_reply_fini(&reply);
    }
    free(url);
    return 0;
}
