/*
 * What both daemons' main() do once their own flags are parsed: print the
 * version line, and load the config around the daemon's run function with
 * logging and libcurl set up, so the two mains stay the same in how they
 * start, fail on a bad config (exit 2) and clean up.
 */
#ifndef SY_COMMON_DAEMON_H
#define SY_COMMON_DAEMON_H

#include "common/config.h"

/* "switchyard-NAME VERSION (shm layout version N)" on stdout. The caller
 * passes N (SHM_LAYOUT_VERSION): common/ does not depend on shm/. */
void daemon_print_version(const char *name, unsigned layout_version);

/*
 * log_init(name), libcurl's global init, the config from config_path (its
 * error on stderr and exit code 2 when it does not load), then run(cfg,
 * arg); returns run's exit code after cleaning up.
 */
int daemon_main(const char *name, const char *config_path, int (*run)(struct cfg *cfg, void *arg),
                void *arg);

#endif
