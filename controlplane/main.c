/*
 * switchyard-controlplane: command line, then cp_run. See controlplane.h.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/tls_client.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "controlplane/controlplane.h"
#include "shm/kv_holders.h"
#include "shm/layout.h"
#include "shm/prefix_index.h"
#include "shm/responses.h"
#include "shm/segment.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: switchyard-controlplane --config FILE [--fresh]\n"
                 "\n"
                 "Owns the shared-memory registry of a switchyard router: discovers and\n"
                 "probes workers, reaps dead dataplanes' leases, serves the admin API.\n"
                 "\n"
                 "  -c, --config FILE   YAML configuration (see docs/configuration.md)\n"
                 "      --fresh         start from the config alone: remove the segment a\n"
                 "                      previous run left (its admin-API workers, drains and\n"
                 "                      load counters), its prefix index and Responses\n"
                 "                      table; refused while a control plane or a data\n"
                 "                      plane still uses them\n"
                 "  -h, --help          this text\n"
                 "  -V, --version       versions of the binary and the segment layout\n");
}

static int run(struct cfg *cfg, void *arg)
{
    const bool *fresh = arg;
    char tls_err[512];
    /* An unreadable CA or client certificate fails the start, not every
     * https:// request later (common/tls_client.h). */
    if (tls_client_check(&cfg->dataplane.upstream_tls, tls_err, sizeof(tls_err)) != 0) {
        log_error("%s: %s", cfg->path, tls_err);
        return 1;
    }
    if (*fresh) {
        char err[512];
        int rc = shm_segment_remove_unused(cfg->shm.name, err, sizeof(err));
        if (rc != 0) {
            log_error("--fresh: %s", err);
            return 1;
        }
        /* Only once the registry is gone: then no data plane uses the
         * index either (each holds a lease lock on the registry). */
        char prefix[CFG_PATH_MAX + sizeof(PIX_NAME_SUFFIX)];
        if (pix_segment_name(cfg->shm.name, prefix, sizeof(prefix)) == 0) {
            rc = shm_segment_remove_unused(prefix, err, sizeof(err));
            if (rc != 0) {
                log_error("--fresh: %s", err);
                return 1;
            }
        }
        /* The KV holder index likewise: its facts name the registry's slots. */
        char kvholders[CFG_PATH_MAX + sizeof(KVH_NAME_SUFFIX)];
        if (kvh_segment_name(cfg->shm.name, kvholders, sizeof(kvholders)) == 0) {
            rc = shm_segment_remove_unused(kvholders, err, sizeof(err));
            if (rc != 0) {
                log_error("--fresh: %s", err);
                return 1;
            }
        }
        /* The Responses stickiness table too: its ids name workers of the
         * registry just removed, and its size is fixed when it is made. */
        char responses[CFG_PATH_MAX + 16];
        if (shm_resp_name(cfg->shm.name, responses, sizeof(responses)) == 0) {
            rc = shm_segment_remove_unused(responses, err, sizeof(err));
            if (rc != 0) {
                log_error("--fresh: %s", err);
                return 1;
            }
        }
        log_info("--fresh: starting from %s alone (segment %s, its prefix index, KV holder "
                 "index and response table removed if they existed)",
                 cfg->path, cfg->shm.name);
    }
    return cp_run(cfg);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"fresh", no_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL;
    bool fresh = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config_path = optarg;
            break;
        case 'F':
            fresh = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            daemon_print_version("controlplane", SHM_LAYOUT_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (config_path == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    return daemon_main("controlplane", config_path, run, &fresh);
}
