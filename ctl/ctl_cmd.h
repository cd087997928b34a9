/*
 * switchyard-ctl's commands (workers, drain, undrain, add, remove,
 * reset-load, status, reload): each turns its arguments into one admin-API
 * request and the answer into output and an exit code. The exit codes are a
 * contract scripts rely on (documented in --help and docs/operations.md):
 * they say what kind of failure happened, never depend on the message text.
 *
 * Output rules: results on stdout (a table or a short line; with --json the
 * server's JSON document, one line, also for refusals that carry details),
 * errors on stderr as "switchyard-ctl: <reason>", where the reason is the
 * server's own error text when it sent one.
 */
#ifndef SY_CTL_CTL_CMD_H
#define SY_CTL_CTL_CMD_H

#include <stdbool.h>

#include "ctl/ctl_http.h"

enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_USAGE = 1,       /* bad arguments, unreadable config or token file */
    CTL_EXIT_NOT_FOUND = 2,   /* no such worker (404) */
    CTL_EXIT_AUTH = 3,        /* token missing or wrong (401) */
    CTL_EXIT_UNREACHABLE = 4, /* no answer: connection refused, timeout */
    CTL_EXIT_SERVER = 5,      /* 5xx or an answer the client cannot read */
    CTL_EXIT_REFUSED = 6,     /* the server understood and said no (400, 409, ...) */
};

/* What the commands take besides their positional arguments. */
struct ctl_cmd_opts {
    bool json;
    const char *model; /* add */
    const char *role;  /* add */
    const char *id;    /* add */
};

/*
 * Checks command argv[0] and its positional arguments argv[1..argc-1]
 * without sending anything: CTL_EXIT_OK, or CTL_EXIT_USAGE with the
 * message printed.
 */
int ctl_cmd_check(const struct ctl_cmd_opts *o, int argc, char **argv);

/* Checks, then runs the command. Returns an enum ctl_exit value; messages
 * are already printed. */
int ctl_cmd_run(const struct ctl_conn *c, const struct ctl_cmd_opts *o, int argc, char **argv);

#endif
