/*
 * cfgcheck FILE...: loads each switchyard config with the daemons' own
 * loader (common/config*.c) and prints its error, so deploy/check-deploy.sh
 * checks the example and Kubernetes configs exactly as the daemons will read
 * them. Built by the check script against $(BUILD)/libswitchyard.a; not part
 * of the daemons. Exit status 1 when any file is refused.
 */
#include <stdio.h>

#include "common/config.h"

int main(int argc, char **argv)
{
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct cfg cfg;
        char err[512];
        if (cfg_load_file(&cfg, argv[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "cfgcheck: %s\n", err);
            failed = 1;
            continue;
        }
        cfg_fini(&cfg);
    }
    return failed;
}
