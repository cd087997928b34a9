/*
 * Fleet mode (see fleet.h): worker i's options are the process's with the
 * port, the KV-event endpoints and the engine id shifted by i; each worker
 * is started with mw_server_start, and all stop on the first SIGTERM or
 * SIGINT.
 */
#include "tests/mockworker/fleet.h"

#include "common/log.h"
#include "tests/mockworker/server.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tcp://HOST:PORT with PORT + i, into out; -EINVAL when not of that shape. */
static int shift_endpoint(const char *ep, uint32_t i, char *out, size_t len)
{
    const char *colon = strrchr(ep, ':');
    if (strncmp(ep, "tcp://", 6) != 0 || colon == NULL)
        return -EINVAL;
    char *end = NULL;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || port == 0 || port + i > 65535)
        return -EINVAL;
    int n = snprintf(out, len, "%.*s:%lu", (int)(colon - ep), ep, port + i);
    return n > 0 && (size_t)n < len ? 0 : -EINVAL;
}

static int worker_options(const struct mw_options *base, uint32_t i, struct mw_options *o,
                          char *err, size_t err_len)
{
    *o = *base;
    o->workers = 0;
    o->port = (uint16_t)(base->port + i);
    if (base->engine_id[0] != '\0')
        snprintf(o->engine_id, sizeof(o->engine_id), "%.40s-%" PRIu32, base->engine_id, i);
    if (base->kv_events_endpoint[0] != '\0' &&
        shift_endpoint(base->kv_events_endpoint, i, o->kv_events_endpoint,
                       sizeof(o->kv_events_endpoint)) != 0) {
        snprintf(err, err_len,
                 "--kv-events-endpoint %s: with --workers, tcp://HOST:PORT and "
                 "PORT + N - 1 <= 65535",
                 base->kv_events_endpoint);
        return -EINVAL;
    }
    if (base->kv_events_replay_endpoint[0] != '\0' &&
        shift_endpoint(base->kv_events_replay_endpoint, i, o->kv_events_replay_endpoint,
                       sizeof(o->kv_events_replay_endpoint)) != 0) {
        snprintf(err, err_len,
                 "--kv-events-replay-endpoint %s: with --workers, tcp://HOST:PORT "
                 "and PORT + N - 1 <= 65535",
                 base->kv_events_replay_endpoint);
        return -EINVAL;
    }
    return 0;
}

int mw_fleet_run(const struct mw_options *opts, char *err, size_t err_len)
{
    uint32_t n = opts->workers;
    struct mw_server *servers = calloc(n, sizeof(*servers));
    if (servers == NULL) {
        snprintf(err, err_len, "fleet: out of memory for %" PRIu32 " workers", n);
        return -ENOMEM;
    }
    uint32_t inited = 0, started = 0;
    int rc = 0;
    for (; inited < n; inited++) {
        struct mw_options o;
        rc = worker_options(opts, inited, &o, err, err_len);
        if (rc != 0)
            break;
        char werr[384] = "";
        rc = mw_server_init(&servers[inited], &o, werr, sizeof(werr));
        if (rc != 0) {
            snprintf(err, err_len, "fleet worker %" PRIu32 " (port %u): %s", inited,
                     (unsigned)o.port, werr);
            break;
        }
    }
    for (; rc == 0 && started < n; started++) {
        rc = mw_server_start(&servers[started]);
        if (rc != 0) {
            snprintf(err, err_len, "fleet worker %" PRIu32 ": loops: %s", started, strerror(-rc));
            started++; /* its half-started loops are stopped below */
            break;
        }
    }
    if (rc == 0) {
        log_info("fleet: %" PRIu32 " workers on %s:%u..%u", n, opts->host, (unsigned)opts->port,
                 (unsigned)(opts->port + n - 1));
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        int sig = 0;
        while (sigwait(&set, &sig) != 0)
            ;
        log_info("signal %d: stopping %" PRIu32 " workers", sig, n);
    }
    for (uint32_t i = 0; i < started; i++)
        mw_server_stop(&servers[i]);
    for (uint32_t i = 0; i < inited; i++)
        mw_server_fini(&servers[i]);
    free(servers);
    return rc;
}
