/*
 * libmicrohttpd's own messages (a failed bind, a connection limit reached,
 * a malformed request it refused) routed through the structured logger, so
 * that every line a daemon writes to stderr is a log line with a level and
 * a quoted message instead of raw text in the middle of them. Pass it to
 * every MHD daemon together with MHD_USE_ERROR_LOG:
 *
 *   MHD_OPTION_EXTERNAL_LOGGER, mhd_log_message, NULL
 *
 * Thread-safe (log_write is); MHD may call it from any of its threads.
 */
#ifndef SY_COMMON_MHD_LOG_H
#define SY_COMMON_MHD_LOG_H

#include <stdarg.h>

/* MHD_LogCallback: logs "libmicrohttpd: <message>" at warn level. */
void mhd_log_message(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
