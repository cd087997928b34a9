/*
 * switchyard-ctl's command line: options, the man-page style --help, and
 * where the admin API is. The admin URL and the token come from --admin and
 * --token-file when given, else from the config file the daemons read
 * (--config; controlplane.admin_listen and controlplane.admin_token_file),
 * else from the config's defaults (http://127.0.0.1:8081, no token). An
 * admin_listen on a wildcard address (0.0.0.0, ::) is reached on loopback.
 *
 * Ownership: struct ctl_args is caller storage; ctl_args_fini frees the
 * token (wiped first). Borrowed strings point into argv.
 */
#ifndef SY_CTL_CTL_ARGS_H
#define SY_CTL_CTL_ARGS_H

#include <stdbool.h>

#include "common/config.h"
#include "ctl/ctl_cmd.h"

struct ctl_args {
    const char *admin;      /* --admin, or NULL */
    const char *token_file; /* --token-file, or NULL */
    const char *config;     /* --config, or NULL */
    long timeout_ms;        /* --timeout */
    struct ctl_cmd_opts cmd;
    int argc; /* the command and its positional arguments */
    char **argv;
    /* Resolved by ctl_args_resolve: */
    char base[CFG_ADDR_MAX + 16]; /* http://HOST:PORT */
    char *token;                  /* owned; NULL = none */
};

/*
 * Parses argv. Returns -1 to go on, or an exit code to exit with now
 * (0 after --help or --version, CTL_EXIT_USAGE after a bad option, with a
 * message already printed).
 */
int ctl_args_parse(struct ctl_args *a, int argc, char **argv);

/* Fills base and token (see the file comment). Returns 0 or an exit code
 * (CTL_EXIT_USAGE: the config or the token file cannot be read). */
int ctl_args_resolve(struct ctl_args *a);

void ctl_args_fini(struct ctl_args *a);

#endif
