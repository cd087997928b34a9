/*
 * The shared tail of both daemons' main() (see daemon.h).
 */
#include "common/daemon.h"

#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/version.h"

void daemon_print_version(const char *name, unsigned layout_version)
{
    printf("switchyard-%s %s (shm layout version %u)\n", name, SY_VERSION, layout_version);
}

int daemon_main(const char *name, const char *config_path, int (*run)(struct cfg *cfg, void *arg),
                void *arg)
{
    log_init(name);
    /* A low inherited soft limit would make the daemon fail accepts, probes
     * and /proc reads under load: take what the hard limit allows. */
    uint64_t fd_before = 0, fd_after = 0;
    int frc = proc_raise_fd_limit(&fd_before, &fd_after);
    if (frc != 0)
        log_warn("cannot raise the descriptor limit (soft %llu): %s", (unsigned long long)fd_before,
                 strerror(-frc));
    else
        log_info("descriptor limit %llu (soft limit was %llu)", (unsigned long long)fd_after,
                 (unsigned long long)fd_before);
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
