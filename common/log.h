/*
 * Structured one-line logs on stderr:
 *
 *   2026-11-29T14:49:25.123Z level=info proc=controlplane pid=42 msg="worker w1 healthy"
 *
 * One write(2) per line so lines from several threads never interleave. The
 * message is quoted and escaped, so a log line is always exactly one line.
 * The threshold comes from SWITCHYARD_LOG_LEVEL (debug|info|warn|error,
 * default info). Thread-safe; no allocation.
 */
#ifndef SY_COMMON_LOG_H
#define SY_COMMON_LOG_H

#include <stdbool.h>

enum log_level {
    LOG_LEVEL_UNSET = 0,
    LOG_LEVEL_DEBUG,
    LOG_LEVEL_INFO,
    LOG_LEVEL_WARN,
    LOG_LEVEL_ERROR,
};

/* Names the process in every line and reads SWITCHYARD_LOG_LEVEL. */
void log_init(const char *process_name);
void log_set_level(enum log_level level);
bool log_is_enabled(enum log_level level);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
