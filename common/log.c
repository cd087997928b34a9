/*
 * Implementation of the one-line structured logger (see log.h). The level is
 * a relaxed atomic so any thread may log while another changes it.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

static _Atomic int log_threshold = LOG_LEVEL_INFO;
static char log_process[32] = "switchyard";

static const char *log_level_name(enum log_level level)
{
    switch (level) {
    case LOG_LEVEL_DEBUG:
        return "debug";
    case LOG_LEVEL_INFO:
        return "info";
    case LOG_LEVEL_WARN:
        return "warn";
    case LOG_LEVEL_ERROR:
        return "error";
    default:
        return "unknown";
    }
}

void log_init(const char *process_name)
{
    snprintf(log_process, sizeof(log_process), "%s", process_name);
    const char *env = getenv("SWITCHYARD_LOG_LEVEL");
    if (env == NULL)
        return;
    for (int l = LOG_LEVEL_DEBUG; l <= LOG_LEVEL_ERROR; l++) {
        if (strcasecmp(env, log_level_name(l)) == 0)
            log_set_level(l);
    }
}

void log_set_level(enum log_level level)
{
    atomic_store_explicit(&log_threshold, level, memory_order_relaxed);
}

bool log_is_enabled(enum log_level level)
{
    return (int)level >= atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

/* Appends src to dst[*len..cap) escaping quotes, backslashes and control bytes. */
static void log_append_escaped(char *dst, size_t *len, size_t cap, const char *src)
{
    for (; *src != '\0' && *len + 4 < cap; src++) {
        unsigned char c = (unsigned char)*src;
        if (c == '"' || c == '\\') {
            dst[(*len)++] = '\\';
            dst[(*len)++] = (char)c;
        } else if (c == '\n') {
            dst[(*len)++] = '\\';
            dst[(*len)++] = 'n';
        } else if (c < 0x20) {
            dst[(*len)++] = '?';
        } else {
            dst[(*len)++] = (char)c;
        }
    }
}

void log_write(enum log_level level, const char *fmt, ...)
{
    if (!log_is_enabled(level))
        return;

    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);

    char line[LOG_LINE_MAX + 128];
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s proc=%s pid=%d msg=\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now.tv_nsec / 1000000, log_level_name(level), log_process, (int)getpid());
    size_t len = n > 0 ? (size_t)n : 0;
    log_append_escaped(line, &len, sizeof(line) - 2, msg);
    line[len++] = '"';
    line[len++] = '\n';
    /* Best effort: a logger has nowhere to report its own failure. */
    ssize_t written = write(STDERR_FILENO, line, len);
    (void)written;
}
