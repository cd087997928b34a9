/*
 * Command line and target resolution of switchyard-ctl (see ctl_args.h).
 * The help text is written like a man page because it is the tool's manual:
 * every command, option and exit code a script may rely on is in it.
 */
#include "ctl/ctl_args.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/version.h"

#define CTL_TOKEN_MAX 4096

static void ctl_usage(FILE *out)
{
    fputs("NAME\n"
          "    switchyard-ctl - command-line client of the switchyard admin API\n"
          "\n"
          "SYNOPSIS\n"
          "    switchyard-ctl [OPTIONS] COMMAND [ARGUMENTS]\n"
          "\n"
          "DESCRIPTION\n"
          "    Talks to a switchyard control plane's admin API (the REST API on\n"
          "    controlplane.admin_listen). The address and the bearer token come from\n"
          "    the same config file the daemons read, or from --admin and --token-file.\n"
          "\n"
          "COMMANDS\n"
          "    workers            list the workers as a table: id, url, model, role,\n"
          "                       health (healthy, unhealthy, or unknown before the\n"
          "                       first probe), draining, load, source\n"
          "    drain ID           stop routing new requests to worker ID\n"
          "    undrain ID         route to worker ID again\n"
          "    add URL [--model M] [--role R] [--id ID]\n"
          "                       add a worker (role regular, prefill or decode; without\n"
          "                       --model it is learned from the worker's /v1/models;\n"
          "                       without --id it is HOST:PORT of the url)\n"
          "    remove ID          remove worker ID (a configured worker comes back at\n"
          "                       the next reload or restart unless removed from the file)\n"
          "    reset-load ID      repair a drifted load counter: refused while any data\n"
          "                       plane still has requests in flight on the worker\n"
          "    status             the control plane, its segment and its data planes\n"
          "    reload             make the control plane re-read its config file (as\n"
          "                       SIGHUP does); refused as a whole, naming the keys, when\n"
          "                       a changed key needs a restart\n"
          "\n"
          "OPTIONS\n"
          "    -c, --config FILE      the daemons' YAML config: admin address and token\n"
          "                           file from controlplane.admin_listen and\n"
          "                           controlplane.admin_token_file\n"
          "    -a, --admin URL        admin API address, http://HOST:PORT or HOST:PORT\n"
          "                           (default: from the config, else 127.0.0.1:8081)\n"
          "    -t, --token-file FILE  file holding the bearer token (default: from the\n"
          "                           config, else none)\n"
          "    -j, --json             print the server's JSON answer (one line) instead\n"
          "                           of text; on a refusal that carries details (e.g.\n"
          "                           reset-load's per-dataplane counts) that body too\n"
          "        --timeout SECONDS  give up on an answer after this long (default 10)\n"
          "    -h, --help             this text\n"
          "    -V, --version          the version\n"
          "\n"
          "OUTPUT\n"
          "    Results go to stdout, errors to stderr as \"switchyard-ctl: REASON\",\n"
          "    where REASON is the server's own message when it sent one.\n"
          "\n"
          "EXIT STATUS\n"
          "    0  success\n"
          "    1  usage: bad command or arguments, unreadable config or token file\n"
          "       (for reload, a config that does not load is a refusal: 6)\n"
          "    2  not found: no worker with that id (HTTP 404)\n"
          "    3  authentication: token missing or wrong (HTTP 401)\n"
          "    4  unreachable: no answer from the admin API (refused, timed out)\n"
          "    5  server error: HTTP 5xx, or an answer that is not the admin API's\n"
          "    6  refused: the request was understood and declined (HTTP 400, 409,\n"
          "       ...: invalid worker, duplicate id or url, reset-load with requests\n"
          "       in flight, reload with a key that needs a restart)\n"
          "\n"
          "EXAMPLES\n"
          "    switchyard-ctl --config /etc/switchyard/switchyard.yaml workers\n"
          "    switchyard-ctl add http://10.0.0.7:8000 --model llama --role decode\n"
          "    switchyard-ctl drain gpu7 && switchyard-ctl --json workers | jq .\n",
          out);
}

int ctl_args_parse(struct ctl_args *a, int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"admin", required_argument, NULL, 'a'},
        {"token-file", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"model", required_argument, NULL, 'm'},
        {"role", required_argument, NULL, 'r'},
        {"id", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->timeout_ms = 10000;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":c:a:t:jhV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            a->config = optarg;
            break;
        case 'a':
            a->admin = optarg;
            break;
        case 't':
            a->token_file = optarg;
            break;
        case 'j':
            a->cmd.json = true;
            break;
        case 'm':
            a->cmd.model = optarg;
            break;
        case 'r':
            a->cmd.role = optarg;
            break;
        case 'i':
            a->cmd.id = optarg;
            break;
        case 'T': {
            char *end = NULL;
            double s = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(s > 0) || s > 3600) {
                fprintf(stderr,
                        "switchyard-ctl: --timeout takes seconds (0 < s <= 3600), not "
                        "'%s'\n",
                        optarg);
                return CTL_EXIT_USAGE;
            }
            a->timeout_ms = (long)(s * 1000.0 + 0.5);
            break;
        }
        case 'h':
            ctl_usage(stdout);
            return CTL_EXIT_OK;
        case 'V':
            printf("switchyard-ctl %s\n", SY_VERSION);
            return CTL_EXIT_OK;
        case ':':
            fprintf(stderr, "switchyard-ctl: option %s needs a value (see --help)\n",
                    argv[optind - 1]);
            return CTL_EXIT_USAGE;
        default:
            fprintf(stderr, "switchyard-ctl: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CTL_EXIT_USAGE;
        }
    }
    a->argc = argc - optind;
    a->argv = argv + optind;
    if (a->argc == 0) {
        fprintf(stderr, "switchyard-ctl: no command given\n");
        ctl_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    return -1;
}

/* "http://" + HOST:PORT, a wildcard host replaced by loopback. */
static int ctl_base_from_listen(struct ctl_args *a, const char *listen)
{
    char host[CFG_ADDR_MAX];
    uint16_t port = 0;
    if (cfg_parse_host_port(listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr, "switchyard-ctl: admin address '%s' is not HOST:PORT\n", listen);
        return CTL_EXIT_USAGE;
    }
    const char *h = host;
    if (strcmp(host, "0.0.0.0") == 0 || host[0] == '\0')
        h = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        h = "::1";
    bool v6 = strchr(h, ':') != NULL;
    snprintf(a->base, sizeof(a->base), "http://%s%s%s:%u", v6 ? "[" : "", h, v6 ? "]" : "",
             (unsigned)port);
    return CTL_EXIT_OK;
}

static int ctl_base_from_flag(struct ctl_args *a)
{
    const char *s = a->admin;
    if (strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0) {
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
            n--;
        if (n >= sizeof(a->base)) {
            fprintf(stderr, "switchyard-ctl: --admin URL too long\n");
            return CTL_EXIT_USAGE;
        }
        memcpy(a->base, s, n);
        a->base[n] = '\0';
        return CTL_EXIT_OK;
    }
    return ctl_base_from_listen(a, s);
}

/* Reads the token as the control plane does: content without trailing whitespace. */
static int ctl_read_token(struct ctl_args *a, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "switchyard-ctl: token file %s: %s\n", path, strerror(errno));
        return CTL_EXIT_USAGE;
    }
    char *buf = calloc(1, CTL_TOKEN_MAX + 1);
    ssize_t n = buf != NULL ? read(fd, buf, CTL_TOKEN_MAX + 1) : -1;
    close(fd);
    if (n < 0 || n > CTL_TOKEN_MAX) {
        fprintf(stderr, "switchyard-ctl: token file %s: unreadable or over %d bytes\n", path,
                CTL_TOKEN_MAX);
        free(buf);
        return CTL_EXIT_USAGE;
    }
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0 || memchr(buf, '\n', (size_t)n) != NULL || memchr(buf, '\r', (size_t)n) != NULL) {
        fprintf(stderr, "switchyard-ctl: token file %s is empty or holds more than one line\n",
                path);
        free(buf);
        return CTL_EXIT_USAGE;
    }
    a->token = buf;
    return CTL_EXIT_OK;
}

int ctl_args_resolve(struct ctl_args *a)
{
    struct cfg cfg;
    char err[512];
    if (a->config != NULL) {
        if (cfg_load_file(&cfg, a->config, err, sizeof(err)) != 0) {
            /* reload asks the control plane to read this very file: one
             * that does not load is a refused reload (as the control plane
             * would answer), not a usage error. */
            if (a->argc > 0 && strcmp(a->argv[0], "reload") == 0) {
                fprintf(stderr, "switchyard-ctl: reload refused, the running config stays: %s\n",
                        err);
                return CTL_EXIT_REFUSED;
            }
            fprintf(stderr, "switchyard-ctl: %s\n", err);
            return CTL_EXIT_USAGE;
        }
    } else {
        cfg_init_defaults(&cfg);
    }
    int code = a->admin != NULL ? ctl_base_from_flag(a)
                                : ctl_base_from_listen(a, cfg.controlplane.admin_listen);
    const char *token_file = a->token_file;
    if (token_file == NULL && cfg.controlplane.admin_token_file[0] != '\0')
        token_file = cfg.controlplane.admin_token_file;
    if (code == CTL_EXIT_OK && token_file != NULL && token_file[0] != '\0')
        code = ctl_read_token(a, token_file);
    cfg_fini(&cfg);
    return code;
}

void ctl_args_fini(struct ctl_args *a)
{
    if (a->token != NULL) {
        explicit_bzero(a->token, strlen(a->token));
        free(a->token);
    }
    a->token = NULL;
}
