/*
 * The shared tail of both daemons' main() (see daemon.h).
 */
#include "common/daemon.h"

#include <stdio.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/version.h"

void daemon_print_version(const char *name, unsigned layout_version)
{
    printf("switchyard-%s %s (shm layout version %u)\n", name, SY_VERSION, layout_version);
}

int daemon_main(const char *name, const char *config_path, int (*run)(struct cfg *cfg, void *arg),
                void *arg)
{
    log_init(name);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct cfg cfg;
    cfg_init_defaults(&cfg);
    char err[1024];
    int code = 2;
    if (cfg_load_file(&cfg, config_path, err, sizeof(err)) != 0)
        fprintf(stderr, "switchyard-%s: %s\n", name, err);
    else
        code = run(&cfg, arg);
    cfg_fini(&cfg);
    curl_global_cleanup();
    return code;
}
