/*
 * switchyard-ctl: command line (ctl_args.h), then one command (ctl_cmd.h).
 */
#include <curl/curl.h>

#include "ctl/ctl_args.h"
#include "ctl/ctl_cmd.h"

int main(int argc, char **argv)
{
    struct ctl_args a;
    int code = ctl_args_parse(&a, argc, argv);
    if (code >= 0)
        return code;
    code = ctl_cmd_check(&a.cmd, a.argc, a.argv);
    if (code != CTL_EXIT_OK)
        return code;
    code = ctl_args_resolve(&a);
    if (code != CTL_EXIT_OK) {
        ctl_args_fini(&a);
        return code;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct ctl_conn c = {.base = a.base, .token = a.token, .timeout_ms = a.timeout_ms};
    code = ctl_cmd_run(&c, &a.cmd, a.argc, a.argv);
    curl_global_cleanup();
    ctl_args_fini(&a);
    return code;
}
