/*
 * switchyard-mockworker: a stand-in for a vLLM OpenAI-compatible server with
 * a simulated prefix cache, used by the end-to-end tests and benchmarks (see
 * docs/mockworker.md). main() only parses flags, blocks the stop signals
 * before any thread exists (so sigwait in the server sees them), and runs
 * the server. Exit status: 0 after SIGTERM/SIGINT, 2 for bad flags, 1 when
 * the server cannot start.
 */
#include "common/log.h"
#include "common/version.h"
#include "tests/mockworker/fleet.h"
#include "tests/mockworker/options.h"
#include "tests/mockworker/server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    const char *prog = "switchyard-mockworker";
    struct mw_options opts;
    mw_options_defaults(&opts);
    char err[512] = "";
    switch (mw_options_parse(&opts, argc, argv, err, sizeof(err))) {
    case MW_OPTIONS_HELP:
        mw_options_usage(stdout, prog);
        return 0;
    case MW_OPTIONS_VERSION:
        printf("%s %s\n", prog, SY_VERSION);
        return 0;
    case MW_OPTIONS_RUN:
        break;
    default:
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }

    log_init("mockworker");
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    if (opts.workers > 0) {
        if (mw_fleet_run(&opts, err, sizeof(err)) != 0) {
            log_error("%s", err);
            return 1;
        }
        log_info("stopped");
        return 0;
    }
    struct mw_server server;
    if (mw_server_init(&server, &opts, err, sizeof(err)) != 0) {
        log_error("%s", err);
        return 1;
    }
    int rc = mw_server_run(&server);
    mw_server_fini(&server);
    if (rc != 0) {
        log_error("server failed: %d", rc);
        return 1;
    }
    log_info("stopped");
    return 0;
}
