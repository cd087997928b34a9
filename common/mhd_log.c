/*
 * libmicrohttpd's messages into the structured log (see mhd_log.h). MHD
 * writes whole sentences ending in a newline; the newline goes, the rest is
 * quoted by the logger. Warn level: MHD only speaks when something went
 * wrong (a bind, a limit, a client it dropped), never on the good path.
 */
#include "common/mhd_log.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

void mhd_log_message(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r' || msg[len - 1] == ' '))
        msg[--len] = '\0';
    log_warn("libmicrohttpd: %s", msg);
}
