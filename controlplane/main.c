/*
 * switchyard-controlplane: command line, then cp_run. See controlplane.h.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/daemon.h"
#include "controlplane/controlplane.h"
#include "shm/layout.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: switchyard-controlplane --config FILE\n"
                 "\n"
                 "Owns the shared-memory registry of a switchyard router: discovers and\n"
                 "probes workers, reaps dead dataplanes' leases, serves the admin API.\n"
                 "\n"
                 "  -c, --config FILE   YAML configuration (see docs/configuration.md)\n"
                 "  -h, --help          this text\n"
                 "  -V, --version       versions of the binary and the segment layout\n");
}

static int run(struct cfg *cfg, void *arg)
{
    (void)arg;
    return cp_run(cfg);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config_path = optarg;
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
    return daemon_main("controlplane", config_path, run, NULL);
}
